package fairrelay_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
)

// A negative busy timeout is invalid_input naming busy_timeout, for the
// queue and the inbox, and creates nothing (it became the 5 s default
// without a word: a Go API breaker's report).
func TestNegativeBusyTimeoutIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	named := func(what string, err error) {
		t.Helper()
		var fe *fairrelay.Error
		if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != "busy_timeout" {
			t.Errorf("%s with BusyTimeout -1s: %v, want invalid_input naming busy_timeout", what, err)
		}
	}
	q, err := fairrelay.Open(ctx, filepath.Join(dir, "q.db"), fairrelay.Config{BusyTimeout: -time.Second})
	if err == nil {
		q.Close()
	}
	named("fairrelay.Open", err)
	in, err := inbox.Open(ctx, filepath.Join(dir, "in.db"), inbox.Options{BusyTimeout: -time.Second})
	if err == nil {
		in.Close()
	}
	named("inbox.Open", err)
	if m, _ := filepath.Glob(filepath.Join(dir, "*")); len(m) != 0 {
		t.Errorf("refused opens left %v", m)
	}
}

// A busy timeout below a millisecond waits a millisecond: PostgreSQL's
// lock_timeout counts whole milliseconds, and 500µs truncated to 0 was no
// limit at all there (and no wait on SQLite). A PostgreSQL queue with a
// 500µs busy timeout answers busy behind a held flow, not never.
func TestSubMillisecondBusyTimeoutStillBounds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, pool := postgresQueue(t, "frbusyus", 500*time.Microsecond)
	holdFlowA(t, q, pool, "A1")
	done := make(chan error, 1)
	go func() {
		_, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "A2", Flow: "A", Body: []byte(`{"delta":2}`), At: fairrelay.AtStored})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, fairrelay.ErrBusy) {
			t.Errorf("Enqueue behind a held flow, BusyTimeout 500µs: %v, want ErrBusy", err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("Enqueue behind a held flow, BusyTimeout 500µs: still waiting after a minute")
	}
}
