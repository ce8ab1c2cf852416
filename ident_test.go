package fairrelay_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/fairrelay/fairrelay"
)

// CheckID accepts names that survive HTTP headers and terminals and refuses
// the rest, naming the field and saying why.
func TestCheckID(t *testing.T) {
	t.Parallel()
	good := []string{"A1", "a b", "order:42/β", "x\u00a0y", "日本", strings.Repeat("é", fairrelay.MaxIDBytes/2), "\U0001F600"}
	for _, v := range good {
		if err := fairrelay.CheckID("id", v); err != nil {
			t.Errorf("%q: %v, want accepted", v, err)
		}
	}
	bad := map[string]string{
		"":                                "empty",
		strings.Repeat("x", 201):          "bytes",
		"S1 ":                             "ends with white space",
		" R":                              "starts with white space",
		"R\u00a0":                         "ends with white space",
		"\u2003R":                         "starts with white space",
		"a\tb":                            "control character U+0009",
		"a\u0085b":                        "control character U+0085",
		"a\u200bb":                        "format character U+200B",
		"a\u202eb":                        "format character U+202E",
		"a\u2028b":                        "line separator",
		"a\u2029b":                        "paragraph separator",
		"a\xffb":                          "not valid UTF-8 (byte 1)",
		"\xed\xa0\x80":                    "not valid UTF-8",
		"ok\U000E0041":                    "format character U+E0041",
		strings.Repeat("é", 100) + "\x00": "bytes", // length is checked first
	}
	for v, want := range bad {
		err := fairrelay.CheckID("flow", v)
		var fe *fairrelay.Error
		if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != "flow" || !strings.Contains(fe.Message, want) {
			t.Errorf("%q: %v, want invalid_input naming flow, saying %q", v, err, want)
		}
	}
	// A written U+FFFD is valid UTF-8, not a decoding error.
	if err := fairrelay.CheckID("id", "a\uFFFDb"); err != nil {
		t.Errorf("U+FFFD: %v", err)
	}
}

// CheckReason takes any one line of text (ends may be blank; an empty
// reason is a rejection, not an input error) and refuses what would forge
// audit lines or drive a terminal.
func TestCheckReason(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"", "  receiver fixed ", "ça marche", strings.Repeat("r", fairrelay.MaxReasonBytes)} {
		if err := fairrelay.CheckReason("reason", v); err != nil {
			t.Errorf("%q: %v", v, err)
		}
	}
	for _, v := range []string{"a\nb", "a\rb", "\x1b[31mred", "a\u009bb", "a\u202eb", "a\u2028", "\xff", strings.Repeat("r", fairrelay.MaxReasonBytes+1)} {
		if err := fairrelay.CheckReason("reason", v); !errors.Is(err, fairrelay.ErrInvalidInput) || !strings.Contains(err.Error(), "reason: ") {
			t.Errorf("%q: %v, want invalid_input naming reason", v, err)
		}
	}
}

// The ranges CheckID's doc lists — the copy a store-side implementation
// (the SQL outbox function) mirrors — are exactly what Go's unicode tables
// say, and CheckID refuses every code point in them.
func TestCheckIDDocListsTheRanges(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(filepath.Join("internal", "ident", "ident.go"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(src)
	doc = doc[:strings.Index(doc, "func Check(")]
	anywhereAt := strings.Index(doc, "refused anywhere")
	edgesAt := strings.Index(doc, "refused at either end")
	if anywhereAt < 0 || edgesAt < anywhereAt {
		t.Fatal("CheckID's doc no longer has the two lists")
	}
	anywhere := docRunes(t, doc[anywhereAt:edgesAt])
	edges := docRunes(t, doc[edgesAt:])

	var wantAnywhere, wantEdges []rune
	for r := rune(0); r <= unicode.MaxRune; r++ {
		switch {
		case unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp):
			wantAnywhere = append(wantAnywhere, r)
		case unicode.Is(unicode.White_Space, r):
			wantEdges = append(wantEdges, r)
		}
	}
	if !slices.Equal(anywhere, wantAnywhere) {
		t.Errorf("the doc lists %s refused anywhere; Unicode %s says %s", runeRanges(anywhere), unicode.Version, runeRanges(wantAnywhere))
	}
	if !slices.Equal(edges, wantEdges) {
		t.Errorf("the doc lists %s refused at the ends; Unicode %s says %s", runeRanges(edges), unicode.Version, runeRanges(wantEdges))
	}
	for _, r := range wantAnywhere {
		if r >= 0xD800 && r <= 0xDFFF {
			continue
		}
		if fairrelay.CheckID("id", "a"+string(r)+"b") == nil {
			t.Errorf("%U inside a name is accepted", r)
		}
	}
	for _, r := range wantEdges {
		if fairrelay.CheckID("id", string(r)+"a") == nil || fairrelay.CheckID("id", "a"+string(r)) == nil {
			t.Errorf("%U at an end is accepted", r)
		}
	}
}

var docRange = regexp.MustCompile(`U\+([0-9A-F]{4,6})(?:–U\+([0-9A-F]{4,6}))?`)

// docRunes expands the U+XXXX and U+XXXX–U+YYYY items of a doc passage.
func docRunes(t *testing.T, passage string) []rune {
	t.Helper()
	var out []rune
	for _, m := range docRange.FindAllStringSubmatch(passage, -1) {
		lo, _ := strconv.ParseUint(m[1], 16, 32)
		hi := lo
		if m[2] != "" {
			hi, _ = strconv.ParseUint(m[2], 16, 32)
		}
		for r := lo; r <= hi; r++ {
			out = append(out, rune(r))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// runeRanges renders sorted runes as compact ranges, for a failure message.
func runeRanges(rs []rune) string {
	var b strings.Builder
	for i := 0; i < len(rs); {
		j := i
		for j+1 < len(rs) && rs[j+1] == rs[j]+1 {
			j++
		}
		if j > i {
			fmt.Fprintf(&b, "%U–%U ", rs[i], rs[j])
		} else {
			fmt.Fprintf(&b, "%U ", rs[i])
		}
		i = j + 1
	}
	return b.String()
}
