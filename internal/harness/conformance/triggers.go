package conformance

import (
	"testing"

	"github.com/fairrelay/fairrelay"
)

// runTriggers makes the database reject one insert at a time (SPEC §5 item
// 9) and requires that the error reaches the caller and that nothing of the
// operation is left half-written.
func runTriggers(t *testing.T, b Backend) {
	t.Run("event_insert", func(t *testing.T) {
		t.Parallel()
		x := h{t: t, Env: Open(t, b, fairrelay.ReferencePolicy())}
		x.enqueue("A1", "A", 1, 0)
		b.RejectInserts(t, x.QueueDSN, "event")
		x.unchanged("rejected enqueue", false, func() {
			_, err := x.Queue.Enqueue(bg, fairrelay.EnqueueParams{ID: "A2", Flow: "A", Body: ledger(1), At: 1})
			wantCode(t, "enqueue into existing flow", err, fairrelay.CodeDatabase, "")
			_, err = x.Queue.Enqueue(bg, fairrelay.EnqueueParams{ID: "B1", Flow: "B", Body: ledger(1), At: 1})
			wantCode(t, "enqueue into new flow", err, fairrelay.CodeDatabase, "")
		})
		if s := x.snapshot(); len(s.Flows) != 1 || s.Flows[0].Seq != 1 {
			t.Fatalf("flows %+v: flow.seq must stay 1 and flow B must not exist", s.Flows)
		}
	})
	t.Run("projection_write", func(t *testing.T) {
		t.Parallel()
		x := h{t: t, Env: Open(t, b, fairrelay.ReferencePolicy())}
		x.enqueue("A1", "A", 1, 0)
		c := x.claimID(0, "A1")
		b.RejectInserts(t, x.InboxDSN, "projection")
		x.unchanged("rejected receive", false, func() {
			_, err := x.Inbox.Receive(bg, inboxDelivery("A1", "A", 1, string(c.Body)))
			wantCode(t, "receive", err, fairrelay.CodeDatabase, "")
		})
		if s := x.inboxSnapshot(); len(s.Receipts) != 0 {
			t.Fatalf("receipts %+v: a receipt without its effect", s.Receipts)
		}
	})
	t.Run("audit_insert", func(t *testing.T) {
		t.Parallel()
		x := h{t: t, Env: Open(t, b, fairrelay.ReferencePolicy())}
		x.enqueue("A1", "A", 1, 0)
		c := x.claimID(0, "A1")
		x.settle(c.Token, fairrelay.OutcomeIDConflict, 0)
		b.RejectInserts(t, x.QueueDSN, "audit")
		x.unchanged("rejected redrive", false, func() {
			_, err := x.Queue.Redrive(bg, fairrelay.RedriveParams{EventID: "A1", ExpectedGeneration: 1, Reason: "fixed", At: 1})
			wantCode(t, "redrive", err, fairrelay.CodeDatabase, "")
		})
		if e := x.event("A1"); e.State != fairrelay.StateQuarantined || e.Generation != 1 {
			t.Fatalf("A1 %+v: must stay quarantined at generation 1", e)
		}
		x.claimID(2, "")
	})
}
