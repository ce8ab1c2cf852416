package fairrelay

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

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
	// tests that give explicit ticks leave it false. A floor write is a
	// daemon clock's, so Policy.MaxTickJump does not apply to it.
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
// §2). Errors: ErrClockRegressed; ErrInvalidInput (at, limit);
// ErrBusy (nothing changed; retry); ErrDatabase.
func (q *Queue) Claim(ctx context.Context, p ClaimParams) (ClaimResult, error) {
	k := p.Limit
	if k == 0 {
		k = 1
	}
	var out []Claim
	op := writeOp{name: "claim", lanes: store.LaneClaim, at: p.At, floor: p.Floor,
		read: store.ReadSet{PickLimit: max(k, 1), Order: q.pickOrder(), DueLimit: duePage},
		check: func() error {
			if k < 1 || k > MaxLimit {
				return invalid("limit", "must be 1 to %d, got %d", MaxLimit, p.Limit)
			}
			return nil
		},
		before: faultpoint.BeforeClaimCommit, after: faultpoint.AfterClaimCommit}
	tick, err := q.write(ctx, op, func(t *txn, rr *store.ReadResult) error {
		var err error
		out, err = t.claim(ctx, k, rr)
		return err
	})
	if err != nil {
		return ClaimResult{}, err
	}
	return ClaimResult{Claims: out, Tick: tick}, nil
}

// duePage is how many due flows one read brings: a claim reads pages until
// every due flow is promoted.
const duePage = 256

// claim is the body of Claim inside a write transaction, whose read asked
// for the first k runnable flows (rr.Picks) and the first page of due ones
// (rr.Due): it promotes every due flow, then claims up to k heads.
func (t *txn) claim(ctx context.Context, k int, rr *store.ReadResult) ([]Claim, error) {
	if err := t.promoteDue(ctx, rr.Due); err != nil {
		return nil, err
	}
	// The first k runnable flows in dispatch order are exactly what k
	// consecutive claims pick: a claim takes its flow out of the runnable
	// index and changes no other flow. They are among the first k flows of
	// the index as read, and the flows this transaction made runnable (due
	// heads, heads behind an ack): the working rows decide.
	cands, seen := t.cands[:0], t.seen
	for _, h := range rr.Picks {
		if f := t.flows[h.Flow.Flow]; f.Runnable && !seen[f.Flow] {
			seen[f.Flow] = true
			cands = append(cands, f)
		}
	}
	for _, f := range t.dirtyFlows {
		if f.Runnable && !seen[f.Flow] {
			seen[f.Flow] = true
			cands = append(cands, f)
		}
	}
	sortDispatch(cands, t.q.pickOrder())
	t.cands = cands
	out := make([]Claim, 0, min(k, len(cands)))
	for _, f := range cands[:min(k, len(cands))] {
		cl, err := t.claimOne(f)
		if err != nil {
			return nil, err
		}
		if cl != nil {
			out = append(out, *cl)
		}
	}
	return out, nil
}

// sortDispatch sorts flows in dispatch order (SPEC §2 step 3, §7): the
// smallest served first, ties by flow id (seed) or creation order (fair).
// It is the Go side of the runnable index's order, which each backend's SQL
// reads in; the conformance suite holds the two to the same answers.
func sortDispatch(fs []*store.FlowRow, order store.Order) {
	slices.SortFunc(fs, func(a, b *store.FlowRow) int {
		if c := cmp.Compare(a.Served, b.Served); c != 0 {
			return c
		}
		if order == store.OrderCreation {
			return cmp.Compare(a.Ord, b.Ord)
		}
		return strings.Compare(a.Flow, b.Flow)
	})
}

// promoteDue moves every flow whose head became eligible by the
// transaction's tick (backoff over, lease run out) from the due index to
// the runnable one, so that a claim never scans heads that are not
// eligible. An expired inflight head whose round used the whole budget is
// quarantined instead ([decision] of SPEC §2), in every flow, whatever the
// claim then picks. due is the first page; the next pages are read here.
func (t *txn) promoteDue(ctx context.Context, due []store.FlowHead) error {
	for {
		for i := range due {
			f := t.addFlow(&due[i].Flow)
			if f.WaitUntil == nil || *f.WaitUntil > t.at {
				continue // changed by this transaction already
			}
			head, err := t.head(f)
			if err != nil {
				return err
			}
			if head.State == store.StateInflight && head.Attempts >= t.q.policy.Budget {
				t.leaseExpired(head)
				head.State, head.Reason = store.StateQuarantined, ReasonBudgetExhausted
				t.changedEvent(head)
				parkHead(f)
			} else {
				f.Runnable, f.WaitUntil = true, nil
			}
			t.changedFlow(f)
		}
		if len(due) < duePage {
			return nil
		}
		last := due[len(due)-1].Flow
		rr, err := t.tx.Read(ctx, store.ReadSet{At: t.at, DueLimit: duePage, DueAfter: &store.FlowKey{WaitUntil: *last.WaitUntil, Flow: last.Flow}})
		if err != nil {
			return err
		}
		t.addHeads(rr.Due)
		due = rr.Due
	}
}

// AttemptLeaseExpired is an attempt's Status when its lease ran out before a
// settle (the event was claimed again, or quarantined for its budget).
const AttemptLeaseExpired = "lease_expired"

// leaseExpired records that e's current claim ended with its lease run out
// unsettled. A settle recorded earlier for the same generation (one that
// answered expired) is kept: the first word wins.
func (t *txn) leaseExpired(e *store.EventRow) {
	t.attempts = append(t.attempts, store.AttemptRow{EventID: e.ID, Generation: e.Generation, Flow: e.Flow,
		LeaseUntil: e.LeaseUntil, ClaimedWall: e.ClaimedWall, Status: AttemptLeaseExpired})
}

// claimOne claims the head of f, a runnable flow picked in dispatch order;
// nil when the head is not eligible at the transaction's tick after all.
func (t *txn) claimOne(f *store.FlowRow) (*Claim, error) {
	head, err := t.head(f)
	if err != nil {
		return nil, err
	}
	if head.State != store.StateReady && head.State != store.StateInflight {
		return nil, fmt.Errorf("flow %q: runnable head %q is %s: the store is inconsistent", f.Flow, head.ID, head.State)
	}
	at := t.at
	if head.State == store.StateReady && head.NextAt > at {
		// Not eligible yet (SPEC §2 step 2): with one writer this cannot
		// happen, but where lanes run side by side (PostgreSQL) an enqueue,
		// a redrive or a settle may have made this head ready at a later
		// tick than this claim's while it ran. A later claim takes it.
		return nil, nil
	}
	if head.State == store.StateInflight {
		t.leaseExpired(head) // the claim before this one ran out unsettled
	}
	// served moves at claim time, not at success: the claim spends the
	// flow's turn whatever happens next (SPEC §2).
	t.clock.Ticket++
	f.Served = t.clock.Ticket
	lease := at + t.q.policy.Lease
	f.Runnable, f.WaitUntil = false, &lease
	head.State = store.StateInflight
	head.Generation++
	head.Attempts++
	head.LifetimeAttempts++
	head.LeaseUntil = lease
	head.ClaimedWall = t.wall
	t.changedEvent(head)
	t.changedFlow(f)
	return &Claim{
		Token: Token{EventID: head.ID, Generation: head.Generation},
		Flow:  head.Flow, Seq: head.Seq, Body: head.Body,
		LeaseUntil: lease, Ticket: t.clock.Ticket, Attempts: head.Attempts,
	}, nil
}
