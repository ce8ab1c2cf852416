package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fairrelay/fairrelay/internal/store"
)

// Tx is a write transaction on the PostgreSQL store, READ COMMITTED.
//
// The lanes (store.Lane) run at the same time and share the flow rows,
// which each of them writes; an enqueue (enqueue_many, migration 005) takes
// no lane and locks only its own flows. Three rules keep each lane's
// answers exact:
//   - a writer of a flow row (or of an event: every writer of an event
//     holds its flow's row lock) locks it before it reads what it will
//     write, and holds it to the end (FOR NO KEY UPDATE, which the event
//     table's foreign key checks do not conflict with);
//   - a transaction waits for flow locks in one statement at most, taking
//     them in flow_id order (a settle's flows, an operator action's, an
//     enqueue's): no two transactions can wait for each other. A settle,
//     and a pause or resume, takes them before its lanes' locks, so that
//     waiting for one flow does not hold up the lane; it then waits for
//     nothing but the lane;
//   - a claim never waits for a flow: it skips one another transaction
//     holds (SKIP LOCKED), which can only be an enqueue appending to it or
//     a settle of its lease-expired head, and a later claim takes it.
//
// What the lanes give up is a total order between them: the clock check of
// SPEC §2 compares at with the others' last committed ticks, and a flow
// created while a claim commits joins the rotation at the ticket committed
// before. Operations that do not overlap in time get exactly SQLite's
// answers.
//
// The transaction runs by hand on a pool connection rather than through
// pgx.Tx: BEGIN travels with the first Read and COMMIT with the writes, two
// round trips fewer per transaction. So a claim or a settle is two round
// trips: Read, then Commit.
type Tx struct {
	c      *pgxConn
	own    *pgxpool.Conn
	lanes  store.Lane
	done   bool
	locked bool // the first Read took the lanes' locks
	clock  store.Clock
	// minWait is the earliest wait_until as the first Read saw it (nil:
	// no flow waited): a due read is needed only once it has come.
	minWait *int64
	bufs    *txBuffers
	buffers *bufferPool // the store's
	// hs holds, for the flows read, their head_state_seq (migration 004)
	// as it stands in the transaction; a flow missing is not known. It
	// spares FlowFlushHeadState when no flow needs it.
	hs map[string]headStateSeq
	// stale names the flows a locking read found in a newer version than
	// its snapshot, their heads not read with them (the fresh column of
	// queries.sql's PickSeed): refresh reads them again.
	stale []string
}

var _ store.Tx = (*Tx)(nil)

// Begin starts a write transaction of the given lanes on a pool connection.
// BEGIN is sent with the first Read, which takes the lanes' locks.
func (s *Store) Begin(ctx context.Context, lanes store.Lane) (store.Tx, error) {
	if lanes == 0 || lanes&^(store.LaneClaim|store.LaneSettle) != 0 {
		return nil, fmt.Errorf("begin transaction: unknown lanes %d", lanes)
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, Translate(fmt.Errorf("begin transaction: %w", err))
	}
	pc := &pgxConn{tx: conn.Conn()}
	pc.queue("Begin", "BEGIN ISOLATION LEVEL READ COMMITTED")
	bufs := s.buffers.get()
	if bufs.hs == nil {
		bufs.hs = map[string]headStateSeq{}
	}
	return &Tx{c: pc, own: conn, lanes: lanes, bufs: bufs, buffers: &s.buffers, hs: bufs.hs}, nil
}

