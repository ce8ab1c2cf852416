package fairrelay_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// gatedAnswer is runGated's result: the call's answers (status, tick and
// limit per event), its error, and whether the other write committed
// before the call went on.
type gatedAnswer struct {
	status []string
	tick   []int64
	limit  []*string
	err    error
	// committedFirst: the other write committed before the call went on.
	committedFirst bool
}

// runGated stops a call of schema's enqueue_many (ids, flows, groups; at
// NULL) at its read-th read of the store's tick — a gate put into the
// test store's stored_clock view, on the call's connection only, that
// waits for an advisory lock held meanwhile — then runs meanwhile (another
// transaction's write), lets the call go on once meanwhile has committed
// or waits for the call, and returns the call's answers. Deterministic:
// each step waits for the server's lock state, no sleeps.
func runGated(t *testing.T, pool *pgxpool.Pool, schema string, read int, ids, flows, groups []string, meanwhile func() error) gatedAnswer {
	t.Helper()
	ctx := context.Background()
	key := rand.Int64()
	s := pgx.Identifier{schema}.Sanitize()
	var view string
	if err := pool.QueryRow(ctx, "SELECT pg_get_viewdef($1::regclass)", schema+".stored_clock").Scan(&view); err != nil {
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
	if _, err := pool.Exec(ctx, gate); err != nil {
		t.Fatal(err)
	}
	dsn := pool.Config().ConnConfig.ConnString()
	holder, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
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
		if err := pool.QueryRow(ctx, `SELECT $1::int = ANY(pg_blocking_pids($2))`, holderPID, pid).Scan(&waiting); err != nil {
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
			if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid)))`, pid).Scan(&waiting); err != nil {
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

// trimSemicolon drops the semicolon pg_get_viewdef ends a definition with.
func trimSemicolon(s string) string {
	for len(s) > 0 && (s[len(s)-1] == ';' || s[len(s)-1] == ' ' || s[len(s)-1] == '\n') {
		s = s[:len(s)-1]
	}
	return s
}
