package fairrelay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

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

// SettleResult is the answer of one settle. NextAt is set for SettleReady.
type SettleResult struct {
	Status SettleStatus `json:"status"`
	NextAt int64        `json:"next_at,omitempty"`
	// Held reports a settle that did not run: under SettleManyParams.SkipHeld,
	// another transaction held the token's flow. Status is empty and
	// nothing of the event or its flow changed.
	Held bool `json:"held,omitempty"`
}

// SettleParams is one settle in its own transaction (SPEC §2 settle).
type SettleParams struct {
	// Token is the claim's fencing token.
	Token Token
	// Outcome is what the receiver answered.
	Outcome Outcome
	// NotBefore, when above the backoff's next_at, raises next_at to it for a
	// transient outcome within the budget (a receiver's Retry-After, as a
	// tick). Zero leaves the SPEC's backoff unchanged. At most MaxTick:
	// above it is ErrInvalidInput naming not_before.
	NotBefore int64
	// Detail and Duration describe the delivery for the attempt history
	// (as Settlement's).
	Detail   string
	Duration time.Duration
	// Relay names the process that delivered (as SettleManyParams.Relay).
	Relay string
	// At is the tick of the write; AtStored runs it at the store's tick.
	At int64
}

// MaxDetailBytes is the longest Settlement.Detail accepted, in bytes.
const MaxDetailBytes = 1024

// Settlement is one settle of a SettleMany.
type Settlement struct {
	Token     Token
	Outcome   Outcome
	NotBefore int64 // as SettleParams.NotBefore
	// Detail is what the receiver said beyond the outcome (an HTTP status
	// line, a broker's error), kept in the attempt history for operators:
	// valid UTF-8 without NUL, at most MaxDetailBytes bytes (sink.Excerpt
	// makes one of any text); optional.
	Detail string
	// Duration is how long the delivery took (wall clock; kept in
	// milliseconds); optional, not negative.
	Duration time.Duration
}

// SettleManyParams settles many tokens at one tick in one transaction and,
// optionally, claims after them in the same transaction.
type SettleManyParams struct {
	// At is the tick of the write; AtStored runs it at the store's tick.
	At int64
	// Floor runs the write at the stored tick when At lies below it (as
	// ClaimParams.Floor).
	Floor bool
	// SkipHeld skips a token whose flow another transaction holds instead of
	// waiting for that transaction to end: its SettleResult has Held set and
	// nothing of it changes; settle it again later. On PostgreSQL an outbox
	// transaction holds the rows of the flows it enqueued to until it
	// commits (EnqueuePgxTx, EnqueueTx); a settle of one of those flows'
	// heads would wait for it, and so would every other settle of its
	// batch. The relay settles with it. On SQLite (one writer at a time) no
	// flow is ever held.
	SkipHeld bool
	// Settles are the tokens to settle, in order; each gets the answer a
	// Settle in that order would give. May be empty; with ClaimLimit 0 as
	// well, the call settles and claims nothing but still writes its tick
	// (the store's clock moves to At), as every write at a tick does —
	// unlike an empty EnqueueMany, which writes nothing.
	Settles []Settlement
	// ClaimLimit, when positive, claims up to that many heads after the
	// settles, in the same transaction: exactly the answers of the settles
	// followed by a Claim with that Limit at the same tick, with one commit
	// (one fsync) instead of two — a worker's loop step: settle the last
	// events, take the next. The claims see the settles. At most MaxLimit.
	ClaimLimit int
	// Relay names the process that delivered, for the attempt history
	// (CheckID's rule; optional), and the claimer of the claims after the
	// settles (ClaimParams.Relay).
	Relay string
	// Exclude as ClaimParams.Exclude, for the claims after the settles.
	Exclude []string
}

// SettleManyResult is the answer of SettleMany.
type SettleManyResult struct {
	// Results answers Settles, in order.
	Results []SettleResult
	// Claims are the heads claimed after the settles (ClaimLimit), in claim
	// order; empty when none was asked for or nothing was eligible.
	Claims []Claim
	// Quarantined are the heads those claims quarantined instead (as
	// ClaimResult.Quarantined).
	Quarantined []Quarantined
	// Tick is the tick the write ran at (At, or the stored tick under
	// AtStored or Floor).
	Tick int64
}