// Read sends the questions of rs in one round trip (with BEGIN and the
// lanes' locks, on the first Read) and takes their answers.
func (t *Tx) Read(ctx context.Context, rs store.ReadSet) (*store.ReadResult, error) {
	rr := &store.ReadResult{}
	pc := t.c
	var held map[string]bool // with SkipHeld: the flows the settle locked
	if !t.locked {
		switch {
		case len(rs.Events) > 0 && rs.SkipHeld:
			// A settle that does not wait: it locks the flows no other
			// transaction holds and leaves the events of the others alone.
			held = map[string]bool{}
			pc.queueRead("FlowLockOfEventsSkipLocked", func(r scanner) error {
				var f string
				if err := r.Scan(&f); err != nil {
					return err
				}
				held[f] = true
				return nil
			}, q["FlowLockOfEventsSkipLocked"], rs.Events)
		case len(rs.Events) > 0:
			// A settle waits for its flows before it takes its lanes: a flow
			// held for long (an open outbox transaction appending to it)
			// then holds up this settle alone, not every settle (and every
			// claim) queued behind it on the lane lock.
			pc.queue("FlowLockOfEvents", q["FlowLockOfEvents"], rs.Events)
		}
		if len(rs.Flows) > 0 {
			// The flows an operator action names, likewise: before the
			// lanes, and read by a later statement (FlowLock).
			pc.queue("FlowLock", q["FlowLock"], rs.Flows)
		}
		lanes := laneRows(t.lanes)
		pc.queue("ClockLock", q["ClockLock"], lanes)
		pc.queueRead("ClockGetForUpdate", func(r scanner) error {
			return r.Scan(&t.clock.Tick, &t.clock.Ticket, &t.minWait)
		}, q["ClockGetForUpdate"], lanes)
	}
	if len(rs.Events) > 0 {
		rr.Events, rr.Flows = make(map[string]*store.EventRow, len(rs.Events)), make(map[string]*store.FlowRow, len(rs.Events))
		sc := &t.bufs.scan
		dest := append(append(append(sc.e.targets(sc.dest[:0]), sc.f.targets(nil)...), &sc.has), sc.n.targets(nil)...)
		pc.queueRead("EventsWithFlows", func(r scanner) error {
			sc.e.body, sc.n.body = nil, nil
			if err := r.Scan(dest...); err != nil {
				return err
			}
			e := t.bufs.events.put(sc.e.row())
			rr.Events[e.ID] = e
			if _, ok := rr.Flows[e.Flow]; !ok {
				f, hs := sc.f.row()
				rr.Flows[f.Flow] = t.bufs.flows.put(f)
				t.hs[f.Flow] = hs
			}
			if sc.has {
				if rr.Next == nil {
					rr.Next = map[string]*store.EventRow{}
				}
				n := t.bufs.events.put(sc.n.row())
				rr.Next[e.ID] = n
			}
			return nil
		}, q["EventsWithFlows"], rs.Events, rs.Next)
	}
	var named []store.FlowHead // rs.Flows with their heads
	if len(rs.Flows) > 0 {
		if rr.Flows == nil {
			rr.Flows, rr.Events = map[string]*store.FlowRow{}, map[string]*store.EventRow{}
		}
		pc.queueRead("FlowsWithHeads", t.flowHeads(&named), q["FlowsWithHeads"], rs.Flows)
		defer func() {
			for i := range named {
				rr.Flows[named[i].Flow.Flow] = &named[i].Flow
				if h := named[i].Head; h != nil {
					rr.Events[h.ID] = h
				}
			}
		}()
	}
	if rs.PickLimit > 0 {
		name := "PickFair"
		if rs.Order == store.OrderFlowID {
			name = "PickSeed"
		}
		rr.Picks = make([]store.FlowHead, 0, rs.PickLimit)
		pc.queueRead(name, t.flowHeads(&rr.Picks), q[name], rs.PickLimit)
	}
	if rs.GroupPickLimit > 0 {
		name := "GroupPickFair"
		if rs.Order == store.OrderFlowID {
			name = "GroupPickSeed"
		}
		sc := &t.bufs.scan
		var g store.GroupRow
		var hasFirst bool
		dest := append(append(append(append(append(groupTargets(&g)[:6], &hasFirst), sc.f.targets(nil)...), &sc.has), sc.e.targets(nil)...), &sc.fresh)
		pc.queueRead(name, func(r scanner) error {
			sc.e.body = nil
			if err := r.Scan(dest...); err != nil {
				return err
			}
			gp := store.GroupPick{Group: g}
			gp.Group.MaxBacklog = 0
			if hasFirst {
				f, hs := sc.f.row()
				gp.First.Flow = f
				if !sc.fresh {
					t.stale = append(t.stale, f.Flow)
				} else if sc.has {
					gp.First.Head = t.bufs.events.put(sc.e.row())
				}
				t.hs[f.Flow] = hs
			}
			rr.GroupPicks = append(rr.GroupPicks, gp)
			return nil
		}, q[name], rs.GroupPickLimit)
	}
	// The due index is read in this round trip when the clock is known to
	// allow it (a later Read), else in a second one, and only when its
	// earliest entry has come: in steady traffic nothing is due, and the
	// read would cost every claim a statement.
	due := func() {
		after := store.FlowKey{WaitUntil: -1 << 63}
		if rs.DueAfter != nil {
			after = *rs.DueAfter
		}
		pc.queueRead("Due", t.flowHeads(&rr.Due), q["Due"], rs.At, after.WaitUntil, after.Flow, rs.DueLimit)
	}
	wasLocked := t.locked
	if rs.DueLimit > 0 && wasLocked {
		due()
	}
	if err := pc.roundTrip(ctx); err != nil {
		return nil, err
	}
	t.locked = true
	rr.Clock = t.clock
	if rs.DueLimit > 0 && !wasLocked && t.minWait != nil && *t.minWait <= max(rs.At, t.clock.Tick) {
		due()
		if err := pc.roundTrip(ctx); err != nil {
			return nil, err
		}
	}
	if held != nil {
		t.forgetHeld(rr, held)
	}
	if err := t.refresh(ctx, rr, &rr.Picks, &rr.Due, &named); err != nil {
		return nil, err
	}
	// The groups asked for, and those of the due member flows: one more
	// round trip, only when there are any.
	names := rs.Groups
	for _, d := range rr.Due {
		if d.Flow.Group != "" {
			names = append(names, d.Flow.Group)
		}
	}
	if len(names) > 0 {
		rr.Groups = map[string]*store.GroupRow{}
		pc.queueRead("GroupsByName", func(r scanner) error {
			g := &store.GroupRow{}
			if err := r.Scan(groupTargets(g)...); err != nil {
				return err
			}
			rr.Groups[g.Group] = g
			return nil
		}, q["GroupsByName"], names)
		if err := pc.roundTrip(ctx); err != nil {
			return nil, err
		}
	}
	return rr, nil
}

