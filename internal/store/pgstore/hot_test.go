package pgstore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/harness/queuetest"
	"github.com/fairrelay/fairrelay/internal/pgtest"
)

// TestEnqueueOntoAFlowWithAHeadIsHOT: an enqueue onto a flow that already
// has a head changes its flow row's seq and nothing indexed, so the update
// is heap-only (migration 013). Before it, seq sat in flow_parked_head's
// predicate and every such update wrote an entry into each of the flow's
// indexes: 0 of them HOT. The counts are the transaction's own
// (pg_stat_get_xact_*), so nothing else on the server moves them.
//
// Also the other side: the rows the index holds are still the parked
// flows with a head, so a quarantined head is listed and counted, and a
// drained flow is not in the index.
func TestEnqueueOntoAFlowWithAHeadIsHOT(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, q := queueOfA(t, "A1")
	conn := pgtest.Connect(t, dsn)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	const n = 20
	for i := range n {
		var status string
		if err := tx.QueryRow(ctx, `SELECT status FROM enqueue($1, 'A', '{"delta":1}'::bytea)`, fmt.Sprintf("A%d", i+2)).Scan(&status); err != nil || status != "created" {
			t.Fatalf("enqueue %d: %q %v", i+2, status, err)
		}
	}
	var updated, hot int64
	if err := tx.QueryRow(ctx, `SELECT pg_stat_get_xact_tuples_updated('flow'::regclass), pg_stat_get_xact_tuples_hot_updated('flow'::regclass)`).Scan(&updated, &hot); err != nil {
		t.Fatal(err)
	}
	if updated != n || hot != n {
		t.Fatalf("flow row updates of %d enqueues onto a flow with a head: %d, %d of them HOT; want %d, all HOT", n, updated, hot, n)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	// A quarantined head is still found through the index; a drained flow
	// (B) is not a parked one.
	if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "B1", Flow: "B", Body: []byte(`{"delta":1}`), At: 1}); err != nil {
		t.Fatal(err)
	}
	for i := range int64(2) {
		c, err := queuetest.ClaimOne(ctx, q, 2+2*i)
		if err != nil || c == nil {
			t.Fatalf("claim: %+v %v", c, err)
		}
		out := fairrelay.OutcomeAccepted
		if c.Token.EventID == "A1" {
			out = fairrelay.OutcomeRejected
		}
		if _, err := q.Settle(ctx, fairrelay.SettleParams{Token: c.Token, Outcome: out, At: 3 + 2*i}); err != nil {
			t.Fatal(err)
		}
	}
	qs, err := q.Quarantined(ctx, 10)
	if err != nil || len(qs) != 1 || qs[0].ID != "A1" {
		t.Fatalf("quarantined heads: %+v %v, want A1 alone", qs, err)
	}
	var parked []string
	pgtest.QueryRow(t, dsn, `SELECT array_agg(flow_id ORDER BY flow_id) FROM flow WHERE parked`, &parked)
	if len(parked) != 1 || parked[0] != "A" {
		t.Fatalf("parked flows: %v, want [A] (B is drained, not parked)", parked)
	}
}
