package sqlitestore

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/fairrelay/fairrelay/internal/ident"
	"github.com/fairrelay/fairrelay/internal/store"
)

// Enqueue carries out SPEC §2 enqueue for p.Events (store.Store): in a
// transaction of its own when caller is nil, else in caller, a *sql.Tx on
// the same file. Checks run in the SPEC's order: the clock, then the
// input's fields, then the answers.
func (s *Store) Enqueue(ctx context.Context, caller any, p store.EnqueueParams) (store.EnqueueResult, error) {
	var c conn
	var own *sql.Tx
	if caller == nil {
		tx, err := s.write.BeginTx(ctx, nil)
		if err != nil {
			return store.EnqueueResult{}, Translate(fmt.Errorf("begin transaction: %w", err))
		}
		defer tx.Rollback()
		own, c = tx, conn{q: tx, tx: tx, prepared: s.stmts}
	} else {
		tx, ok := caller.(*sql.Tx)
		if !ok {
			return store.EnqueueResult{}, &store.InvalidError{Field: "tx", Message: fmt.Sprintf("the SQLite backend takes a *sql.Tx, not %T", caller)}
		}
		c = conn{q: tx}
	}
	cl, flows, err := c.clock(ctx)
	if err != nil {
		if caller != nil && strings.Contains(err.Error(), "no such table") {
			return store.EnqueueResult{}, &store.InvalidError{Field: "tx", Message: "the transaction's database holds no fairrelay queue store (is it a transaction on " + s.path + "?)"}
		}
		return store.EnqueueResult{}, err
	}
	at, err := resolveTick(p, cl.Tick)
	if err != nil {
		return store.EnqueueResult{}, err
	}
	if err := checkEvents(p); err != nil {
		return store.EnqueueResult{}, err
	}
	out := store.EnqueueResult{Answers: make([]store.EnqueueAnswer, 0, len(p.Events)), Tick: at}
	b := batch{c: &c, cl: &cl, flows: &flows, at: at, entry: s.entry, rows: map[string]*store.FlowRow{}}
	for _, e := range p.Events {
		a, err := b.enqueue(ctx, e)
		if err != nil {
			return store.EnqueueResult{}, err
		}
		out.Answers = append(out.Answers, a)
	}
	// Each flow is written once per batch (loading a backlog writes many
	// events per flow).
	for _, f := range b.dirty {
		if err := c.exec(ctx, "FlowUpdate", f.Seq, f.Served, f.HeadSeq, boolInt(f.Runnable), f.WaitUntil,
			boolInt(f.Paused), nullString(f.PausedBy), nullString(f.PausedReason), pausedAt(*f), f.Flow); err != nil {
			return store.EnqueueResult{}, err
		}
	}
	cl.Tick = at
	if err := c.exec(ctx, "ClockSet", cl.Tick, cl.Ticket, flows); err != nil {
		return store.EnqueueResult{}, err
	}
	if own != nil {
		if err := own.Commit(); err != nil {
			return store.EnqueueResult{}, Translate(fmt.Errorf("commit: %w", err))
		}
	}
	return out, nil
}

// resolveTick is the clock check of an enqueue (SPEC §2, §7), as the root
// package's for the other writes: AtStored runs at the stored tick, a tick
// below it fails (or runs at it under Floor), a tick further ahead than
// MaxTickJump or beyond MaxTick is invalid input naming "at".
func resolveTick(p store.EnqueueParams, stored int64) (int64, error) {
	at := p.At
	switch {
	case at == store.AtStored:
		return stored, nil
	case at < stored && p.Floor:
		return stored, nil
	case at < stored:
		return 0, &store.ClockRegressedError{At: at, Stored: stored}
	case !p.Floor && p.MaxTickJump > 0 && at-stored > p.MaxTickJump:
		return 0, &store.InvalidError{Field: "at", Message: fmt.Sprintf("tick %d is %d ticks ahead of the stored tick %d, more than the policy's max_tick_jump of %d (a typo would poison the store's clock)",
			at, at-stored, stored, p.MaxTickJump)}
	case at > store.MaxTick:
		return 0, &store.InvalidError{Field: "at", Message: fmt.Sprintf("must be a tick in [0, %d], got %d", int64(store.MaxTick), at)}
	}
	return at, nil
}

// checkEvents checks the fields of every event (internal/ident's rule for
// id and flow; a body of 1 to MaxBodyBytes bytes).
func checkEvents(p store.EnqueueParams) error {
	for _, e := range p.Events {
		if err := ident.Check(e.ID); err != nil {
			return &store.InvalidError{Field: "id", Message: err.Error()}
		}
		if err := ident.Check(e.Flow); err != nil {
			return &store.InvalidError{Field: "flow", Message: err.Error()}
		}
		switch {
		case len(e.Body) == 0:
			return &store.InvalidError{Field: "body", Message: "empty"}
		case len(e.Body) > p.MaxBodyBytes:
			return &store.InvalidError{Field: "body", Message: fmt.Sprintf("%d bytes, more than the limit of %d", len(e.Body), p.MaxBodyBytes)}
		}
	}
	return nil
}

// batch is one enqueue transaction's state: the clock, the flow counter,
// and the flow rows it read or created, written once at the end.
type batch struct {
	c     *conn
	cl    *store.Clock
	flows *int64
	at    int64
	entry string
	rows  map[string]*store.FlowRow
	dirty []*store.FlowRow
}

// enqueue appends one event: existing or conflict for a known id; else the
// flow (created at the back of the rotation under the fair rule) gets the
// next seq, and a flow that had no head gets this event as its head,
// eligible now.
func (b *batch) enqueue(ctx context.Context, e store.NewEvent) (store.EnqueueAnswer, error) {
	old, err := b.c.event(ctx, "EventGet", e.ID)
	if err != nil {
		return store.EnqueueAnswer{}, err
	}
	if old != nil {
		if old.Flow == e.Flow && bytes.Equal(old.Body, e.Body) {
			return store.EnqueueAnswer{Status: "existing", Seq: old.Seq}, nil
		}
		return store.EnqueueAnswer{Status: "conflict"}, nil
	}
	f := b.rows[e.Flow]
	if f == nil {
		if f, err = b.c.flowGet(ctx, e.Flow); err != nil {
			return store.EnqueueAnswer{}, err
		}
		if f == nil {
			*b.flows++
			f = &store.FlowRow{Flow: e.Flow, Ord: *b.flows, HeadSeq: 1}
			if b.entry == "fair" {
				// SPEC §7: a new flow joins at the back of the current rotation.
				f.Served = b.cl.Ticket
			}
			// Inserted now, before its first event (foreign key).
			if err := b.c.exec(ctx, "FlowInsert", f.Flow, f.Ord, f.Seq, f.Served, f.HeadSeq, boolInt(f.Runnable), f.WaitUntil); err != nil {
				return store.EnqueueAnswer{}, err
			}
		}
		b.rows[e.Flow] = f
		b.dirty = append(b.dirty, f)
	}
	f.Seq++
	if f.HeadSeq == f.Seq && !f.Paused {
		// The new event is the head (the flow had none): eligible now,
		// unless an operator paused the flow (SPEC §9: it stays in neither
		// index until resumed).
		f.Runnable, f.WaitUntil = true, nil
	}
	if err := b.c.exec(ctx, "EventInsert", e.ID, e.Flow, f.Seq, e.Body, store.StateReady, 0, 0, 0, nil, b.at, 0, b.at); err != nil {
		return store.EnqueueAnswer{}, err
	}
	return store.EnqueueAnswer{Status: "created", Seq: f.Seq}, nil
}
