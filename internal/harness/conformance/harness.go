package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/harness/queuetest"
)

// h wraps an Env with helpers that fail the test on unexpected errors.
type h struct {
	t *testing.T
	*Env
}

var bg = context.Background()

func ledger(delta int) []byte { return []byte(`{"delta":` + itoa(int64(delta)) + `}`) }

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

func (h h) enqueue(id, flow string, delta int, at int64) fairrelay.EnqueueResult {
	h.t.Helper()
	r, err := h.Queue.Enqueue(bg, fairrelay.EnqueueParams{ID: id, Flow: flow, Body: ledger(delta), At: at})
	if err != nil {
		h.t.Fatalf("enqueue %s: %v", id, err)
	}
	return r
}

func (h h) claim(at int64) *fairrelay.Claim {
	h.t.Helper()
	c, err := queuetest.ClaimOne(bg, h.Queue, at)
	if err != nil {
		h.t.Fatalf("claim at %d: %v", at, err)
	}
	return c
}

// claimID claims at tick at and requires the given event ("" for idle).
func (h h) claimID(at int64, want string) *fairrelay.Claim {
	h.t.Helper()
	c := h.claim(at)
	got := ""
	if c != nil {
		got = c.Token.EventID
	}
	if got != want {
		h.t.Fatalf("claim at %d: got %q, want %q", at, got, want)
	}
	return c
}

func (h h) settle(tok fairrelay.Token, o fairrelay.Outcome, at int64) fairrelay.SettleResult {
	h.t.Helper()
	r, err := h.Queue.Settle(bg, fairrelay.SettleParams{Token: tok, Outcome: o, At: at})
	if err != nil {
		h.t.Fatalf("settle %v %s at %d: %v", tok, o, at, err)
	}
	return r
}

func (h h) receive(c *fairrelay.Claim) fairrelay.Outcome {
	h.t.Helper()
	o, err := h.Inbox.Receive(bg, inbox.Delivery{EventID: c.Token.EventID, Flow: c.Flow, Seq: c.Seq, Body: c.Body})
	if err != nil {
		h.t.Fatalf("receive %s: %v", c.Token.EventID, err)
	}
	return o
}

// step claims, delivers to the inbox and settles with its answer at tick at;
// it returns the claimed id ("" when idle) and the settle status.
func (h h) step(at int64) (string, fairrelay.SettleStatus) {
	h.t.Helper()
	c := h.claim(at)
	if c == nil {
		return "", ""
	}
	return c.Token.EventID, h.settle(c.Token, h.receive(c), at).Status
}

func (h h) snapshot() *fairrelay.Snapshot {
	h.t.Helper()
	s, err := h.Queue.Snapshot(bg)
	if err != nil {
		h.t.Fatalf("snapshot: %v", err)
	}
	return s
}

func (h h) inboxSnapshot() *inbox.Snapshot {
	h.t.Helper()
	s, err := h.Inbox.Snapshot(bg)
	if err != nil {
		h.t.Fatalf("inbox snapshot: %v", err)
	}
	return s
}

func (h h) event(id string) fairrelay.EventState {
	h.t.Helper()
	e, err := h.Queue.Event(bg, id)
	if err != nil {
		h.t.Fatalf("event %s: %v", id, err)
	}
	return e.EventState
}

// unchanged runs fn and requires both snapshots to be identical before and
// after, but for the clock tick when tickMayMove.
func (h h) unchanged(name string, tickMayMove bool, fn func()) {
	h.t.Helper()
	before, ib := h.snapshot(), h.inboxSnapshot()
	fn()
	after, ia := h.snapshot(), h.inboxSnapshot()
	if tickMayMove {
		after.Clock.Tick = before.Clock.Tick
	}
	if d := cmp.Diff(before, after); d != "" {
		h.t.Errorf("%s changed the queue store (-before +after):\n%s", name, d)
	}
	if d := cmp.Diff(ib, ia); d != "" {
		h.t.Errorf("%s changed the inbox (-before +after):\n%s", name, d)
	}
}

func wantCode(t *testing.T, what string, err error, code fairrelay.Code, field string) {
	t.Helper()
	var fe *fairrelay.Error
	if !errors.As(err, &fe) {
		t.Errorf("%s: got error %v, want code %s", what, err, code)
		return
	}
	if fe.Code != code || (field != "" && fe.Field != field) {
		t.Errorf("%s: got code %s field %q (%v), want code %s field %q", what, fe.Code, fe.Field, err, code, field)
	}
}

func inboxDelivery(id, flow string, seq int64, body string) inbox.Delivery {
	return inbox.Delivery{EventID: id, Flow: flow, Seq: seq, Body: []byte(body)}
}
