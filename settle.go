package fairrelay

import (
	"context"
	"slices"

	"github.com/fairrelay/fairrelay/internal/faultpoint"
	"github.com/fairrelay/fairrelay/internal/store"
)

// ReasonBudgetExhausted is the quarantine reason when a round's budget of
// claims is used up by transient outcomes or leases that ran out.
const ReasonBudgetExhausted = "budget_exhausted"

// SettleStatus is the answer of settle (SPEC §2).
type SettleStatus string

const (
	// SettleAcked: the event is acked; the next event of its flow is the head.
	SettleAcked SettleStatus = "acked"
	// SettleReady: a transient outcome within the budget; the event may be
	// claimed again from NextAt on.
	SettleReady SettleStatus = "ready"
	// SettleQuarantined: a permanent outcome, or a transient one with the
	// budget used up; the head blocks its flow until a redrive.
	SettleQuarantined SettleStatus = "quarantined"
	// SettleStale: the event is not inflight or the token's generation is
	// not the current one; nothing changed but the tick.
	SettleStale SettleStatus = "stale"
	// SettleExpired: the token is current but at >= lease_until; nothing
	// changed but the tick.
	SettleExpired SettleStatus = "expired"
)

// SettleResult is the answer of Settle. NextAt is set for SettleReady.
type SettleResult struct {
	Status SettleStatus `json:"status"`
	NextAt int64        `json:"next_at,omitempty"`
	// Held reports a settle that did not run: under WithSkipHeldFlows,
	// another transaction held the token's flow. Status is empty and
	// nothing of the event or its flow changed.
	Held bool `json:"held,omitempty"`
}

// SettleParams is one settle of a batch.
type SettleParams struct {
	Token   Token
	Outcome Outcome
	// NotBefore, when above the backoff's next_at, raises next_at to it for a
	// transient outcome within the budget (a receiver's Retry-After, in
	// ticks). Zero leaves the SPEC's backoff unchanged.
	NotBefore int64
}

// Settle records what the receiver answered for the claim with token tok
// (SPEC §2 settle): the fence first (stale, expired), then the outcome's
// class. Errors: ErrNotFound for an unknown event id; ErrInvalidInput for an
// empty outcome, an empty id, a negative generation or a negative tick;
// ErrClockRegressed; ErrBusy; ErrDatabase.
func (q *Queue) Settle(ctx context.Context, tok Token, outcome Outcome, at int64) (SettleResult, error) {
	rs, err := q.SettleBatch(ctx, at, []SettleParams{{Token: tok, Outcome: outcome}})
	if err != nil {
		return SettleResult{}, err
	}
	return rs[0], nil
}

// SettleBatch settles many tokens at one tick in one transaction, each with
// the answer Settle would give in that order. An unknown event id fails the
// whole batch with ErrNotFound and nothing changes. Errors as Settle.
func (q *Queue) SettleBatch(ctx context.Context, at int64, ps []SettleParams) ([]SettleResult, error) {
	if err := checkSettles(ps); err != nil {
		return nil, err
	}
	var out []SettleResult
	err := q.writeTx(ctx, store.LaneSettle, store.TxHint{Events: settleIDs(ps), SkipHeld: skipHeld(ctx)}, "settle", at, faultpoint.BeforeSettleCommit, faultpoint.AfterSettleCommit, func(tx store.Tx, c *store.Clock) error {
		var err error
		out, err = q.settleBatch(ctx, tx, c.Tick, ps)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func checkSettles(ps []SettleParams) error {
	for _, p := range ps {
		if p.Outcome == "" {
			return invalid("outcome", "empty")
		}
		if p.Token.EventID == "" {
			return invalid("id", "empty")
		}
		if err := checkGeneration("generation", p.Token.Generation); err != nil {
			return err
		}
		if p.NotBefore < 0 || p.NotBefore > 2*MaxTick {
			return invalid("not_before", "must be a tick in [0, %d], got %d", int64(2*MaxTick), p.NotBefore)
		}
	}
	return nil
}

// settleBatch is the body of SettleBatch inside a write transaction. A
// token whose flow the transaction skipped (store.HeldEvents: another
// transaction holds it) is answered Held and not read.
func (q *Queue) settleBatch(ctx context.Context, tx store.Tx, at int64, ps []SettleParams) ([]SettleResult, error) {
	out := make([]SettleResult, 0, len(ps))
	held := store.HeldEvents(tx)
	if len(ps) > 1 {
		// One read for the whole batch where a question costs a round trip.
		ids := settleIDs(ps)
		if len(held) > 0 {
			ids = slices.DeleteFunc(ids, func(id string) bool { return held[id] })
		}
		if err := store.Prefetch(ctx, tx, ids, nil); err != nil {
			return nil, err
		}
	}
	for _, p := range ps {
		if held[p.Token.EventID] {
			out = append(out, SettleResult{Held: true})
			continue
		}
		r, err := q.settle(ctx, tx, p, at)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func (q *Queue) settle(ctx context.Context, tx store.Tx, p SettleParams, at int64) (SettleResult, error) {
	e, err := tx.EventGet(ctx, p.Token.EventID)
	if err != nil {
		return SettleResult{}, err
	}
	if e == nil {
		return SettleResult{}, &Error{Code: CodeNotFound, Message: "no event with id " + quote(p.Token.EventID)}
	}
	// The fence (SPEC §2): a stale generation, then a lease that ran out —
	// also when nobody has re-claimed the event.
	if e.State != store.StateInflight || e.Generation != p.Token.Generation {
		return SettleResult{Status: SettleStale}, nil
	}
	if at >= e.LeaseUntil {
		return SettleResult{Status: SettleExpired}, nil
	}
	f, err := tx.FlowGet(ctx, e.Flow)
	if err != nil {
		return SettleResult{}, err
	}
	var res SettleResult
	switch p.Outcome.Class() {
	case ClassAck:
		e.State = store.StateAcked
		f.HeadSeq++
		if f.HeadSeq <= f.Seq {
			// Events behind the head are untouched since enqueue: ready, with
			// next_at = their enqueue tick <= at. The new head is eligible now.
			placeHead(f, at, at)
		} else {
			parkHead(f)
		}
		res.Status = SettleAcked
	case ClassPermanent:
		e.State, e.Reason = store.StateQuarantined, string(p.Outcome)
		parkHead(f)
		res.Status = SettleQuarantined
	default:
		if e.Attempts < q.policy.Budget {
			e.State = store.StateReady
			e.NextAt = at + q.policy.Backoff(e.ID, e.Generation, e.Attempts)
			if p.NotBefore > e.NextAt {
				e.NextAt = p.NotBefore
			}
			placeHead(f, e.NextAt, at)
			res = SettleResult{Status: SettleReady, NextAt: e.NextAt}
		} else {
			e.State, e.Reason = store.StateQuarantined, ReasonBudgetExhausted
			parkHead(f)
			res.Status = SettleQuarantined
		}
	}
	if err := tx.EventUpdate(ctx, *e); err != nil {
		return SettleResult{}, err
	}
	if err := tx.FlowUpdate(ctx, *f); err != nil {
		return SettleResult{}, err
	}
	return res, nil
}

// settleIDs returns the event ids of ps, in order.
func settleIDs(ps []SettleParams) []string {
	ids := make([]string, len(ps))
	for i, p := range ps {
		ids[i] = p.Token.EventID
	}
	return ids
}
