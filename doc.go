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
// A minimal round trip on the embedded SQLite store, under the daemon's
// policy (1 tick = 1 ms) and at the store's own tick (AtStored), as a tool
// beside a running relay writes:
//
//	q, err := fairrelay.Open(ctx, "queue.db", fairrelay.Config{Policy: fairrelay.DaemonPolicy()})
//	if err != nil { … }
//	defer q.Close()
//	_, err = q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "A1", Flow: "A", Body: []byte(`{"delta":1}`), At: fairrelay.AtStored})
//	res, err := q.Claim(ctx, fairrelay.ClaimParams{At: fairrelay.AtStored}) // res.First() is nil when idle
//	c := res.First()
//	outcome := deliver(c) // your receiver's answer
//	r, err := q.Settle(ctx, fairrelay.SettleParams{Token: c.Token, Outcome: outcome, At: fairrelay.AtStored})
//	// r.Status: acked, ready, quarantined, stale or expired
//
// In production the relay (package relay) runs the claim-deliver-settle
// loop; the library calls above are what it and the CLI are made of.
//
// The same operations run on PostgreSQL when the DSN is a postgres:// URL.
// Every operation is one atomic transaction; errors are *Error values with a
// Code (errors.Is against ErrClockRegressed, ErrNotFound, ErrInvalidInput,
// ErrBusy, ErrDatabase).
package fairrelay
