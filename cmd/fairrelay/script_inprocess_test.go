package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/cmd/fairrelay/internal/script"
	"github.com/fairrelay/fairrelay/internal/harness/conformance"
)

// vectorDir holds the copies of the shared vectors.
var vectorDir = filepath.Join("..", "..", "testdata", "vectors")

// TestScriptRunnerVectors runs every vector through the script runner
// in-process on every backend (the real command runs them too:
// TestScriptCommandRunsVectors), comparing each result as check-vectors does
// (SPEC §6).
func TestScriptRunnerVectors(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join(vectorDir, "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var ops []string
	for _, f := range files {
		if !strings.HasSuffix(f, ".expected.jsonl") {
			ops = append(ops, f)
		}
	}
	if len(ops) == 0 {
		t.Fatalf("no vectors in %s", vectorDir)
	}
	for _, b := range conformance.Backends() {
		for _, f := range ops {
			name := filepath.Base(f)
			t.Run(b.Name+"/"+strings.TrimSuffix(name, ".jsonl"), func(t *testing.T) {
				t.Parallel()
				pol := fairrelay.ReferencePolicy()
				if strings.HasSuffix(name, ".fair.jsonl") {
					pol.Entry = fairrelay.EntryFair
				}
				runVector(t, conformance.Open(t, b, pol), f)
			})
		}
	}
}

// runVector runs the ops file path through the script runner on env and
// compares each result with the same line of the .expected.jsonl file: every
// expected key must be present with an equal value (SPEC §6).
func runVector(t *testing.T, env *conformance.Env, path string) {
	t.Helper()
	opsLines := fileLines(t, path)
	want := fileLines(t, strings.TrimSuffix(path, ".jsonl")+".expected.jsonl")
	if len(opsLines) != len(want) {
		t.Fatalf("%d ops but %d expected results", len(opsLines), len(want))
	}
	r := &script.Runner{Queue: env.Queue, Inbox: env.Inbox}
	for i, line := range opsLines {
		res := r.Do(context.Background(), []byte(line))
		gotJSON, err := json.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		var got, w any
		if err := json.Unmarshal(gotJSON, &got); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(want[i]), &w); err != nil {
			t.Fatalf("expected line %d: %v", i+1, err)
		}
		if why := conformance.Match(w, got, "$"); why != "" {
			t.Fatalf("op %d %s\n  %s\n  got: %s", i+1, line, why, gotJSON)
		}
	}
}

// fileLines returns the non-empty lines of path.
func fileLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

