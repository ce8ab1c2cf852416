package fairrelay

import (
	"context"
	"fmt"

	"github.com/fairrelay/fairrelay/internal/faultpoint"
	"github.com/fairrelay/fairrelay/internal/store"
)

// Token is the fencing token a claim hands out: the event id and the
// generation the claim set. Only the current generation, before the lease
// runs out, can settle (SPEC §2 settle).
type Token struct {
	EventID    string `json:"id"`
	Generation int64  `json:"generation"`
}

// Claim is one claimed head: what to deliver and the token to settle it with.
type Claim struct {
	Token Token
	// Flow and Seq place the event in its flow; Body is its payload.
	Flow string
	Seq  int64
	Body []byte
	// LeaseUntil is the tick at which the lease runs out: a settle at or
	// after it answers expired.
	LeaseUntil int64
	// Ticket is the global ticket this claim took; it is the flow's new
	// served value.
	Ticket int64
	// Attempts is the event's claim count in the current round, this claim
	// included (1-based).
	Attempts int64
}

// ClaimParams is one claim transaction (SPEC §2 claim).
type ClaimParams struct {
	// At is the tick of the write (SPEC §2: at >= the stored tick); AtStored
	// runs it at the store's tick.
	At int64
	// Limit is the most heads to claim, each of a distinct flow, with exactly
	// the answers Limit consecutive claims at the same tick would give (one
	// commit, one fsync, for many claims). Defaults to 1; at most MaxLimit.
	Limit int
	// Floor runs the claim at the stored tick when At lies below it, instead
	// of failing with ErrClockRegressed: the daemon clock of SPEC §7, which
	// never goes below the stored tick. For a dispatcher whose writes wait
	// for locks while other processes commit later ticks (several relays on
	// one PostgreSQL queue), where a retry at a fresher tick would lose the
	// same race again. ClaimResult.Tick says the tick it ran at. Scripts and
	// tests that give explicit ticks leave it false.
	Floor bool
}

// MaxLimit is the largest ClaimParams.Limit (and SettleManyParams.ClaimLimit)
// accepted.
const MaxLimit = 1 << 16

// ClaimResult is the answer of Claim.
type ClaimResult struct {
	// Claims are the heads claimed, in claim order (ascending Ticket); empty
	// when nothing was eligible (idle; the tick still advanced).
	Claims []Claim
	// Tick is the tick the claim ran at: At, or the stored tick (AtStored,
	// Floor).
	Tick int64
}

// First returns the first claim, nil when the claim was idle: for a claim of
// one head (Limit 1).
func (r ClaimResult) First() *Claim {
	if len(r.Claims) == 0 {
		return nil
	}
	return &r.Claims[0]
}

// Claim takes up to p.Limit eligible heads in dispatch order, each the one
// with the smallest served (SPEC §2 claim): ready with next_at <= at, or
// inflight with a lease that ran out. An empty ClaimResult.Claims is idle
// (the tick still advances). In the same transaction, every expired
// inflight head whose round already used the whole budget is quarantined
// with reason budget_exhausted instead of being claimed ([decision] of SPEC
// §2). Errors: ErrInvalidInput (at, limit), ErrClockRegressed, ErrBusy
// (nothing changed; retry), ErrDatabase.
func (q *Queue) Claim(ctx context.Context, p ClaimParams) (ClaimResult, error) {
	k := p.Limit
	if k == 0 {
		k = 1
	}
	if k < 1 || k > MaxLimit {
		return ClaimResult{}, invalid("limit", "must be 1 to %d, got %d", MaxLimit, p.Limit)
	}
	var out []Claim
	op := writeOp{name: "claim", lanes: store.LaneClaim, hint: store.TxHint{Pick: k, PickOrder: q.pickOrder()},
		at: p.At, floor: p.Floor, before: faultpoint.BeforeClaimCommit, after: faultpoint.AfterClaimCommit}
	tick, err := q.writeTx(ctx, op, func(tx store.Tx, c *store.Clock) error {
		var err error
		out, err = q.claimBatch(ctx, tx, c, c.Tick, k)
		return err
	})
	if err != nil {
		return ClaimResult{}, err
	}
	return ClaimResult{Claims: out, Tick: tick}, nil
}

