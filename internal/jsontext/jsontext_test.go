package jsontext

import (
	"strings"
	"testing"
)

func TestValidText(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]bool{
		`"plain"`:                    true,
		`"\u00e9 é"`:                 true,
		`"\ud834\udd1e"`:             true,
		`"\\ud800"`:                  true, // an escaped backslash, then text
		"\"X\xff\"":                  false,
		`"\ud800"`:                   false,
		`"\udfff"`:                   false,
		`"\ud800\u0041"`:             false,
		`{"a":"\ud834\udd1e","b":1}`: true,
	} {
		if got := ValidText([]byte(raw)); got != want {
			t.Errorf("ValidText(%s) = %v, want %v", raw, got, want)
		}
	}
}

func TestCanonical(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		` { "b" : [1, {"d":true,"c":null}], "a":"\u0041<" } `: `{"a":"A<","b":[1,{"c":null,"d":true}]}`,
		`1.50`: `1.50`,
		`"x"`:  `"x"`,
	} {
		got, err := Canonical([]byte(raw))
		if err != nil || string(got) != want {
			t.Errorf("Canonical(%s) = %s, %v; want %s", raw, got, err, want)
		}
	}
	for _, bad := range []string{`{"a":1,"a":2}`, `{"x":{"a":1,"a":1}}`, `{"a":1} 2`, `{"a":`, "\"\xff\""} {
		if got, err := Canonical([]byte(bad)); err == nil {
			t.Errorf("Canonical(%s) = %s, want an error", bad, got)
		}
	}
}

func TestObjectRejectsDuplicatesAndNonObjects(t *testing.T) {
	t.Parallel()
	ms, err := Object([]byte(`{"op":"claim","at":3}`))
	if err != nil || len(ms) != 2 || ms[0].Key != "op" || string(ms[1].Value) != "3" {
		t.Fatalf("Object: %+v %v", ms, err)
	}
	for _, bad := range []string{`{"at":0,"at":3}`, `[1]`, `{"a":1}{}`, `"s"`} {
		if _, err := Object([]byte(bad)); err == nil {
			t.Errorf("Object(%s): want an error", bad)
		}
	}
}

func TestPositiveInt(t *testing.T) {
	t.Parallel()
	type r struct {
		n            int64
		ok, tooLarge bool
	}
	for raw, want := range map[string]r{
		"1": {1, true, false}, "9223372036854775807": {9223372036854775807, true, false},
		"9223372036854775808": {0, false, true}, "100000000000000000000000": {0, false, true},
		"0": {}, "-1": {}, "1.0": {}, "1e2": {}, `"1"`: {}, "": {},
	} {
		n, ok, tl := PositiveInt([]byte(raw))
		if (r{n, ok, tl}) != want {
			t.Errorf("PositiveInt(%s) = %d %v %v, want %+v", raw, n, ok, tl, want)
		}
	}
}

// Object takes what Canonical takes: a member nested deeper than
// encoding/json's 10 000 levels (a ledger body's ignored key) is split
// out as written, where decoding it refused the whole object, so the
// receiver answered invalid_body to a body the enqueue had taken (a
// breaker's report). Each value is its text as written, space inside kept
// and space around trimmed, as json.RawMessage's decoding gave it.
func TestObjectTakesWhatCanonicalTakes(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat("[", 10001) + strings.Repeat("]", 10001)
	body := `{"delta":1,"x":` + deep + `}`
	if _, err := Canonical([]byte(body)); err != nil {
		t.Fatalf("Canonical of the deep body: %v", err)
	}
	ms, err := Object([]byte(body))
	if err != nil {
		t.Fatalf("Object of the deep body: %v", err)
	}
	if len(ms) != 2 || ms[0].Key != "delta" || string(ms[0].Value) != "1" || ms[1].Key != "x" || string(ms[1].Value) != deep {
		t.Fatalf("Object of the deep body: %d members, first %q", len(ms), ms[0].Key)
	}
	ms, err = Object([]byte(" {\n \"a\" :\t[1, {\"b\" : 2}] ,\"c\":\"s:\" , \"d\" : -1.5e3 , \"e\":{}}\n"))
	want := []Member{{"a", []byte(`[1, {"b" : 2}]`)}, {"c", []byte(`"s:"`)}, {"d", []byte(`-1.5e3`)}, {"e", []byte(`{}`)}}
	if err != nil || len(ms) != len(want) {
		t.Fatalf("Object: %+v %v", ms, err)
	}
	for i := range want {
		if ms[i].Key != want[i].Key || string(ms[i].Value) != string(want[i].Value) {
			t.Errorf("member %d: %q = %s, want %q = %s", i, ms[i].Key, ms[i].Value, want[i].Key, want[i].Value)
		}
	}
	for _, bad := range []string{`{"a":[1,}`, `{"a":` + strings.Repeat("[", 20000) + `}`, `{"a":tru}`} {
		if _, err := Object([]byte(bad)); err == nil {
			t.Errorf("Object(%.40s…): want an error", bad)
		}
	}
}
