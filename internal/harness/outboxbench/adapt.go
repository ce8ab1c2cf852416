package outboxbench

// This file is the only place where the outbox benchmarks (here and in the
// Watermill comparison module, bench/watermill) use the library's API: the
// Queue's open, EnqueueTx and the relay. When that API changes (parameter
// structs, a typed EnqueueTx per transaction kind), only this file changes.

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/relay"
	"github.com/fairrelay/fairrelay/sink"
)

// Outbox is a fairrelay queue store opened for the benchmarks, under the
// daemon's policy (what `fairrelay relay` runs).
type Outbox struct {
	q *fairrelay.Queue
}

// OpenOutbox opens (creating it if needed) the queue store at dsn: a SQLite
// file path, or a postgres:// URL with schema=NAME.
func OpenOutbox(ctx context.Context, dsn string) (*Outbox, error) {
	q, err := fairrelay.Open(ctx, dsn, fairrelay.Config{Policy: fairrelay.DaemonPolicy()})
	if err != nil {
		return nil, err
	}
	return &Outbox{q: q}, nil
}

// Close closes the store.
func (o *Outbox) Close() error { return o.q.Close() }

// SQLiteDSN is the database/sql DSN an application opens its own pool on a
// queue's SQLite file with (fairrelay.SQLiteDSN).
func SQLiteDSN(path string) string { return fairrelay.SQLiteDSN(path) }

// EnqueuePgx enqueues one event inside the caller's pgx transaction at the
// store's tick (a producer does not know the relay's clock); anything but a
// new event (existing, conflict) is an error here, since every benchmark id
// is fresh.
func (o *Outbox) EnqueuePgx(ctx context.Context, tx pgx.Tx, id, flow string, body []byte) error {
	r, err := o.q.EnqueuePgxTx(ctx, tx, fairrelay.EnqueueParams{ID: id, Flow: flow, Body: body, At: fairrelay.AtStored})
	return created(id, r, err)
}

// EnqueueSQL is EnqueuePgx for a *sql.Tx (SQLite, or PostgreSQL through
// pgx's stdlib driver).
func (o *Outbox) EnqueueSQL(ctx context.Context, tx *sql.Tx, id, flow string, body []byte) error {
	r, err := o.q.EnqueueTx(ctx, tx, fairrelay.EnqueueParams{ID: id, Flow: flow, Body: body, At: fairrelay.AtStored})
	return created(id, r, err)
}

// created turns an answer other than created into an error.
func created(id string, r fairrelay.EnqueueResult, err error) error {
	if err != nil {
		return err
	}
	if r.Status != fairrelay.EnqueueCreated {
		return fmt.Errorf("enqueue %s: %s, want created", id, r.Status)
	}
	return nil
}

// Delivered is one event as the relay handed it to the benchmark's sink.
type Delivered struct {
	ID, Flow string
	Seq      int64
	Body     []byte
	// At is the wall-clock time the sink received it.
	At time.Time
}

// RelayOptions configure StartRelay.
type RelayOptions struct {
	// Workers is the relay's deliveries at once (relay.Config.Workers);
	// 0 is the library's default.
	Workers int
	// Deliver is called for every delivery, from the relay's delivery
	// goroutines (concurrently for distinct flows); the sink then accepts
	// the event. It must be quick.
	Deliver func(Delivered)
}

// StartRelay runs the relay daemon (package relay, as `fairrelay relay`
// runs it, its poll intervals at their defaults) on o until stop is
// called; stop shuts it down gracefully and returns Run's error.
func (o *Outbox) StartRelay(ctx context.Context, opts RelayOptions) (stop func() error, err error) {
	r, err := relay.New(ctx, relay.Config{
		Queue: o.q, Workers: opts.Workers, Logger: slog.New(slog.DiscardHandler),
		Sink: sink.Func(func(_ context.Context, d sink.Delivery) (sink.Result, error) {
			at := time.Now()
			if opts.Deliver != nil {
				opts.Deliver(Delivered{ID: d.EventID, Flow: d.Flow, Seq: d.Seq, Body: d.Body, At: at})
			}
			return sink.Result{Outcome: fairrelay.OutcomeAccepted}, nil
		}),
	})
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	return func() error {
		cancel()
		return <-done
	}, nil
}
