package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay/internal/sqlitetest"
	"github.com/fairrelay/fairrelay/internal/store"
)

// A write begun while another connection holds the writer tries again on
// its own schedule and begins once the other lets go; inside the
// transaction, and on the connection afterwards, the busy timeout is the
// store's again (every statement after the BEGIN keeps SQLite's wait).
func TestBeginWaitsForAnotherWriterAndKeepsTheBusyTimeout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	s, err := Open(context.Background(), path, Options{BusyTimeout: 7 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	release := sqlitetest.HoldWriter(t, path)
	met := make(chan struct{}, 64)
	s.lockBusy = func() {
		select {
		case met <- struct{}{}:
		default:
		}
	}
	type begun struct {
		tx  *WriteTx
		err error
	}
	done := make(chan begun, 1)
	go func() {
		tx, err := s.beginWrite(context.Background())
		done <- begun{tx, err}
	}()
	// It tried while the other held the writer, and again: each try
	// returned to Go (SQLite's busy handler would wait up to the store's
	// 7 s inside one BEGIN).
	for range 2 {
		select {
		case <-met:
		case b := <-done:
			t.Fatalf("begin returned (%v) while the other connection held the writer", b.err)
		case <-time.After(3 * time.Second):
			t.Fatal("no try came back within 3 s: the BEGIN waits in SQLite's busy handler")
		}
	}
	release()
	b := <-done
	if b.err != nil {
		t.Fatalf("begin after the other writer let go: %v", b.err)
	}
	if ms := sqlitetest.BusyTimeout(t, b.tx); ms != 7000 {
		t.Errorf("busy timeout inside the transaction %d ms, want the store's 7000", ms)
	}
	if err := b.tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if ms := sqlitetest.BusyTimeout(t, s.write); ms != 7000 {
		t.Errorf("write connection's busy timeout after the transaction %d ms, want 7000", ms)
	}
}

// A write that cannot begin within the store's busy timeout fails with
// ErrBusy, and the connection keeps its busy timeout.
func TestBeginGivesUpAfterTheBusyTimeout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	s, err := Open(context.Background(), path, Options{BusyTimeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	release := sqlitetest.HoldWriter(t, path)
	defer release()
	tries := 0
	s.lockBusy = func() { tries++ }
	_, err = s.Begin(context.Background(), store.LaneClaim)
	if !errors.Is(err, store.ErrBusy) {
		t.Fatalf("Begin with the writer held throughout: %v, want ErrBusy", err)
	}
	if tries < 2 {
		t.Errorf("%d tries before giving up, want it to have tried again", tries)
	}
	if ms := sqlitetest.BusyTimeout(t, s.write); ms != 20 {
		t.Errorf("write connection's busy timeout after giving up %d ms, want 20", ms)
	}
}

// A write waiting for another writer ends with its context, and the
// connection keeps its busy timeout.
func TestBeginEndsWithItsContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	s, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	release := sqlitetest.HoldWriter(t, path)
	defer release()
	ctx, cancel := context.WithCancel(context.Background())
	s.lockBusy = cancel
	_, err = s.beginWrite(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("begin whose context ended while it waited: %v, want context.Canceled", err)
	}
	if ms := sqlitetest.BusyTimeout(t, s.write); ms != 5000 {
		t.Errorf("write connection's busy timeout %d ms, want the default 5000", ms)
	}
}

// The waits between tries stay under a millisecond (SQLite's own handler
// waits 1, 2, 5, 10 … ms): each within [wait/2, wait], doubling from
// lockFirstWait to lockMaxWait.
func TestLockWaitSchedule(t *testing.T) {
	wait := lockFirstWait
	for i := 0; i < 20; i++ {
		d, next := lockWait(wait)
		if d < wait/2 || d > wait {
			t.Fatalf("try %d: waited %v, want within [%v, %v]", i, d, wait/2, wait)
		}
		if want := min(2*wait, lockMaxWait); next != want {
			t.Fatalf("try %d: next wait %v, want %v", i, next, want)
		}
		wait = next
	}
	if lockMaxWait >= time.Millisecond {
		t.Errorf("lockMaxWait %v, want under SQLite's first 1 ms wait", lockMaxWait)
	}
}

// A write transaction that database/sql rolled back when its context ended
// answers Commit with that context's error in the chain, not only "sql:
// transaction has already been committed or rolled back", which no
// caller could tell from a fault (a Go API breaker's report).
func TestCommitAfterTheContextEndedCarriesItsError(t *testing.T) {
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "q.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	tx, err := BeginImmediate(ctx, s.write, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	// database/sql rolls the transaction back in a goroutine of its own:
	// until it has, the transaction answers ctx's error itself.
	for {
		if _, err := tx.ExecContext(context.Background(), "SELECT 1"); errors.Is(err, sql.ErrTxDone) {
			break
		}
	}
	err = tx.Commit()
	if !errors.Is(err, sql.ErrTxDone) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Commit after ctx ended and the rollback: %v, want sql.ErrTxDone and context.Canceled", err)
	}
}
