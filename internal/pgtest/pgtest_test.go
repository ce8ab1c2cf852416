package pgtest_test

import (
	"context"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fairrelay/fairrelay/internal/pgtest"
)

// WaitForWriters returns only once the transaction writing to the schema
// has ended: while it is open, its lock request waits (seen in pg_locks as
// not granted), and it returns after the writer rolls back.
func TestWaitForWritersWaitsForAnOpenWriter(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.Schema(t, "pgtest_wait")
	pgtest.Exec(t, dsn, "CREATE SCHEMA IF NOT EXISTS "+schemaOf(t, dsn)+"; CREATE TABLE "+schemaOf(t, dsn)+".t (id int primary key); INSERT INTO "+schemaOf(t, dsn)+".t VALUES (1)")
	writer := pgtest.Connect(t, dsn)
	defer writer.Close(ctx)
	tx, err := writer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "UPDATE t SET id = 2"); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); pgtest.WaitForWriters(t, dsn) }()
	// Its lock request is queued behind the writer's.
	watcher := pgtest.Connect(t, dsn)
	defer watcher.Close(ctx)
	for waiting := false; !waiting; {
		select {
		case <-done:
			t.Fatal("WaitForWriters returned while the writer's transaction was open")
		default:
		}
		if err := watcher.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE c.relname = 't' AND c.relnamespace = current_schema()::regnamespace AND NOT l.granted)").Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	<-done
}

func schemaOf(t *testing.T, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return pgx.Identifier{u.Query().Get("schema")}.Sanitize()
}
