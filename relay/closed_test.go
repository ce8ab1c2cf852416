package relay_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/errs"
	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/relay"
	"github.com/fairrelay/fairrelay/sink"
)

// A relay whose Queue is closed under it (a deferred q.Close that runs
// before the relay is stopped) stops with ErrClosed: a closed Queue never
// opens again, and a relay that took "sql: database is closed" (SQLite) or
// "closed pool" (PostgreSQL) for a store outage retried it for ever, Run
// never returning (a library user's report).
func TestRelayStopsWhenItsQueueIsClosed(t *testing.T) {
	pgtest.EachBackend(t, "queue.db", "relay_closed_", func(t *testing.T, dsn string) {
		q, err := fairrelay.Open(t.Context(), dsn, fairrelay.Config{Policy: fairrelay.DaemonPolicy()})
		if err != nil {
			t.Fatal(err)
		}
		delivered := make(chan struct{}, 1)
		r, err := relay.New(t.Context(), relay.Config{Queue: q, Logger: slog.New(slog.DiscardHandler),
			Sink: sink.Func(func(context.Context, sink.Delivery) (sink.Result, error) {
				select {
				case delivered <- struct{}{}:
				default:
				}
				return sink.Result{Outcome: fairrelay.OutcomeAccepted}, nil
			})})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q.Enqueue(t.Context(), fairrelay.EnqueueParams{ID: "E1", Flow: "F", Body: []byte(`{"delta":1}`), At: fairrelay.AtStored}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		<-delivered // the relay is running and has used the store
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if !errors.Is(err, fairrelay.ErrClosed) {
				t.Errorf("Run after its Queue was closed: %v, want ErrClosed", err)
			} else if m := errs.Stutter(err.Error()); m != "" {
				t.Errorf("Run after its Queue was closed: %q names its operation twice (%q)", err, m)
			}
		case <-time.After(time.Minute):
			cancel()
			t.Fatalf("the relay still ran a minute after its Queue was closed (Run after cancel: %v)", <-done)
		}
	})
}