// Members reads up to limit runnable member flows of group in order, with
// their heads, locked; a flow another transaction holds is skipped.
func (t *Tx) Members(ctx context.Context, group string, order store.Order, limit int) ([]store.FlowHead, error) {
	name := "MembersFair"
	if order == store.OrderFlowID {
		name = "MembersSeed"
	}
	var out []store.FlowHead
	t.c.queueRead(name, t.flowHeads(&out), q[name], group, limit)
	if err := t.c.roundTrip(ctx); err != nil {
		return nil, err
	}
	if err := t.refresh(ctx, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// refresh reads again, in a statement of its own, the flows a locking read
// found in a newer version than its snapshot (t.stale), with their heads:
// such a flow was changed by a transaction that committed after the
// read's statement began, and the head joined to it is the snapshot's
// (queries.sql, PickSeed). The transaction holds their locks now, so the
// new statement reads them as they stand. The rows in lists and in rr's
// group picks (rr may be nil) are replaced.
func (t *Tx) refresh(ctx context.Context, rr *store.ReadResult, lists ...*[]store.FlowHead) error {
	if len(t.stale) == 0 {
		return nil
	}
	ids := t.stale
	t.stale = nil
	var again []store.FlowHead
	t.c.queueRead("FlowsWithHeads", t.flowHeads(&again), q["FlowsWithHeads"], ids)
	if err := t.c.roundTrip(ctx); err != nil {
		return err
	}
	if len(t.stale) > 0 {
		return fmt.Errorf("flow %q changed while this transaction held its lock: the store is inconsistent", t.stale[0])
	}
	by := make(map[string]store.FlowHead, len(again))
	for _, h := range again {
		by[h.Flow.Flow] = h
	}
	for _, l := range lists {
		for i := range *l {
			if h, ok := by[(*l)[i].Flow.Flow]; ok {
				(*l)[i] = h
			}
		}
	}
	if rr != nil {
		for i := range rr.GroupPicks {
			if h, ok := by[rr.GroupPicks[i].First.Flow.Flow]; ok && rr.GroupPicks[i].First.Flow.Flow != "" {
				rr.GroupPicks[i].First = h
			}
		}
	}
	return nil
}

// forgetHeld drops from rr the events asked for whose flows the settle did
// not lock (another transaction held them: an open outbox transaction), and
// names them in rr.Held: rows another transaction may be changing, which
// this one must neither answer from nor write.
func (t *Tx) forgetHeld(rr *store.ReadResult, locked map[string]bool) {
	for id, e := range rr.Events {
		if locked[e.Flow] {
			continue
		}
		if rr.Held == nil {
			rr.Held = map[string]bool{}
		}
		rr.Held[id] = true
		delete(rr.Events, id)
		delete(rr.Flows, e.Flow)
		delete(rr.Next, id)
		delete(t.hs, e.Flow)
	}
}

// flowHeads returns the reader of a query of flows joined with their heads,
// which appends to out.
func (t *Tx) flowHeads(out *[]store.FlowHead) func(scanner) error {
	sc := &t.bufs.scan
	dest := append(append(append(sc.f.targets(nil), &sc.has), sc.e.targets(nil)...), &sc.fresh)
	return func(r scanner) error {
		sc.e.body = nil
		if err := r.Scan(dest...); err != nil {
			return err
		}
		f, hs := sc.f.row()
		h := store.FlowHead{Flow: f}
		if !sc.fresh {
			t.stale = append(t.stale, f.Flow) // refresh reads its head
		} else if sc.has {
			h.Head = t.bufs.events.put(sc.e.row())
		}
		t.hs[f.Flow] = hs
		*out = append(*out, h)
		return nil
	}
}

// rowScan holds the scan targets of the store's row queries, reused for
// every row: value types allocate nothing per row but the data of strings
// and bodies.
type rowScan struct {
	f    flowScan
	e, n eventScan
	has  bool
	// fresh: the locked flow row is the version the statement's snapshot
	// read, so the head joined to it is its own (queries.sql, PickSeed).
	fresh bool
	dest  []any
}

// flowScan scans the columns of a flow row: the FlowRow's, with its
// head_state_seq after WaitUntil.
type flowScan struct {
	f                             store.FlowRow
	wait, hs, pausedAt            pgtype.Int8
	pausedBy, pausedReason, group pgtype.Text
}

func (s *flowScan) targets(dst []any) []any {
	return append(dst, &s.f.Flow, &s.f.Ord, &s.f.Seq, &s.f.Served, &s.f.HeadSeq, &s.f.Runnable, &s.wait, &s.hs,
		&s.f.Paused, &s.pausedBy, &s.pausedReason, &s.pausedAt, &s.group)
}

func (s *flowScan) row() (store.FlowRow, headStateSeq) {
	f := s.f
	f.WaitUntil = nil
	if s.wait.Valid {
		v := s.wait.Int64
		f.WaitUntil = &v
	}
	f.PausedBy, f.PausedReason, f.PausedAt = s.pausedBy.String, s.pausedReason.String, s.pausedAt.Int64
	f.Group = s.group.String
	return f, headStateSeq{seq: s.hs.Int64, ok: s.hs.Valid}
}

// groupTargets are the scan targets of a group row's columns (GC in
// queries.sql) and its max_backlog.
func groupTargets(g *store.GroupRow) []any {
	return []any{&g.Group, &g.Ord, &g.Served, &g.Weight, &g.Credit, &g.RunnableFlows, &g.MaxBacklog}
}

// eventScan scans the fifteen columns of event_now; every one may be NULL
// (the outer join of a flow's head, or of the event behind one).
type eventScan struct {
	id, flow, state, reason, claimedBy                           pgtype.Text
	seq, gen, att, life, next, lease, enqueued, claimed, ackedAt pgtype.Int8
	body                                                         []byte
}

func (s *eventScan) targets(dst []any) []any {
	return append(dst, &s.id, &s.flow, &s.seq, &s.body, &s.state, &s.gen, &s.att, &s.life, &s.reason, &s.next, &s.lease, &s.enqueued,
		&s.claimed, &s.ackedAt, &s.claimedBy)
}

func (s *eventScan) row() store.EventRow {
	e := store.EventRow{ID: s.id.String, Flow: s.flow.String, Seq: s.seq.Int64, Body: s.body, State: s.state.String,
		Generation: s.gen.Int64, Attempts: s.att.Int64, LifetimeAttempts: s.life.Int64, Reason: s.reason.String,
		NextAt: s.next.Int64, LeaseUntil: s.lease.Int64, EnqueuedAt: s.enqueued.Int64, ClaimedWall: s.claimed.Int64,
		ClaimedBy: s.claimedBy.String}
	if s.ackedAt.Valid {
		v := s.ackedAt.Int64
		e.AckedAt = &v
	}
	return e
}

// scanFlowHead scans a row of flow columns, head_state_seq, has_head and
// the head event's columns (read transactions).
func scanFlowHead(r scanner) (store.FlowHead, error) {
	var sc rowScan
	if err := r.Scan(append(append(sc.f.targets(nil), &sc.has), sc.e.targets(nil)...)...); err != nil {
		return store.FlowHead{}, err
	}
	f, _ := sc.f.row()
	h := store.FlowHead{Flow: f}
	if sc.has {
		e := sc.e.row()
		h.Head = &e
	}
	return h, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func deref64(v *int64) int64 {
	if v == nil {
		return 0
	}
	return *v
}

// Write takes ws; the statements go with the commit.
func (t *Tx) Write(ctx context.Context, ws *store.WriteSet) error {
	t.bufs.ws.add(ws)
	return nil
}

// Commit sends the collected writes and the COMMIT in one round trip, then
// returns the connection to the pool.
func (t *Tx) Commit(ctx context.Context) error {
	if t.done {
		return nil
	}
	t.bufs.ws.stage(t.c, t.lanes, t.hs, &t.bufs.arrays)
	if err := t.c.commit(ctx); err != nil {
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
		t.bufs = nil
	}
}

// Rollback ends the transaction unless it was committed, and returns the
// connection to the pool (a connection left in a failed state is closed by
// the pool).
func (t *Tx) Rollback(ctx context.Context) error {
	if t.done {
		return nil
	}
	t.done = true
	defer t.own.Release()
	defer t.releaseBuffers()
	if len(t.c.names) > 0 && t.c.names[0] == "Begin" {
		return nil // BEGIN was never sent: there is nothing to end
	}
	if _, err := t.own.Exec(ctx, "ROLLBACK"); err != nil {
		return Translate(fmt.Errorf("rollback: %w", err))
	}
	return nil
}
