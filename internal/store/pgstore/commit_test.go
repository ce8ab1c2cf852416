package pgstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/internal/store"
	"github.com/fairrelay/fairrelay/internal/store/pgstore"
)

// A round trip whose BEGIN the server answered with an error (here FATAL,
// from a connection an administrator ended while it sat idle in the pool)
// never ran its COMMIT, so nothing committed: the error says so by not
// being ErrCommitUnknown, though the connection closed (a breaker's
// report: routine connection kills made commit-unknown alerts noisy).
func TestCommitAnsweredBeforeItsCommitIsNotUnknown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	conn := pgtest.Connect(t, url)
	var pid uint32
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	admin := pgtest.Connect(t, url)
	if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	for gone := false; !gone; {
		if err := admin.QueryRow(ctx, "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)", pid).Scan(&gone); err != nil {
			t.Fatal(err)
		}
	}
	err := pgstore.CommitOn(ctx, conn, "BEGIN ISOLATION LEVEL READ COMMITTED", "SELECT 1")
	var pe *pgconn.PgError
	if err == nil || errors.Is(err, store.ErrCommitUnknown) || !errors.As(err, &pe) || pe.Code != "57P01" {
		t.Fatalf("commit on an ended connection: %v, want the server's FATAL (57P01), not ErrCommitUnknown", err)
	}
}
