package fairrelay_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fairrelay/fairrelay"
)

type gatedAnswer struct {
	status []string
	tick   []int64
	limit  []*string
	err    error
	// committedFirst: the other write committed before the call went on.
	committedFirst bool
}

func runGated(t *testing.T, q *fairrelay.Queue, poolDSN string, schema string, read int,
	ids, flows, groups []string, meanwhile func() error, execPool func(string, ...any) error, queryRow func(string, ...any) pgx.Row) gatedAnswer {
	t.Helper()
	ctx := context.Background()
	key := rand.Int64()
	s := pgx.Identifier{schema}.Sanitize()
	var view string
	if err := queryRow("SELECT pg_get_viewdef($1::regclass)", schema+".stored_clock").Scan(&view); err != nil {
		t.Fatal(err)
	}
	gate := fmt.Sprintf(`CREATE FUNCTION %[1]s.fr_test_gate() RETURNS int LANGUAGE plpgsql VOLATILE AS $g$
DECLARE at int := nullif(current_setting('fr_test.block_read', true), '')::int; n int;
BEGIN
    IF at IS NULL THEN RETURN 0; END IF;
    n := coalesce(nullif(current_setting('fr_test.reads', true), ''), '0')::int + 1;
    PERFORM set_config('fr_test.reads', n::text, false);
    IF n = at THEN
        PERFORM pg_advisory_lock_shared(%[2]d);
        PERFORM pg_advisory_unlock_shared(%[2]d);
    END IF;
    RETURN n;
END $g$;
CREATE OR REPLACE VIEW %[1]s.stored_clock AS SELECT o.tick, o.ticket FROM (%[3]s) o, LATERAL (SELECT %[1]s.fr_test_gate()) g`,
		s, key, trimSemicolon(view))
	if err := execPool(gate); err != nil {
		t.Fatal(err)
	}
	holder, err := pgx.Connect(ctx, poolDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, poolDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var pid int32
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf("SET fr_test.block_read = '%d'", read)); err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"delta":1}`)
	bodies := make([][]byte, len(ids))
	for i := range bodies {
		bodies[i] = body
	}
	done := make(chan gatedAnswer, 1)
	go func() {
		var a gatedAnswer
		a.err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, "SELECT status, tick, \"limit\" FROM "+s+".enqueue_many($1, $2, $3, NULL, false, 3600000, 1048576, $4)",
				ids, flows, bodies, groups)
			if err != nil {
				return err
			}
			for rows.Next() {
				var st string
				var tick int64
				var lim *string
				if err := rows.Scan(&st, &tick, &lim); err != nil {
					return err
				}
				a.status = append(a.status, st)
				a.tick = append(a.tick, tick)
				a.limit = append(a.limit, lim)
			}
			return rows.Err()
		})
		done <- a
	}()
	// Wait until the call waits at the gate.
	var holderPID int32
	if err := holder.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&holderPID); err != nil {
		t.Fatal(err)
	}
	for {
		var waiting bool
		if err := queryRow(`SELECT $1::int = ANY(pg_blocking_pids($2))`, holderPID, pid).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		select {
		case a := <-done:
			t.Fatalf("the call answered before the gate: %+v", a)
		default:
		}
	}
	// The other write commits meanwhile, or waits for the call (which
	// then holds what it needs) and commits after it.
	other := make(chan error, 1)
	go func() { other <- meanwhile() }()
	committedFirst := false
	for waiting := false; !committedFirst && !waiting; {
		select {
		case err := <-other:
			if err != nil {
				t.Fatalf("meanwhile: %v", err)
			}
			committedFirst = true
		default:
			if err := queryRow(`SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid)))`, pid).Scan(&waiting); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_unlock($1)", key); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if !committedFirst {
		if err := <-other; err != nil {
			t.Fatalf("meanwhile, after the call: %v", err)
		}
	}
	a.committedFirst = committedFirst
	return a
}

// A group's limit configured at a later tick while an enqueue at the
// store's tick is between its read of the tick and its read of the limit:
// the enqueue that answers full because of that limit (it depended on the
// configure, which committed before it went on) must answer at the
// configure's tick or later (SPEC §2: whatever its answer, at >= the stored
// tick; migration 038's rule: never answer at a tick older than a row it
// met). Before migration 039 a new flow of an existing group read the tick
// again after its names and the group's limit row, and started over; the
// event already on an existing flow of the group never did.
func TestPostgresFullAnsweredAtTheLimitsTick(t *testing.T) {
	t.Parallel()
	const later = 1000
	cases := []struct {
		name  string
		first bool // the group's first limit (else lowered from 5 to 1)
		fill  bool // the limit is 2 from the start; meanwhile another enqueue takes the last place
		id    string
		flow  string
	}{
		{"new flow of an existing group, first limit", true, false, "b1", "b"},
		{"new flow of an existing group, limit lowered", false, false, "b1", "b"},
		{"existing flow of the group, limit lowered", false, false, "a2", "a"},
		{"new flow of an existing group, the last place taken", false, true, "b1", "b"},
		{"existing flow of the group, the last place taken", false, true, "a2", "a"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			q, pool, schema := outboxStore(t, "h186_limtick", fairrelay.DaemonPolicy())
			if _, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: 1, Events: []fairrelay.NewEvent{
				{ID: "a1", Flow: "a", Group: "G", Body: []byte(`{"delta":1}`)}}}); err != nil {
				t.Fatal(err)
			}
			if !tc.first {
				five := int64(5)
				if tc.fill {
					five = 2
				}
				if _, err := q.Configure(ctx, fairrelay.ConfigureParams{At: 1, Group: "G", MaxBacklog: &five}); err != nil {
					t.Fatal(err)
				}
			}
			a := runGated(t, q, pool.Config().ConnConfig.ConnString(), schema, 2,
				[]string{tc.id}, []string{tc.flow}, []string{"G"},
				func() error {
					if tc.fill {
						_, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: later, Events: []fairrelay.NewEvent{
							{ID: "c1", Flow: "c", Group: "G", Body: []byte(`{"delta":1}`)}}})
						return err
					}
					one := int64(1)
					_, err := q.Configure(ctx, fairrelay.ConfigureParams{At: later, Group: "G", MaxBacklog: &one})
					return err
				},
				func(sql string, args ...any) error { _, err := pool.Exec(ctx, sql, args...); return err },
				func(sql string, args ...any) pgx.Row { return pool.QueryRow(ctx, sql, args...) })
			if a.err != nil {
				t.Fatalf("the call: %v", a.err)
			}
			if len(a.status) != 1 {
				t.Fatalf("answers %v", a.status)
			}
			lim := ""
			if a.limit[0] != nil {
				lim = *a.limit[0]
			}
			t.Logf("answered %s (limit %q) at tick %d; the other write committed first: %v", a.status[0], lim, a.tick[0], a.committedFirst)
			if a.committedFirst && a.status[0] == "full" && a.tick[0] < later {
				t.Errorf("answered full at tick %d, below the tick %d of the write (configure or enqueue) that made the group full, committed before the call went on", a.tick[0], later)
			}
		})
	}
}
