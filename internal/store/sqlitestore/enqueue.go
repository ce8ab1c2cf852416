package sqlitestore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"os"
	"strings"

	"modernc.org/sqlite"

	"github.com/fairrelay/fairrelay/internal/errs"
	"github.com/fairrelay/fairrelay/internal/store"
)

// checkCaller refuses a caller's transaction that is not on this store's
// file, before it writes anything there (a breaker's report: EnqueueTx
// wrote wherever the transaction pointed). The store's own file must still
// be the one it opened (CheckFile: ErrFileReplaced, wrapped, as every
// write of the store answers; events written to a replaced file would be
// lost), and the transaction's main database must be that file
// (os.SameFile): another file, another fairrelay store's among them (whose
// entry rule this Queue would ignore), or an in-memory database, is
// invalid_input naming tx, as is a connection with a temporary table or
// view named like one of the store's. Errors: those, and the database's,
// translated.
func (s *Store) checkCaller(ctx context.Context, tx *sql.Tx) error {
	if err := CheckFile(s.path, s.file); err != nil {
		return err
	}
	// And no temporary table or view of the caller's connection has the
	// name of one of the store's: SQLite resolves an unqualified name in
	// temp before main, so one with a store table's columns took the
	// enqueue's writes (a breaker: created, the flow's seq moved in the
	// store, the event gone with the connection, every claim then failing
	// on a missing head). In the same statement as the file's name.
	var file string
	var shadow sql.NullString
	if err := tx.QueryRowContext(ctx, `SELECT (SELECT file FROM pragma_database_list WHERE name = 'main'),
	(SELECT group_concat(name, ', ') FROM temp.sqlite_master WHERE type IN ('table', 'view')
	   AND name IN (SELECT name FROM main.sqlite_master WHERE type IN ('table', 'view')))`).Scan(&file, &shadow); err != nil {
		var se *sqlite.Error
		if !errors.As(err, &se) && !errors.Is(err, sql.ErrTxDone) && ctx.Err() == nil && !errors.Is(err, driver.ErrBadConn) {
			// Not SQLite's answer: another driver's transaction (a
			// PostgreSQL one, say; a breaker's report).
			return &store.InvalidError{Field: "tx", Message: fmt.Sprintf("the transaction is not on a SQLite database (is it a transaction on %s?): its driver answered: %v", s.path, err)}
		}
		return Translate(fmt.Errorf("the transaction's database file: %w", err))
	}
	if shadow.Valid {
		return &store.InvalidError{Field: "tx", Message: fmt.Sprintf(
			"the transaction's connection has temporary tables named like the store's (%s), which SQLite would write instead of the store's: drop them, or enqueue on another connection", shadow.String)}
	}
	if file == "" {
		return &store.InvalidError{Field: "tx", Message: "the transaction is on an in-memory or temporary database, not on " + s.path}
	}
	got, err := os.Stat(file)
	if err != nil {
		return &store.InvalidError{Field: "tx", Message: fmt.Sprintf("the transaction's database file %s: %v (is it a transaction on %s?)", file, err, s.path)}
	}
	want := s.file
	if want == nil {
		if want, err = os.Stat(s.path); err != nil {
			return err
		}
	}
	if !os.SameFile(got, want) {
		return &store.InvalidError{Field: "tx", Message: fmt.Sprintf("the transaction is on %s, not on this queue's store %s", file, s.path)}
	}
	return nil
}

// inTransaction reports whether tx's connection is inside a transaction:
// a BEGIN there is refused. When it is not (SQLite rolled the caller's
// transaction back), the BEGIN it ran is rolled back again.
func inTransaction(ctx context.Context, tx *sql.Tx) (bool, error) {
	_, err := tx.ExecContext(ctx, "BEGIN")
	if err == nil {
		// Whatever ctx does now: the probe's own transaction must not
		// stay open on the caller's connection.
		if _, err := tx.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); err != nil {
			return false, Translate(fmt.Errorf("the transaction's state: %w", err))
		}
		return false, nil
	}
	if strings.Contains(err.Error(), "within a transaction") {
		return true, nil
	}
	return false, Translate(fmt.Errorf("the transaction's state: %w", err))
}

