package fairrelay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/pgtest"
)

// A group's first backlog limit counts every event of the group, also one
// onto a flow of the group made and committed while the configure waited
// for the group's other flows (SPEC §8): the configure's lock of the
// group's flows took the flows its snapshot saw, the new flow's enqueue let
// the group's limit row go at its commit, and an open outbox transaction
// then enqueued onto the new flow without waiting, read no limit, and was
// counted by no one (a hunter's reproduction, step for step; the counter
// ended one below the backlog, as TestPostgresOutboxUnderContention once
// found in CI). Now the configure locks the flows made since, without
// waiting, once it holds the limit row, and waits for that transaction.
func TestPostgresFirstGroupLimitCountsAFlowMadeWhileItWaited(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, pool, schema := outboxStoreAt(t, pgtest.Schema(t, "frlimflow")+"&deadlock_timeout=20ms", fairrelay.DaemonPolicy())
	body := []byte(`{"delta":1}`)
	enqueue := func(id, flow string) {
		t.Helper()
		if r, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: id, Flow: flow, Group: "g", Body: body, At: fairrelay.AtStored}); err != nil || r.Status != fairrelay.EnqueueCreated {
			t.Fatalf("enqueue %s onto %s: %+v %v", id, flow, r, err)
		}
	}
	open := func(id, flow string) pgx.Tx {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tx.Rollback(context.Background()) })
		if r, err := q.EnqueuePgxTx(ctx, tx, fairrelay.EnqueueParams{ID: id, Flow: flow, Group: "g", Body: body, At: fairrelay.AtStored}); err != nil || r.Status != fairrelay.EnqueueCreated {
			t.Fatalf("enqueue %s onto %s in an open transaction: %+v %v", id, flow, r, err)
		}
		return tx
	}
	enqueue("e0", "F0") // group g, no limit
	h := open("e1", "F0")
	limit := int64(100)
	done := make(chan error, 1)
	go func() {
		_, err := q.Configure(ctx, fairrelay.ConfigureParams{At: fairrelay.AtStored, Group: "g", MaxBacklog: &limit})
		done <- err
	}()
	waitBlockedBy(t, pool, h) // the configure waits for F0
	enqueue("e2", "F1")       // a new flow of g, committed
	e := open("e3", "F1")     // did not wait: the configure does not hold F1
	if err := h.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Either the configure returns (it counted without e3: the defect) or
	// it waits for the transaction that holds F1.
	for waiting := false; !waiting; {
		select {
		case err := <-done:
			done <- err
			waiting = true
		default:
			waiting = waitsFor(t, pool, e) > 0
			if !waiting {
				time.Sleep(time.Millisecond) // polling a condition; the configure's own answer ends it too
			}
		}
	}
	if err := e.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if counter, backlog := groupCounterAndBacklog(t, pool, schema, "g"); counter != backlog || backlog != 4 {
		t.Errorf("group g's counter %d, its backlog %d: want both 4", counter, backlog)
	}
}

// groupCounterAndBacklog reads group g's backlog counter (its grp_limit
// row's enqueued, which the group's acks, none in these tests, are taken
// from) and the group's real backlog, its events.
func groupCounterAndBacklog(t *testing.T, pool *pgxpool.Pool, schema, g string) (counter, backlog int64) {
	t.Helper()
	if err := pool.QueryRow(context.Background(), `SELECT l.enqueued, (SELECT count(*) FROM `+pgx.Identifier{schema, "event"}.Sanitize()+` e JOIN `+pgx.Identifier{schema, "flow"}.Sanitize()+` f
		ON f.flow_id = e.flow_id WHERE f.group_id = $1) FROM `+pgx.Identifier{schema, "grp_limit"}.Sanitize()+` l WHERE l.group_id = $1`, g).Scan(&counter, &backlog); err != nil {
		t.Fatal(err)
	}
	return counter, backlog
}

// limitRace is a store whose group's first backlog limit races enqueues,
// step by step: each step waits until the server shows the wait it sets
// up (pg_blocking_pids).
type limitRace struct {
	t      *testing.T
	q      *fairrelay.Queue
	pool   *pgxpool.Pool
	schema string
	body   []byte
}

func newLimitRace(t *testing.T, prefix string) *limitRace {
	q, pool, schema := outboxStore(t, prefix, fairrelay.DaemonPolicy())
	return &limitRace{t: t, q: q, pool: pool, schema: schema, body: []byte(`{"delta":1}`)}
}

