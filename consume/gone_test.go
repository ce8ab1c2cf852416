package consume_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/consume"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/internal/sqlitetest"
)

// A consumer whose inbox's tables are dropped under it (a PostgreSQL
// schema dropped, a SQLite inbox's tables removed) stops with
// fairrelay.ErrNotDatabase at its next message, which it hands back for
// redelivery, as it stops on a replaced file: no redelivery cures it. It
// redelivered every message for ever instead, each logged "not applied",
// with no exit for a supervisor to restart on — the relay stops on
// not_a_database, and fairrelay receive stops through its own watch, but
// consume.Run (jetstream.Consume, amqp.Consume) went on (an audit of the
// database errors turned into "retry later").
func TestRunStopsWhenItsInboxTablesAreDropped(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			dsn := filepath.Join(t.TempDir(), "inbox.db")
			drop := func(*inbox.Inbox) { sqlitetest.Exec(t, dsn, `DROP TABLE receipt; DROP TABLE projection`) }
			if backend == "postgres" {
				dsn = pgtest.Schema(t, "frcongone")
				drop = func(*inbox.Inbox) {
					schema := dsn[strings.LastIndex(dsn, "schema=")+len("schema="):]
					pgtest.Exec(t, pgtest.URL(t), fmt.Sprintf(`DROP SCHEMA %q CASCADE`, schema))
				}
			}
			stopsAfterA1(t, dsn, drop, fairrelay.ErrNotDatabase, "its inbox's tables were dropped")
		})
	}
}

// A consumer whose Inbox is closed under it (a deferred in.Close that ran
// before Run returned) stops with fairrelay.ErrClosed at its next message,
// which it hands back for redelivery: a closed Inbox never opens again, and
// a consumer that took "sql: database is closed" for an outage redelivered
// every message for ever (the relay's report of a closed Queue, its whole
// kind).
func TestRunStopsWhenItsInboxIsClosed(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, "inbox.db", "frconclosed", func(t *testing.T, dsn string) {
		closeInbox := func(in *inbox.Inbox) {
			if err := in.Close(); err != nil {
				t.Error(err)
			}
		}
		stopsAfterA1(t, dsn, closeInbox, fairrelay.ErrClosed, "its inbox was closed")
	})
}

// stopsAfterA1 runs a consumer on an inbox at dsn, does what to the inbox
// once A1 is acked, gives it A2, and checks that Run stops with want in its
// chain, A1 acked and A2 handed back once or never taken.
func stopsAfterA1(t *testing.T, dsn string, what func(*inbox.Inbox), want error, after string) {
	t.Helper()
	in, err := inbox.Open(t.Context(), dsn, inbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	f := &fake{done: map[string][]string{}}
	f.queue = []*msg{ledger(f, "A1", "A", 1, 1, 1)}
	happened := make(chan struct{})
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		// A long cap: the listing of held messages runs at the
		// start only, and A2's receive meets what was done.
		done <- consume.Run(ctx, f, consume.Options{Inbox: in, RedeliverBase: time.Millisecond, RedeliverCap: time.Hour,
			OnApplied: func(a consume.Applied) {
				if a.Message.Delivery.EventID == "A1" && a.Action == consume.ActionAck {
					what(in)
					close(happened)
				}
			}})
	}()
	<-happened
	f.mu.Lock()
	f.queue = append(f.queue, ledger(f, "A2", "A", 2, 1, 1))
	f.mu.Unlock()
	select {
	case err := <-done:
		if !errors.Is(err, want) {
			t.Errorf("Run after %s: %v, want %v in its chain", after, err, want)
		}
	case <-time.After(time.Minute):
		cancel()
		t.Fatalf("the consumer still ran a minute after %s (Run after cancel: %v)", after, <-done)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	// A2 is handed back once, or never taken when Run met what was done
	// first elsewhere (its listing of held messages at the start can run
	// after it: CI saw it); never acked.
	if a2 := f.done["A2"]; fmt.Sprint(f.done["A1"]) != "[ack]" || len(a2) > 1 || (len(a2) == 1 && !strings.HasPrefix(a2[0], "redeliver")) {
		t.Errorf("actions %v, want A1 acked and A2 handed back once or not taken", f.done)
	}
}

// An idle consumer finds its inbox's tables gone too: it lists the held
// messages at its start and every RedeliverCap, and stops there, where it
// logged "retried later" for ever while no message came.
func TestRunStopsIdleWhenItsInboxTablesAreGone(t *testing.T) {
	t.Parallel()
	dsn := filepath.Join(t.TempDir(), "inbox.db")
	in, err := inbox.Open(t.Context(), dsn, inbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	sqlitetest.Exec(t, dsn, `DROP TABLE held`)
	f := &fake{done: map[string][]string{}}
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		done <- consume.Run(ctx, f, consume.Options{Inbox: in, RedeliverBase: time.Millisecond, RedeliverCap: 10 * time.Millisecond})
	}()
	select {
	case err := <-done:
		if !errors.Is(err, fairrelay.ErrNotDatabase) {
			t.Errorf("an idle Run whose inbox's tables are gone: %v, want ErrNotDatabase", err)
		}
	case <-time.After(time.Minute):
		cancel()
		t.Fatalf("the idle consumer still ran a minute after its inbox's tables were gone (Run after cancel: %v)", <-done)
	}
}
