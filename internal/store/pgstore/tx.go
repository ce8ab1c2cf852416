package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fairrelay/fairrelay/internal/store"
)

// Tx is a transaction on the PostgreSQL store. own is the pool connection
// of the store's own transactions, nil for a wrapped caller transaction,
// whose Commit and Rollback belong to the caller. write makes ClockGet lock
// the clock rows of the transaction's lanes (SPEC §2: the writers of a lane
// are serialised; see store.Lane), and makes every read of a row the
// transaction may write lock that row.
//
// The lanes run at the same time and share the flow rows, which each of
// them writes. Three rules keep each lane's answers exact:
//   - a writer of a flow row (or of an event: every writer of an event
//     holds its flow's row lock) locks it before it reads what it will
//     write, and holds it to the end (FOR NO KEY UPDATE, which the event
//     table's foreign key checks do not conflict with). The one exception
//     is an enqueue of the store's own: it reads its flows unlocked (it is
//     the one writer of seq, the only column it needs exact) and locks
//     them only at its commit, writing seq and the wake-up of a drained
//     flow from the row as it is then (FlowAppendMany), so that its
//     flows' claims and settles wait or skip for that last round trip
//     only;
//   - a transaction waits for flow locks in one statement at most, taking
//     them in flow_id order (an enqueue's flows, a settle's flows): no two
//     transactions can wait for each other. A settle takes them before its
//     lanes' locks, so that waiting for one flow does not hold up the
//     lane; it then waits for nothing but the lane;
//   - a claim never waits for a flow: it skips one another transaction
//     holds (SKIP LOCKED), which can only be an enqueue appending to it or
//     a settle of its lease-expired head, and a later claim takes it.
//
// What the lanes give up is a total order between lanes: the clock check
// of SPEC §2 compares at with the other lanes' last committed ticks, and a
// flow created while a claim commits joins the rotation at the ticket
// committed before (never ahead of a flow already waiting). Operations
// that do not overlap in time get exactly SQLite's answers.
//
// The store runs its own transactions by hand on the connection rather
// than through pgx.Tx: BEGIN travels with the first query and COMMIT with
// the last writes, two round trips fewer per transaction.
type Tx struct {
	c     conn
	own   *pgxpool.Conn
	done  bool
	write bool
	lane  store.Lane
	hint  store.TxHint
	// cache and ws are used in the store's own write transactions once the
	// lanes are locked (see rowCache and writeSet); bufs holds them, and
	// goes back to its pool when the transaction ends.
	cache   *rowCache
	ws      *writeSet
	bufs    *txBuffers
	buffers *bufferPool // the store's
	// held are the events of the hint whose flows another transaction
	// held (TxHint.SkipHeld): not read, not cached.
	held map[string]bool
}

// Held returns the events of the hint that the transaction skipped because
// another transaction held their flows (store.HeldReporter).
func (t *Tx) Held() map[string]bool { return t.held }

// begin starts a transaction on a connection of pool: stmt (a BEGIN) is
// queued to go with the first query.
func begin(ctx context.Context, pool *pgxpool.Pool, buffers *bufferPool, stmt string) (*Tx, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, Translate(err)
	}
	pc := &pgxConn{tx: conn.Conn()}
	pc.queue("Begin", stmt)
	return &Tx{c: pc, own: conn, buffers: buffers}, nil
}

