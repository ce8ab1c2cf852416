package relay_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/internal/store/pgstore"
	"github.com/fairrelay/fairrelay/relay"
	"github.com/fairrelay/fairrelay/sink"
)

// never is a poll interval no test lasts: a relay configured with it finds
// an event only when something wakes it.
const never = time.Hour

// wakeRelay runs a relay on queue (a SQLite path or a postgres:// URL)
// that polls never and delivers to a sink reporting each event id on the
// returned channel. log receives the relay's logs (nil: none).
func wakeRelay(t *testing.T, queue string, log *slog.Logger) <-chan string {
	t.Helper()
	q, err := fairrelay.Open(t.Context(), queue, fairrelay.Config{Policy: fairrelay.DaemonPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	got := make(chan string, 64)
	r, err := relay.New(t.Context(), relay.Config{Queue: q, PollInterval: never, MaxPollInterval: never, Logger: log,
		Sink: sink.Func(func(_ context.Context, d sink.Delivery) (sink.Result, error) {
			got <- d.EventID
			return sink.Result{Outcome: fairrelay.OutcomeAccepted}, nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return got
}

// delivered waits for the delivery of id, failing after 10 s.
func delivered(t *testing.T, got <-chan string, id, what string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case d := <-got:
			if d == id {
				return
			}
		case <-deadline:
			t.Fatalf("%s not delivered within 10s %s: the relay polls every hour, so only the change signal can wake it", id, what)
		}
	}
}

// An event committed through another connection — another process, as far
// as the relay can tell — wakes the relay at once: here it polls only once
// an hour, so a relay that waited for its poll would never deliver it. On
// PostgreSQL the event comes from plain SQL (the schema's enqueue function
// inside a transaction of another connection, as a program in any
// language would call it); on SQLite from EnqueueTx in a transaction of
// another pool on the file.
func TestAnEventCommittedElsewhereWakesTheRelay(t *testing.T) {
	t.Parallel()
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		dsn := pgtest.Schema(t, "relay_wake")
		got := wakeRelay(t, dsn, nil)
		conn := pgtest.Connect(t, dsn)
		defer conn.Close(context.Background())
		for _, id := range []string{"A1", "B1", "A2"} {
			// A2 waits behind A1 until A1 is acked: the relay claims it
			// after that settle, no signal needed.
			err := pgx.BeginFunc(t.Context(), conn, func(tx pgx.Tx) error {
				_, err := tx.Exec(t.Context(), "SELECT * FROM enqueue($1, $2, $3)", id, id[:1], []byte(`{"delta":1}`))
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			delivered(t, got, id, "of its commit through another connection")
		}
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "queue.db")
		got := wakeRelay(t, path, nil)
		producer, err := fairrelay.Open(t.Context(), path, fairrelay.Config{Policy: fairrelay.DaemonPolicy()})
		if err != nil {
			t.Fatal(err)
		}
		defer producer.Close()
		db, err := sql.Open("sqlite", fairrelay.SQLiteDSN(path))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		for _, id := range []string{"A1", "B1", "A2"} {
			tx, err := db.BeginTx(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := producer.EnqueueTx(t.Context(), tx, fairrelay.EnqueueParams{ID: id, Flow: id[:1], Body: []byte(`{"delta":1}`), At: fairrelay.AtStored}); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			delivered(t, got, id, "of its commit through another pool")
		}
	})
}

// When the relay's listening connection drops (its server process is
// terminated), the relay logs that notifications are lost, the queue
// listens again with backoff, the relay logs that they are back, and the
// next commit elsewhere wakes it as before.
func TestTheRelayListensAgainAfterItsConnectionDrops(t *testing.T) {
	t.Parallel()
	dsn := pgtest.Schema(t, "relay_relisten")
	_, schema, err := pgstore.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logCounter{}
	got := wakeRelay(t, dsn, slog.New(logs))
	listen := "LISTEN " + pgx.Identifier{pgstore.Channel(schema)}.Sanitize()
	pid := 0
	for deadline := time.Now().Add(10 * time.Second); pid == 0; {
		conn := pgtest.Connect(t, dsn)
		err := conn.QueryRow(t.Context(), "SELECT pid FROM pg_stat_activity WHERE query = $1", listen).Scan(&pid)
		conn.Close(context.Background())
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		if pid == 0 && time.Now().After(deadline) {
			t.Fatal("the relay's listening connection did not show within 10s")
		}
		time.Sleep(time.Millisecond) // polling a condition, with a deadline
	}
	pgtest.Exec(t, dsn, "SELECT pg_terminate_backend("+strconv.Itoa(pid)+")")
	for _, want := range []string{"relay: change notifications lost", "relay: change notifications back"} {
		for deadline := time.Now().Add(10 * time.Second); logs.count(want) == 0; {
			if time.Now().After(deadline) {
				t.Fatalf("no log %q within 10s of the listener's server process ending", want)
			}
			time.Sleep(time.Millisecond) // polling a condition, with a deadline
		}
	}
	pgtest.Exec(t, dsn, `SELECT * FROM enqueue('A1', 'A', '{"delta":1}')`)
	delivered(t, got, "A1", "of its commit once listening again")
}