// Enqueue carries out SPEC §2 enqueue for p.Events (store.Store): in a
// transaction of its own when caller is nil, else in caller, a *sql.Tx on
// the same file. Checks run in the SPEC's order: the clock, then the
// input's fields, then the answers.
func (s *Store) Enqueue(ctx context.Context, caller any, p store.EnqueueParams) (res store.EnqueueResult, err error) {
	var c conn
	var own *WriteTx
	if caller == nil {
		tx, err := s.beginWrite(ctx)
		if err != nil {
			return store.EnqueueResult{}, Translate(fmt.Errorf("begin transaction: %w", err))
		}
		defer tx.Rollback()
		own, c = tx, conn{q: tx, tx: tx.Tx, prepared: s.stmts}
	} else {
		tx, ok := caller.(*sql.Tx)
		if !ok {
			return store.EnqueueResult{}, &store.InvalidError{Field: "tx", Message: fmt.Sprintf("the SQLite backend takes a *sql.Tx, not %T", caller)}
		}
		if err := s.checkCaller(ctx, tx); err != nil {
			return store.EnqueueResult{}, err
		}
		// In the caller's transaction, the call's writes are all or
		// nothing within a savepoint: a ctx that ended part way, or an
		// error after the first write, left some of them in the
		// caller's transaction, and a caller that committed anyway made
		// a flow whose seq disagrees with its events, and every later
		// new flow failed on flow.ord (a breaker's report). The
		// savepoint's end runs whatever happened to ctx.
		//
		// A transaction SQLite has already rolled back (a statement of it
		// failed that way, or was interrupted) leaves the connection in
		// autocommit, where SAVEPOINT opens a transaction of its own and
		// RELEASE commits it: the event was stored while the caller's
		// transaction was gone (a reviewer's report). Refused.
		if open, err := inTransaction(ctx, tx); err != nil {
			return store.EnqueueResult{}, err
		} else if !open {
			return store.EnqueueResult{}, &store.InvalidError{Field: "tx", Message: "the transaction has ended: SQLite rolled it back (one of its statements failed or was interrupted, which ends the whole transaction); roll back and run it again"}
		}
		if _, err := tx.ExecContext(ctx, "SAVEPOINT fairrelay_enqueue"); err != nil {
			return store.EnqueueResult{}, Translate(fmt.Errorf("savepoint: %w", err))
		}
		defer func() {
			end := context.WithoutCancel(ctx)
			if err != nil {
				if _, rerr := tx.ExecContext(end, "ROLLBACK TO fairrelay_enqueue"); rerr != nil {
					// An interrupted statement (a ctx that ended) makes
					// SQLite roll back the whole transaction, the
					// savepoint with it.
					if open, perr := inTransaction(end, tx); perr == nil && !open {
						err = errs.Join(err, errors.New("SQLite rolled back the whole transaction (an interrupted or failed statement does): roll back and run it again"))
						return
					}
					err = errs.Join(err, Translate(fmt.Errorf("rollback to savepoint: %w", rerr)))
					return
				}
			}
			if _, rerr := tx.ExecContext(end, "RELEASE fairrelay_enqueue"); rerr != nil && err == nil {
				res, err = store.EnqueueResult{}, Translate(fmt.Errorf("release savepoint: %w", rerr))
			}
		}()
		c = conn{q: tx}
	}
	cl, err := c.clock(ctx)
	if err != nil {
		if caller != nil && strings.Contains(err.Error(), "no such table") {
			return store.EnqueueResult{}, &store.InvalidError{Field: "tx", Message: "the transaction's database holds no fairrelay queue store (is it a transaction on " + s.path + "?)"}
		}
		return store.EnqueueResult{}, err
	}
	at, err := store.ResolveTick("enqueue", p.At, p.Floor, p.MaxTickJump, cl.Tick)
	if err != nil {
		return store.EnqueueResult{}, err
	}
	if err := store.CheckEvents(p); err != nil {
		return store.EnqueueResult{}, err
	}
	limits, err := c.settings(ctx)
	if err != nil {
		return store.EnqueueResult{}, err
	}
	out := store.EnqueueResult{Answers: make([]store.EnqueueAnswer, 0, len(p.Events)), Tick: at}
	b := batch{c: &c, cl: &cl, at: at, entry: s.entry, limits: limits,
		rows: map[string]*store.FlowRow{}, groups: map[string]*groupCols{},
		written: map[*store.FlowRow]bool{}, writtenG: map[*groupCols]bool{}}
	for i, e := range p.Events {
		a, err := b.enqueue(ctx, e)
		if err != nil {
			var ie *store.InvalidError
			if errors.As(err, &ie) && len(p.Events) > 1 && ie.Item == 0 {
				// A refusal only the store can make (a flow's group):
				// which event of the call, as for the fields the caller
				// checks (a breaker's report).
				return store.EnqueueResult{}, &store.InvalidError{Field: ie.Field, Item: i + 1,
					Message: fmt.Sprintf("event %d of %d: %s", i+1, len(p.Events), ie.Message)}
			}
			return store.EnqueueResult{}, err
		}
		out.Answers = append(out.Answers, a)
	}
	if err := b.flush(ctx); err != nil {
		return store.EnqueueResult{}, err
	}
	cl.Tick = at
	if err := c.setClock(ctx, cl); err != nil {
		return store.EnqueueResult{}, err
	}
	if own != nil {
		if err := own.Commit(); err != nil {
			return store.EnqueueResult{}, Translate(fmt.Errorf("commit: %w", err))
		}
		s.commits.Add(1)
	}
	return out, nil
}