// Settle records what the receiver answered for the claim with p.Token
// (SPEC §2 settle): the fence first (stale, expired), then the outcome's
// class. Errors (SPEC §2 order): ErrClockRegressed; ErrInvalidInput for an
// outcome or an id CheckID refuses (an empty one included; no event has
// such an id, and an outcome is stored as a name), a detail that is not
// valid UTF-8 without NUL or is longer than MaxDetailBytes, or a bad tick;
// ErrNotFound for an unknown event id; ErrBusy; ErrDatabase.
func (q *Queue) Settle(ctx context.Context, p SettleParams) (SettleResult, error) {
	r, err := q.SettleMany(ctx, SettleManyParams{At: p.At, Relay: p.Relay,
		Settles: []Settlement{{Token: p.Token, Outcome: p.Outcome, NotBefore: p.NotBefore, Detail: p.Detail, Duration: p.Duration}}})
	if err != nil {
		return SettleResult{}, single(err)
	}
	return r.Results[0], nil
}

// SettleMany settles p.Settles at one tick in one transaction, each with the
// answer Settle would give in that order, then claims up to p.ClaimLimit
// heads. An unknown event id fails the whole call with ErrNotFound and
// nothing changes. The fault points are the settle's (before_settle_commit,
// after_settle_commit): a crash before the commit keeps neither part.
// Errors as Settle, plus ErrInvalidInput (field "claim_limit"); an
// ErrInvalidInput about one settlement gives its position in p.Settles
// (Error.Item).
func (q *Queue) SettleMany(ctx context.Context, p SettleManyParams) (SettleManyResult, error) {
	k := p.ClaimLimit
	var rs []SettleResult
	var cs []Claim
	var qs []Quarantined
	op := writeOp{name: "settle", lanes: store.LaneSettle, at: p.At, floor: p.Floor,
		read:   store.ReadSet{Events: settleIDs(p.Settles), SkipHeld: p.SkipHeld},
		before: faultpoint.BeforeSettleCommit, after: faultpoint.AfterSettleCommit,
		check: func() error {
			if err := checkSettles(p.Settles); err != nil {
				return err
			}
			if p.Relay != "" {
				if err := checkID("relay", p.Relay); err != nil {
					return err
				}
			}
			if k < 0 || k > MaxLimit {
				return invalid("claim_limit", "must be 0 to %d, got %d", MaxLimit, k)
			}
			if err := checkExclude(p.Exclude); err != nil {
				return err
			}
			return nil
		}}
	if k > 0 {
		op.name, op.lanes = "settle and claim", store.LaneSettle|store.LaneClaim
		// The claims see the settles: the events behind the settled ones
		// come along, the heads the claims are likely to take.
		op.read.Next, op.read.PickLimit, op.read.GroupPickLimit, op.read.Order, op.read.DueLimit = true, k+len(p.Exclude), k+len(p.Exclude), q.pickOrder(), duePage
	}
	tick, err := q.write(ctx, op, func(t *txn, rr *store.ReadResult) error {
		var err error
		if rs, err = t.settleMany(p.Settles, p.Relay, rr.Held); err != nil {
			return err
		}
		cs, qs = nil, nil
		if k > 0 {
			t.claimer = p.Relay
			cs, err = t.claim(ctx, k, excludeSet(p.Exclude), rr)
			qs = slices.Clone(t.quarantined)
		}
		return err
	})
	if err != nil {
		return SettleManyResult{}, q.explainNoEvent(ctx, op.name, err)
	}
	return SettleManyResult{Results: rs, Claims: cs, Quarantined: qs, Tick: tick}, nil
}

// checkSettles checks each settlement (checkSettle); an error gives the
// settlement's position (Error.Item).
func checkSettles(ps []Settlement) error {
	for i, p := range ps {
		if err := checkSettle(p); err != nil {
			return itemError(err, "settlement", i, len(ps))
		}
	}
	return nil
}

func checkSettle(p Settlement) error {
	if p.Outcome == "" {
		return invalid("outcome", "empty")
	}
	// An outcome outside the known ones is transient (Outcome.Class),
	// but it is stored with the attempt: it is a name (CheckID), which
	// every backend can hold (PostgreSQL's text takes no NUL and no
	// invalid UTF-8: it failed the commit with a database error).
	if err := checkID("outcome", string(p.Outcome)); err != nil {
		return err
	}
	// The id's own rule (CheckID), as redrive's and expedite's: an id
	// no event could have is bad input, not not_found.
	if err := checkID("id", p.Token.EventID); err != nil {
		return err
	}
	if err := checkGeneration("generation", p.Token.Generation); err != nil {
		return err
	}
	// Not above MaxTick: a head due later could never be claimed (no
	// operation's tick goes past MaxTick), and its flow would stay blocked
	// without being quarantined (a breaker's report).
	if p.NotBefore < 0 || p.NotBefore > MaxTick {
		return invalid("not_before", "must be a tick in [0, %d] (MaxTick; a head due later could never be claimed), got %d", int64(MaxTick), p.NotBefore)
	}
	if len(p.Detail) > MaxDetailBytes || !utf8.ValidString(p.Detail) || strings.IndexByte(p.Detail, 0) >= 0 {
		return invalid("detail", "must be valid UTF-8 without NUL of at most %d bytes, got %d bytes", MaxDetailBytes, len(p.Detail))
	}
	if p.Duration < 0 {
		return invalid("duration", "must not be negative, got %s", p.Duration)
	}
	return nil
}

