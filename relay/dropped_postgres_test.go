package relay_test

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/internal/syncbuf"
	"github.com/fairrelay/fairrelay/relay"
	"github.com/fairrelay/fairrelay/sink"
)

// A relay whose PostgreSQL store's schema is dropped under it stops with
// ErrNotDatabase at its next round trip, as one whose SQLite file is
// replaced stops (TestRelayStopsWhenItsSQLiteFileIsReplaced): waiting
// cannot bring the tables back, and the relay that retried once a minute
// for ever was never restarted by a supervisor (a fresh user's report).
func TestRelayStopsWhenItsPostgresSchemaIsDropped(t *testing.T) {
	t.Parallel()
	dsn := pgtest.Schema(t, "relay_dropped_")
	q, err := fairrelay.Open(t.Context(), dsn, fairrelay.Config{Policy: patientPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if _, err := q.Enqueue(t.Context(), fairrelay.EnqueueParams{ID: "A1", Flow: "A", Body: []byte(`{"delta":1}`), At: fairrelay.AtStored}); err != nil {
		t.Fatal(err)
	}
	schema := dsn[strings.LastIndex(dsn, "schema=")+len("schema="):]
	var once sync.Once
	s := sink.Func(func(ctx context.Context, d sink.Delivery) (sink.Result, error) {
		// The schema goes while the delivery is under way: its settle is
		// the relay's next round trip.
		once.Do(func() { pgtest.Exec(t, pgtest.URL(t), "DROP SCHEMA "+schema+" CASCADE") })
		return sink.Result{Outcome: fairrelay.OutcomeAccepted}, nil
	})
	var logs syncbuf.Buffer
	r, err := relay.New(t.Context(), relay.Config{Queue: q, Sink: s, Workers: 1, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	select {
	case err := <-done:
		if !errors.Is(err, fairrelay.ErrNotDatabase) {
			t.Errorf("Run after its store's schema was dropped: %v, want ErrNotDatabase", err)
		}
		// Its stop line says why (a fresh user's report: "relay:
		// stopped" at info level, and the reason only in a later line).
		if !regexp.MustCompile(`level=ERROR msg="relay: stopped on an error" clock_tick=\d+ err=.*not a fairrelay database`).MatchString(logs.String()) {
			t.Errorf("no stop line with its error:\n%s", logs.String())
		}
	case <-time.After(time.Minute):
		cancel()
		t.Fatalf("the relay still ran a minute after its store's schema was dropped (Run after cancel: %v)", <-done)
	}
}
