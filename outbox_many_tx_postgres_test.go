package fairrelay_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/fairrelay/fairrelay"
)

// A business transaction's events go in one call inside it
// (EnqueueManyTx, EnqueueManyPgxTx): docs/outbox.md told Go users to do so
// and named a call that did not exist (a fresh user's report). Rolled
// back, nothing stays; committed, the events are stored in the batch's
// order per flow, with EnqueueMany's answers; on SQLite, on PostgreSQL
// through database/sql and through pgx.
func TestEnqueueManyInTheCallersTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	body := []byte(`{"delta":1}`)
	batch := func(prefix string) fairrelay.EnqueueManyParams {
		return fairrelay.EnqueueManyParams{At: fairrelay.AtStored, Events: []fairrelay.NewEvent{
			{ID: prefix + "1", Flow: "A", Body: body}, {ID: prefix + "2", Flow: "B", Body: body},
			{ID: prefix + "3", Flow: "A", Body: body}, {ID: "shared", Flow: "C", Body: body},
		}}
	}
	type way struct {
		name string
		q    *fairrelay.Queue
		run  func(p fairrelay.EnqueueManyParams, commit bool) ([]fairrelay.EnqueueResult, error)
	}
	var ways []way
	{
		path := filepath.Join(t.TempDir(), "q.db")
		q, err := fairrelay.Open(ctx, path, fairrelay.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		db, err := sql.Open("sqlite", fairrelay.SQLiteDSN(path))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		ways = append(ways, way{"SQLite", q, sqlWay(t, q, db)})
	}
	{
		q, pool, _ := outboxStore(t, "frmanytx", fairrelay.DaemonPolicy())
		db := stdlib.OpenDBFromPool(pool)
		defer db.Close()
		ways = append(ways, way{"PostgreSQL, database/sql", q, sqlWay(t, q, db)})
		q2, pool2, _ := outboxStore(t, "frmanypgx", fairrelay.DaemonPolicy())
		ways = append(ways, way{"PostgreSQL, pgx", q2, func(p fairrelay.EnqueueManyParams, commit bool) ([]fairrelay.EnqueueResult, error) {
			tx, err := pool2.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			rs, err := q2.EnqueueManyPgxTx(ctx, tx, p)
			if err == nil && commit {
				err = tx.Commit(ctx)
			}
			return rs, err
		}})
	}
	for _, w := range ways {
		if _, err := w.run(batch("r"), false); err != nil {
			t.Fatalf("%s: rolled back batch: %v", w.name, err)
		}
		if s, err := w.q.Snapshot(ctx); err != nil || len(s.Events) != 0 {
			t.Errorf("%s: after a rollback: %d events (%v), want none", w.name, len(s.Events), err)
		}
		rs, err := w.run(batch("c"), true)
		if err != nil {
			t.Fatalf("%s: committed batch: %v", w.name, err)
		}
		var got []string
		for _, r := range rs {
			got = append(got, string(r.Status)+" "+string(rune('0'+r.Seq)))
		}
		if diff := cmp.Diff([]string{"created 1", "created 1", "created 2", "created 1"}, got); diff != "" {
			t.Errorf("%s: answers (-want +got):\n%s", w.name, diff)
		}
		s, err := w.q.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var order []string
		for _, e := range s.Events {
			order = append(order, e.Flow+" "+e.ID)
		}
		if diff := cmp.Diff([]string{"A c1", "A c3", "B c2", "C shared"}, order); diff != "" {
			t.Errorf("%s: stored (-want +got):\n%s", w.name, diff)
		}
		// The same id again, another body: conflict, as EnqueueMany answers.
		p := fairrelay.EnqueueManyParams{At: fairrelay.AtStored, Events: []fairrelay.NewEvent{{ID: "shared", Flow: "C", Body: []byte(`{"delta":2}`)}}}
		if rs, err := w.run(p, true); err != nil || len(rs) != 1 || rs[0].Status != fairrelay.EnqueueConflict {
			t.Errorf("%s: the same id with another body: %+v %v, want conflict", w.name, rs, err)
		}
	}
	if _, err := ways[0].q.EnqueueManyTx(ctx, nil, batch("n")); fairrelay.CodeOf(err) != fairrelay.CodeInvalidInput {
		t.Errorf("EnqueueManyTx with a nil tx: %v, want invalid_input", err)
	}
}

// sqlWay runs a batch with EnqueueManyTx in a transaction of db.
func sqlWay(t *testing.T, q *fairrelay.Queue, db *sql.DB) func(fairrelay.EnqueueManyParams, bool) ([]fairrelay.EnqueueResult, error) {
	return func(p fairrelay.EnqueueManyParams, commit bool) ([]fairrelay.EnqueueResult, error) {
		tx, err := db.BeginTx(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		rs, err := q.EnqueueManyTx(t.Context(), tx, p)
		if err == nil && commit {
			err = tx.Commit()
		}
		return rs, err
	}
}
