package experiment

import (
	"context"
	"fmt"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
)

// workerTurn is what one worker holding a token did: its claim's generation,
// the inbox's answer to its delivery, and settle's answer.
type workerTurn struct {
	Generation int64                  `json:"generation"`
	Received   fairrelay.Outcome      `json:"received,omitempty"`
	Settled    fairrelay.SettleStatus `json:"settled"`
}

type staleFacts struct {
	Old   workerTurn `json:"old_worker"`
	New   workerTurn `json:"new_worker"`
	Final state      `json:"final"`
}

// staleGenerationDuplicate is SPEC §5 item 5: the old worker's lease ran
// out and a new worker re-claimed A1. The old worker's late delivery is
// applied (the inbox cannot know), but its settle is fenced off (stale); the
// new worker's delivery is a duplicate and its settle acks. The generation
// fence protects the queue's state, the receipt protects the effect.
func staleGenerationDuplicate(ctx context.Context, s *session) (any, error) {
	q, in, old, err := s.claimA1(ctx, 7)
	if err != nil {
		return nil, err
	}
	res, err := q.Claim(ctx, fairrelay.ClaimParams{At: 5})
	if err != nil {
		return nil, err
	}
	cur := res.First()
	if cur == nil {
		return nil, fmt.Errorf("claim at 5 answered idle, want A1 again (the lease ran out)")
	}
	var f staleFacts
	if f.Old, err = turn(ctx, q, in, old, 5); err != nil {
		return nil, err
	}
	if f.New, err = turn(ctx, q, in, cur, 5); err != nil {
		return nil, err
	}
	if f.Final, err = snapshot(ctx, q, in); err != nil {
		return nil, err
	}
	s.expect(f.Old.Generation == 1 && f.New.Generation == 2, "generations %d and %d, want 1 then 2", f.Old.Generation, f.New.Generation)
	s.expect(f.Old.Received == fairrelay.OutcomeAccepted && f.Old.Settled == fairrelay.SettleStale, "old worker %+v, want accepted then stale", f.Old)
	s.expect(f.New.Received == fairrelay.OutcomeDuplicate && f.New.Settled == fairrelay.SettleAcked, "new worker %+v, want duplicate then acked", f.New)
	p := f.Final.projection("A")
	s.expect(len(f.Final.Receipts) == 1 && p.Total == 7, "%d receipts, total %d: want one receipt and one effect (7)", len(f.Final.Receipts), p.Total)
	return f, nil
}

// turn delivers c to the inbox and settles its token with the answer at
// tick at.
func turn(ctx context.Context, q *fairrelay.Queue, in *inbox.Inbox, c *fairrelay.Claim, at int64) (workerTurn, error) {
	t := workerTurn{Generation: c.Token.Generation}
	out, err := in.Receive(ctx, inbox.Delivery{EventID: c.Token.EventID, Flow: c.Flow, Seq: c.Seq, Body: c.Body})
	if err != nil {
		return t, err
	}
	t.Received = out
	r, err := q.Settle(ctx, fairrelay.SettleParams{Token: c.Token, Outcome: out, At: at})
	if err != nil {
		return t, err
	}
	t.Settled = r.Status
	return t, nil
}

type expiredFacts struct {
	LeaseUntil int64      `json:"lease_until"`
	Old        workerTurn `json:"old_worker"`
	Final      state      `json:"final"`
}

// expiredLeaseWithoutTakeover is SPEC §5 item 6: the lease of A1 ran out at
// tick 5 and nobody re-claimed it; the old token's settle at 5 still answers
// expired, so the lease's edge does not depend on whether someone came.
func expiredLeaseWithoutTakeover(ctx context.Context, s *session) (any, error) {
	q, in, c, err := s.claimA1(ctx, 1)
	if err != nil {
		return nil, err
	}
	f := expiredFacts{LeaseUntil: c.LeaseUntil}
	if f.Old, err = turn(ctx, q, in, c, c.LeaseUntil); err != nil {
		return nil, err
	}
	if f.Final, err = snapshot(ctx, q, in); err != nil {
		return nil, err
	}
	s.expect(f.Old.Settled == fairrelay.SettleExpired, "old token settled %s at tick %d, want expired", f.Old.Settled, f.LeaseUntil)
	a1 := f.Final.event("A1")
	s.expect(a1.State == fairrelay.StateInflight && a1.Generation == 1, "A1 is %s at generation %d, want still inflight at generation 1", a1.State, a1.Generation)
	return f, nil
}
