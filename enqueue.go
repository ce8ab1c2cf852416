package fairrelay

import (
	"bytes"
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"

	"github.com/fairrelay/fairrelay/internal/store"
)

// EnqueueParams is one event to enqueue in its own transaction, or in the
// caller's (SPEC §2 enqueue).
type EnqueueParams struct {
	// ID is the event id: 1 to MaxIDBytes bytes of UTF-8 without control
	// characters, unique in the store. The receiver deduplicates by it.
	ID string
	// Flow is the ordering key: 1 to MaxIDBytes bytes of UTF-8 without
	// control characters.
	Flow string
	// Body is the immutable payload: 1 to Policy.MaxBodyBytes bytes, stored
	// and delivered byte for byte.
	Body []byte
	// At is the tick of the write (SPEC §2: at >= the stored tick). The event
	// is eligible from this tick on. Beside a running relay, whose clock
	// moves every millisecond, pass AtStored (the store's tick, read in the
	// same transaction) or the relay's own tick (relay.Relay.Do).
	At int64
	// Floor runs the write at the stored tick when At lies below it, instead
	// of failing with ErrClockRegressed (as ClaimParams.Floor);
	// EnqueueResult.Tick says the tick it ran at.
	Floor bool
}

// NewEvent is one event of an EnqueueMany: the fields of EnqueueParams but
// the tick, which is the batch's.
type NewEvent struct {
	ID   string
	Flow string
	Body []byte
}

// EnqueueManyParams enqueues many events at one tick in one transaction.
type EnqueueManyParams struct {
	// At is the tick of the whole batch; AtStored runs it at the store's
	// tick.
	At int64
	// Floor as EnqueueParams.Floor.
	Floor bool
	// Events are the events to enqueue, in order.
	Events []NewEvent
}

// EnqueueStatus is the answer of enqueue.
type EnqueueStatus string

const (
	// EnqueueCreated: a new event was stored with the next seq of its flow.
	EnqueueCreated EnqueueStatus = "created"
	// EnqueueExisting: the same id, flow and body is already stored; nothing
	// changed. Seq is the stored seq.
	EnqueueExisting EnqueueStatus = "existing"
	// EnqueueConflict: the id is stored with another flow or body; nothing
	// changed.
	EnqueueConflict EnqueueStatus = "conflict"
)

// EnqueueResult is the answer of Enqueue. Seq is 0 for EnqueueConflict.
type EnqueueResult struct {
	Status EnqueueStatus `json:"status"`
	Seq    int64         `json:"seq,omitempty"`
	// Tick is the tick the write ran at (At, or the stored tick under
	// AtStored or Floor). Not part of the SPEC §6 answer.
	Tick int64 `json:"-"`
}

func (q *Queue) checkEvent(e NewEvent) error {
	if err := checkID("id", e.ID); err != nil {
		return err
	}
	if err := checkID("flow", e.Flow); err != nil {
		return err
	}
	if len(e.Body) == 0 {
		return invalid("body", "empty")
	}
	if len(e.Body) > q.policy.MaxBodyBytes {
		return invalid("body", "%d bytes, more than the limit of %d", len(e.Body), q.policy.MaxBodyBytes)
	}
	return nil
}

func (p EnqueueParams) event() NewEvent { return NewEvent{ID: p.ID, Flow: p.Flow, Body: p.Body} }

// Enqueue stores one event in its own transaction (SPEC §2): a new id gets
// the next seq of its flow (creating the flow), a repeated id with the same
// flow and body answers existing, a repeated id with anything else answers
// conflict. Errors: ErrInvalidInput naming id, flow, body or at;
// ErrClockRegressed; ErrBusy; ErrDatabase. On error nothing changed.
func (q *Queue) Enqueue(ctx context.Context, p EnqueueParams) (EnqueueResult, error) {
	rs, err := q.EnqueueMany(ctx, EnqueueManyParams{At: p.At, Floor: p.Floor, Events: []NewEvent{p.event()}})
	if err != nil {
		return EnqueueResult{}, err
	}
	return rs[0], nil
}

// EnqueueMany stores p.Events in one transaction at one tick, each with the
// answer Enqueue would give in that order. A bad event fails the whole batch
// before anything is written (the error names the field). The caller's
// slices are not changed. Errors as Enqueue.
func (q *Queue) EnqueueMany(ctx context.Context, p EnqueueManyParams) ([]EnqueueResult, error) {
	for _, e := range p.Events {
		if err := q.checkEvent(e); err != nil {
			return nil, err
		}
	}
	out := make([]EnqueueResult, 0, len(p.Events))
	ids, flows := make([]string, len(p.Events)), make([]string, len(p.Events))
	for i, e := range p.Events {
		ids[i], flows[i] = e.ID, e.Flow
	}
	op := writeOp{name: "enqueue", lanes: store.LaneEnqueue, hint: store.TxHint{Events: ids, Flows: flows}, at: p.At, floor: p.Floor}
	tick, err := q.writeTx(ctx, op, func(tx store.Tx, c *store.Clock) error {
		out = out[:0]
		// One read for the whole batch where a question costs a round trip.
		if err := store.Prefetch(ctx, tx, ids, flows); err != nil {
			return err
		}
		fc := flowCache{}
		for _, e := range p.Events {
			r, err := q.enqueue(ctx, tx, c, fc, e)
			if err != nil {
				return err
			}
			out = append(out, r)
		}
		return fc.flush(ctx, tx)
	})
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Tick = tick
	}
	return out, nil
}

