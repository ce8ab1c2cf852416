package pgstore

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fairrelay/fairrelay/internal/store"
)

// Tx is a transaction on the PostgreSQL store. own is the pool connection
// of the store's own transactions, nil for a wrapped caller transaction,
// whose Commit and Rollback belong to the caller. write makes ClockGet lock
// the clock row (SPEC §2: writes are serialised).
//
// The store runs its own transactions by hand on the connection rather
// than through pgx.Tx: BEGIN travels with the first query and COMMIT with
// the last writes, two round trips fewer per transaction.
type Tx struct {
	c     conn
	own   *pgxpool.Conn
	done  bool
	write bool
	// cache and ws are used in the store's own write transactions once the
	// clock row is locked (see rowCache and writeSet).
	cache *rowCache
	ws    writeSet
	// hint is the store's read-ahead hint (Store.readAhead).
	hint *atomic.Int64
}

// begin starts a transaction on a connection of pool: stmt (a BEGIN) is
// queued to go with the first query.
func begin(ctx context.Context, pool *pgxpool.Pool, stmt string) (*Tx, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, Translate(err)
	}
	pc := &pgxConn{tx: conn.Conn()}
	pc.queue("Begin", stmt)
	return &Tx{c: pc, own: conn}, nil
}

// db returns the connection for a statement that needs the server, after
// queuing the collected writes to go with it.
func (t *Tx) db() conn {
	if t.cache != nil && !t.ws.empty() {
		t.ws.stage(t.c.(*pgxConn))
	}
	return t.c
}

// Commit sends any collected writes and the COMMIT in one round trip, then
// returns the connection to the pool.
func (t *Tx) Commit(ctx context.Context) error {
	if t.own == nil || t.done {
		return nil
	}
	if err := t.db().(*pgxConn).commit(ctx); err != nil {
		// The caller's Rollback ends the failed transaction.
		return err
	}
	t.done = true
	t.own.Release()
	return nil
}

// Rollback ends the transaction unless it was committed, and returns the
// connection to the pool (a connection left in a failed state is closed by
// the pool).
func (t *Tx) Rollback(ctx context.Context) error {
	if t.own == nil || t.done {
		return nil
	}
	t.done = true
	defer t.own.Release()
	if pc := t.c.(*pgxConn); len(pc.names) > 0 && pc.names[0] == "Begin" {
		return nil // BEGIN was never sent: there is nothing to end
	}
	if _, err := t.own.Exec(ctx, "ROLLBACK"); err != nil {
		return Translate(fmt.Errorf("rollback: %w", err))
	}
	return nil
}

func (t *Tx) exec(ctx context.Context, name string, args ...any) error {
	return t.db().exec(ctx, name, q[name], args)
}

// ClockGet reads the clock row; in a write transaction it locks it first.
func (t *Tx) ClockGet(ctx context.Context) (store.Clock, error) {
	name := "ClockGet"
	if t.write {
		name = "ClockGetForUpdate"
	}
	if t.write {
		if pc, ok := t.c.(*pgxConn); ok {
			// Sent with the clock read: one round trip.
			pc.queue("ClockLock", q["ClockLock"])
		} else if err := t.exec(ctx, "ClockLock"); err != nil {
			return store.Clock{}, err
		}
	}
	var c store.Clock
	var minWait *int64
	err := queryRow(ctx, t.db(), name, nil, func(r scanner) error {
		if t.write {
			return r.Scan(&c.Tick, &c.Ticket, &c.Flows, &minWait)
		}
		return r.Scan(&c.Tick, &c.Ticket, &c.Flows)
	})
	if err == nil && t.write && t.own != nil {
		// The clock lock is held from here to the end of the transaction:
		// rows can be cached and writes collected (rowCache, writeSet).
		if _, ok := t.c.(*pgxConn); ok {
			t.cache = newRowCache(t.hint, minWait)
		}
	}
	return c, err
}

func (t *Tx) ClockSet(ctx context.Context, c store.Clock) error {
	if t.cache != nil {
		t.ws.clock = &c
		return nil
	}
	return t.exec(ctx, "ClockSet", c.Tick, c.Ticket, c.Flows)
}

func scanFlow(r scanner, f *store.FlowRow) error {
	return r.Scan(&f.Flow, &f.Ord, &f.Seq, &f.Served, &f.HeadSeq, &f.Runnable, &f.WaitUntil)
}

func (t *Tx) FlowGet(ctx context.Context, flow string) (*store.FlowRow, error) {
	if t.cache != nil {
		if f, ok := t.cache.flow(flow); ok {
			return f, nil
		}
	}
	var f store.FlowRow
	found, err := queryRowFound(ctx, t.db(), "FlowGet", []any{flow}, func(r scanner) error { return scanFlow(r, &f) })
	if err != nil {
		return nil, err
	}
	if !found {
		if t.cache != nil {
			t.cache.flows[flow] = nil
		}
		return nil, nil
	}
	if t.cache != nil {
		t.cache.putFlow(f)
	}
	return &f, nil
}

