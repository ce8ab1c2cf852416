package fairrelay_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
// new name and 010 a subtransaction per new flow, each an entry of that
// table held to commit, and such a transaction failed with "out of shared
// memory" (53200); migration 012 claims names with row locks and undoes a
// lost flow without a subtransaction.
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
