package fairrelay_test

import (
	"context"
	"errors"
	"testing"

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
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	if r, err := q.EnqueuePgxTx(ctx, holder, fairrelay.EnqueueParams{ID: "A1", Flow: "A", Body: []byte(`{"delta":1}`), At: fairrelay.AtStored}); err != nil || r.Status != fairrelay.EnqueueCreated {
		t.Fatalf("holder's enqueue: %+v %v", r, err)
	}
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
