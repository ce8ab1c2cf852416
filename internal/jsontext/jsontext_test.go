package jsontext

import (
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
