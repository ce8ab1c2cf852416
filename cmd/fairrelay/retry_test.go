package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/syncbuf"
)

// A bulk enqueue whose store is busy (here a SQLite write lock another
// connection holds, as a relay stopped mid-transaction holds PostgreSQL's
// locks until the server ends its session) tries the batch again until the
// store answers, within --retry-for, saying so on stderr, and stores every
// line in order; with --retry-for 0 it stops at the first busy answer, as
// it always did (a fresh user's report: tail -f | fairrelay enqueue died
// on one busy answer).
func TestBulkEnqueueRidesOutABusyStore(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "q.db")
	q, err := fairrelay.Open(t.Context(), path, fairrelay.Config{BusyTimeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	db, err := sql.Open("sqlite", "file:"+path+"?_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	lock := func() *sql.Tx {
		t.Helper()
		tx, err := db.Begin() // BEGIN IMMEDIATE: the file's write lock until it ends
		if err != nil {
			t.Fatal(err)
		}
		return tx
	}
	input := `{"id":"A1","flow":"A","delta":1}` + "\n" + `{"id":"A2","flow":"A","delta":2}` + "\n"

	// --retry-for 0: busy, nothing stored.
	tx := lock()
	_, err = bulkEnqueue(t.Context(), q, strings.NewReader(input), new(strings.Builder), fairrelay.AtStored, &storeRetry{within: 0, out: new(strings.Builder), what: "enqueue"})
	if !errors.Is(err, fairrelay.ErrBusy) {
		t.Fatalf("without retries: %v, want busy", err)
	}

	// --retry-for 1m: busy until the lock goes, then stored.
	stderr := &signalling{said: make(chan struct{}), when: "trying again for up to 1m0s (--retry-for)"}
	var stdout strings.Builder
	done := make(chan error, 1)
	go func() {
		_, err := bulkEnqueue(t.Context(), q, strings.NewReader(input), &stdout, fairrelay.AtStored, &storeRetry{within: time.Minute, out: stderr, what: "enqueue"})
		done <- err
	}()
	select {
	case <-stderr.said:
	case err := <-done:
		t.Fatalf("the run ended (%v) before it said it would try again: %q", err, stderr.String())
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("with retries: %v (stderr %q)", err, stderr.String())
	}
	want := `{"id":"A1","line":1,"seq":1,"status":"created"}` + "\n" + `{"id":"A2","line":2,"seq":2,"status":"created"}` + "\n"
	if stdout.String() != want || !strings.Contains(stderr.String(), "fairrelay: enqueue: the store failed (enqueue: database busy") || !strings.Contains(stderr.String(), "the store answers again") {
		t.Errorf("stdout %q, stderr %q; want both lines created, and the retry said on stderr", stdout.String(), stderr.String())
	}
}

// signalling is a writer that closes said once what was written holds
// when.
type signalling struct {
	syncbuf.Buffer
	said chan struct{}
	when string
	once sync.Once
}

func (s *signalling) Write(p []byte) (int, error) {
	n, err := s.Buffer.Write(p)
	if strings.Contains(s.Buffer.String(), s.when) {
		s.once.Do(func() { close(s.said) })
	}
	return n, err
}

// A streak ended by an answer that is not success (a read of an id not
// stored: not_found) says the store answers again (helper-172: no such
// line then, so stderr read as if the store still failed); a call stopped
// by its context (SIGTERM) is not a store failure: no retry, no line.
func TestStoreRetrySaysWhenTheStoreAnswers(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	r := &storeRetry{within: time.Minute, out: &out, what: "enqueue"}
	answers := []error{fairrelay.ErrBusy, fairrelay.ErrNotFound}
	err := r.do(t.Context(), func() error {
		err := answers[0]
		answers = answers[1:]
		return err
	})
	if !errors.Is(err, fairrelay.ErrNotFound) || !strings.Contains(out.String(), "trying again") || !strings.Contains(out.String(), "the store answers again") {
		t.Errorf("busy, then not_found: %v, stderr %q; want not_found and both lines", err, out.String())
	}
	out.Reset()
	calls := 0
	stopped := fmt.Errorf("%w: begin read transaction: %w", fairrelay.ErrDatabase, context.Canceled)
	if err := r.do(t.Context(), func() error { calls++; return stopped }); !errors.Is(err, context.Canceled) || calls != 1 || out.Len() != 0 {
		t.Errorf("a call stopped by its context: %v after %d calls, stderr %q; want it returned at once, nothing said", err, calls, out.String())
	}
}
