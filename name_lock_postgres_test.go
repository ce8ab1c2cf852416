package fairrelay_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fairrelay/fairrelay"
)

// A transaction makes a new flow and holds it uncommitted while a second
// one enqueues to the same flow, names a group of the flow's name, or
// configures a group of that name (SPEC §8, §10; a breaker's report,
// migration 011). The second waits for the first (pg_blocking_pids), and
// once the first commits answers as if it had come after it: the group it
// named is checked against the flow's, the limits are counted with the
// first's event, existing and conflict come before every limit, and one
// name has one place in the rotation. Before migration 011 the second
// either did not wait at all or answered from what it read before waiting;
// before 012, so did one that met a batch of the SQL function (several new
// flows, no group) or that a batch met.
func TestPostgresNewFlowRaces(t *testing.T) {
	t.Parallel()
	i64 := func(v int64) *int64 { return &v }
	type step func(ctx context.Context, q *fairrelay.Queue, tx pgx.Tx, schema string) (string, error)
	enq := func(id, flow, group string) step {
		return func(ctx context.Context, q *fairrelay.Queue, tx pgx.Tx, _ string) (string, error) {
			r, err := q.EnqueuePgxTx(ctx, tx, fairrelay.EnqueueParams{ID: id, Flow: flow, Group: group, Body: []byte(`{"delta":1}`), At: fairrelay.AtStored})
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("%s %d %s", r.Status, r.Seq, r.Limit), nil
		}
	}
	// enqMany makes flows FLOW and FLOW-other in one call of the batch
	// path (the SQL function enqueue_many with two events and no group, as
	// a producer in another language calls it) and answers the first
	// event's answer.
	enqMany := func(id, flow string) step {
		return func(ctx context.Context, _ *fairrelay.Queue, tx pgx.Tx, schema string) (string, error) {
			var status string
			var seq *int64
			err := tx.QueryRow(ctx, "SELECT status, seq FROM "+pgx.Identifier{schema, "enqueue_many"}.Sanitize()+"($1, $2, $3)",
				[]string{id, id + "-other"}, []string{flow, flow + "-other"}, [][]byte{[]byte(`{"delta":1}`), []byte(`{"delta":1}`)}).Scan(&status, &seq)
			if err != nil {
				return "", fmt.Errorf("%w (%s)", err, fairrelay.CodeOf(err))
			}
			if seq == nil {
				seq = new(int64)
			}
			return fmt.Sprintf("%s %d ", status, *seq), nil
		}
	}
	configure := func(p fairrelay.ConfigureParams) step {
		return func(ctx context.Context, q *fairrelay.Queue, _ pgx.Tx, _ string) (string, error) {
			p.At = fairrelay.AtStored
			if _, err := q.Configure(ctx, p); err != nil {
				return "", err
			}
			return "configured", nil
		}
	}
	cases := []struct {
		name   string
		before []fairrelay.ConfigureParams
		first  step // makes flow F1, F or the like, held open
		second step
		want   string // the second's answer, or "invalid_input: FIELD"
		after  step   // run once both committed
		wantAf string
	}{
		{"a group other than the flow's", []fairrelay.ConfigureParams{{Group: "g2", MaxBacklog: i64(1)}},
			enq("a1", "F1", ""), enq("a2", "F1", "g2"), "invalid_input: group",
			enq("b1", "H", "g2"), "created 1 "},
		{"a group limit configured while the flow is made", nil,
			enq("a1", "F", ""), configure(fairrelay.ConfigureParams{Group: "F", MaxBacklog: i64(1)}), "configured",
			enq("a2", "F", ""), "full 0 group"},
		{"a group named like the flow being made", nil,
			enq("a1", "F", ""), enq("b1", "G", "F"), "created 1 ",
			nil, ""},
		{"max_flow_backlog on a flow being made", []fairrelay.ConfigureParams{{MaxFlowBacklog: i64(1)}},
			enq("a1", "F1", ""), enq("a2", "F1", ""), "full 0 flow",
			nil, ""},
		{"existing before the store limit", []fairrelay.ConfigureParams{{MaxBacklog: i64(1)}},
			enq("a1", "F1", ""), enq("a1", "F1", ""), "existing 1 ",
			nil, ""},
		{"conflict before the store limit", []fairrelay.ConfigureParams{{MaxBacklog: i64(1)}},
			enq("a1", "F1", ""), enq("a1", "F2", ""), "conflict 0 ",
			nil, ""},
		// The batch path (migration 012).
		{"a group limit configured while a batch makes the flow", nil,
			enqMany("a1", "F"), configure(fairrelay.ConfigureParams{Group: "F", MaxBacklog: i64(1)}), "configured",
			enq("a2", "F", ""), "full 0 group"},
		{"a group named like a flow a batch is making", nil,
			enqMany("a1", "F"), enq("b1", "G", "F"), "created 1 ",
			nil, ""},
		{"a batch making a flow named like a group being made", nil,
			enq("a1", "G", "F"), enqMany("b1", "F"), "created 1 ",
			nil, ""},
		{"a batch making a flow another batch is making", nil,
			enqMany("a1", "F"), enqMany("b1", "F"), "created 2 ",
			nil, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			q, pool, schema := outboxStore(t, "frname_", fairrelay.DaemonPolicy())
			for _, p := range c.before {
				p.At = fairrelay.AtStored
				if _, err := q.Configure(ctx, p); err != nil {
					t.Fatal(err)
				}
			}
			first, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer first.Rollback(ctx)
			if got, err := c.first(ctx, q, first, schema); err != nil || got != "created 1 " {
				t.Fatalf("first transaction: %q %v, want created 1", got, err)
			}
			done := make(chan string, 1)
			go func() {
				var got string
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					var err error
					got, err = c.second(ctx, q, tx, schema)
					return err
				})
				if err != nil {
					got = fmt.Sprintf("%s: %s", fairrelay.CodeOf(err), fieldOf(err))
				}
				done <- got
			}()
			waitBlockedBy(t, pool, first)
			if err := first.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case got := <-done:
				if got != c.want {
					t.Errorf("second: %q, want %q", got, c.want)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the second did not end within 20s of the first's commit")
			}
			if c.after != nil {
				var got string
				if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					var err error
					got, err = c.after(ctx, q, tx, schema)
					return err
				}); err != nil || got != c.wantAf {
					t.Errorf("after both: %q %v, want %q", got, err, c.wantAf)
				}
			}
			// One name, one place in the rotation; every group a flow's.
			s, err := q.Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]int{}
			for _, g := range s.Groups {
				seen[g.Group]++
				if seen[g.Group] > 1 {
					t.Errorf("group %s is in the snapshot twice: %+v", g.Group, s.Groups)
				}
			}
			gs, err := q.Groups(ctx, "", 100)
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range gs {
				if g.Backlog > 0 && g.Flows == 0 {
					t.Errorf("group %s counts a backlog of %d with no flow", g.Group, g.Backlog)
				}
			}
		})
	}
}

