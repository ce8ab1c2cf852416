package main

import (
	"context"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/pgtest"
)

// A store behind a PgBouncer whose pool is full (its one server connection
// held by another client; the bouncer answers "query_wait_timeout") is
// waited for at start by every daemon: relay waited, while receive exited
// 2 on the same URL, and a broker consumer restarted then left 1 000
// settled events unapplied (a fresh user's report). Both stores' opens
// answer an error untilStoreAnswers waits on.
func TestAFullPoolerIsWaitedFor(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	queue, inb := pgtest.Schema(t, "frpoolq"), pgtest.Schema(t, "frpooli")
	// Made directly, so that the bouncer is the only thing in the way.
	q, err := fairrelay.Open(ctx, queue, fairrelay.Config{Policy: fairrelay.DaemonPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	in, err := inbox.Open(ctx, inb, inbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	in.Close()
	settings := []string{"default_pool_size = 1", "query_wait_timeout = 1"}
	for name, open := range map[string]func(dsn string) error{
		"queue": func(dsn string) error {
			q, err := fairrelay.Open(ctx, dsn, fairrelay.Config{Policy: fairrelay.DaemonPolicy(), MustExist: true})
			if err == nil {
				q.Close()
			}
			return err
		},
		"inbox": func(dsn string) error {
			in, err := inbox.Open(ctx, dsn, inbox.Options{MustExist: true})
			if err == nil {
				in.Close()
			}
			return err
		},
	} {
		dsn := pgtest.PgBouncer(t, map[string]string{"queue": queue, "inbox": inb}[name], "session", settings...)
		holder := pgtest.Connect(t, dsn) // session pooling: it keeps the pool's one server connection
		if _, err := holder.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
		err := open(dsn)
		if err == nil || !waitable(err) {
			t.Errorf("%s: open with the pool full: %v; want an error a daemon waits on", name, err)
		}
		holder.Close(context.Background())
		if err := open(dsn); err != nil {
			t.Errorf("%s: open once the pool is free: %v", name, err)
		}
	}
}
