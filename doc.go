// Package fairrelay is a durable, fair, per-flow-ordered event relay: the
// dispatcher behind a transactional outbox.
//
// Events belong to flows (ordering keys). Inside a flow, delivery is strictly
// in sequence: the head — the lowest event that is not acked — blocks the rest
// of its flow in every state. Across flows, dispatch rotates fairly: a claim
// spends the flow's turn at claim time, so a head that fails forever cannot
// monopolise the relay. Claims carry a lease and a generation (a fencing
// token); stale or expired tokens cannot settle. Permanent failures quarantine
// the head at once; transient ones back off within a budget. Quarantine ends
// only through an audited redrive. Receivers keep an inbox (package inbox):
// receipt and effect in one transaction, deduplicated by event id and
// sequence-checked.
//
// The contract is SPEC.md (sections cited as "SPEC §n" throughout). Time is
// logical: every write takes a tick (an int64 that never goes back); the
// daemon maps 1 tick to 1 ms.
//
// A minimal round trip on the embedded SQLite store:
//
//	q, err := fairrelay.Open(ctx, "queue.db", fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
//	if err != nil { … }
//	defer q.Close()
//	q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "A1", Flow: "A", Body: []byte(`{"delta":1}`), At: 0})
//	c, err := q.Claim(ctx, 0)                          // nil when nothing is eligible
//	outcome := deliver(c)                              // your receiver's answer
//	r, err := q.Settle(ctx, c.Token, outcome, 1)       // acked, ready, quarantined, stale or expired
//
// The same operations run on PostgreSQL when the DSN is a postgres:// URL.
// Every operation is one atomic transaction; errors are *Error values with a
// Code (errors.Is against ErrClockRegressed, ErrNotFound, ErrInvalidInput,
// ErrBusy, ErrDatabase).
package fairrelay