// fieldOf is the field an invalid_input error names, or "".
func fieldOf(err error) string {
	var fe *fairrelay.Error
	if errors.As(err, &fe) {
		return fe.Field
	}
	return ""
}

// enqueue_many with NULL arrays is an empty batch, as with empty arrays:
// no rows, no error (it raised PL/pgSQL's "upper bound of FOR loop cannot
// be null" before migration 011).
func TestPostgresEnqueueManyOfNothing(t *testing.T) {
	t.Parallel()
	_, pool, schema := outboxStore(t, "frnothing_", fairrelay.DaemonPolicy())
	for _, args := range []string{"NULL, NULL, NULL", "'{}', '{}', '{}'"} {
		var n int
		if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM "+pgx.Identifier{schema, "enqueue_many"}.Sanitize()+"("+args+")").Scan(&n); err != nil || n != 0 {
			t.Errorf("enqueue_many(%s): %d rows, %v; want none and no error", args, n, err)
		}
	}
}

// New flows of a group that exists already do not wait for each other
// (SPEC §10: different flows never wait): only a group being made is
// claimed by name (migrations 011, 012). The second enqueue commits while the first is open.
func TestPostgresNewFlowsOfOneGroupDoNotWait(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	q, pool, _ := outboxStore(t, "frgroupwait_", fairrelay.DaemonPolicy())
	if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "t0", Flow: "T0", Group: "TEN", Body: []byte("0"), At: fairrelay.AtStored}); err != nil {
		t.Fatal(err)
	}
	first, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback(ctx)
	if r, err := q.EnqueuePgxTx(ctx, first, fairrelay.EnqueueParams{ID: "a1", Flow: "F1", Group: "TEN", Body: []byte("1"), At: fairrelay.AtStored}); err != nil || r.Status != fairrelay.EnqueueCreated {
		t.Fatalf("first: %+v %v", r, err)
	}
	done := make(chan error, 1)
	go func() {
		done <- pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			r, err := q.EnqueuePgxTx(ctx, tx, fairrelay.EnqueueParams{ID: "b1", Flow: "F2", Group: "TEN", Body: []byte("2"), At: fairrelay.AtStored})
			if err == nil && r.Status != fairrelay.EnqueueCreated {
				err = fmt.Errorf("answered %s", r.Status)
			}
			return err
		})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("second, a new flow of the same group: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a new flow of an existing group waited 10s for another new flow's open transaction")
	}
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// A transaction may make many flows: in one transaction, a call of the SQL
// function per new flow (as a producer's EnqueueTx in a loop), or one
// grouped batch of new flows, four times as many as the server's shared
// lock table is sized for (max_locks_per_transaction × max_connections:
// 6 400 by default), all commit. Migration 011 took an advisory lock per
// new name, an entry of that table held to commit, and such a transaction
// failed with "out of shared memory" (53200); migration 012 claims names
// with row locks.
func TestPostgresManyNewFlowsInOneTransaction(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	q, pool, schema := outboxStore(t, "frmanyflows_", fairrelay.DaemonPolicy())
	var limit int
	if err := pool.QueryRow(ctx, `SELECT current_setting('max_locks_per_transaction')::int * (current_setting('max_connections')::int + current_setting('max_prepared_transactions')::int)`).Scan(&limit); err != nil {
		t.Fatal(err)
	}
	n := 4 * limit
	var created int
	err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE e.status = 'created') FROM generate_series(1, $1) AS i,
		LATERAL `+pgx.Identifier{schema, "enqueue_many"}.Sanitize()+`(ARRAY['one-' || i], ARRAY['one-' || i], ARRAY['1'::bytea]) AS e`, n).Scan(&created)
	if err != nil || created != n {
		t.Fatalf("%d calls making a flow each in one transaction: %d created, %v", n, created, err)
	}
	evs := make([]fairrelay.NewEvent, n)
	for i := range evs {
		evs[i] = fairrelay.NewEvent{ID: fmt.Sprint("many-", i), Flow: fmt.Sprint("many-", i), Group: "TEN", Body: []byte("1")}
	}
	rs, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: fairrelay.AtStored, Events: evs})
	if err != nil {
		t.Fatalf("a batch of %d new flows in one group: %v", n, err)
	}
	for i, r := range rs {
		if r.Status != fairrelay.EnqueueCreated {
			t.Fatalf("batch event %d: %s", i, r.Status)
		}
	}
}

// BenchmarkPostgresNewFlowsInOneTransaction times a call of the SQL
// function enqueue_many that makes a new flow, in one transaction of N
// such calls on a new store (a first import: a producer's EnqueueTx in a
// loop). The time per call should not grow with N: before migration 012 a
// generic plan made while the flow table was a few rows scanned it whole at
// every call (BENCHMARKS.md, "Many new flows in one transaction").
//
//	go test -run XXX -bench PostgresNewFlowsInOneTransaction -benchtime 1x .
func BenchmarkPostgresNewFlowsInOneTransaction(b *testing.B) {
	for _, n := range []int{3200, 6400, 12800} {
		b.Run(fmt.Sprint("calls=", n), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				_, pool, schema := outboxStore(b, "frbenchflows_", fairrelay.DaemonPolicy())
				b.StartTimer()
				var created int
				err := pool.QueryRow(b.Context(), `SELECT count(*) FROM generate_series(1, $1) AS i,
					LATERAL `+pgx.Identifier{schema, "enqueue_many"}.Sanitize()+`(ARRAY['e' || i], ARRAY['f' || i], ARRAY['1'::bytea]) AS e`, n).Scan(&created)
				if err != nil || created != n {
					b.Fatalf("%d created, %v", created, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/call")
		})
	}
}

// sqlBatch calls the SQL function enqueue_many in tx with events of no
// group (groups nil) or of groups, as a producer in another language does,
// and answers each event's answer as "status seq limit".
func sqlBatch(ctx context.Context, tx pgx.Tx, schema string, ids, flows, groups []string) ([]string, error) {
	bodies := make([][]byte, len(ids))
	for i := range bodies {
		bodies[i] = []byte(`{"delta":1}`)
	}
	var g any
	if groups != nil {
		g = groups
	}
	rows, err := tx.Query(ctx, `SELECT status, coalesce(seq, 0), coalesce("limit", '') FROM `+pgx.Identifier{schema, "enqueue_many"}.Sanitize()+
		`($1, $2, $3, NULL, false, 0, 1048576, $4)`, ids, flows, bodies, g)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var st, lim string
		var seq int64
		err := r.Scan(&st, &seq, &lim)
		return fmt.Sprintf("%s %d %s", st, seq, lim), err
	})
}

// A call answers, never fails with a deadlock, when it must lock a flow
// after waiting for another transaction (SPEC §10: a call waits, then
// answers). Two cases from a breaker's report, each a cycle between a
// one-event call and a batch that the deadlock detector breaks by failing
// one of them: a one-event call that waited for a new flow's name and
// then found its id stored in another flow, which a batch holds while it
// waits for that name (migration 012 as first written); and a one-event
// call making flow X while a grouped batch holds its id and then waits
// for X's name (since 011). Each call is tried with the deadlock detector
// free to pick either; the transactions commit as their calls return.
func TestPostgresCallsDoNotFailOnDeadlock(t *testing.T) {
	t.Parallel()
	type result struct {
		who string
		got []string
		err error
	}
	// finish waits for the two calls, committing each one's transaction as
	// its call returns (the other may be waiting for it), and answers
	// their results by name.
	finish := func(t *testing.T, pool *pgxpool.Pool, txs map[string]pgx.Tx, done chan result) map[string]result {
		out := map[string]result{}
		for range 2 {
			select {
			case r := <-done:
				out[r.who] = r
				if err := txs[r.who].Commit(t.Context()); err != nil && r.err == nil {
					t.Fatalf("%s: commit: %v", r.who, err)
				}
			case <-time.After(30 * time.Second):
				// Once seen in CI beside other PostgreSQL work, never
				// reproduced since: say what every session of the
				// database waits for, for the next time.
				t.Fatalf("calls still waiting after 30s: %v answered; the database's sessions:\n%s", out, sessionWaits(pool))
			}
		}
		return out
	}
	one := func(q *fairrelay.Queue, tx pgx.Tx, who, id, flow string, done chan result) {
		r, err := q.EnqueuePgxTx(context.Background(), tx, fairrelay.EnqueueParams{ID: id, Flow: flow, Body: []byte(`{"delta":1}`), At: fairrelay.AtStored})
		done <- result{who, []string{fmt.Sprintf("%s %d %s", r.Status, r.Seq, r.Limit)}, err}
	}
	begin := func(t *testing.T, pool interface {
		Begin(context.Context) (pgx.Tx, error)
	}) pgx.Tx {
		tx, err := pool.Begin(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tx.Rollback(context.Background()) })
		return tx
	}

	t.Run("one event after a name's claim", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		q, pool, schema := outboxStore(t, "frdeadlock1_", fairrelay.DaemonPolicy())
		for _, f := range []string{"G", "H", "W"} {
			if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: f + "0", Flow: f, Body: []byte("0"), At: fairrelay.AtStored}); err != nil {
				t.Fatal(err)
			}
		}
		// T4 makes flow X and holds its name until it rolls back. (Until
		// migration 023, a call that lost the race for its id while making
		// X held X's name to its commit; it starts over now, and lets the
		// name go.)
		t4 := begin(t, pool)
		if r, err := q.EnqueuePgxTx(ctx, t4, fairrelay.EnqueueParams{ID: "d1", Flow: "X", Body: []byte("1"), At: fairrelay.AtStored}); err != nil || r.Status != fairrelay.EnqueueCreated {
			t.Fatalf("t4: %+v %v, want created", r, err)
		}
		// TS waits for X's name; meanwhile s1 is stored in flow G.
		done := make(chan result, 2)
		ts, th, tb := begin(t, pool), begin(t, pool), begin(t, pool)
		go one(q, ts, "ts", "s1", "X", done)
		waitBlockedBy(t, pool, t4)
		if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "s1", Flow: "G", Body: []byte(`{"delta":1}`), At: fairrelay.AtStored}); err != nil {
			t.Fatal(err)
		}
		// TB locks G, waits for H (TH), then will claim X.
		if _, err := q.EnqueuePgxTx(ctx, th, fairrelay.EnqueueParams{ID: "h1", Flow: "H", Body: []byte("1"), At: fairrelay.AtStored}); err != nil {
			t.Fatal(err)
		}
		go func() {
			got, err := sqlBatch(context.Background(), tb, schema, []string{"b1", "b2", "b3"}, []string{"G", "H", "X"}, nil)
			done <- result{"tb", got, err}
		}()
		waitBlockedBy(t, pool, th)
		// TS takes X's name, finds s1 stored in G and waits for G (TB).
		if err := t4.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		waitBlockedBy(t, pool, tb)
		// TB takes H and waits for X's name (TS): a cycle.
		if err := th.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		out := finish(t, pool, map[string]pgx.Tx{"ts": ts, "tb": tb}, done)
		if r := out["ts"]; r.err != nil || r.got[0] != "conflict 0 " {
			t.Errorf("ts: %v %v (code %s), want conflict (s1 is G's)", r.got, r.err, fairrelay.CodeOf(r.err))
		}
		if r := out["tb"]; r.err != nil || len(r.got) != 3 || r.got[0] != "created 3 " || r.got[1] != "created 3 " || r.got[2] != "created 1 " {
			t.Errorf("tb: %v %v, want created 3, 3, 1", r.got, r.err)
		}
	})

	// The batch's d1 and the one-event call's flow X: a cycle once the
	// batch goes on to X's name. Which of the two the deadlock detector
	// ends is set by each transaction's deadlock_timeout: "either" leaves
	// both at the server's; "batch" makes the batch the one that detects
	// it (the one-event call never looks), the case that failed before
	// migration 022 — the batch's d1 came from a subtransaction that had
	// committed into its attempt, so the one-event call waited for the
	// batch's whole transaction, ending the attempt freed nothing, and
	// every attempt met the same deadlock until the call failed.
	for _, victim := range []string{"either", "batch"} {
		t.Run("one event against a grouped batch, the detector ends "+victim, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			q, pool, schema := outboxStore(t, "frdeadlock2_", fairrelay.DaemonPolicy())
			if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "g0", Flow: "G0", Group: "G", Body: []byte("0"), At: fairrelay.AtStored}); err != nil {
				t.Fatal(err)
			}
			th, t2, t1 := begin(t, pool), begin(t, pool), begin(t, pool)
			if victim == "batch" {
				for tx, timeout := range map[pgx.Tx]string{t1: "60s", t2: "20ms"} {
					if _, err := tx.Exec(ctx, "SET LOCAL deadlock_timeout = '"+timeout+"'"); err != nil {
						t.Fatal(err)
					}
				}
			}
			if _, err := q.EnqueuePgxTx(ctx, th, fairrelay.EnqueueParams{ID: "h1", Flow: "Z", Body: []byte("1"), At: fairrelay.AtStored}); err != nil {
				t.Fatal(err)
			}
			done := make(chan result, 2)
			// T2 stores d1 in Y and waits for h1 (TH), then will make X.
			go func() {
				got, err := sqlBatch(context.Background(), t2, schema, []string{"d1", "h1", "e2"}, []string{"Y", "Y", "X"}, []string{"G", "G", "G"})
				done <- result{"t2", got, err}
			}()
			waitBlockedBy(t, pool, th)
			// T1 makes X for d1 and waits for d1 (T2).
			go one(q, t1, "t1", "d1", "X", done)
			waitBlockedBy(t, pool, t2)
			if err := th.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			out := finish(t, pool, map[string]pgx.Tx{"t1": t1, "t2": t2}, done)
			// Exactly one of the two stored d1. When the one-event call
			// did, it made X its own group's flow, and the batch, which
			// names group G for e2 in X, is refused whole (SQL: FR002,
			// field group; SPEC §8, a flow's group is fixed); otherwise
			// the batch answered every event: h1 is TH's (in Z), and e2
			// made X in G.
			var pe *pgconn.PgError
			if r := out["t1"]; r.err != nil {
				t.Errorf("t1: %v (code %s): a call must answer, not fail", r.err, fairrelay.CodeOf(r.err))
			} else if r.got[0] == "created 1 " {
				if r2 := out["t2"]; !errors.As(r2.err, &pe) || pe.Code != "FR002" || pe.Detail != "group" {
					t.Errorf("t2: %v %v, want FR002 (group): t1 made X its own group's", r2.got, r2.err)
				}
			} else if r.got[0] != "conflict 0 " {
				t.Errorf("t1: %v, want created 1 or conflict", r.got)
			} else if d := cmp.Diff([]string{"created 1 ", "conflict 0 ", "created 1 "}, out["t2"].got); d != "" || out["t2"].err != nil {
				t.Errorf("t2: %v; answers (-want +got):\n%s", out["t2"].err, d)
			}
		})
	}
}

// The batch path of enqueue_many (several events, no group) is taken only
// when no group limit applies to its flows and none of its ids was pruned;
// a group limit configured or a prune committed while the batch waited for
// a flow's lock is seen once it holds its flows (SPEC §8; a breaker's
// report: the batch answered created past the limit, and stored a pruned
// id a second time, beside its tombstone).
func TestPostgresBatchReadsAgainAfterItsLocks(t *testing.T) {
	t.Parallel()
	i64 := func(v int64) *int64 { return &v }
	cases := []struct {
		name  string
		setup func(ctx context.Context, t *testing.T, q *fairrelay.Queue)
		ids   []string
		flows []string
		while func(ctx context.Context, q *fairrelay.Queue) error // committed while the batch waits for A
		want  []string
	}{
		{"a group limit configured meanwhile",
			func(ctx context.Context, t *testing.T, q *fairrelay.Queue) {
				if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "m0", Flow: "M", Group: "G", Body: []byte("0"), At: fairrelay.AtStored}); err != nil {
					t.Fatal(err)
				}
			},
			[]string{"b1", "b2"}, []string{"A", "M"},
			func(ctx context.Context, q *fairrelay.Queue) error {
				_, err := q.Configure(ctx, fairrelay.ConfigureParams{Group: "G", MaxBacklog: i64(1), At: fairrelay.AtStored})
				return err
			},
			[]string{"created 3 ", "full 0 group"}},
		{"a prune of one of its ids meanwhile",
			func(ctx context.Context, t *testing.T, q *fairrelay.Queue) {
				if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "k1", Flow: "K", Body: []byte(`{"delta":1}`), At: fairrelay.AtStored}); err != nil {
					t.Fatal(err)
				}
				c, err := q.Claim(ctx, fairrelay.ClaimParams{At: fairrelay.AtStored, Limit: 10})
				if err != nil {
					t.Fatal(err)
				}
				for _, h := range c.Claims {
					if h.Token.EventID != "k1" {
						continue
					}
					if _, err := q.Settle(ctx, fairrelay.SettleParams{Token: h.Token, Outcome: fairrelay.OutcomeAccepted, At: fairrelay.AtStored}); err != nil {
						t.Fatal(err)
					}
				}
			},
			[]string{"k1", "y1"}, []string{"K", "A"},
			func(ctx context.Context, q *fairrelay.Queue) error {
				c, err := q.Clock(ctx)
				if err != nil {
					return err
				}
				r, err := q.Prune(ctx, fairrelay.PruneParams{At: c.Tick + 1, AckedBefore: c.Tick + 1})
				if err == nil && r.Events != 1 {
					err = fmt.Errorf("pruned %+v, want k1", r)
				}
				return err
			},
			[]string{"existing 1 ", "created 3 "}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			q, pool, schema := outboxStore(t, "frbatchagain_", fairrelay.DaemonPolicy())
			c.setup(ctx, t, q)
			if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "a0", Flow: "A", Body: []byte("0"), At: fairrelay.AtStored}); err != nil {
				t.Fatal(err)
			}
			hold, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer hold.Rollback(context.Background())
			if _, err := q.EnqueuePgxTx(ctx, hold, fairrelay.EnqueueParams{ID: "a1", Flow: "A", Body: []byte("1"), At: fairrelay.AtStored}); err != nil {
				t.Fatal(err)
			}
			batch, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer batch.Rollback(context.Background())
			type answer struct {
				got []string
				err error
			}
			done := make(chan answer, 1)
			go func() {
				got, err := sqlBatch(context.Background(), batch, schema, c.ids, c.flows, nil)
				done <- answer{got, err}
			}()
			waitBlockedBy(t, pool, hold)
			if err := c.while(ctx, q); err != nil {
				t.Fatal(err)
			}
			if err := hold.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			var a answer
			select {
			case a = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("the batch did not answer within 20s")
			}
			if a.err != nil || !slices.Equal(a.got, c.want) {
				t.Fatalf("batch answered %v %v, want %v", a.got, a.err, c.want)
			}
			if err := batch.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A group's first limit, configured while an enqueue that makes a new
// flow in the group waits for a lock after reading the limit (here the
// store limit's row), counts that event or refuses it: the group's count
// equals its backlog after both commit (SPEC §8; a breaker's stress run
// left a count one below the backlog). Before migration 012 the enqueue
// held the group's limit row only after its wait, and configure's count,
// over the group's flows, could not see the flow not yet inserted.
func TestPostgresGroupLimitCountsANewFlowBeingMade(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	i64 := func(v int64) *int64 { return &v }
	q, pool, _ := outboxStore(t, "frgrpcount_", fairrelay.DaemonPolicy())
	if _, err := q.Configure(ctx, fairrelay.ConfigureParams{MaxBacklog: i64(100), At: fairrelay.AtStored}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "m0", Flow: "M", Group: "E", Body: []byte("0"), At: fairrelay.AtStored}); err != nil {
		t.Fatal(err)
	}
	// Under the store limit an enqueue holds the settings row to commit.
	hold, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(context.Background())
	if _, err := q.EnqueuePgxTx(ctx, hold, fairrelay.EnqueueParams{ID: "x0", Flow: "X", Body: []byte("0"), At: fairrelay.AtStored}); err != nil {
		t.Fatal(err)
	}
	maker, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer maker.Rollback(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := q.EnqueuePgxTx(context.Background(), maker, fairrelay.EnqueueParams{ID: "e1", Flow: "F", Group: "E", Body: []byte("1"), At: fairrelay.AtStored})
		done <- err
	}()
	waitBlockedBy(t, pool, hold)
	configured := make(chan error, 1)
	go func() {
		_, err := q.Configure(context.Background(), fairrelay.ConfigureParams{Group: "E", MaxBacklog: i64(5), At: fairrelay.AtStored})
		configured <- err
	}()
	// The configure either commits now (before 012) or waits for the
	// maker; either way the maker goes on once hold commits.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if len(configured) > 0 || waitsFor(t, pool, maker) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("configure neither ended nor waited for the enqueue within 10s")
		}
		time.Sleep(time.Millisecond) // polling a condition, with a deadline
	}
	if err := hold.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := maker.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-configured; err != nil {
		t.Fatal(err)
	}
	var counted, backlog int64
	if err := pool.QueryRow(ctx, `SELECT (SELECT enqueued FROM grp_limit WHERE group_id = 'E'),
		(SELECT coalesce(sum(seq - head_seq + 1), 0) FROM flow WHERE group_id = 'E')`).Scan(&counted, &backlog); err != nil {
		t.Fatal(err)
	}
	if counted != backlog {
		t.Errorf("group E's limit counts %d events, its backlog is %d", counted, backlog)
	}
}

// sessionWaits describes, for a failure message, every other session of the
// pool's database: its state, what it waits for, whom (pg_blocking_pids),
// its transaction's age and the start of its query, and the locks not
// granted.
func sessionWaits(pool *pgxpool.Pool) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var b strings.Builder
	rows, err := pool.Query(ctx, `SELECT a.pid, coalesce(a.state, ''), coalesce(a.wait_event_type || ':' || a.wait_event, ''),
		pg_blocking_pids(a.pid)::text, coalesce(extract(epoch FROM now() - a.xact_start)::text, ''), left(coalesce(a.query, ''), 120),
		coalesce((SELECT string_agg(l.locktype || ' ' || l.mode || coalesce(' xid ' || l.transactionid::text, '') ||
		                 coalesce(' rel ' || l.relation::regclass::text, '') || coalesce(' tuple ' || l.page || ',' || l.tuple, ''), '; ')
		          FROM pg_locks l WHERE l.pid = a.pid AND NOT l.granted), '')
		FROM pg_stat_activity a WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() ORDER BY a.pid`)
	if err != nil {
		return "(sessions not read: " + err.Error() + ")"
	}
	defer rows.Close()
	for rows.Next() {
		var pid int
		var state, wait, blockers, age, query, waiting string
		if err := rows.Scan(&pid, &state, &wait, &blockers, &age, &query, &waiting); err != nil {
			return b.String() + "(" + err.Error() + ")"
		}
		fmt.Fprintf(&b, "pid %d %s wait %s blocked by %s xact %ss: %s; waits for: %s\n", pid, state, wait, blockers, age, query, waiting)
	}
	return b.String()
}

// A flow's name and a group's name claim different things (SPEC §8: a
// flow without a group joins the group named like it, so only such a flow
// makes both): a transaction making or enqueueing to flow N of group G1, and
// another making flow M of a group named N, or configuring group N, touch
// different flows and groups and must not wait for each other (SPEC §10). They did:
// both claimed the one name N (name_claim), and a grouped enqueue locked
// the flow row named like its group even when that flow is another group's
// (a breaker's report). The second commits while the first is open, and
// both answer as alone.
func TestPostgresFlowAndGroupNamesDoNotWait(t *testing.T) {
	t.Parallel()
	i64 := func(v int64) *int64 { return &v }
	enq := func(id, flow, group string) func(ctx context.Context, q *fairrelay.Queue, tx pgx.Tx) (string, error) {
		return func(ctx context.Context, q *fairrelay.Queue, tx pgx.Tx) (string, error) {
			r, err := q.EnqueuePgxTx(ctx, tx, fairrelay.EnqueueParams{ID: id, Flow: flow, Group: group, Body: []byte(`{"delta":1}`), At: fairrelay.AtStored})
			return fmt.Sprintf("%s %d", r.Status, r.Seq), err
		}
	}
	configure := func(p fairrelay.ConfigureParams) func(ctx context.Context, q *fairrelay.Queue, tx pgx.Tx) (string, error) {
		return func(ctx context.Context, q *fairrelay.Queue, _ pgx.Tx) (string, error) {
			p.At = fairrelay.AtStored
			_, err := q.Configure(ctx, p)
			return "configured", err
		}
	}
	type step = func(ctx context.Context, q *fairrelay.Queue, tx pgx.Tx) (string, error)
	cases := []struct {
		name          string
		before        []fairrelay.NewEvent
		first, second step
		wantFirst     string
		wantSecond    string
	}{
		{"a new flow N of group G1, a new flow of a new group N", nil,
			enq("a1", "N", "G1"), enq("b1", "M", "N"), "created 1", "created 1"},
		{"a new flow of a new group N, a new flow N of group G1", nil,
			enq("b1", "M", "N"), enq("a1", "N", "G1"), "created 1", "created 1"},
		{"a new flow N of group G1, group N configured", nil,
			enq("a1", "N", "G1"), configure(fairrelay.ConfigureParams{Group: "N", Weight: i64(3)}), "created 1", "configured"},
		{"flow N of group G1 held, a new flow of a new group N", []fairrelay.NewEvent{{ID: "a0", Flow: "N", Group: "G1", Body: []byte("0")}},
			enq("a1", "N", "G1"), enq("b1", "M", "N"), "created 2", "created 1"},
		{"flow N of group G1 held, a new flow of group N", []fairrelay.NewEvent{{ID: "a0", Flow: "N", Group: "G1", Body: []byte("0")}, {ID: "b0", Flow: "M0", Group: "N", Body: []byte("0")}},
			enq("a1", "N", "G1"), enq("b1", "M", "N"), "created 2", "created 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			q, pool, _ := outboxStore(t, "frnamespace_", fairrelay.DaemonPolicy())
			if len(c.before) > 0 {
				if _, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: fairrelay.AtStored, Events: c.before}); err != nil {
					t.Fatal(err)
				}
			}
			first, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer first.Rollback(ctx)
			if got, err := c.first(ctx, q, first); err != nil || got != c.wantFirst {
				t.Fatalf("first: %q %v, want %q", got, err, c.wantFirst)
			}
			done := make(chan string, 1)
			go func() {
				var got string
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					var err error
					got, err = c.second(ctx, q, tx)
					return err
				})
				if err != nil {
					got = err.Error()
				}
				done <- got
			}()
			select {
			case got := <-done:
				if got != c.wantSecond {
					t.Errorf("second: %q, want %q", got, c.wantSecond)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("the second waited 10 s for the first's open transaction on another flow and group:\n%s", sessionWaits(pool))
				first.Rollback(ctx)
				<-done
				return
			}
			if err := first.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
