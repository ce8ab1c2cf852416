package fairrelay_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fairrelay/fairrelay"
)

// beginTx opens a transaction on pool, rolled back when the test ends
// (a no-op once it has committed).
func beginTx(t *testing.T, pool *pgxpool.Pool) pgx.Tx {
	t.Helper()
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(context.Background()) })
	return tx
}

// setDeadlockTimeout sets tx's deadlock_timeout, so that a test decides
// which of two waiting transactions runs the deadlock check (the one with
// the shorter timeout; PostgreSQL checks once per wait).
func setDeadlockTimeout(t *testing.T, tx pgx.Tx, d string) {
	t.Helper()
	if _, err := tx.Exec(t.Context(), "SET LOCAL deadlock_timeout = '"+d+"'"); err != nil {
		t.Fatal(err)
	}
}

// The outbox's common call (one event onto a flow that exists) holds its
// flow while its insert waits for another transaction's uncommitted event
// of the same id. When that transaction's next call enqueues onto the
// same flow — in ascending flow order, as docs/outbox.md advises — the two
// wait for each other, and the call that can let go must: it answers
// conflict once the other has committed, never deadlock_detected (SPEC
// §10; a breaker's report: 6 of 6 runs failed, through Enqueue and
// through the SQL function). T1's deadlock_timeout is long, so the call is
// the one that finds the cycle.
func TestPostgresCommonCallLetsItsFlowGoOnDeadlock(t *testing.T) {
	t.Parallel()
	for _, via := range []string{"Enqueue", "SQL"} {
		t.Run(via, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			q, pool, schema := outboxStore(t, "frcommondl_", fairrelay.DaemonPolicy())
			body := []byte(`{"delta":1}`)
			for _, f := range []string{"F1", "F2"} {
				if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "seed-" + f, Flow: f, Body: body, At: fairrelay.AtStored}); err != nil {
					t.Fatal(err)
				}
			}
			t1 := beginTx(t, pool)
			setDeadlockTimeout(t, t1, "60s")
			if r, err := q.EnqueuePgxTx(ctx, t1, fairrelay.EnqueueParams{ID: "X", Flow: "F1", Body: body, At: fairrelay.AtStored}); err != nil || r.Status != fairrelay.EnqueueCreated {
				t.Fatalf("T1 X onto F1: %+v %v", r, err)
			}
			type answer struct {
				status string
				err    error
			}
			t2 := make(chan answer, 1)
			go func() {
				if via == "Enqueue" {
					r, err := q.Enqueue(context.Background(), fairrelay.EnqueueParams{ID: "X", Flow: "F2", Body: body, At: fairrelay.AtStored})
					t2 <- answer{string(r.Status), err}
					return
				}
				tx, err := pool.Begin(context.Background())
				if err != nil {
					t2 <- answer{"", err}
					return
				}
				defer tx.Rollback(context.Background())
				// PostgreSQL looks for a deadlock once, deadlock_timeout after
				// a wait begins: the cycle (T1's next call, below) must close
				// before this call's look, or T1 (60 s) finds it. 20 ms lost
				// that race under the race detector (CI: T1 still waiting
				// after 30 s); 3 s does not.
				if _, err := tx.Exec(context.Background(), "SET LOCAL deadlock_timeout = '3s'"); err != nil {
					t2 <- answer{"", err}
					return
				}
				var st string
				err = tx.QueryRow(context.Background(), `SELECT status FROM `+pgx.Identifier{schema, "enqueue"}.Sanitize()+`('X', 'F2', $1)`, body).Scan(&st)
				if err == nil {
					err = tx.Commit(context.Background())
				}
				t2 <- answer{st, err}
			}()
			waitBlockedBy(t, pool, t1)
			// T1's next call, onto F2, which the common call holds.
			t1y := make(chan answer, 1)
			go func() {
				r, err := q.EnqueuePgxTx(context.Background(), t1, fairrelay.EnqueueParams{ID: "Y", Flow: "F2", Body: body, At: fairrelay.AtStored})
				t1y <- answer{fmt.Sprintf("%s %d", r.Status, r.Seq), err}
			}()
			var y answer
			select {
			case y = <-t1y:
			case a := <-t2:
				t.Fatalf("the common call answered %q %v while T1 waited for its flow, before T1 committed", a.status, a.err)
			case <-time.After(30 * time.Second):
				t.Fatal("T1's call onto F2 still waiting after 30s")
			}
			if y.err != nil || y.status != "created 2" {
				t.Fatalf("T1 Y onto F2: %q %v, want created 2", y.status, y.err)
			}
			if err := t1.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			a := <-t2
			var pe *pgconn.PgError
			if a.err != nil || a.status != string(fairrelay.EnqueueConflict) {
				errors.As(a.err, &pe)
				t.Fatalf("the common call: %q %v (code %s), want conflict: X is T1's, in F1", a.status, a.err, fairrelay.CodeOf(a.err))
			}
		})
	}
}