// enqueue enqueues and commits one event onto flow, of group when not "".
func (r *limitRace) enqueue(id, flow, group string) {
	r.t.Helper()
	if res, err := r.q.Enqueue(context.Background(), fairrelay.EnqueueParams{ID: id, Flow: flow, Group: group, Body: r.body, At: fairrelay.AtStored}); err != nil || res.Status != fairrelay.EnqueueCreated {
		r.t.Fatalf("enqueue %s onto %s: %+v %v", id, flow, res, err)
	}
}

// open enqueues one event in a transaction it leaves open (rolled back
// when the test ends unless committed).
func (r *limitRace) open(id, flow, group string) pgx.Tx {
	r.t.Helper()
	ctx := context.Background()
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { tx.Rollback(context.Background()) })
	if res, err := r.q.EnqueuePgxTx(ctx, tx, fairrelay.EnqueueParams{ID: id, Flow: flow, Group: group, Body: r.body, At: fairrelay.AtStored}); err != nil || res.Status != fairrelay.EnqueueCreated {
		r.t.Fatalf("enqueue %s onto %s in an open transaction: %+v %v", id, flow, res, err)
	}
	return tx
}

func (r *limitRace) commit(tx pgx.Tx) {
	r.t.Helper()
	if err := tx.Commit(context.Background()); err != nil {
		r.t.Fatal(err)
	}
}

// configure sets group's first backlog limit in a goroutine; its error
// comes on the channel.
func (r *limitRace) configure(group string, limit int64) chan error {
	done := make(chan error, 1)
	go func() {
		_, err := r.q.Configure(context.Background(), fairrelay.ConfigureParams{At: fairrelay.AtStored, Group: group, MaxBacklog: &limit})
		done <- err
	}()
	return done
}

// enqueueMany runs a batch in a transaction of its own in a goroutine,
// checking that every event is created; its error comes on the channel.
func (r *limitRace) enqueueMany(evs ...fairrelay.NewEvent) chan error {
	done := make(chan error, 1)
	go func() {
		rs, err := r.q.EnqueueMany(context.Background(), fairrelay.EnqueueManyParams{At: fairrelay.AtStored, Events: evs})
		for i := 0; err == nil && i < len(evs); i++ {
			if i >= len(rs) || rs[i].Status != fairrelay.EnqueueCreated {
				err = fmt.Errorf("answers %+v: want every event created", rs)
			}
		}
		done <- err
	}()
	return done
}

// waitUntil polls the server until waits holds, failing the test after
// 10 s, or when a call under way (calls) answers first: it did not wait.
func (r *limitRace) waitUntil(what string, waits func() bool, calls ...chan error) {
	r.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !waits(); {
		for _, c := range calls {
			select {
			case err := <-c:
				r.t.Fatalf("%s: a call under way answered first (%v)", what, err)
			default:
			}
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: not within 10s; the sessions:\n%s", what, sessionWaits(r.pool))
		}
		time.Sleep(time.Millisecond) // polling a condition, with a deadline
	}
}

// end commits h, the last transaction the configure and the batch wait
// for, waits for both to answer, and wants group g's counter equal to its
// backlog of 4 events.
func (r *limitRace) end(h pgx.Tx, configured, batch chan error) {
	r.t.Helper()
	r.commit(h)
	if err := <-configured; err != nil {
		r.t.Fatal(err)
	}
	if err := <-batch; err != nil {
		r.t.Fatal(err)
	}
	if counter, backlog := groupCounterAndBacklog(r.t, r.pool, r.schema, "g"); counter != backlog || backlog != 4 {
		r.t.Errorf("group g's counter %d, its backlog %d: want both 4", counter, backlog)
	}
}