// db returns the connection for a statement that needs the server, after
// queuing the collected writes to go with it.
func (t *Tx) db() conn {
	if t.cache != nil && !t.ws.empty() {
		t.ws.stage(t.c.(*pgxConn), t.lane, t.cache, &t.bufs.arrays)
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
	t.releaseBuffers()
	return nil
}

// releaseBuffers gives the transaction's buffers back to their pool, once
// it has ended: nothing of it is read or sent any more.
func (t *Tx) releaseBuffers() {
	if t.bufs != nil {
		t.buffers.put(t.bufs)
		t.bufs, t.cache, t.ws = nil, nil, nil
	}
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
	defer t.releaseBuffers()
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

// Hint takes what the transaction asks first (store.Hinter): ClockGet
// sends those reads in its own round trip, after the locks.
func (t *Tx) Hint(h store.TxHint) { t.hint = h }

// ClockGet reads the clock (store.Clock); in a write transaction it locks
// its lanes' clock rows first. In the store's own write transactions it
// also sends the reads of the transaction's hint in the same round trip,
// after the locks.
func (t *Tx) ClockGet(ctx context.Context) (store.Clock, error) {
	var c store.Clock
	if !t.write {
		err := queryRow(ctx, t.db(), "ClockGet", nil, func(r scanner) error { return r.Scan(&c.Tick, &c.Ticket, &c.Flows) })
		return c, err
	}
	lanes := laneRows(t.lane)
	var minWait *int64
	scan := func(r scanner) error { return r.Scan(&c.Tick, &c.Ticket, &c.Flows, &minWait) }
	pc, ok := t.c.(*pgxConn)
	if !ok {
		if err := t.exec(ctx, "ClockLock", lanes); err != nil {
			return store.Clock{}, err
		}
		return c, queryRow(ctx, t.db(), "ClockGetForUpdate", []any{lanes}, scan)
	}
	preLocked := t.own != nil && t.lane&store.LaneSettle != 0 && len(t.hint.Events) > 0
	var locked map[string]bool // with SkipHeld: the flows the settle locked
	switch {
	case preLocked && t.hint.SkipHeld:
		// A settle that does not wait: it locks the flows no other
		// transaction holds and leaves the events of the others alone.
		locked = map[string]bool{}
		pc.queueRead("FlowLockOfEventsSkipLocked", func(r scanner) error {
			var f string
			if err := r.Scan(&f); err != nil {
				return err
			}
			locked[f] = true
			return nil
		}, q["FlowLockOfEventsSkipLocked"], t.hint.Events)
	case preLocked:
		// A settle waits for its flows before it takes its lanes: a flow
		// held for long (an open outbox transaction appending to it) then
		// holds up this settle alone, not every settle (and, for
		// SettleAndClaim, every claim) queued behind it on the lane lock.
		pc.queue("FlowLockOfEvents", q["FlowLockOfEvents"], t.hint.Events)
	}
	pc.queue("ClockLock", q["ClockLock"], lanes)
	if t.own == nil {
		return c, queryRow(ctx, t.db(), "ClockGetForUpdate", []any{lanes}, scan)
	}
	// The lanes' locks are held from the first round trip to the end of the
	// transaction, and the rows read after them are locked as they are
	// read: rows can be cached and writes collected (rowCache, writeSet).
	if t.bufs == nil {
		t.bufs = t.buffers.get()
	} else {
		// A second ClockGet: a fresh cache, as the first one's rows may
		// have changed; the writes collected so far stay.
		t.bufs.cache.reset()
	}
	t.cache, t.ws = &t.bufs.cache, &t.bufs.ws
	found := false
	pc.queueRead("ClockGetForUpdate", func(r scanner) error { found = true; return scan(r) }, q["ClockGetForUpdate"], lanes)
	var finish []func()
	// SettleAndClaim: the events behind the settled ones are the heads the
	// claims are likely to take (their flows are locked): read them along.
	next := t.hint.Pick > 0 && t.lane&store.LaneSettle != 0
	if f := t.queuePrefetch(t.hint.Events, t.hint.Flows, !preLocked, next); f != nil {
		finish = append(finish, f)
	}
	if t.hint.Pick > 0 {
		finish = append(finish, t.queuePick(t.hint.PickOrder, t.hint.Pick))
	}
	if err := pc.roundTrip(ctx); err != nil {
		t.cache, t.ws = nil, nil
		return store.Clock{}, err
	}
	if !found {
		t.cache, t.ws = nil, nil
		return store.Clock{}, errors.New("ClockGetForUpdate: no row")
	}
	t.cache.minWait = minWait
	for _, f := range finish {
		f()
	}
	if locked != nil {
		t.forgetHeld(locked)
	}
	return c, nil
}

// forgetHeld records as held the hint's events whose flows are not in
// locked, and drops from the cache what the prefetch read of them (the
// event, its flow, the event behind it): rows another transaction may be
// changing, which this one must neither answer from nor write.
func (t *Tx) forgetHeld(locked map[string]bool) {
	for _, id := range t.hint.Events {
		e := t.cache.events[id]
		if e == nil || locked[e.Flow] {
			continue // unknown (the settle reports it) or locked
		}
		if t.held == nil {
			t.held = map[string]bool{}
		}
		t.held[id] = true
		for seq := e.Seq; seq <= e.Seq+1; seq++ {
			k := flowSeq{e.Flow, seq}
			if other, ok := t.cache.bySeq[k]; ok {
				delete(t.cache.events, other)
				delete(t.cache.bySeq, k)
			}
		}
		delete(t.cache.events, id)
		delete(t.cache.flows, e.Flow)
		delete(t.cache.headStateSeq, e.Flow)
		if t.cache.pickValid && slices.Contains(t.cache.pick, e.Flow) {
			// The flow was freed while the settle waited for its lanes, and
			// the pick (read after that wait) locked it: its rows are not
			// cached any more, so the claims read the pick again.
			t.cache.pickValid = false
		}
	}
}

func (t *Tx) ClockSet(ctx context.Context, c store.Clock) error {
	if t.cache != nil {
		t.ws.clock = &c
		return nil
	}
	return t.exec(ctx, "ClockSet", c.Tick, c.Ticket, c.Flows, laneRows(t.lane))
}

// scanFlow scans a flow row: the columns of store.FlowRow, then its
// head_state_seq (migration 004) into hs.
func scanFlow(r scanner, f *store.FlowRow, hs **int64) error {
	return r.Scan(&f.Flow, &f.Ord, &f.Seq, &f.Served, &f.HeadSeq, &f.Runnable, &f.WaitUntil, hs)
}

func (t *Tx) FlowGet(ctx context.Context, flow string) (*store.FlowRow, error) {
	if t.cache != nil {
		if f, ok := t.cache.flow(flow); ok {
			return f, nil
		}
	}
	name := "FlowGet"
	if t.write && (t.cache == nil || t.lane != store.LaneEnqueue) {
		// An enqueue of the store's own locks its flows at the write
		// (FlowAppendMany); a caller's transaction writes at once.
		name = "FlowGetForUpdate"
	}
	var f store.FlowRow
	var hs *int64
	found, err := queryRowFound(ctx, t.db(), name, []any{flow}, func(r scanner) error { return scanFlow(r, &f, &hs) })
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
		t.cache.headStateSeq[f.Flow] = hs
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
		var hs *int64
		if err := scanFlow(r, &f, &hs); err != nil {
			return err
		}
		if t.cache != nil {
			t.cache.headStateSeq[f.Flow] = hs
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
	if t.write {
		return t.flows(ctx, "FlowListDueForUpdate", at, limit)
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
		if t.write && t.lane != store.LaneEnqueue {
			return nil, errors.New("EventGet: a settle must run on the store's own connection")
		}
		return t.event(ctx, "EventGet", id)
	}
	if e, ok := t.cache.event(id); ok {
		return e, nil
	}
	if t.lane == store.LaneEnqueue {
		// An enqueue reads an existing event only to compare it; it does
		// not lock (or cache) the event's flow, which it may never write.
		e, err := t.event(ctx, "EventGet", id)
		if err != nil {
			return nil, err
		}
		if e == nil {
			t.cache.events[id] = nil
		} else {
			t.cache.putEvent(*e)
		}
		return e, nil
	}
	// A settle or redrive: lock the event's flow, then read the event with
	// its flow (settle asks for it next) in one round trip.
	if err := t.Prefetch(ctx, []string{id}, nil); err != nil {
		return nil, err
	}
	e, _ := t.cache.event(id)
	return e, nil
}

// eventsWithFlows returns the reader of EventGetManyWithFlow's rows (an
// event and its flow) or, with next, of EventGetManyWithFlowAndNext's (and
// the event behind it, when there is one), which caches what it reads. It
// scans every row into the same targets and copies them into the cache:
// one allocation per query instead of several per row.
func (t *Tx) eventsWithFlows(next bool) func(scanner) error {
	var e, n store.EventRow
	var f store.FlowRow
	var reason, nReason *string
	var hs *int64
	var hasNext bool
	dest := []any{&e.ID, &e.Flow, &e.Seq, &e.Body, &e.State, &e.Generation, &e.Attempts, &e.LifetimeAttempts, &reason, &e.NextAt, &e.LeaseUntil, &e.EnqueuedAt,
		&f.Flow, &f.Ord, &f.Seq, &f.Served, &f.HeadSeq, &f.Runnable, &f.WaitUntil, &hs}
	if next {
		dest = append(dest, &hasNext, &n.ID, &n.Flow, &n.Seq, &n.Body, &n.State, &n.Generation, &n.Attempts, &n.LifetimeAttempts,
			&nReason, &n.NextAt, &n.LeaseUntil, &n.EnqueuedAt)
	}
	return func(r scanner) error {
		// Zeroed targets: nothing the cache keeps of a row (a body, a
		// pointer) can then be written over by the next row's scan.
		e, n, f, reason, nReason, hs, hasNext = store.EventRow{}, store.EventRow{}, store.FlowRow{}, nil, nil, nil, false
		if err := r.Scan(dest...); err != nil {
			return err
		}
		if reason != nil {
			e.Reason = *reason
		}
		t.cache.putEvent(e)
		if _, ok := t.cache.flows[f.Flow]; !ok {
			t.cache.putFlow(f)
			t.cache.headStateSeq[f.Flow] = hs
		}
		if hasNext {
			if nReason != nil {
				n.Reason = *nReason
			}
			t.cache.putEvent(n)
		}
		return nil
	}
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
	pc := t.db().(*pgxConn) // the collected writes go first
	finish := t.queuePrefetch(eventIDs, flows, true, false)
	if finish == nil {
		return nil
	}
	if err := pc.roundTrip(ctx); err != nil {
		return err
	}
	finish()
	return nil
}

// queuePrefetch queues the reads of Prefetch for the next round trip and
// returns what to do once it is made (nil when nothing needs reading); lock
// false says the events' flows are locked already:
//   - an enqueue reads the events it will compare (their flows are neither
//     locked nor cached: the batch may never write them) and locks and
//     reads the flows it will write, in flow_id order;
//   - a settle or redrive locks the events' flows in flow_id order, then
//     reads the events with their flows (a new snapshot, after the locks).
func (t *Tx) queuePrefetch(eventIDs, flows []string, lock, next bool) (finish func()) {
	pc := t.c.(*pgxConn)
	var ids []string
	for _, id := range eventIDs {
		if _, ok := t.cache.events[id]; !ok {
			ids = append(ids, id)
		}
	}
	var fs []string
	for _, f := range flows {
		if _, ok := t.cache.flows[f]; !ok {
			fs = append(fs, f)
		}
	}
	if len(ids) == 0 && len(fs) == 0 {
		return nil
	}
	if len(ids) > 0 && t.lane == store.LaneEnqueue {
		pc.queueRead("EventGetMany", func(r scanner) error {
			var e store.EventRow
			if err := scanEvent(r, &e); err != nil {
				return err
			}
			t.cache.putEvent(e)
			return nil
		}, q["EventGetMany"], ids)
	} else if len(ids) > 0 {
		if lock {
			pc.queue("FlowLockOfEvents", q["FlowLockOfEvents"], ids)
		}
		if next {
			pc.queueRead("EventGetManyWithFlowAndNext", t.eventsWithFlows(true), q["EventGetManyWithFlowAndNext"], ids)
		} else {
			pc.queueRead("EventGetManyWithFlow", t.eventsWithFlows(false), q["EventGetManyWithFlow"], ids)
		}
	}
	if len(fs) > 0 {
		name := "FlowGetMany"
		if t.lane == store.LaneEnqueue {
			name = "FlowGetManyUnlocked" // locked at the write (FlowAppendMany)
		}
		pc.queueRead(name, func(r scanner) error {
			var f store.FlowRow
			var hs *int64
			if err := scanFlow(r, &f, &hs); err != nil {
				return err
			}
			t.cache.putFlow(f)
			t.cache.headStateSeq[f.Flow] = hs
			return nil
		}, q[name], fs)
	}
	return func() {
		for _, id := range ids {
			if _, ok := t.cache.events[id]; !ok {
				t.cache.events[id] = nil
			}
		}
		for _, f := range fs {
			if _, ok := t.cache.flows[f]; !ok {
				t.cache.flows[f] = nil
			}
		}
	}
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
		// Flows that joined the prefix by a write of this transaction (a
		// settle's next head) come without their heads: read them together.
		return fs, t.loadHeads(ctx, fs)
	}
	pc := t.db().(*pgxConn) // the collected writes go first
	finish := t.queuePick(order, limit)
	if err := pc.roundTrip(ctx); err != nil {
		return nil, err
	}
	finish()
	fs, _ := t.cache.picked(order, limit)
	return fs, nil
}

// loadHeads reads, in one query, the head events of fs that are not
// cached; the flows are locked, so their heads cannot change.
func (t *Tx) loadHeads(ctx context.Context, fs []store.FlowRow) error {
	var flows []string
	var seqs []int64
	for _, f := range fs {
		if _, ok := t.cache.eventBySeq(f.Flow, f.HeadSeq); !ok && f.HeadSeq <= f.Seq {
			flows, seqs = append(flows, f.Flow), append(seqs, f.HeadSeq)
		}
	}
	if len(flows) == 0 {
		return nil
	}
	// Straight to the connection, without the collected writes: they do
	// not touch these events, and a settle's write of a flow can then fold
	// into the claim's write of it at the commit (one row version).
	return t.c.query(ctx, "EventGetManyBySeq", q["EventGetManyBySeq"], []any{flows, seqs}, func(r scanner) error {
		var e store.EventRow
		if err := scanEvent(r, &e); err != nil {
			return err
		}
		t.cache.putEvent(e)
		return nil
	})
}

// queuePick queues the read of the first limit runnable flows in order,
// with their heads, for the next round trip, and returns what to do once it
// is made. No read-ahead: every flow read is locked until the commit.
func (t *Tx) queuePick(order store.Order, limit int) (finish func()) {
	name := "FlowPickRunnableSeedHeads"
	if order == store.OrderCreation {
		name = "FlowPickRunnableFairHeads"
	}
	var ids []string
	// One set of scan targets for every row (each row is copied into the
	// cache): one allocation per query instead of several per row.
	var f store.FlowRow
	var e store.EventRow
	var hasHead bool
	var reason *string
	var hs *int64
	dest := []any{&f.Flow, &f.Ord, &f.Seq, &f.Served, &f.HeadSeq, &f.Runnable, &f.WaitUntil, &hs, &hasHead,
		&e.ID, &e.Flow, &e.Seq, &e.Body, &e.State, &e.Generation, &e.Attempts, &e.LifetimeAttempts, &reason, &e.NextAt, &e.LeaseUntil, &e.EnqueuedAt}
	t.c.(*pgxConn).queueRead(name, func(r scanner) error {
		// Zeroed targets, as in eventsWithFlows.
		f, e, hasHead, reason, hs = store.FlowRow{}, store.EventRow{}, false, nil, nil
		if err := r.Scan(dest...); err != nil {
			return err
		}
		if reason != nil {
			e.Reason = *reason
		}
		t.cache.putFlow(f)
		t.cache.headStateSeq[f.Flow] = hs
		if hasHead {
			t.cache.putEvent(e)
		}
		ids = append(ids, f.Flow)
		return nil
	}, q[name], limit)
	return func() { t.cache.setPick(order, ids, len(ids) < limit) }
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
	if err := t.exec(ctx, "EventUpdate", e.State, e.Generation, e.Attempts, e.LifetimeAttempts, nullString(e.Reason), e.NextAt, e.LeaseUntil, e.ID); err != nil {
		return err
	}
	// The event row now holds the event's columns: its flow's head state,
	// if it describes this event, stops applying (migration 004).
	return t.exec(ctx, "FlowClearHeadState", []string{e.Flow}, []int64{e.Seq})
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

// laneRows returns the clock row ids of the lanes of l, ascending: 1 the
// claim lane, 2 the enqueue lane, 3 the settle lane (migration 003).
func laneRows(l store.Lane) []int32 {
	var ids []int32
	for i, bit := range []store.Lane{store.LaneClaim, store.LaneEnqueue, store.LaneSettle} {
		if l&bit != 0 {
			ids = append(ids, int32(i+1))
		}
	}
	return ids
}
