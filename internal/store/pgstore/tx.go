package pgstore

import (
	"context"
	"fmt"

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
//     them in flow_id order (a settle's flows, an enqueue's flows): no two
//     transactions can wait for each other. A settle takes them before its
//     lanes' locks, so that waiting for one flow does not hold up the
//     lane; it then waits for nothing but the lane;
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
	c       *pgxConn
	own     *pgxpool.Conn
	lanes   store.Lane
	done    bool
	locked  bool // the first Read took the lanes' locks
	clock   store.Clock
	bufs    *txBuffers
	buffers *bufferPool // the store's
	// hs holds, for the flows read, their head_state_seq (migration 004)
	// as it stands in the transaction, nil for none; a flow missing is not
	// known. It spares FlowFlushHeadState when no flow needs it.
	hs map[string]*int64
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
	return &Tx{c: pc, own: conn, lanes: lanes, bufs: s.buffers.get(), buffers: &s.buffers, hs: map[string]*int64{}}, nil
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
		lanes := laneRows(t.lanes)
		pc.queue("ClockLock", q["ClockLock"], lanes)
		pc.queueRead("ClockGetForUpdate", func(r scanner) error {
			return r.Scan(&t.clock.Tick, &t.clock.Ticket)
		}, q["ClockGetForUpdate"], lanes)
	}
	if len(rs.Events) > 0 {
		rr.Events, rr.Flows = map[string]*store.EventRow{}, map[string]*store.FlowRow{}
		var e, n store.EventRow
		var f store.FlowRow
		var reason, nReason *string
		var hs *int64
		var hasNext bool
		var nID, nFlow, nState *string
		var nSeq, nGen, nAtt, nLife, nNext, nLease, nEnq *int64
		dest := []any{&e.ID, &e.Flow, &e.Seq, &e.Body, &e.State, &e.Generation, &e.Attempts, &e.LifetimeAttempts, &reason, &e.NextAt, &e.LeaseUntil, &e.EnqueuedAt,
			&f.Flow, &f.Ord, &f.Seq, &f.Served, &f.HeadSeq, &f.Runnable, &f.WaitUntil, &hs,
			&hasNext, &nID, &nFlow, &nSeq, &n.Body, &nState, &nGen, &nAtt, &nLife, &nReason, &nNext, &nLease, &nEnq}
		pc.queueRead("EventsWithFlows", func(r scanner) error {
			// Fresh targets per row: the rows handed out keep what they
			// point to.
			e, n, f, reason, nReason, hs = store.EventRow{}, store.EventRow{}, store.FlowRow{}, nil, nil, nil
			if err := r.Scan(dest...); err != nil {
				return err
			}
			ev := e
			ev.Reason = deref(reason)
			rr.Events[ev.ID] = &ev
			if _, ok := rr.Flows[f.Flow]; !ok {
				fl := f
				rr.Flows[fl.Flow] = &fl
				t.hs[fl.Flow] = hs
			}
			if hasNext {
				nx := store.EventRow{ID: deref(nID), Flow: deref(nFlow), Seq: deref64(nSeq), Body: n.Body, State: deref(nState),
					Generation: deref64(nGen), Attempts: deref64(nAtt), LifetimeAttempts: deref64(nLife), Reason: deref(nReason),
					NextAt: deref64(nNext), LeaseUntil: deref64(nLease), EnqueuedAt: deref64(nEnq)}
				if rr.Next == nil {
					rr.Next = map[string]*store.EventRow{}
				}
				rr.Next[nx.Flow] = &nx
			}
			return nil
		}, q["EventsWithFlows"], rs.Events, rs.Next)
	}
	if rs.PickLimit > 0 {
		name := "PickFair"
		if rs.Order == store.OrderFlowID {
			name = "PickSeed"
		}
		pc.queueRead(name, t.flowHeads(&rr.Picks), q[name], rs.PickLimit)
	}
	if rs.DueLimit > 0 {
		after := store.FlowKey{WaitUntil: -1 << 63}
		if rs.DueAfter != nil {
			after = *rs.DueAfter
		}
		pc.queueRead("Due", t.flowHeads(&rr.Due), q["Due"], rs.At, after.WaitUntil, after.Flow, rs.DueLimit)
	}
	if err := pc.roundTrip(ctx); err != nil {
		return nil, err
	}
	t.locked = true
	rr.Clock = t.clock
	if held != nil {
		t.forgetHeld(rr, held)
	}
	return rr, nil
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
		delete(rr.Next, e.Flow)
		delete(t.hs, e.Flow)
	}
}

// flowHeads returns the reader of a query of flows joined with their heads,
// which appends to out.
func (t *Tx) flowHeads(out *[]store.FlowHead) func(scanner) error {
	return func(r scanner) error {
		h, hs, err := scanFlowHead(r)
		if err != nil {
			return err
		}
		t.hs[h.Flow.Flow] = hs
		*out = append(*out, h)
		return nil
	}
}

// scanFlowHead scans a row of flow columns, head_state_seq, has_head and
// the head event's columns.
func scanFlowHead(r scanner) (store.FlowHead, *int64, error) {
	var f store.FlowRow
	var hs *int64
	var hasHead bool
	var id, flow, state, reason *string
	var seq, gen, att, life, next, lease, enq *int64
	var body []byte
	if err := r.Scan(&f.Flow, &f.Ord, &f.Seq, &f.Served, &f.HeadSeq, &f.Runnable, &f.WaitUntil, &hs,
		&hasHead, &id, &flow, &seq, &body, &state, &gen, &att, &life, &reason, &next, &lease, &enq); err != nil {
		return store.FlowHead{}, nil, err
	}
	h := store.FlowHead{Flow: f}
	if hasHead {
		h.Head = &store.EventRow{ID: deref(id), Flow: deref(flow), Seq: deref64(seq), Body: body, State: deref(state),
			Generation: deref64(gen), Attempts: deref64(att), LifetimeAttempts: deref64(life), Reason: deref(reason),
			NextAt: deref64(next), LeaseUntil: deref64(lease), EnqueuedAt: deref64(enq)}
	}
	return h, hs, nil
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