// claimBatch is the body of Claim inside a write transaction.
func (q *Queue) claimBatch(ctx context.Context, tx store.Tx, c *store.Clock, at int64, k int) ([]Claim, error) {
	if err := q.promoteDue(ctx, tx, at); err != nil {
		return nil, err
	}
	order := q.pickOrder()
	// The first k runnable flows in dispatch order are exactly what k
	// consecutive claims pick: a claim takes its flow out of the runnable
	// index and changes no other flow, so one indexed read serves the batch.
	fs, err := tx.FlowPickRunnable(ctx, order, k)
	if err != nil {
		return nil, err
	}
	var out []Claim
	for _, f := range fs {
		cl, err := q.claimOne(ctx, tx, c, at, f)
		if err != nil {
			return nil, err
		}
		if cl != nil {
			out = append(out, *cl)
		}
	}
	return out, nil
}

// promoteDue moves every flow whose head became eligible by tick at (backoff
// over, lease run out) from the waiting index to the runnable one, so that
// claim never scans heads that are not eligible. An expired inflight head
// whose round used the whole budget is quarantined here instead.
func (q *Queue) promoteDue(ctx context.Context, tx store.Tx, at int64) error {
	const page = 256
	for {
		due, err := tx.FlowListDue(ctx, at, page)
		if err != nil {
			return err
		}
		for _, f := range due {
			head, err := q.head(ctx, tx, f)
			if err != nil {
				return err
			}
			if head.State == store.StateInflight && head.Attempts >= q.policy.Budget {
				head.State, head.Reason = store.StateQuarantined, ReasonBudgetExhausted
				if err := tx.EventUpdate(ctx, *head); err != nil {
					return err
				}
				parkHead(&f)
			} else {
				f.Runnable, f.WaitUntil = true, nil
			}
			if err := tx.FlowUpdate(ctx, f); err != nil {
				return err
			}
		}
		if len(due) < page {
			return nil
		}
	}
}

// head loads the flow's head event; a flow in an index always has one.
func (q *Queue) head(ctx context.Context, tx store.Tx, f store.FlowRow) (*store.EventRow, error) {
	e, err := tx.EventGetBySeq(ctx, f.Flow, f.HeadSeq)
	if err != nil {
		return nil, err
	}
	if e == nil {
		return nil, fmt.Errorf("flow %q: head seq %d is missing: the store is inconsistent", f.Flow, f.HeadSeq)
	}
	return e, nil
}

// claimOne claims the head of f, a runnable flow picked in dispatch order;
// nil when the head is not eligible at tick at after all.
func (q *Queue) claimOne(ctx context.Context, tx store.Tx, c *store.Clock, at int64, f store.FlowRow) (*Claim, error) {
	head, err := q.head(ctx, tx, f)
	if err != nil {
		return nil, err
	}
	if head.State != store.StateReady && head.State != store.StateInflight {
		return nil, fmt.Errorf("flow %q: runnable head %q is %s: the store is inconsistent", f.Flow, head.ID, head.State)
	}
	if head.State == store.StateReady && head.NextAt > at {
		// Not eligible yet (SPEC §2 step 2): with one writer this cannot
		// happen, but where lanes run side by side (PostgreSQL) an enqueue,
		// a redrive or a settle may have made this head ready at a later
		// tick than this claim's while it ran. A later claim takes it.
		return nil, nil
	}
	// served moves at claim time, not at success: the claim spends the
	// flow's turn whatever happens next (SPEC §2).
	c.Ticket++
	f.Served = c.Ticket
	lease := at + q.policy.Lease
	f.Runnable, f.WaitUntil = false, &lease
	head.State = store.StateInflight
	head.Generation++
	head.Attempts++
	head.LifetimeAttempts++
	head.LeaseUntil = lease
	if err := tx.EventUpdate(ctx, *head); err != nil {
		return nil, err
	}
	if err := tx.FlowUpdate(ctx, f); err != nil {
		return nil, err
	}
	return &Claim{
		Token: Token{EventID: head.ID, Generation: head.Generation},
		Flow:  head.Flow, Seq: head.Seq, Body: head.Body,
		LeaseUntil: lease, Ticket: c.Ticket, Attempts: head.Attempts,
	}, nil
}

// pickOrder is the tie-break of the runnable index under the queue's policy
// (SPEC §2 step 3, §7).
func (q *Queue) pickOrder() store.Order {
	if q.policy.Entry == EntryFair {
		return store.OrderCreation
	}
	return store.OrderFlowID
}
