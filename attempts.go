package fairrelay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fairrelay/fairrelay/internal/store"
)

// Attempt is one claim of an event (one generation) and what became of it:
// the attempt history an operator reads beside the audit. The queue writes
// one row when the claim's settle is answered (acked, ready, quarantined or
// expired; a stale token records nothing) or, when no settle came, once its
// lease is found run out (Status AttemptLeaseExpired, at the next claim of
// the event or its quarantine for the budget). The first word on a
// generation wins.
type Attempt struct {
	// Generation is the claim's fencing token generation.
	Generation int64 `json:"generation"`
	// Flow is the event's flow.
	Flow string `json:"flow"`
	// LeaseUntil is the tick at which the claim's lease ran out.
	LeaseUntil int64 `json:"lease_until"`
	// Claimed is when the claim ran, on the queue's wall clock
	// (Config.Now), to the millisecond.
	Claimed time.Time `json:"claimed"`
	// SettledAt is the tick of the settle (nil for AttemptLeaseExpired);
	// Settled the wall-clock time (zero for AttemptLeaseExpired).
	SettledAt *int64    `json:"settled_at"`
	Settled   time.Time `json:"settled"`
	// Outcome is what the receiver answered (empty for
	// AttemptLeaseExpired); Status the settle's answer (SettleStatus) or
	// AttemptLeaseExpired.
	Outcome string `json:"outcome"`
	Status  string `json:"status"`
	// Detail, Duration and Relay are the settle's (Settlement.Detail,
	// Settlement.Duration to the millisecond, SettleManyParams.Relay); an
	// AttemptLeaseExpired attempt has the Relay of its claim
	// (ClaimParams.Relay, SettleManyParams.Relay): the relay that held
	// the lease when it ran out.
	// In JSON, Duration is a time.Duration's integer: nanoseconds (a
	// whole number of milliseconds).
	Detail   string        `json:"detail"`
	Duration time.Duration `json:"duration"`
	Relay    string        `json:"relay"`
}

// Attempts lists the event's recorded attempts by generation, in one read
// transaction. Errors: ErrInvalidInput (field "id"); ErrNotFound for an
// unknown event (a pruned one included: its history goes with it, SPEC §8,
// and the error's message says it was pruned); ErrBusy; ErrDatabase.
func (q *Queue) Attempts(ctx context.Context, eventID string) ([]Attempt, error) {
	if err := checkID("id", eventID); err != nil {
		return nil, err
	}
	tx, err := q.store.BeginRead(ctx)
	if err != nil {
		return nil, dbError("attempts", err)
	}
	defer tx.Rollback(ctx)
	e, err := tx.EventGet(ctx, eventID)
	if err != nil {
		return nil, dbError("attempts", err)
	}
	if e == nil {
		return nil, eventNotFound(ctx, tx, "attempts", eventID)
	}
	rows, err := tx.Attempts(ctx, eventID)
	if err != nil {
		return nil, dbError("attempts", err)
	}
	out := make([]Attempt, 0, len(rows))
	for _, r := range rows {
		a := Attempt{Generation: r.Generation, Flow: r.Flow, LeaseUntil: r.LeaseUntil, Claimed: wallTime(r.ClaimedWall),
			SettledAt: r.SettledAt, Outcome: r.Outcome, Status: r.Status, Detail: r.Detail,
			Duration: time.Duration(r.DurationMs) * time.Millisecond, Relay: r.Relay}
		if r.SettledWall != nil {
			a.Settled = wallTime(*r.SettledWall)
		}
		out = append(out, a)
	}
	return out, nil
}

// wallTime is a stored wall-clock reading (milliseconds since the Unix
// epoch) as a UTC time; 0 is the zero time (never recorded).
func wallTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// eventNotFound is the ErrNotFound answer of a read for an id that names
// no event, read in tx. An id a prune deleted the event of (SPEC §8: the
// prune keeps the id as a tombstone, not the body or the attempts) says
// so, with the event's flow, seq and acked tick, so that "no event" does
// not read as "never enqueued" beside an enqueue that answers existing.
// A failed read of the tombstone is the store's error (ErrBusy,
// ErrDatabase), named by op.
// noEvent is the ErrNotFound a write answers for an id that names no
// event (redrive, expedite, settle). Its message is completed after the
// write by explainNoEvent, in a read transaction of its own (a write
// transaction does not read tombstones).
type noEvent struct{ id string }

func (n noEvent) Error() string { return "no event with id " + quote(n.id) }

// errNoEvent is the answer of a write for id, which names no event.
func errNoEvent(id string) error {
	return &Error{Code: CodeNotFound, Err: noEvent{id}}
}

// explainNoEvent gives the ErrNotFound of a write, err, the answer of a
// read (eventNotFound): an id a prune deleted the event of says so, as
// Attempts and Event do (a fresh user: redrive of a pruned id said only
// "no event"). Any other err is returned as it is; a failed read of the
// tombstone is the store's error, named by op.
func (q *Queue) explainNoEvent(ctx context.Context, op string, err error) error {
	var n noEvent
	if !errors.As(err, &n) {
		return err
	}
	tx, rerr := q.store.BeginRead(ctx)
	if rerr != nil {
		return dbError(op, rerr)
	}
	defer tx.Rollback(ctx)
	return eventNotFound(ctx, tx, op, n.id)
}

func eventNotFound(ctx context.Context, tx store.ReadTx, op, id string) error {
	ts, err := tx.Tombstone(ctx, id)
	if err != nil {
		return dbError(op, err)
	}
	if ts == nil {
		return &Error{Code: CodeNotFound, Message: "no event with id " + quote(id)}
	}
	return &Error{Code: CodeNotFound, Message: fmt.Sprintf("no event with id %s: it was pruned (seq %d of flow %s, acked at tick %d); a prune keeps its id, as a tombstone, not its body or its attempts (SPEC §8)",
		quote(id), ts.Seq, quote(ts.Flow), ts.AckedAt)}
}
