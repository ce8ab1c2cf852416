package fairrelay

import (
	"bytes"
	"context"

	"github.com/fairrelay/fairrelay/internal/store"
)

// EnqueueParams is one event to enqueue (SPEC §2 enqueue).
type EnqueueParams struct {
	// ID is the event id, unique in the store, following CheckID's rule
	// (1 to MaxIDBytes bytes of UTF-8, no control or format characters, no
	// white space at either end). The receiver deduplicates by it.
	ID string
	// Flow is the ordering key, following CheckID's rule.
	Flow string
	// Body is the immutable payload: 1 to Policy.MaxBodyBytes bytes, stored
	// and delivered byte for byte.
	Body []byte
	// At is the tick of the write (SPEC §2: at >= the stored tick). The event
	// is eligible from this tick on. Beside a running relay, whose clock
	// moves every millisecond, pass AtStored (the store's tick, read in the
	// same transaction) or the relay's own tick (relay.Relay.Do).
	At int64
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
}

func (q *Queue) checkEnqueue(p EnqueueParams) error {
	if err := checkID("id", p.ID); err != nil {
		return err
	}
	if err := checkID("flow", p.Flow); err != nil {
		return err
	}
	if len(p.Body) == 0 {
		return invalid("body", "empty")
	}
	if len(p.Body) > q.policy.MaxBodyBytes {
		return invalid("body", "%d bytes, more than the limit of %d", len(p.Body), q.policy.MaxBodyBytes)
	}
	return checkTick(p.At)
}

// Enqueue stores one event in its own transaction (SPEC §2): a new id gets
// the next seq of its flow (creating the flow), a repeated id with the same
// flow and body answers existing, a repeated id with anything else answers
// conflict. Errors: ErrInvalidInput naming id, flow, body or at;
// ErrClockRegressed; ErrBusy; ErrDatabase. On error nothing changed.
func (q *Queue) Enqueue(ctx context.Context, p EnqueueParams) (EnqueueResult, error) {
	if err := q.checkEnqueue(p); err != nil {
		return EnqueueResult{}, err
	}
	var res EnqueueResult
	err := q.writeTx(ctx, store.LaneEnqueue, store.TxHint{Events: []string{p.ID}, Flows: []string{p.Flow}}, "enqueue", p.At, "", "", func(tx store.Tx, c *store.Clock) error {
		fc := flowCache{}
		var err error
		if res, err = q.enqueue(ctx, tx, c, fc, p); err != nil {
			return err
		}
		return fc.flush(ctx, tx)
	})
	return res, err
}

// EnqueueBatch stores many events in one transaction, each with its own
// answer, in order; at is the tick of the whole batch (each EnqueueParams.At
// is ignored). A bad item fails the whole batch before anything is written.
// Errors as Enqueue.
func (q *Queue) EnqueueBatch(ctx context.Context, at int64, ps []EnqueueParams) ([]EnqueueResult, error) {
	for i := range ps {
		ps[i].At = at
		if err := q.checkEnqueue(ps[i]); err != nil {
			return nil, err
		}
	}
	out := make([]EnqueueResult, 0, len(ps))
	ids, flows := make([]string, len(ps)), make([]string, len(ps))
	for i, p := range ps {
		ids[i], flows[i] = p.ID, p.Flow
	}
	err := q.writeTx(ctx, store.LaneEnqueue, store.TxHint{Events: ids, Flows: flows}, "enqueue", at, "", "", func(tx store.Tx, c *store.Clock) error {
		out = out[:0]
		// One read for the whole batch where a question costs a round trip.
		if err := store.Prefetch(ctx, tx, ids, flows); err != nil {
			return err
		}
		fc := flowCache{}
		for _, p := range ps {
			r, err := q.enqueue(ctx, tx, c, fc, p)
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
	return out, nil
}

// EnqueueTx stores one event inside a transaction the caller owns — the
// transactional outbox: the business write and the event commit or roll back
// together. tx is a *sql.Tx on the same SQLite file (open its pool with
// fairrelay.SQLiteDSN), or for PostgreSQL a pgx.Tx or *sql.Tx on the same
// database. The caller commits. p.At is usually AtStored: a producer does
// not know the relay's clock. Until the caller commits, the caller's
// transaction holds a write lock: on SQLite the file's (every other writer
// waits), on PostgreSQL the enqueue lane's and the row of p.Flow (other
// enqueuers wait; claims skip that flow and its settles wait, or under
// WithSkipHeldFlows, as the relay settles, are put off; everything else
// goes on — store.Lane). Answers and errors as Enqueue; an error leaves
// the caller's transaction to be rolled back by the caller.
func (q *Queue) EnqueueTx(ctx context.Context, tx any, p EnqueueParams) (EnqueueResult, error) {
	if err := q.checkEnqueue(p); err != nil {
		return EnqueueResult{}, err
	}
	stx, err := q.store.Wrap(ctx, tx, store.LaneEnqueue)
	if err != nil {
		return EnqueueResult{}, &Error{Code: CodeInvalidInput, Field: "tx", Message: err.Error()}
	}
	var res EnqueueResult
	tick, err := q.inTx(ctx, "enqueue", stx, p.At, func(tx store.Tx, c *store.Clock) error {
		fc := flowCache{}
		var err error
		if res, err = q.enqueue(ctx, tx, c, fc, p); err != nil {
			return err
		}
		return fc.flush(ctx, tx)
	})
	if ran := tickFloor(ctx); ran != nil && err == nil {
		ran(tick)
	}
	return res, err
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

func (q *Queue) enqueue(ctx context.Context, tx store.Tx, c *store.Clock, fc flowCache, p EnqueueParams) (EnqueueResult, error) {
	p.At = c.Tick // the write's tick (p.At may be AtStored)
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
		placeHead(f, p.At, c.Tick)
	}
	e := store.EventRow{
		ID: p.ID, Flow: p.Flow, Seq: f.Seq, Body: p.Body, State: store.StateReady,
		NextAt: p.At, EnqueuedAt: p.At,
	}
	if err := tx.EventInsert(ctx, e); err != nil {
		return EnqueueResult{}, err
	}
	return EnqueueResult{Status: EnqueueCreated, Seq: f.Seq}, nil
}