// batch is one enqueue transaction's state: the clock row (with the flow
// counter and the store's backlog counters), the store's limits, and the
// flow and group rows it read or created, written once at the end.
type batch struct {
	c      *conn
	cl     *clockRow
	at     int64
	entry  string
	limits store.Settings
	rows   map[string]*store.FlowRow
	dirty  []*store.FlowRow
	groups map[string]*groupCols // nil value: known to have no row
	dirtyG []*groupCols
	// written marks the rows in dirty and dirtyG.
	written  map[*store.FlowRow]bool
	writtenG map[*groupCols]bool
}

// flow returns the working row of a flow, nil when it does not exist.
func (b *batch) flow(ctx context.Context, name string) (*store.FlowRow, error) {
	if f, ok := b.rows[name]; ok {
		return f, nil
	}
	f, err := b.c.flowGet(ctx, name)
	if err != nil || f == nil {
		return nil, err
	}
	b.rows[name] = f
	return f, nil
}

// touch marks a flow row written at the end.
func (b *batch) touch(f *store.FlowRow) {
	if !b.written[f] {
		b.written[f] = true
		b.dirty = append(b.dirty, f)
	}
}

// touchGroup marks a group row written at the end.
func (b *batch) touchGroup(g *groupCols) {
	if !b.writtenG[g] {
		b.writtenG[g] = true
		b.dirtyG = append(b.dirtyG, g)
	}
}

// group returns the working row of a group, nil when it has none.
func (b *batch) group(ctx context.Context, name string) (*groupCols, error) {
	if g, ok := b.groups[name]; ok {
		return g, nil
	}
	g, err := b.c.group(ctx, name)
	if err != nil {
		return nil, err
	}
	b.groups[name] = g
	return g, nil
}

// groupOf is the name of f's group (SPEC §8: its own name when it joined
// none).
func groupOf(f *store.FlowRow) string {
	if f.Group != "" {
		return f.Group
	}
	return f.Flow
}

// enqueue appends one event (SPEC §2, §8): the group check first; existing
// or conflict for a known id (a pruned one included, by its tombstone);
// full when a limit would be passed; else the flow (created, with its
// group, at the back of the rotation under the fair rule) gets the next seq,
// and a flow that had no head gets this event as its head.
func (b *batch) enqueue(ctx context.Context, e store.NewEvent) (store.EnqueueAnswer, error) {
	f, err := b.flow(ctx, e.Flow)
	if err != nil {
		return store.EnqueueAnswer{}, err
	}
	if f != nil && e.Group != "" && e.Group != groupOf(f) {
		return store.EnqueueAnswer{}, &store.InvalidError{Field: "group",
			Message: fmt.Sprintf("flow %q belongs to group %q; a flow's group is fixed by the enqueue that created it", e.Flow, groupOf(f))}
	}
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
	if a, ok, err := b.tombstone(ctx, e); err != nil || ok {
		return a, err
	}
	name := e.Group
	if f != nil {
		name = groupOf(f)
	} else if name == "" {
		name = e.Flow
	}
	g, err := b.group(ctx, name)
	if err != nil {
		return store.EnqueueAnswer{}, err
	}
	switch {
	case b.limits.MaxBacklog > 0 && b.cl.enqueued-b.cl.acked >= b.limits.MaxBacklog:
		return store.EnqueueAnswer{Status: "full", Limit: "store"}, nil
	case g != nil && g.g.MaxBacklog > 0 && g.enqueued-g.ackedN >= g.g.MaxBacklog:
		return store.EnqueueAnswer{Status: "full", Limit: "group"}, nil
	case f != nil && b.limits.MaxFlowBacklog > 0 && f.Seq-f.HeadSeq+1 >= b.limits.MaxFlowBacklog:
		return store.EnqueueAnswer{Status: "full", Limit: "flow"}, nil
	}
	if f == nil {
		if f, g, err = b.create(ctx, e.Flow, name, g); err != nil {
			return store.EnqueueAnswer{}, err
		}
	}
	f.Seq++
	b.touch(f)
	b.cl.enqueued++
	if g != nil {
		g.enqueued++
		b.touchGroup(g)
	}
	if f.HeadSeq == f.Seq && !f.Paused {
		// The new event is the head (the flow had none): eligible now,
		// unless an operator paused the flow (SPEC §9: it stays in neither
		// index until resumed). A member flow goes to the due index, due
		// now: only claims count a group's runnable flows.
		if f.Group == "" {
			f.Runnable, f.WaitUntil = true, nil
		} else {
			at := b.at
			f.WaitUntil = &at
		}
	}
	if err := b.c.exec(ctx, "EventInsert", e.ID, e.Flow, f.Seq, e.Body, store.StateReady, 0, 0, 0, nil, b.at, 0, b.at); err != nil {
		return store.EnqueueAnswer{}, err
	}
	return store.EnqueueAnswer{Status: "created", Seq: f.Seq}, nil
}