// A call that made a new flow for an id another transaction stored
// meanwhile answers existing or conflict without writing a row every
// enqueue shares: it recorded its tick on the store's settings row and
// held it until its caller committed, so every other call losing such a
// race, and a configure, waited for that transaction (SPEC §10; a
// breaker's report: an unrelated enqueue failed busy after 5.3 s). One
// event with no group (enqueue_many's own path) and with one
// (enqueue_events).
func TestPostgresLostRaceHoldsNoSharedRow(t *testing.T) {
	t.Parallel()
	for _, group := range []string{"", "G"} {
		t.Run("group="+group, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			q, pool, schema := outboxStore(t, "frlostrace_", fairrelay.DaemonPolicy())
			body := []byte(`{"delta":1}`)
			// The store's tick ahead of the settings row's, as a relay's
			// claims make it.
			if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "tick", Flow: "T", Body: body, At: 100}); err != nil {
				t.Fatal(err)
			}
			t1, t2 := beginTx(t, pool), beginTx(t, pool)
			if r, err := q.EnqueuePgxTx(ctx, t1, fairrelay.EnqueueParams{ID: "X", Flow: "N1", Body: body, At: fairrelay.AtStored}); err != nil || r.Status != fairrelay.EnqueueCreated {
				t.Fatalf("T1 X onto N1: %+v %v", r, err)
			}
			var pid int32
			if err := t2.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
				t.Fatal(err)
			}
			type answer struct {
				r   fairrelay.EnqueueResult
				err error
			}
			lost := make(chan answer, 1)
			go func() {
				r, err := q.EnqueuePgxTx(context.Background(), t2, fairrelay.EnqueueParams{ID: "X", Flow: "N2", Group: group, Body: body, At: fairrelay.AtStored})
				lost <- answer{r, err}
			}()
			waitBlockedBy(t, pool, t1)
			if err := t1.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			a := <-lost
			if a.err != nil || a.r.Status != fairrelay.EnqueueConflict {
				t.Fatalf("T2 X onto N2: %+v %v, want conflict", a.r, a.err)
			}
			// T2 is open: what does it hold?
			var held []string
			rows, err := pool.Query(ctx, `SELECT c.relname || ' ' || l.mode FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
				WHERE l.pid = $1 AND c.relnamespace = $2::regnamespace AND l.mode NOT IN ('AccessShareLock', 'RowShareLock')
				ORDER BY 1`, pid, schema)
			if err != nil {
				t.Fatal(err)
			}
			held, err = pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range held {
				if len(h) >= 9 && h[:9] == "settings " {
					t.Errorf("T2 holds %q after its conflict answer (all held: %v): the settings row is every enqueue's", h, held)
				}
			}
			var n int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM flow WHERE flow_id = 'N2'`).Scan(&n); err != nil || n != 0 {
				t.Errorf("flow N2: %d rows %v, want none (a conflict changes nothing but the tick)", n, err)
			}
		})
	}
}
