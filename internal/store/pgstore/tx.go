package pgstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/fairrelay/fairrelay/internal/store"
)

// Tx is a transaction on the PostgreSQL store. tx is nil for a wrapped
// caller transaction, whose Commit and Rollback belong to the caller. write
// makes ClockGet lock the clock row (SPEC §2: writes are serialised).
type Tx struct {
	c     conn
	tx    pgx.Tx
	write bool
	// cache and ws are used in the store's own write transactions once the
	// clock row is locked (see rowCache and writeSet).
	cache *rowCache
	ws    writeSet
}

// db returns the connection for a statement that needs the server, after
// queuing the collected writes to go with it.
func (t *Tx) db() conn {
	if t.cache != nil && !t.ws.empty() {
		t.ws.stage(t.c.(*pgxConn))
	}
	return t.c
}

// Commit sends any queued writes, then commits.
func (t *Tx) Commit(ctx context.Context) error {
	if t.tx == nil {
		return nil
	}
	if pc, ok := t.db().(*pgxConn); ok {
		if err := pc.flush(ctx); err != nil {
			return err
		}
	}
	return Translate(t.tx.Commit(ctx))
}

// Rollback discards the transaction; after Commit it does nothing.
func (t *Tx) Rollback(ctx context.Context) error {
	if t.tx == nil {
		return nil
	}
	err := t.tx.Rollback(ctx)
	if errors.Is(err, pgx.ErrTxClosed) {
		return nil
	}
	return Translate(err)
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
	var c store.Clock
	err := queryRow(ctx, t.db(), name, nil, func(r scanner) error { return r.Scan(&c.Tick, &c.Ticket, &c.Flows) })
	if err == nil && t.write {
		// The clock lock is held from here to the end of the transaction:
		// every later write can wait for the next read or the commit.
		if _, ok := t.c.(*pgxConn); ok && t.tx != nil {
			t.cache = newRowCache()
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
		t.ws.flowInserts = append(t.ws.flowInserts, f)
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
	var e store.EventRow
	var f store.FlowRow
	found, err := queryRowFound(ctx, t.db(), "EventGetWithFlow", []any{id}, func(r scanner) error {
		var reason *string
		err := r.Scan(&e.ID, &e.Flow, &e.Seq, &e.Body, &e.State, &e.Generation, &e.Attempts, &e.LifetimeAttempts, &reason, &e.NextAt, &e.LeaseUntil, &e.EnqueuedAt,
			&f.Flow, &f.Ord, &f.Seq, &f.Served, &f.HeadSeq, &f.Runnable, &f.WaitUntil)
		if reason != nil {
			e.Reason = *reason
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if !found {
		t.cache.events[id] = nil
		return nil, nil
	}
	t.cache.putEvent(e)
	if _, ok := t.cache.flows[f.Flow]; !ok {
		t.cache.putFlow(f)
	}
	return &e, nil
}

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
		t.ws.eventInserts = append(t.ws.eventInserts, e)
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
