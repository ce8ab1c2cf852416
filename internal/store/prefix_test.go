package store

import (
	"testing"
	"unicode/utf8"
)

func TestPrefixEnd(t *testing.T) {
	for prefix, want := range map[string]string{
		"":                     "",
		"a":                    "b",
		"f00":                  "f01",
		"a\u00ff":              "a\u0100",
		"a\ud7ff":              "a\ue000",
		"a\U0010ffff":          "b",
		"\U0010ffff\U0010ffff": "",
		"é":                    "ê",
	} {
		got := PrefixEnd(prefix)
		if got != want || !utf8.ValidString(got) {
			t.Errorf("PrefixEnd(%q) = %q, want %q", prefix, got, want)
		}
		for _, s := range []string{prefix, prefix + "\x00", prefix + "zz", prefix + "\U0010ffff"} {
			if got != "" && s >= got {
				t.Errorf("%q starts with %q but is not below %q", s, prefix, got)
			}
		}
	}
}