func (t *Tx) FlowInsert(ctx context.Context, f store.FlowRow) error {
	if t.cache != nil {
		t.cache.flowWritten(f)
		t.ws.insertFlow(f)
		return nil
	}
	return t.exec(ctx, "FlowInsert", f.Flow, f.Ord, f.Seq, f.Served, f.HeadSeq, f.Runnable, f.WaitUntil)
}

func (t *Tx) FlowUpdate(ctx context.Context, f store.FlowRow) error {
	if t.cache != nil {
		t.cache.flowWritten(f)
		t.ws.updateFlow(f)
		return nil
	}
	return t.exec(ctx, "FlowUpdate", f.Seq, f.Served, f.HeadSeq, f.Runnable, f.WaitUntil, f.Flow)
}

func (t *Tx) flows(ctx context.Context, name string, args ...any) ([]store.FlowRow, error) {
	var out []store.FlowRow
	err := t.db().query(ctx, name, q[name], args, func(r scanner) error {
		var f store.FlowRow
		if err := scanFlow(r, &f); err != nil {
			return err
		}
		out = append(out, f)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (t *Tx) FlowListDue(ctx context.Context, at int64, limit int) ([]store.FlowRow, error) {
	if t.cache != nil && t.cache.noneDue(at) {
		return nil, nil
	}
	return t.flows(ctx, "FlowListDue", at, limit)
}

func (t *Tx) FlowPickRunnable(ctx context.Context, order store.Order, limit int) ([]store.FlowRow, error) {
	if t.cache != nil {
		return t.pickCached(ctx, order, limit)
	}
	if order == store.OrderCreation {
		return t.flows(ctx, "FlowPickRunnableFair", limit)
	}
	return t.flows(ctx, "FlowPickRunnableSeed", limit)
}

func (t *Tx) FlowList(ctx context.Context, after string, limit int) ([]store.FlowRow, error) {
	return t.flows(ctx, "FlowList", after, limit)
}

func scanEvent(r scanner, e *store.EventRow) error {
	var reason *string
	err := r.Scan(&e.ID, &e.Flow, &e.Seq, &e.Body, &e.State, &e.Generation, &e.Attempts, &e.LifetimeAttempts, &reason, &e.NextAt, &e.LeaseUntil, &e.EnqueuedAt)
	if reason != nil {
		e.Reason = *reason
	}
	return err
}

func (t *Tx) event(ctx context.Context, name string, args ...any) (*store.EventRow, error) {
	var e store.EventRow
	found, err := queryRowFound(ctx, t.db(), name, args, func(r scanner) error { return scanEvent(r, &e) })
	if err != nil || !found {
		return nil, err
	}
	return &e, nil
}

func (t *Tx) EventGet(ctx context.Context, id string) (*store.EventRow, error) {
	if t.cache == nil {
		return t.event(ctx, "EventGet", id)
	}
	if e, ok := t.cache.event(id); ok {
		return e, nil
	}
	// The event's flow comes along: settle asks for it next.
	if err := t.readEvents(ctx, "EventGetWithFlow", id, []string{id}); err != nil {
		return nil, err
	}
	e, _ := t.cache.event(id)
	return e, nil
}

// readEvents runs name (EventGetWithFlow or EventGetManyWithFlow) with arg
// and caches the events it returns with their flows, and every id of ids it
// does not return as absent.
func (t *Tx) readEvents(ctx context.Context, name string, arg any, ids []string) error {
	err := t.db().query(ctx, name, q[name], []any{arg}, func(r scanner) error {
		var e store.EventRow
		var f store.FlowRow
		var reason *string
		if err := r.Scan(&e.ID, &e.Flow, &e.Seq, &e.Body, &e.State, &e.Generation, &e.Attempts, &e.LifetimeAttempts, &reason, &e.NextAt, &e.LeaseUntil, &e.EnqueuedAt,
			&f.Flow, &f.Ord, &f.Seq, &f.Served, &f.HeadSeq, &f.Runnable, &f.WaitUntil); err != nil {
			return err
		}
		if reason != nil {
			e.Reason = *reason
		}
		t.cache.putEvent(e)
		if _, ok := t.cache.flows[f.Flow]; !ok {
			t.cache.putFlow(f)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, id := range ids {
		if _, ok := t.cache.events[id]; !ok {
			t.cache.events[id] = nil
		}
	}
	return nil
}

// Prefetch reads, in at most two queries, the events of eventIDs (with their
// flows) and the flows of flows that the transaction has not cached yet, so
// that the batch's EventGet and FlowGet calls need no round trip
// (store.Prefetcher). Outside the store's own write transactions it does
// nothing.
func (t *Tx) Prefetch(ctx context.Context, eventIDs, flows []string) error {
	if t.cache == nil {
		return nil
	}
	var ids []string
	for _, id := range eventIDs {
		if _, ok := t.cache.events[id]; !ok {
			ids = append(ids, id)
		}
	}
	if len(ids) > 0 {
		if err := t.readEvents(ctx, "EventGetManyWithFlow", ids, ids); err != nil {
			return err
		}
	}
	var fs []string
	for _, f := range flows {
		if _, ok := t.cache.flows[f]; !ok {
			fs = append(fs, f)
		}
	}
	if len(fs) == 0 {
		return nil
	}
	err := t.db().query(ctx, "FlowGetMany", q["FlowGetMany"], []any{fs}, func(r scanner) error {
		var f store.FlowRow
		if err := scanFlow(r, &f); err != nil {
			return err
		}
		t.cache.putFlow(f)
		return nil
	})
	if err != nil {
		return err
	}
	for _, f := range fs {
		if _, ok := t.cache.flows[f]; !ok {
			t.cache.flows[f] = nil
		}
	}
	return nil
}

var _ store.Prefetcher = (*Tx)(nil)

func (t *Tx) EventGetBySeq(ctx context.Context, flow string, seq int64) (*store.EventRow, error) {
	if t.cache == nil {
		return t.event(ctx, "EventGetBySeq", flow, seq)
	}
	if e, ok := t.cache.eventBySeq(flow, seq); ok {
		return e, nil
	}
	e, err := t.event(ctx, "EventGetBySeq", flow, seq)
	if e != nil {
		t.cache.putEvent(*e)
	}
	return e, err
}

// pickCached answers FlowPickRunnable from the cached prefix of the
// runnable index, reading the next flows and their heads ahead when the
// prefix is too short.
func (t *Tx) pickCached(ctx context.Context, order store.Order, limit int) ([]store.FlowRow, error) {
	if fs, ok := t.cache.picked(order, limit); ok {
		return fs, nil
	}
	name := "FlowPickRunnableSeedHeads"
	if order == store.OrderCreation {
		name = "FlowPickRunnableFairHeads"
	}
	n := max(limit, t.cache.readAhead)
	var ids []string
	err := t.db().query(ctx, name, q[name], []any{n}, func(r scanner) error {
		var f store.FlowRow
		var e store.EventRow
		var hasHead bool
		var reason *string
		if err := r.Scan(&f.Flow, &f.Ord, &f.Seq, &f.Served, &f.HeadSeq, &f.Runnable, &f.WaitUntil, &hasHead,
			&e.ID, &e.Flow, &e.Seq, &e.Body, &e.State, &e.Generation, &e.Attempts, &e.LifetimeAttempts, &reason, &e.NextAt, &e.LeaseUntil, &e.EnqueuedAt); err != nil {
			return err
		}
		if reason != nil {
			e.Reason = *reason
		}
		t.cache.putFlow(f)
		if hasHead {
			t.cache.putEvent(e)
		}
		ids = append(ids, f.Flow)
		return nil
	})
	if err != nil {
		return nil, err
	}
	t.cache.setPick(order, ids, len(ids) < n)
	t.hint.Store(int64(t.cache.picks))
	fs, _ := t.cache.picked(order, limit)
	return fs, nil
}

// nullString stores an empty reason as NULL, as the SQLite backend does.
func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (t *Tx) EventInsert(ctx context.Context, e store.EventRow) error {
	if t.cache != nil {
		t.cache.putEvent(e)
		t.ws.insertEvent(e)
		return nil
	}
	return t.exec(ctx, "EventInsert", e.ID, e.Flow, e.Seq, e.Body, e.State, e.Generation, e.Attempts, e.LifetimeAttempts, nullString(e.Reason), e.NextAt, e.LeaseUntil, e.EnqueuedAt)
}

func (t *Tx) EventUpdate(ctx context.Context, e store.EventRow) error {
	if t.cache != nil {
		t.cache.eventUpdated(e)
		t.ws.updateEvent(e)
		return nil
	}
	return t.exec(ctx, "EventUpdate", e.State, e.Generation, e.Attempts, e.LifetimeAttempts, nullString(e.Reason), e.NextAt, e.LeaseUntil, e.ID)
}

func (t *Tx) EventList(ctx context.Context, state string, afterFlow string, afterSeq int64, limit int) ([]store.EventRow, error) {
	name, args := "EventList", []any{afterFlow, afterSeq, limit}
	switch state {
	case "":
	case store.StateQuarantined:
		name = "EventListQuarantined"
	default:
		name, args = "EventListState", []any{state, afterFlow, afterSeq, limit}
	}
	var out []store.EventRow
	err := t.db().query(ctx, name, q[name], args, func(r scanner) error {
		var e store.EventRow
		if err := scanEvent(r, &e); err != nil {
			return err
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (t *Tx) AuditInsert(ctx context.Context, a store.AuditRow) error {
	if t.cache != nil {
		t.ws.audits = append(t.ws.audits, a)
		return nil
	}
	return t.exec(ctx, "AuditInsert", a.EventID, a.Action, a.Reason, a.Operator, a.PreviousReason, a.Generation, a.At)
}

func (t *Tx) AuditList(ctx context.Context, after int64, limit int) ([]store.AuditRow, error) {
	var out []store.AuditRow
	err := t.db().query(ctx, "AuditList", q["AuditList"], []any{after, limit}, func(r scanner) error {
		var a store.AuditRow
		if err := r.Scan(&a.No, &a.EventID, &a.Action, &a.Reason, &a.Operator, &a.PreviousReason, &a.Generation, &a.At); err != nil {
			return err
		}
		out = append(out, a)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
