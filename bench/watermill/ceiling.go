package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The ceilings: the same publishers and business transactions with no
// consumer at all. A system's end-to-end rate can be no higher than its
// publishers' commit rate with a consumer that cost nothing, so these
// workloads bound what any change to a relay or a subscriber could buy
// (issue 14's end-to-end target). Their "end to end" is the time to the
// last commit; no event is received, so no order is checked.
//
//   - watermill-publish: Watermill's publisher alone (its tables made
//     first, as its subscriber makes them).
//   - fairrelay-publish: EnqueueTx alone, no relay: every flow keeps a
//     backlog, so no enqueue wakes a flow or notifies — cheaper than
//     beside a relay that keeps up.
//   - bare-publish: what is left of an enqueue without the SQL function:
//     its common call's one statement (lock the flow's row, insert the
//     event at the next seq, advance the flow), prepared, in the store's
//     own tables — the least that orders a flow's events by commit with no
//     hole (SPEC §10) in this data model. No tick, no checks, no limits.
//   - lock-insert-publish: what an enqueue could cost in another data model
//     (a probe of one, not fairrelay's): a per-flow transaction-scoped
//     advisory lock (held in memory, no row written) and an insert into an
//     events table at the flow's largest seq + 1, read after the lock under
//     a new snapshot. It orders a flow's events by commit with no hole, as
//     SPEC §10 asks, and writes one row; the head, the turn and the
//     claim's state would live elsewhere, written by the relay alone.
//   - plain-publish: one row into a plain outbox table (a BIGSERIAL key, the
//     flow, the body, a timestamp), the outbox a team would write by hand.
func ceilingWorkloads(ctx context.Context, o options) []workload {
	return []workload{
		{"watermill-publish", "Watermill SQL's publisher alone (no subscriber)", func() (measure, error) { return benchWatermillPublish(ctx, o) }, true},
		{"fairrelay-publish", "fairrelay's EnqueueTx alone (no relay)", func() (measure, error) { return benchFairrelayPublish(ctx, o, false) }, true},
		{"bare-publish", "fairrelay's bare enqueue statement alone (no function, no relay)", func() (measure, error) { return benchFairrelayPublish(ctx, o, true) }, true},
		{"lock-insert-publish", "a per-flow advisory lock and an insert at the next seq (another data model's least, no consumer)", func() (measure, error) { return benchLockInsertPublish(ctx, o) }, true},
		{"plain-publish", "a plain outbox row alone (no consumer)", func() (measure, error) { return benchPlainPublish(ctx, o) }, true},
		{"lease-floor", "a per-flow advisory lock and an insert at the next seq, and a consumer that claims each flow's head under a lease and a generation and settles it (a probe: the least under SPEC §2, floor.go)", func() (measure, error) { return benchLeaseFloor(ctx, o) }, false},
	}
}

func benchWatermillPublish(ctx context.Context, o options) (measure, error) {
	pool, cleanup, err := business(ctx, o)
	if err != nil {
		return measure{}, err
	}
	defer cleanup()
	sub, err := watermillSubscriber(pool, o)
	if err != nil {
		return measure{}, err
	}
	err = sub.SubscribeInitialize(topic)
	sub.Close()
	if err != nil {
		return measure{}, err
	}
	start := time.Now()
	err = publishAll(ctx, o, pool, watermillPublish(o))
	d := time.Since(start)
	return measure{elapsed: d, publish: d}, err
}

