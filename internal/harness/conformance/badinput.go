package conformance

import (
	"strings"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/harness/queuetest"
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
		// Names that HTTP headers, logs or terminals would not carry intact
		// (internal/ident): white space at an end, which HTTP trims, and
		// control, format and separator characters anywhere (issue 15).
		{"ideographic space starting an id", "id", func() error { return enq(x, "\u3000S1", "S", `{"delta":1}`, 3) }},
		{"TAB in flow", "flow", func() error { return enq(x, "S1", "R\tX", `{"delta":1}`, 3) }},
		{"DEL in id", "id", func() error { return enq(x, "S\x7f1", "S", `{"delta":1}`, 3) }},
		{"right-to-left override in id", "id", func() error { return enq(x, "S\u202e1", "S", `{"delta":1}`, 3) }},
		{"byte order mark in id", "id", func() error { return enq(x, "\ufeffS1", "S", `{"delta":1}`, 3) }},
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
			_, err := x.Queue.Settle(bg, fairrelay.SettleParams{Token: fairrelay.Token{EventID: "A1", Generation: -1}, Outcome: fairrelay.OutcomeAccepted, At: 3})
			return err
		}},
		{"white space at the end of an id", "id", func() error { return enq(x, "S1 ", "S", `{"delta":1}`, 3) }},
		{"white space at the start of a flow", "flow", func() error { return enq(x, "S1", " R", `{"delta":1}`, 3) }},
		{"NEL (C1 control) in an id", "id", func() error { return enq(x, "S\u00851", "S", `{"delta":1}`, 3) }},
		{"zero-width space (format) in a flow", "flow", func() error { return enq(x, "S1", "S\u200b", `{"delta":1}`, 3) }},
		{"line separator in an id", "id", func() error { return enq(x, "S\u20281", "S", `{"delta":1}`, 3) }},
		{"no-break space at the end of a flow", "flow", func() error { return enq(x, "S1", "S\u00a0", `{"delta":1}`, 3) }},
		{"tick beyond MaxTick (enqueue)", "at", func() error { return enq(x, "Z1", "Z", `{"delta":1}`, fairrelay.MaxTick+1) }},
		{"tick beyond MaxTick", "at", func() error { _, err := queuetest.ClaimOne(bg, x.Queue, fairrelay.MaxTick+1); return err }},
		{"claim limit below zero", "limit", func() error { _, err := x.Queue.Claim(bg, fairrelay.ClaimParams{At: 3, Limit: -1}); return err }},
		{"claim limit over the maximum", "limit", func() error {
			_, err := x.Queue.Claim(bg, fairrelay.ClaimParams{At: 3, Limit: fairrelay.MaxLimit + 1})
			return err
		}},
		{"settle claim limit below zero", "claim_limit", func() error {
			_, err := x.Queue.SettleMany(bg, fairrelay.SettleManyParams{At: 3, ClaimLimit: -1})
			return err
		}},
		{"empty outcome", "outcome", func() error {
			_, err := x.Queue.Settle(bg, fairrelay.SettleParams{Token: c.Token, Outcome: "", At: 3})
			return err
		}},
		{"redrive long operator", "operator", func() error {
			_, err := x.Queue.Redrive(bg, fairrelay.RedriveParams{EventID: "A1", Reason: "r", Operator: long, At: 3})
			return err
		}},
		{"redrive non-UTF-8 reason", "reason", func() error {
			_, err := x.Queue.Redrive(bg, fairrelay.RedriveParams{EventID: "A1", Reason: "\xff", At: 3})
			return err
		}},
	}
	for _, tc := range lib {
		x.unchanged(tc.name, false, func() {
			wantCode(t, tc.name, tc.call(), fairrelay.CodeInvalidInput, tc.field)
		})
	}
	// SPEC §2's order: the clock first, then the input's fields. A write
	// whose tick lies below the stored one is clock_regressed whatever else
	// is wrong with it; a negative tick always lies below.
	order := []struct {
		name string
		call func() error
	}{
		{"negative tick", func() error { return enq(x, "Z1", "Z", `{"delta":1}`, -1) }},
		{"bad id at a regressed tick", func() error { return enq(x, "", "Z", `{"delta":1}`, 2) }},
		{"bad body at a regressed tick", func() error { return enq(x, "Z1", "Z", ``, 2) }},
		{"bad claim limit at a regressed tick", func() error {
			_, err := x.Queue.Claim(bg, fairrelay.ClaimParams{At: 2, Limit: -1})
			return err
		}},
		{"empty outcome at a regressed tick", func() error {
			_, err := x.Queue.Settle(bg, fairrelay.SettleParams{Token: c.Token, Outcome: "", At: 2})
			return err
		}},
		{"bad operator at a regressed tick", func() error {
			_, err := x.Queue.Redrive(bg, fairrelay.RedriveParams{EventID: "A1", Reason: "r", Operator: long, At: 2})
			return err
		}},
	}
	for _, tc := range order {
		x.unchanged(tc.name, false, func() {
			wantCode(t, tc.name, tc.call(), fairrelay.CodeClockRegressed, "")
		})
	}
}

func enq(x h, id, flow, body string, at int64) error {
	_, err := x.Queue.Enqueue(bg, fairrelay.EnqueueParams{ID: id, Flow: flow, Body: []byte(body), At: at})
	return err
}

// runTickJump: under a policy with MaxTickJump, a write further ahead of the
// stored tick is invalid input naming at and changes nothing, on every
// write; a daemon clock's write (Floor) is not checked (SPEC §7).
func runTickJump(t *testing.T, b Backend) {
	pol := fairrelay.ReferencePolicy()
	pol.MaxTickJump = 100
	x := h{t: t, Env: Open(t, b, pol)}
	x.enqueue("A1", "A", 1, 10)
	far := int64(10 + 101)
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"enqueue", func() error { return enq(x, "B1", "B", `{"delta":1}`, far) }},
		{"claim", func() error { _, err := x.Queue.Claim(bg, fairrelay.ClaimParams{At: far}); return err }},
		{"settle", func() error {
			_, err := x.Queue.Settle(bg, fairrelay.SettleParams{Token: fairrelay.Token{EventID: "A1", Generation: 1}, Outcome: fairrelay.OutcomeAccepted, At: far})
			return err
		}},
		{"redrive", func() error {
			_, err := x.Queue.Redrive(bg, fairrelay.RedriveParams{EventID: "A1", ExpectedGeneration: 0, Reason: "r", At: far})
			return err
		}},
		{"poisoning tick", func() error { return enq(x, "B1", "B", `{"delta":1}`, fairrelay.MaxTick) }},
	} {
		x.unchanged(tc.name, false, func() { wantCode(t, tc.name, tc.call(), fairrelay.CodeInvalidInput, "at") })
	}
	// At the limit it goes; with Floor (a relay's clock) beyond it too.
	if err := enq(x, "B1", "B", `{"delta":1}`, 110); err != nil {
		t.Fatalf("enqueue at the limit: %v", err)
	}
	if r, err := x.Queue.Claim(bg, fairrelay.ClaimParams{At: 5000, Floor: true}); err != nil || r.Tick != 5000 {
		t.Fatalf("claim with the floor far ahead: %+v %v, want it to run at 5000", r, err)
	}
}
