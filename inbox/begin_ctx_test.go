package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/fairrelay/fairrelay/inbox"
)

// Receive's ctx ends its wait for another writer of a SQLite inbox's file
// (another process, the application's): it waited out the whole busy
// timeout whatever its ctx (a breaker's report: with a 50 ms ctx it
// answered after 3 s), and a receiver's requests piled up behind it. Here
// the busy timeout is an hour and ctx's deadline 50 ms: Receive answers
// the deadline's error, and nothing is written.
func TestReceiveStopsWaitingForTheWriterWhenCtxEnds(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "inbox.db")
	in, err := inbox.Open(ctx, path, inbox.Options{BusyTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	other, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tx, err := other.Begin()
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	out, err := in.Receive(cctx, inbox.Delivery{EventID: "A1", Flow: "A", Seq: 1, Body: []byte(`{"delta":1}`)})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Receive behind another writer: %q, %v; want the ctx's deadline error", out, err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if n, err := in.Receipts(ctx, "", 0, 10); err != nil || len(n) != 0 {
		t.Fatalf("receipts after the refused receive: %v, %v; want none", n, err)
	}
}