func benchFairrelayPublish(ctx context.Context, o options, bare bool) (measure, error) {
	pool, ob, queueSchema, cleanup, err := businessAndQueue(ctx, o)
	if err != nil {
		return measure{}, err
	}
	defer cleanup()
	publish := func(ctx context.Context, tx pgx.Tx, flow string, version int64, body []byte) error {
		return ob.EnqueuePgx(ctx, tx, fmt.Sprintf("%s-%d", flow, version), flow, body)
	}
	if bare {
		// The flows exist, each with a head, before the clock starts: the
		// bare statement only appends to a flow, as the function's common
		// call does.
		for i := range o.flows {
			flow := fmt.Sprintf("acct-%d", i)
			if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return publish(ctx, tx, flow, 0, []byte(`{}`)) }); err != nil {
				return measure{}, err
			}
		}
		s := pgx.Identifier{queueSchema}.Sanitize()
		// The statement of the function's common call (migrations 016,
		// 023), with the tick and the id checks left out.
		stmt := fmt.Sprintf(`WITH lk AS (
    SELECT f.seq + 1 AS new_seq FROM %[1]s.flow f WHERE f.flow_id = $2 AND f.group_id IS NULL FOR NO KEY UPDATE OF f
), ins AS (
    INSERT INTO %[1]s.event (event_id, flow_id, seq, body, own_state, generation, attempts, lifetime_attempts,
                             reason, next_at, lease_until, enqueued_at)
    SELECT $1, $2, lk.new_seq, $3, 'ready', 0, 0, 0, NULL, 0, 0, 0 FROM lk
    RETURNING event.seq
), upd AS (
    UPDATE %[1]s.flow f SET seq = ins.seq FROM ins WHERE f.flow_id = $2 RETURNING f.seq
)
SELECT (SELECT u.seq FROM upd u)`, s)
		publish = func(ctx context.Context, tx pgx.Tx, flow string, version int64, body []byte) error {
			var seq *int64
			if err := tx.QueryRow(ctx, stmt, fmt.Sprintf("%s-%d", flow, version), flow, body).Scan(&seq); err != nil {
				return err
			}
			if seq == nil {
				return fmt.Errorf("bare enqueue onto %s: no row written", flow)
			}
			return nil
		}
	}
	start := time.Now()
	err = publishAll(ctx, o, pool, publish)
	d := time.Since(start)
	return measure{elapsed: d, publish: d}, err
}

func benchPlainPublish(ctx context.Context, o options) (measure, error) {
	pool, cleanup, err := business(ctx, o)
	if err != nil {
		return measure{}, err
	}
	defer cleanup()
	if _, err := pool.Exec(ctx, `CREATE TABLE outbox (id BIGSERIAL PRIMARY KEY, flow TEXT NOT NULL, body BYTEA NOT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT now())`); err != nil {
		return measure{}, err
	}
	start := time.Now()
	err = publishAll(ctx, o, pool, func(ctx context.Context, tx pgx.Tx, flow string, _ int64, body []byte) error {
		_, err := tx.Exec(ctx, `INSERT INTO outbox (flow, body) VALUES ($1, $2)`, flow, body)
		return err
	})
	d := time.Since(start)
	return measure{elapsed: d, publish: d}, err
}

func benchLockInsertPublish(ctx context.Context, o options) (measure, error) {
	pool, cleanup, err := business(ctx, o)
	if err != nil {
		return measure{}, err
	}
	defer cleanup()
	if _, err := pool.Exec(ctx, `CREATE TABLE events (event_id TEXT PRIMARY KEY, flow_id TEXT NOT NULL, seq BIGINT NOT NULL, body BYTEA NOT NULL, UNIQUE (flow_id, seq))`); err != nil {
		return measure{}, err
	}
	start := time.Now()
	err = publishAll(ctx, o, pool, lockInsert)
	d := time.Since(start)
	return measure{elapsed: d, publish: d}, err
}

// lockInsert is lock-insert-publish's publish (and lease-floor's): the
// flow's transaction-scoped advisory lock, then the insert into events at
// the flow's largest seq + 1, in one round trip; the insert's statement
// starts after the lock is held and so sees the flow's last committed seq
// (READ COMMITTED).
func lockInsert(ctx context.Context, tx pgx.Tx, flow string, version int64, body []byte) error {
	b := &pgx.Batch{}
	b.Queue(`SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, flow)
	b.Queue(`INSERT INTO events (event_id, flow_id, seq, body) SELECT $1, $2, coalesce(max(seq), 0) + 1, $3 FROM events WHERE flow_id = $2`,
		fmt.Sprintf("%s-%d", flow, version), flow, body)
	return tx.SendBatch(ctx, b).Close()
}