// TestScriptBadInput feeds the script runner every kind of bad line on every
// backend and requires an error naming the field and both stores unchanged
// (issue 2, item 5); the script goes on after them.
func TestScriptBadInput(t *testing.T) {
	t.Parallel()
	for _, b := range conformance.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pol := fairrelay.ReferencePolicy()
			pol.MaxBodyBytes = 64
			env := conformance.Open(t, b, pol)
			if _, err := env.Queue.Enqueue(ctx, fairrelay.EnqueueParams{ID: "A1", Flow: "A", Body: []byte(`{"delta":1}`), At: 3}); err != nil {
				t.Fatal(err)
			}
			if r, err := env.Queue.Claim(ctx, fairrelay.ClaimParams{At: 3}); err != nil || len(r.Claims) != 1 {
				t.Fatalf("claim: %+v %v", r, err)
			}
			// The same through the script runner, plus what only a script can get
			// wrong.
			r := &script.Runner{Queue: env.Queue, Inbox: env.Inbox}
			lines := []struct{ line, code, field string }{
				{`{"op":"enqueue","id":"Z1","flow":"Z","at":3}`, "invalid_input", "body"},
				{`{"op":"enqueue","id":"Z1","flow":"Z","delta":0,"at":3}`, "invalid_input", "delta"},
				{`{"op":"enqueue","id":"Z1","flow":"Z","delta":-2,"at":3}`, "invalid_input", "delta"},
				{`{"op":"enqueue","id":"Z1","flow":"Z","delta":1.5,"at":3}`, "invalid_input", "delta"},
				{`{"op":"enqueue","id":"Z1","flow":"Z","delta":"1","at":3}`, "invalid_input", "delta"},
				{`{"op":"enqueue","id":"Z1","flow":"Z","delta":1,"body":{"delta":1},"at":3}`, "invalid_input", "delta"},
				{`{"op":"enqueue","id":"","flow":"Z","delta":1,"at":3}`, "invalid_input", "id"},
				{`{"op":"enqueue","id":"Z1","flow":"Z","delta":1}`, "invalid_input", "at"},
				{`{"op":"enqueue","id":"Z1","flow":"Z","delta":1,"at":1.5}`, "invalid_input", "at"},
				{`{"op":"enqueue","id":"Z1","flow":"Z","delta":1,"at":2}`, "clock_regressed", ""},
				{`{"op":"settle","id":"A1","generation":1,"outcome":"acepted","at":3}`, "invalid_input", "outcome"},
				{`{"op":"settle","id":"NOPE","generation":1,"outcome":"accepted","at":3}`, "not_found", ""},
				{`{"op":"settle","id":"A1","generation":-1,"outcome":"accepted","at":3}`, "invalid_input", "generation"},
				{`{"op":"enqueue","id":"Z1 ","flow":"Z","delta":1,"at":3}`, "invalid_input", "id"},
				{`{"op":"enqueue","id":"Z1","flow":"Z\u0085","delta":1,"at":3}`, "invalid_input", "flow"},
				{`{"op":"redrive","id":"A1","expected_generation":1,"reason":"a\nb","at":3}`, "invalid_input", "reason"},
				{`{"op":"receive","id":"NOPE","generation":1}`, "not_found", ""},
				{`{"op":"redrive","id":"NOPE","expected_generation":1,"reason":"r","at":3}`, "not_found", ""},
				{`{"op":"claim","at":2}`, "clock_regressed", ""},
				// SPEC §2 order: the clock before the fields, including
				// those the runner checks itself.
				{`{"op":"enqueue","id":"Z1","flow":"Z","delta":0,"at":2}`, "clock_regressed", ""},
				{`{"op":"enqueue","flow":"Z","delta":1,"at":2}`, "clock_regressed", ""},
				{`{"op":"enqueue","id":"Z1","flow":"Z","body":{"delta":1,"delta":2},"at":2}`, "clock_regressed", ""},
				{`{"op":"settle","id":"A1","generation":1,"outcome":"acepted","at":2}`, "clock_regressed", ""},
				{`{"op":"redrive","id":"A1","expected_generation":-1,"reason":"r","at":3}`, "invalid_input", "expected_generation"},
				{`{"op":"frobnicate","at":3}`, "invalid_input", "op"},
				{`{"op":"claim","at":3,"colour":"red"}`, "invalid_input", "colour"},
				{`{"OP":"claim","At":3}`, "invalid_input", "OP"},
				{`{"op":"claim","at":3,"at":4}`, "invalid_json", ""},
				{`{"op":"claim","at":null}`, "invalid_input", "at"},
				{`{"op":"enqueue","id":"Z1","flow":"Z","body":null,"at":3}`, "invalid_input", "body"},
				{`{"op":"enqueue","id":"Z1","flow":"Z","body":{"delta":1,"delta":2},"at":3}`, "invalid_input", "body"},
				{"{\"op\":\"enqueue\",\"id\":\"Z\xff\",\"flow\":\"Z\",\"delta\":1,\"at\":3}", "invalid_input", "id"},
				{`{"op":"enqueue","id":"Z\ud800","flow":"Z","delta":1,"at":3}`, "invalid_input", "id"},
				{`{"op":"enqueue","id":"Z1","flow":"Z\udfff","delta":1,"at":3}`, "invalid_input", "flow"},
				{`{"op":"enqueue","id":"Z1","flow":"Z","delta":9223372036854775808,"at":3}`, "invalid_input", "delta"},
				{`{"op":"inbox","max_delta":-1}`, "invalid_input", "max_delta"},
				{`[{"op":"claim","at":3}]`, "invalid_json", ""},
				{`{"at":3}`, "invalid_input", "op"},
				{`{"op":"inbox"}`, "invalid_input", "max_delta"},
				{`{"op":"claim","at":3`, "invalid_json", ""},
				{`not json at all`, "invalid_json", ""},
			}
			for _, l := range lines {
				env.Unchanged(t, l.line, false, func() {
					res := r.Do(ctx, []byte(l.line))
					if res["error"] != l.code || (l.field != "" && res["field"] != l.field) {
						t.Errorf("%s: got %v, want error %s field %q", l.line, res, l.code, l.field)
					}
					if msg, _ := res["message"].(string); msg == "" {
						t.Errorf("%s: no message in %v", l.line, res)
					}
				})
			}
			// The script goes on after bad lines: a good op still works.
			if res := r.Do(ctx, []byte(`{"op":"settle","id":"A1","generation":1,"outcome":"accepted","at":4}`)); res["status"] != "acked" {
				t.Fatalf("good op after bad ones: %v", res)
			}
		})
	}
}