// tombstone answers an id a prune left a tombstone of (SPEC §8): existing
// with its seq when the flow and the body's SHA-256 match, else conflict.
func (b *batch) tombstone(ctx context.Context, e store.NewEvent) (store.EnqueueAnswer, bool, error) {
	var flow string
	var seq int64
	var sum []byte
	err := b.c.queryRow(ctx, "TombstoneGet", e.ID).Scan(&flow, &seq, &sum)
	if errors.Is(err, sql.ErrNoRows) {
		return store.EnqueueAnswer{}, false, nil
	}
	if err != nil {
		return store.EnqueueAnswer{}, false, Translate(fmt.Errorf("TombstoneGet: %w", err))
	}
	h := sha256.Sum256(e.Body)
	if flow == e.Flow && bytes.Equal(sum, h[:]) {
		return store.EnqueueAnswer{Status: "existing", Seq: seq}, true, nil
	}
	return store.EnqueueAnswer{Status: "conflict"}, true, nil
}

// create makes flow name's row in group (SPEC §8): the flow is its own group
// when group is its own name and no row of that name exists; else it joins
// the group row g, made when missing, first turning a flow named like the
// group, if there is one that is its own group, into its first member (the
// group then takes that flow's place in the rotation). A group not yet in
// the rotation (configured before any flow) takes its place now.
func (b *batch) create(ctx context.Context, name, group string, g *groupCols) (*store.FlowRow, *groupCols, error) {
	served := int64(0)
	if b.entry == "fair" {
		// SPEC §7: a new flow or group joins at the back of the current
		// rotation.
		served = b.cl.Ticket
	}
	if g == nil && group != name {
		own, err := b.flow(ctx, group)
		if err != nil {
			return nil, nil, err
		}
		if own != nil && own.Group == "" {
			g = b.adopt(own)
			b.touch(own)
		} else {
			b.cl.flows++
			g = &groupCols{g: store.GroupRow{Group: group, Ord: b.cl.flows, Served: served, Weight: 1}}
		}
		if err := b.c.insertGroup(ctx, g); err != nil {
			return nil, nil, err
		}
		b.groups[group] = g
	}
	if g != nil && g.g.Ord == 0 {
		b.cl.flows++
		g.g.Ord, g.g.Served = b.cl.flows, served
		b.touchGroup(g)
	}
	b.cl.flows++
	f := &store.FlowRow{Flow: name, Ord: b.cl.flows, HeadSeq: 1, Served: served}
	if g != nil {
		f.Group = group
	}
	// Inserted now, before its first event (foreign key).
	if err := b.c.exec(ctx, "FlowInsert", f.Flow, f.Ord, f.Seq, f.Served, f.HeadSeq, boolInt(f.Runnable), f.WaitUntil, nullString(f.Group)); err != nil {
		return nil, nil, err
	}
	b.rows[name] = f
	return f, g, nil
}

// adopt makes the group row of own, a flow that was its own group, and
// makes own its first member: the group takes own's place in the rotation
// (its served and creation position), and its backlog. own's head, if
// runnable, moves to the due index, due now: only claims count a group's
// runnable flows.
func (b *batch) adopt(own *store.FlowRow) *groupCols {
	g := &groupCols{g: store.GroupRow{Group: own.Flow, Ord: own.Ord, Served: own.Served, Weight: 1}, enqueued: own.Seq - own.HeadSeq + 1}
	own.Group = own.Flow
	if own.Runnable {
		at := b.at
		own.Runnable, own.WaitUntil = false, &at
	}
	return g
}

func (c *conn) insertGroup(ctx context.Context, g *groupCols) error {
	return c.exec(ctx, "GroupInsert", g.g.Group, g.g.Ord, g.g.Served, g.g.Weight, g.g.Credit, g.g.RunnableFlows, g.g.MaxBacklog, g.enqueued, g.ackedN)
}

// flush writes every flow and group row the batch changed, once (loading a
// backlog writes many events per flow).
func (b *batch) flush(ctx context.Context) error {
	for _, f := range b.dirty {
		if err := b.c.updateFlow(ctx, f); err != nil {
			return err
		}
	}
	for _, g := range b.dirtyG {
		if err := b.c.exec(ctx, "GroupUpdate", g.g.Ord, g.g.Served, g.g.Weight, g.g.Credit, g.g.MaxBacklog, g.enqueued, g.g.Group); err != nil {
			return err
		}
	}
	return nil
}