// itemError gives an *Error about the item at index i of n its position
// (Error.Item, 1-based) and, when n > 1, leads its message with it.
func itemError(err error, noun string, i, n int) error {
	var e *Error
	if !errors.As(err, &e) {
		return err
	}
	c := *e
	c.Item = i + 1
	if n > 1 {
		c.Message = fmt.Sprintf("%s %d of %d: %s", noun, i+1, n, c.Message)
	}
	return &c
}

// settleMany is the body of SettleMany inside a write transaction. A
// token whose flow the read skipped (held: another transaction holds it)
// is answered Held and not touched.
func (t *txn) settleMany(ps []Settlement, relay string, held map[string]bool) ([]SettleResult, error) {
	out := make([]SettleResult, 0, len(ps))
	for _, p := range ps {
		if held[p.Token.EventID] {
			out = append(out, SettleResult{Held: true})
			continue
		}
		r, err := t.settle(p, relay)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func (t *txn) settle(p Settlement, relay string) (SettleResult, error) {
	at := t.at
	e := t.events[p.Token.EventID]
	if e == nil {
		return SettleResult{}, errNoEvent(p.Token.EventID)
	}
	// The fence (SPEC §2): a stale generation, then a lease that ran out —
	// also when nobody has re-claimed the event.
	if e.State != store.StateInflight || e.Generation != p.Token.Generation {
		return SettleResult{Status: SettleStale}, nil
	}
	if at >= e.LeaseUntil {
		t.settled(e, p, relay, SettleExpired)
		return SettleResult{Status: SettleExpired}, nil
	}
	f := t.flows[e.Flow]
	if f == nil {
		return SettleResult{}, fmt.Errorf("event %q: flow %q is missing: the store is inconsistent", e.ID, e.Flow)
	}
	var res SettleResult
	switch p.Outcome.Class() {
	case ClassAck:
		e.State = store.StateAcked
		t.acked++
		if f.Group != "" {
			t.ackedGroups[f.Group]++
		}
		acked := at
		e.AckedAt = &acked
		f.HeadSeq++
		if f.HeadSeq <= f.Seq {
			// Events behind the head are untouched since enqueue: ready, with
			// next_at = their enqueue tick <= at. The new head is eligible now.
			t.placeHead(f, at)
		} else {
			t.parkHead(f)
		}
		res.Status = SettleAcked
	case ClassPermanent:
		e.State, e.Reason = store.StateQuarantined, string(p.Outcome)
		t.parkHead(f)
		res.Status = SettleQuarantined
	default:
		if e.Attempts < t.q.policy.Budget {
			e.State = store.StateReady
			e.NextAt = at + t.q.policy.Backoff(e.ID, e.Generation, e.Attempts)
			if p.NotBefore > e.NextAt {
				e.NextAt = p.NotBefore
			}
			t.placeHead(f, e.NextAt)
			res = SettleResult{Status: SettleReady, NextAt: e.NextAt}
		} else {
			e.State, e.Reason = store.StateQuarantined, ReasonBudgetExhausted
			t.parkHead(f)
			res.Status = SettleQuarantined
		}
	}
	t.settled(e, p, relay, res.Status)
	t.changedEvent(e)
	t.changedFlow(f)
	return res, nil
}

// settled records the attempt of e's current claim as p settled it, with the
// answer (a token of the current generation: stale tokens record nothing).
func (t *txn) settled(e *store.EventRow, p Settlement, relay string, status SettleStatus) {
	at, wall := t.at, t.wall
	t.attempts = append(t.attempts, store.AttemptRow{EventID: e.ID, Generation: e.Generation, Flow: e.Flow,
		LeaseUntil: e.LeaseUntil, ClaimedWall: e.ClaimedWall, SettledAt: &at, SettledWall: &wall,
		Outcome: string(p.Outcome), Status: string(status), Detail: p.Detail, DurationMs: p.Duration.Milliseconds(), Relay: relay})
}

// settleIDs returns the event ids of ps, in order.
func settleIDs(ps []Settlement) []string {
	ids := make([]string, len(ps))
	for i, p := range ps {
		ids[i] = p.Token.EventID
	}
	return ids
}