// EnqueueTx stores one event inside a *sql.Tx the caller owns — the
// transactional outbox: the business write and the event commit or roll
// back together. On SQLite, tx is a transaction on the same file (open its
// pool with fairrelay.SQLiteDSN); on PostgreSQL, a transaction of pgx's
// database/sql driver (github.com/jackc/pgx/v5/stdlib) on the same
// database (EnqueuePgxTx takes a pgx.Tx). The caller commits. p.At is
// usually AtStored: a producer does not know the relay's clock. Until the
// caller commits, the caller's transaction holds a write lock: on SQLite the
// file's (every other writer waits), on PostgreSQL the enqueue lane's and
// the row of p.Flow (other enqueuers wait; claims skip that flow and its
// settles wait, or under SettleManyParams.SkipHeld, as the relay settles,
// are put off; everything else goes on — store.Lane). Answers and errors as
// Enqueue, plus ErrInvalidInput (field "tx") for a transaction the store
// cannot use; an error leaves the caller's transaction to be rolled back by
// the caller.
func (q *Queue) EnqueueTx(ctx context.Context, tx *sql.Tx, p EnqueueParams) (EnqueueResult, error) {
	if tx == nil {
		return EnqueueResult{}, invalid("tx", "nil *sql.Tx")
	}
	return q.enqueueIn(ctx, tx, p)
}

// EnqueuePgxTx is EnqueueTx for a pgx.Tx on the PostgreSQL database of the
// store (the pgx-native outbox). Answers and errors as EnqueueTx; on a
// SQLite store it fails with ErrInvalidInput (field "tx").
func (q *Queue) EnqueuePgxTx(ctx context.Context, tx pgx.Tx, p EnqueueParams) (EnqueueResult, error) {
	if tx == nil {
		return EnqueueResult{}, invalid("tx", "nil pgx.Tx")
	}
	return q.enqueueIn(ctx, tx, p)
}

// enqueueIn is EnqueueTx and EnqueuePgxTx: tx is a *sql.Tx or a pgx.Tx.
func (q *Queue) enqueueIn(ctx context.Context, tx any, p EnqueueParams) (EnqueueResult, error) {
	if err := q.checkEvent(p.event()); err != nil {
		return EnqueueResult{}, err
	}
	if err := checkTick(p.At); err != nil {
		return EnqueueResult{}, err
	}
	stx, err := q.store.Wrap(ctx, tx, store.LaneEnqueue)
	if err != nil {
		return EnqueueResult{}, &Error{Code: CodeInvalidInput, Field: "tx", Message: err.Error()}
	}
	var res EnqueueResult
	tick, err := q.inTx(ctx, "enqueue", stx, p.At, p.Floor, func(tx store.Tx, c *store.Clock) error {
		fc := flowCache{}
		var err error
		if res, err = q.enqueue(ctx, tx, c, fc, p.event()); err != nil {
			return err
		}
		return fc.flush(ctx, tx)
	})
	if err != nil {
		return EnqueueResult{}, err
	}
	res.Tick = tick
	return res, nil
}

// flowCache holds the flow rows one enqueue transaction read or created, so a
// batch reads and writes each flow once instead of once per event (issue 4:
// loading a backlog). flush writes the changed rows before the commit.
type flowCache map[string]*cachedFlow

type cachedFlow struct {
	row   store.FlowRow
	dirty bool // changed since read or inserted
}

func (fc flowCache) flush(ctx context.Context, tx store.Tx) error {
	for _, f := range fc {
		if f.dirty {
			if err := tx.FlowUpdate(ctx, f.row); err != nil {
				return err
			}
		}
	}
	return nil
}

func (q *Queue) enqueue(ctx context.Context, tx store.Tx, c *store.Clock, fc flowCache, p NewEvent) (EnqueueResult, error) {
	at := c.Tick // the write's tick
	old, err := tx.EventGet(ctx, p.ID)
	if err != nil {
		return EnqueueResult{}, err
	}
	if old != nil {
		if old.Flow == p.Flow && bytes.Equal(old.Body, p.Body) {
			return EnqueueResult{Status: EnqueueExisting, Seq: old.Seq}, nil
		}
		return EnqueueResult{Status: EnqueueConflict}, nil
	}
	cf := fc[p.Flow]
	if cf == nil {
		row, err := tx.FlowGet(ctx, p.Flow)
		if err != nil {
			return EnqueueResult{}, err
		}
		if row == nil {
			c.Flows++
			row = &store.FlowRow{Flow: p.Flow, Ord: c.Flows, HeadSeq: 1}
			if q.policy.Entry == EntryFair {
				// SPEC §7: a new flow joins at the back of the current rotation.
				row.Served = c.Ticket
			}
			// Inserted now, before its first event (foreign key); later
			// changes reach it in flush.
			if err := tx.FlowInsert(ctx, *row); err != nil {
				return EnqueueResult{}, err
			}
		}
		cf = &cachedFlow{row: *row}
		fc[p.Flow] = cf
	}
	f := &cf.row
	f.Seq++
	cf.dirty = true
	if f.HeadSeq == f.Seq {
		// The new event is the head: the flow had none.
		placeHead(f, at, at)
	}
	e := store.EventRow{
		ID: p.ID, Flow: p.Flow, Seq: f.Seq, Body: p.Body, State: store.StateReady,
		NextAt: at, EnqueuedAt: at,
	}
	if err := tx.EventInsert(ctx, e); err != nil {
		return EnqueueResult{}, err
	}
	return EnqueueResult{Status: EnqueueCreated, Seq: f.Seq}, nil
}
