package main

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// leaseFloor is a probe, not fairrelay: the least a relay that keeps SPEC
// §2's contract could cost end to end, beside the least publisher of
// another data model (lock-insert-publish, ceiling.go). Issue 14 asks for
// fairrelay at 1 × Watermill's end-to-end rate; this bounds what any
// rewrite of the store could reach on this machine.
//
//   - publish: a per-flow transaction-scoped advisory lock and one insert
//     at the flow's largest seq + 1 (one round trip), as lock-insert-publish.
//   - consume: one loop, as one relay with its deliveries done at once.
//     Each round is one transaction and one round trip: the settle of the
//     last round's deliveries, each at the generation it was claimed at,
//     then the claim of every flow's head (its lowest event not acked;
//     DISTINCT ON through a partial index of the events not acked) whose
//     lease is free: a new generation and a lease of 30 s, durable before
//     the delivery (SPEC §2: a claim carries a lease and a generation, and
//     a stale one cannot settle). The deliveries go to the order checker
//     after the commit. Nothing else: no tick, no turn or fairness
//     accounting, no attempt history, no backoff, no limits, no group —
//     what fairrelay's claim and settle write beyond this is what they cost
//     beyond the floor. A round that claims nothing waits 1 ms (Watermill's
//     subscriber here: 10 ms).
func benchLeaseFloor(ctx context.Context, o options) (measure, error) {
	pool, cleanup, err := business(ctx, o)
	if err != nil {
		return measure{}, err
	}
	defer cleanup()
	if _, err := pool.Exec(ctx, `CREATE TABLE events (event_id TEXT PRIMARY KEY, flow_id TEXT NOT NULL, seq BIGINT NOT NULL, body BYTEA NOT NULL,
	generation BIGINT NOT NULL DEFAULT 0, lease_until TIMESTAMPTZ, acked BOOLEAN NOT NULL DEFAULT false, UNIQUE (flow_id, seq));
CREATE INDEX events_waiting ON events (flow_id, seq) WHERE NOT acked`); err != nil {
		return measure{}, err
	}
	check := newChecker(o.n)
	failed := make(chan error, 2)
	cctx, stopConsumer := context.WithCancel(ctx)
	consumed := make(chan error, 1)
	go func() {
		err := leaseFloorConsume(cctx, pool, check)
		if err != nil && cctx.Err() == nil {
			select {
			case failed <- err: // the workload's failure
			default:
			}
		}
		consumed <- err
	}()
	defer func() {
		stopConsumer()
		<-consumed
	}()
	start := time.Now()
	published := publishing(ctx, o, pool, start, failed, lockInsert)
	last, err := check.wait(ctx, o.timeout, failed)
	if err != nil {
		return measure{}, err
	}
	return check.measure(start, last, <-published), nil
}

// leaseFloorConsume claims, delivers and settles until ctx ends. Each
// round is one transaction and one round trip (a pgx batch): the settle of
// the last round's deliveries, then the claim of the heads free now (a
// statement of its own, so that it sees the settle), as fairrelay's relay
// settles with its claims.
func leaseFloorConsume(ctx context.Context, pool *pgxpool.Pool, check *checker) error {
	var ids []string
	var gens []int64
	var bodies [][]byte
	for ctx.Err() == nil {
		bodies = bodies[:0]
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			b := &pgx.Batch{}
			b.Queue(`UPDATE events e SET acked = true, lease_until = NULL
FROM unnest($1::text[], $2::bigint[]) AS s (id, gen) WHERE e.event_id = s.id AND e.generation = s.gen AND NOT e.acked`, ids, gens)
			b.Queue(`WITH heads AS (
    SELECT DISTINCT ON (w.flow_id) w.event_id FROM events w WHERE NOT w.acked ORDER BY w.flow_id, w.seq
)
UPDATE events e SET generation = e.generation + 1, lease_until = clock_timestamp() + interval '30 seconds'
FROM heads h WHERE e.event_id = h.event_id AND (e.lease_until IS NULL OR e.lease_until < clock_timestamp())
RETURNING e.event_id, e.generation, e.body`)
			br := tx.SendBatch(ctx, b)
			if _, err := br.Exec(); err != nil {
				br.Close()
				return err
			}
			ids, gens = ids[:0], gens[:0]
			rows, err := br.Query()
			if err != nil {
				br.Close()
				return err
			}
			for rows.Next() {
				var id string
				var gen int64
				var body []byte
				if err := rows.Scan(&id, &gen, &body); err != nil {
					rows.Close()
					br.Close()
					return err
				}
				ids, gens, bodies = append(ids, id), append(gens, gen), append(bodies, body)
			}
			rows.Close()
			if err := br.Close(); err != nil {
				return err
			}
			return nil
		})
		if err != nil {
			return err
		}
		// Delivered once the claim is durable: after the commit.
		for _, body := range bodies {
			if err := check.observe(body, time.Now()); err != nil {
				return err
			}
		}
		if len(bodies) == 0 {
			select {
			case <-ctx.Done():
			case <-time.After(time.Millisecond):
			}
		}
	}
	return nil
}
