package conformance

import (
	"strings"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/script"
)

// runBadInput feeds every kind of bad input, through the library and through
// the script runner, and requires a clear error naming the field and both
// stores unchanged (issue 2, item 5).
func runBadInput(t *testing.T, b Backend) {
	pol := fairrelay.ReferencePolicy()
	pol.MaxBodyBytes = 64
	x := h{t: t, Env: Open(t, b, pol)}
	x.enqueue("A1", "A", 1, 3)
	c := x.claimID(3, "A1")
	long := strings.Repeat("x", fairrelay.MaxIDBytes+1)

	lib := []struct {
		name  string
		field string
		call  func() error
	}{
		{"empty id", "id", func() error { return enq(x, "", "A", `{"delta":1}`, 3) }},
		{"long id", "id", func() error { return enq(x, long, "A", `{"delta":1}`, 3) }},
		{"non-UTF-8 id", "id", func() error { return enq(x, "A\xff", "A", `{"delta":1}`, 3) }},
		{"control character in id", "id", func() error { return enq(x, "A\n1", "A", `{"delta":1}`, 3) }},
		{"NUL in flow", "flow", func() error { return enq(x, "Z1", "Z\x00", `{"delta":1}`, 3) }},
		{"empty flow", "flow", func() error { return enq(x, "Z1", "", `{"delta":1}`, 3) }},
		{"long flow", "flow", func() error { return enq(x, "Z1", long, `{"delta":1}`, 3) }},
		{"non-UTF-8 flow", "flow", func() error { return enq(x, "Z1", "\xc3\x28", `{"delta":1}`, 3) }},
		{"empty body", "body", func() error { return enq(x, "Z1", "Z", ``, 3) }},
		{"body over the limit", "body", func() error { return enq(x, "Z1", "Z", `{"delta":1,"pad":"`+strings.Repeat("p", 64)+`"}`, 3) }},
		{"negative tick", "at", func() error { return enq(x, "Z1", "Z", `{"delta":1}`, -1) }},
		{"tick beyond MaxTick", "at", func() error { _, err := x.Queue.Claim(bg, fairrelay.MaxTick+1); return err }},
		{"claim batch of zero", "k", func() error { _, err := x.Queue.ClaimBatch(bg, 3, 0); return err }},
		{"empty outcome", "outcome", func() error { _, err := x.Queue.Settle(bg, c.Token, "", 3); return err }},
		{"redrive long operator", "operator", func() error {
			_, err := x.Queue.Redrive(bg, fairrelay.RedriveParams{EventID: "A1", Reason: "r", Operator: long, At: 3})
			return err
		}},
		{"redrive non-UTF-8 reason", "reason", func() error {
			_, err := x.Queue.Redrive(bg, fairrelay.RedriveParams{EventID: "A1", Reason: "\xff", At: 3})
			return err
		}},
		// Names that HTTP headers, logs or terminals would not carry intact
		// (fairrelay.CheckID): white space at an end, which HTTP trims, and
		// control, format and separator characters anywhere (issue 15).
		{"trailing space in id", "id", func() error { return enq(x, "S1 ", "S", `{"delta":1}`, 3) }},
		{"leading space in flow", "flow", func() error { return enq(x, "S1", " R", `{"delta":1}`, 3) }},
		{"no-break space ending a flow", "flow", func() error { return enq(x, "S1", "R\u00a0", `{"delta":1}`, 3) }},
		{"ideographic space starting an id", "id", func() error { return enq(x, "\u3000S1", "S", `{"delta":1}`, 3) }},
		{"TAB in flow", "flow", func() error { return enq(x, "S1", "R\tX", `{"delta":1}`, 3) }},
		{"C1 control U+0085 in id", "id", func() error { return enq(x, "S\u00851", "S", `{"delta":1}`, 3) }},
		{"DEL in id", "id", func() error { return enq(x, "S\x7f1", "S", `{"delta":1}`, 3) }},
		{"zero-width space in flow", "flow", func() error { return enq(x, "S1", "R\u200bR", `{"delta":1}`, 3) }},
		{"right-to-left override in id", "id", func() error { return enq(x, "S\u202e1", "S", `{"delta":1}`, 3) }},
		{"byte order mark in id", "id", func() error { return enq(x, "\ufeffS1", "S", `{"delta":1}`, 3) }},
		{"line separator in flow", "flow", func() error { return enq(x, "S1", "R\u2028", `{"delta":1}`, 3) }},
		{"paragraph separator in id", "id", func() error { return enq(x, "S\u20291", "S", `{"delta":1}`, 3) }},
		{"tag character in id", "id", func() error { return enq(x, "S\U000E00411", "S", `{"delta":1}`, 3) }},
		// Operator text goes into the audit log and onto terminals: one
		// line, no escape sequences.
		{"redrive reason with a line feed", "reason", func() error {
			_, err := x.Queue.Redrive(bg, fairrelay.RedriveParams{EventID: "A1", Reason: "fixed\n2 A1 redrive forged", At: 3})
			return err
		}},
		{"redrive reason with a terminal escape", "reason", func() error {
			_, err := x.Queue.Redrive(bg, fairrelay.RedriveParams{EventID: "A1", Reason: "fixed \x1b[2J", At: 3})
			return err
		}},
		{"redrive reason with a C1 CSI", "reason", func() error {
			_, err := x.Queue.Redrive(bg, fairrelay.RedriveParams{EventID: "A1", Reason: "fixed \u009b2J", At: 3})
			return err
		}},
		{"redrive operator with a line feed", "operator", func() error {
			_, err := x.Queue.Redrive(bg, fairrelay.RedriveParams{EventID: "A1", Reason: "r", Operator: "me\nroot", At: 3})
			return err
		}},
		{"redrive operator with a trailing space", "operator", func() error {
			_, err := x.Queue.Redrive(bg, fairrelay.RedriveParams{EventID: "A1", Reason: "r", Operator: "me ", At: 3})
			return err
		}},
		{"settle negative generation", "generation", func() error {
			_, err := x.Queue.Settle(bg, fairrelay.Token{EventID: "A1", Generation: -1}, fairrelay.OutcomeAccepted, 3)
			return err
		}},
	}
	for _, tc := range lib {
		x.unchanged(tc.name, false, func() {
			wantCode(t, tc.name, tc.call(), fairrelay.CodeInvalidInput, tc.field)
		})
	}

	// The same through the script runner, plus what only a script can get
	// wrong.
	r := &script.Runner{Queue: x.Queue, Inbox: x.Inbox}
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
		x.unchanged(l.line, false, func() {
			res := r.Do(bg, []byte(l.line))
			if res["error"] != l.code || (l.field != "" && res["field"] != l.field) {
				t.Errorf("%s: got %v, want error %s field %q", l.line, res, l.code, l.field)
			}
			if msg, _ := res["message"].(string); msg == "" {
				t.Errorf("%s: no message in %v", l.line, res)
			}
		})
	}
	// The script goes on after bad lines: a good op still works.
	if res := r.Do(bg, []byte(`{"op":"settle","id":"A1","generation":1,"outcome":"accepted","at":4}`)); res["status"] != "acked" {
		t.Fatalf("good op after bad ones: %v", res)
	}
}

func enq(x h, id, flow, body string, at int64) error {
	_, err := x.Queue.Enqueue(bg, fairrelay.EnqueueParams{ID: id, Flow: flow, Body: []byte(body), At: at})
	return err
}