// waitsBehind counts the server processes that wait for a lock of a
// process that itself waits for one tx holds.
func waitsBehind(t *testing.T, pool *pgxpool.Pool, tx pgx.Tx) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity w, pg_stat_activity m
		WHERE m.pid = ANY (pg_blocking_pids(w.pid)) AND $1 = ANY (pg_blocking_pids(m.pid))`, tx.Conn().PgConn().PID()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A group's first backlog limit counts an event that a batch naming no
// group (enqueue_many's batch path) puts onto a flow of the group made and
// committed after the batch locked its flows (SPEC §8): the batch's lock
// took the flows its snapshot saw, none of the new flow, and the batch
// then waited for the names of the flows it would make; meanwhile the
// configure locked the new flow and waited for another flow of the group,
// the batch read no limit and inserted its event, and the configure
// counted the group without it (a hunter's reproduction, step for step;
// the counter ended one below the backlog, 3 and 4). Now the batch goes
// event by event when it meets a flow its first lock missed, which locks
// the flow, waiting for the configure, before it reads the limit
// (migration 032).
func TestPostgresFirstGroupLimitCountsABatchOntoAFlowMadeWhileItWaited(t *testing.T) {
	t.Parallel()
	r := newLimitRace(t, "frlimbatch")
	r.enqueue("e0", "F9", "g") // group g, no limit
	h := r.open("e1", "F9", "g")
	e := r.open("e2", "F1", "g") // a new flow of g, not committed: the batch's lock misses it
	x := r.open("x1", "X", "")   // a new flow of its own group: holds the name the batch claims after F1's
	// No group named, more than one event: the batch path.
	batch := r.enqueueMany(fairrelay.NewEvent{ID: "e3", Flow: "F1", Body: r.body}, fairrelay.NewEvent{ID: "x2", Flow: "X", Body: r.body})
	r.waitUntil("the batch waits for the name of F1", func() bool { return waitsFor(t, r.pool, e) > 0 }, batch)
	r.commit(e)
	r.waitUntil("the batch waits for the name of X", func() bool { return waitsFor(t, r.pool, x) > 0 }, batch)
	configured := r.configure("g", 100)
	// It locks F1 (committed, held by no one), then waits for F9.
	r.waitUntil("the configure waits for F9", func() bool { return waitsFor(t, r.pool, h) > 0 }, batch, configured)
	r.commit(x)
	// The batch waits for the configure, which holds F1: to advance F1
	// after it read no limit and inserted e3 (the defect), or to lock F1
	// before it reads the limit.
	r.waitUntil("the batch waits for the configure", func() bool { return waitsBehind(t, r.pool, h) > 0 }, batch, configured)
	r.end(h, configured, batch)
}

// The same for a batch that names groups (enqueue_events, event by event):
// its lock of its flows took the flows its snapshot saw, none of a new
// flow of g; its first event, making a flow of a new group h, waited for
// h's name while the new flow committed and the configure locked it and
// waited for another flow of g; its second event's read then found the
// new flow, took it for locked, read no limit and inserted its event, and
// the configure counted the group without it (a hunter's reproduction,
// step for step; the counter ended one below the backlog, 3 and 4). Then
// enqueue_events locked such a flow, waiting for the configure, and read
// it again (migration 032); now the batch takes F1's name too before it
// reads the tick (migration 039), and locks F1, committed by then, with its
// flows, waiting for the configure.
func TestPostgresFirstGroupLimitCountsAGroupedBatchOntoAFlowMadeWhileItWaited(t *testing.T) {
	t.Parallel()
	r := newLimitRace(t, "frlimgrouped")
	r.enqueue("e0", "F9", "g") // group g, no limit
	h := r.open("e1", "F9", "g")
	e := r.open("e2", "F1", "g") // a new flow of g, not committed: the batch's lock misses it
	eh := r.open("y1", "Y", "h") // a new group h: holds its name
	batch := r.enqueueMany(fairrelay.NewEvent{ID: "a1", Flow: "A", Group: "h", Body: r.body}, fairrelay.NewEvent{ID: "e3", Flow: "F1", Group: "g", Body: r.body})
	// Migration 039: the batch takes every name before it reads the tick,
	// in name order (f:A, f:F1, g:h): F1's first, held by e.
	r.waitUntil("the batch waits for the name of F1", func() bool { return waitsFor(t, r.pool, e) > 0 }, batch)
	r.commit(e)
	r.waitUntil("the batch waits for the name of h", func() bool { return waitsFor(t, r.pool, eh) > 0 }, batch)
	configured := r.configure("g", 100)
	// It locks F1 (committed, held by no one), then waits for F9.
	r.waitUntil("the configure waits for F9", func() bool { return waitsFor(t, r.pool, h) > 0 }, batch, configured)
	r.commit(eh)
	// The batch's second event waits for the configure, which holds F1: to
	// advance F1 after it read no limit and inserted e3 (the defect), or
	// to lock F1 before it reads the limit again.
	r.waitUntil("the batch waits for the configure", func() bool { return waitsBehind(t, r.pool, h) > 0 }, batch, configured)
	r.end(h, configured, batch)
}
