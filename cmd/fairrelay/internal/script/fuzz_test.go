package script

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
)

// FuzzScriptLine feeds arbitrary lines to the script parser and runner
// (SPEC §6). Properties: nothing panics; a line the parser refuses gets an
// error result with a code and a message, and an invalid_input error
// always names the field at fault; every result is one JSON object. The
// runner works on real SQLite files, one pair per fuzzing process. Seeds:
// f.Add below and testdata/fuzz/FuzzScriptLine.
func FuzzScriptLine(f *testing.F) {
	for _, seed := range []string{
		`{"op":"enqueue","id":"A1","flow":"A","delta":1,"at":0}`,
		`{"op":"enqueue","id":"A2","flow":"A","body":{"delta":2,"note":"x"},"at":1}`,
		`{"op":"claim","at":2}`,
		`{"op":"receive","id":"A1","generation":1}`,
		`{"op":"settle","id":"A1","generation":1,"outcome":"accepted","at":3}`,
		`{"op":"step","at":4}`,
		`{"op":"redrive","id":"A2","expected_generation":1,"reason":"fixed","operator":"me","at":5}`,
		`{"op":"inbox","max_delta":5,"unavailable":false}`,
		`{"op":"snapshot"}`,
		`{"op":"claim","at":3,"at":4}`,
		`{"op":"enqueue","id":"Z\ud800","flow":"Z","delta":1,"at":3}`,
		`{"op":"enqueue","id":"S1 ","flow":"S","delta":1,"at":3}`,
		`{"op":"settle","id":"A1","generation":-1,"outcome":"accepted","at":3}`,
		`[1]`, `not json`, `{"op":null}`, `{"OP":"claim"}`, ``,
	} {
		f.Add([]byte(seed))
	}
	dir := f.TempDir()
	q, err := fairrelay.Open(context.Background(), filepath.Join(dir, "q.db"), fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { q.Close() })
	in, err := inbox.Open(context.Background(), filepath.Join(dir, "i.db"), inbox.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { in.Close() })
	rn := &Runner{Queue: q, Inbox: in}
	f.Fuzz(func(t *testing.T, line []byte) {
		if _, err := parseOp(line); err != nil {
			var fe *fairrelay.Error
			if !errors.As(err, &fe) {
				t.Fatalf("parse error %v is not a fairrelay error", err)
			}
			if fe.Code != "invalid_json" && fe.Code != fairrelay.CodeInvalidInput {
				t.Fatalf("parse error code %q, want invalid_json or invalid_input", fe.Code)
			}
		}
		res := rn.Do(context.Background(), line)
		if code, failed := res["error"]; failed {
			msg, _ := res["message"].(string)
			if msg == "" {
				t.Fatalf("error result without a message: %v", res)
			}
			if code == string(fairrelay.CodeInvalidInput) {
				if field, _ := res["field"].(string); field == "" {
					t.Fatalf("invalid_input without a field: %v", res)
				}
			}
		}
		b, err := json.Marshal(res)
		if err != nil || !json.Valid(b) || b[0] != '{' {
			t.Fatalf("result is not one JSON object: %s %v", b, err)
		}
	})
}
