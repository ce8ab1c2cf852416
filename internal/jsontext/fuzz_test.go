package jsontext

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// FuzzCanonical: Canonical never panics; what it returns is valid, compact
// JSON, canonical already (idempotent), and the same value as its input
// (numbers as written); on input that is valid JSON text it fails only for
// a duplicate key. Seeds: f.Add below and testdata/fuzz/FuzzCanonical.
func FuzzCanonical(f *testing.F) {
	for _, seed := range []string{
		`{"b":1,"a":[1.50,true,null,{"z":"\u00e9","y":"\ud83d\ude00"}]}`,
		` { "delta" : 10 } `,
		`"\u2028<>&"`, `1e400`, `-0.0`, `[]`, `{}`,
		`{"a":1,"a":2}`, `{"a":{"b":1,"b":1}}`, `"\ud800"`, "\"\xff\"", `[1,]`, `1 2`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		out, err := Canonical(raw)
		if err != nil {
			if json.Valid(raw) && ValidText(raw) && !strings.Contains(err.Error(), "duplicate key") {
				t.Fatalf("Canonical(%q) refused valid JSON text: %v", raw, err)
			}
			return
		}
		if !json.Valid(out) {
			t.Fatalf("Canonical(%q) = %q, not JSON", raw, out)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, out); err != nil || !bytes.Equal(compact.Bytes(), out) {
			t.Fatalf("Canonical(%q) = %q, not compact", raw, out)
		}
		again, err := Canonical(out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("not idempotent: Canonical(%q) = %q, then %q (%v)", raw, out, again, err)
		}
		if a, b := decode(t, raw), decode(t, out); !reflect.DeepEqual(a, b) {
			t.Fatalf("Canonical(%q) = %q changed the value: %#v vs %#v", raw, out, a, b)
		}
	})
}

// decode reads one JSON value, numbers as written.
func decode(t *testing.T, b []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %q: %v", b, err)
	}
	return v
}
