package fairrelay_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/internal/store/pgstore"
)

// TestPostgresOutboxDoesNotStallTheRelay is the point of the PostgreSQL
// backend's lanes (store.Lane): a business transaction that has enqueued an
// event and not committed yet holds the enqueue lane and the row of the
// flow it appends to, nothing else, so the relay keeps claiming and
// settling the other flows meanwhile (before the lanes, every write waited
// for the caller's commit). The flow appended to waits: its claims skip it
// and its settles wait for the row. Each step runs under a deadline; a
// dispatch that waited for the caller would miss it.
func TestPostgresOutboxDoesNotStallTheRelay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.Schema(t, "frlane")
	q, err := fairrelay.Open(ctx, dsn, fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for _, id := range []string{"A1", "B1", "C1"} {
		if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: id, Flow: id[:1], Body: []byte(`{"delta":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	first, err := q.ClaimBatch(ctx, 0, 2) // A1 and B1
	if err != nil || len(first) != 2 {
		t.Fatalf("claim: %+v %v", first, err)
	}
	url, schema, err := pgstore.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	// The caller's transaction appends A2 behind the inflight A1 and stays
	// open.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if r, err := q.EnqueueTx(ctx, tx, fairrelay.EnqueueParams{ID: "A2", Flow: "A", Body: []byte(`{"delta":2}`), At: fairrelay.AtStored}); err != nil || r.Seq != 2 {
		t.Fatalf("EnqueueTx A2: %+v %v", r, err)
	}

	deadline := func() context.Context {
		c, cancel := context.WithTimeout(ctx, 20*time.Second)
		t.Cleanup(cancel)
		return c
	}
	// Meanwhile the relay settles B1 and claims and settles C1.
	if r, err := q.Settle(deadline(), first[1].Token, fairrelay.OutcomeAccepted, 0); err != nil || r.Status != fairrelay.SettleAcked {
		t.Fatalf("settle B1 while an enqueue is open: %+v %v", r, err)
	}
	cs, err := q.ClaimBatch(deadline(), 0, 3)
	if err != nil || len(cs) != 1 || cs[0].Token.EventID != "C1" {
		t.Fatalf("claim while an enqueue is open: %+v %v", cs, err)
	}
	if r, err := q.Settle(deadline(), cs[0].Token, fairrelay.OutcomeAccepted, 0); err != nil || r.Status != fairrelay.SettleAcked {
		t.Fatalf("settle C1 while an enqueue is open: %+v %v", r, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// A1 settles, and A2 is A's head.
	if r, err := q.Settle(deadline(), first[0].Token, fairrelay.OutcomeAccepted, 0); err != nil || r.Status != fairrelay.SettleAcked {
		t.Fatalf("settle A1 after the commit: %+v %v", r, err)
	}
	cs, err = q.ClaimBatch(deadline(), 0, 3)
	if err != nil || len(cs) != 1 || cs[0].Token.EventID != "A2" || cs[0].Seq != 2 {
		t.Fatalf("claim after the commit: %+v %v", cs, err)
	}
}

// TestPostgresEnqueueDoesNotWaitForAClaim holds a claim transaction open
// (the claim lane's lock and the claimed flow's row lock) through the store
// seam and requires an enqueue to another flow, and an enqueue appending to
// a flow the claim did not lock, to commit meanwhile.
func TestPostgresEnqueueDoesNotWaitForAClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.Schema(t, "frlane2")
	q, err := fairrelay.Open(ctx, dsn, fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "B1", Flow: "B", Body: []byte(`{"delta":1}`)}); err != nil {
		t.Fatal(err)
	}
	url, schema, err := pgstore.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// What a claim transaction holds until its commit: the claim lane's
	// advisory lock and clock row (migration 003), and its flows' rows.
	if _, err := conn.Exec(ctx, "SET search_path = "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	hold, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(ctx)
	for _, s := range []string{
		`SELECT pg_advisory_xact_lock(1718186354, hashtext(current_schema()))`,
		`SELECT 1 FROM clock WHERE id = 1 FOR UPDATE`,
		`SELECT 1 FROM flow WHERE flow_id = 'B' FOR NO KEY UPDATE`,
	} {
		if _, err := hold.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if r, err := q.EnqueueBatch(c, fairrelay.AtStored, []fairrelay.EnqueueParams{
		{ID: "A1", Flow: "A", Body: []byte(`{"delta":1}`)},
		{ID: "C1", Flow: "C", Body: []byte(`{"delta":1}`)},
	}); err != nil || len(r) != 2 || r[0].Status != fairrelay.EnqueueCreated {
		t.Fatalf("enqueue while a claim is open: %+v %v", r, err)
	}
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	cs, err := q.ClaimBatch(ctx, 0, 3)
	if err != nil || len(cs) != 3 {
		t.Fatalf("claim after: %+v %v", cs, err)
	}
}
