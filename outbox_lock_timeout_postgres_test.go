package fairrelay_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/fairrelay/fairrelay"
)

// TestPostgresEnqueueTxWaitsUnderTheCallersLockTimeout: EnqueueTx and
// EnqueuePgxTx run in the caller's transaction, so a wait for a flow another
// transaction holds lasts as long as the caller's lock_timeout allows, and
// past it answers ErrBusy (CodeBusy), as docs/outbox.md says (a fresh user
// read that Config.BusyTimeout bounded it; it bounds fairrelay's own
// transactions). The caller's transaction is left to roll back; the
// holder's event is the flow's only one.
func TestPostgresEnqueueTxWaitsUnderTheCallersLockTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, pool := postgresQueue(t, "frltmo", 0)
	holder := holdFlowA(t, q, pool, "A1")
	pgxCall := func(tx pgx.Tx) error {
		_, err := q.EnqueuePgxTx(ctx, tx, fairrelay.EnqueueParams{ID: "A2", Flow: "A", Body: []byte(`{"delta":2}`), At: fairrelay.AtStored})
		return err
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	for name, call := range map[string]func() error{
		"EnqueuePgxTx": func() error {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '50ms'"); err != nil {
				return err
			}
			return pgxCall(tx)
		},
		"EnqueueTx": func() error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if _, err := tx.ExecContext(ctx, "SET LOCAL lock_timeout = '50ms'"); err != nil {
				return err
			}
			_, err = q.EnqueueTx(ctx, tx, fairrelay.EnqueueParams{ID: "A2", Flow: "A", Body: []byte(`{"delta":2}`), At: fairrelay.AtStored})
			return err
		},
	} {
		if err := call(); fairrelay.CodeOf(err) != fairrelay.CodeBusy || !errors.Is(err, fairrelay.ErrBusy) {
			t.Errorf("%s behind a held flow, lock_timeout 50ms: %v, want busy", name, err)
		}
	}
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if es, err := q.Events(ctx, "", 0, 10); err != nil || len(es) != 1 || es[0].ID != "A1" {
		t.Fatalf("events: %+v %v, want A1 alone", es, err)
	}
}

// TestPostgresEnqueueEndsWithItsContextBehindAHeldFlow: Enqueue and
// EnqueueMany run in a transaction of their own, sent with its COMMIT in
// one round trip. Waiting for a flow an open outbox transaction holds,
// they end when the caller's ctx does, with ctx's error, and say nothing
// was written (a breaker's report: with a 1 s ctx and a 20 s BusyTimeout
// the call returned after 11 s marked ErrCommitUnknown, "may have
// committed", though its statement had been waiting for a row lock). The
// flow keeps no hole: the holder's event is its only one, and the next
// enqueue takes seq 2.
func TestPostgresEnqueueEndsWithItsContextBehindAHeldFlow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, pool := postgresQueue(t, "frctxend", time.Minute)
	holder := holdFlowA(t, q, pool, "A1")
	a2 := fairrelay.EnqueueParams{ID: "A2", Flow: "A", Body: []byte(`{"delta":2}`), At: fairrelay.AtStored}
	for name, call := range map[string]func(ctx context.Context) error{
		"Enqueue": func(ctx context.Context) error {
			_, err := q.Enqueue(ctx, a2)
			return err
		},
		"EnqueueMany": func(ctx context.Context) error {
			_, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{Events: []fairrelay.NewEvent{{ID: a2.ID, Flow: a2.Flow, Body: a2.Body}}, At: fairrelay.AtStored})
			return err
		},
	} {
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		err := call(cctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, fairrelay.ErrCommitUnknown) {
			t.Errorf("%s behind a held flow, its ctx ended: %v, want ctx's error, not ErrCommitUnknown", name, err)
		}
	}
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if es, err := q.Events(ctx, "", 0, 10); err != nil || len(es) != 1 || es[0].ID != "A1" {
		t.Fatalf("events: %+v %v, want A1 alone", es, err)
	}
	if r, err := q.Enqueue(ctx, a2); err != nil || r.Status != fairrelay.EnqueueCreated || r.Seq != 2 {
		t.Fatalf("A2 after the holder's commit: %+v %v, want created at seq 2", r, err)
	}
}
