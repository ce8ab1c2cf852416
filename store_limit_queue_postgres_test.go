package fairrelay_test

import (
	"context"
	"testing"

	"github.com/fairrelay/fairrelay"
)

// The store's first backlog limit, configured while an outbox transaction
// holds a new flow A open, does not hold up the store's other writers while
// it waits for that transaction (SPEC §10: enqueues onto different flows
// never wait for each other): an enqueue onto flow B, the claim of B's head
// and its settle answer while A's transaction stays open, and the limit is
// set, counting every event, once that transaction commits. The configure
// took the flow table EXCLUSIVE with one waiting request, which queued every
// later lock of the table behind it, so all three waited for A's
// transaction until the configure gave up busy at the store's busy
// timeout (a breaker's report: 4.6 s, the claim then answered idle).
func TestPostgresFirstStoreLimitDoesNotHoldUpOtherFlows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, pool, _ := outboxStore(t, "frstorelim", fairrelay.DaemonPolicy())
	body := []byte(`{"delta":1}`)
	enqueue := func(id, flow string) {
		t.Helper()
		if r, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: id, Flow: flow, Body: body, At: fairrelay.AtStored}); err != nil || r.Status != fairrelay.EnqueueCreated {
			t.Fatalf("enqueue %s onto %s: %+v %v", id, flow, r, err)
		}
	}
	enqueue("B0", "B")
	a, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Rollback(context.Background())
	if r, err := q.EnqueuePgxTx(ctx, a, fairrelay.EnqueueParams{ID: "A1", Flow: "A", Body: body, At: fairrelay.AtStored}); err != nil || r.Status != fairrelay.EnqueueCreated {
		t.Fatalf("enqueue A1 in an open transaction: %+v %v", r, err)
	}
	limit := int64(100)
	configured := make(chan error, 1)
	go func() {
		_, err := q.Configure(ctx, fairrelay.ConfigureParams{At: fairrelay.AtStored, MaxBacklog: &limit})
		configured <- err
	}()
	waitBlockedBy(t, pool, a) // the configure waits for A's transaction

	enqueue("B1", "B")
	cr, err := q.Claim(ctx, fairrelay.ClaimParams{At: fairrelay.AtStored, Limit: 10})
	if err != nil || len(cr.Claims) != 1 || cr.Claims[0].Token.EventID != "B0" {
		t.Fatalf("claim beside the waiting configure: %+v %v, want B0", cr, err)
	}
	if sr, err := q.Settle(ctx, fairrelay.SettleParams{Token: cr.Claims[0].Token, Outcome: fairrelay.OutcomeAccepted, At: fairrelay.AtStored}); err != nil || sr.Status != fairrelay.SettleAcked {
		t.Fatalf("settle B0 beside the waiting configure: %+v %v", sr, err)
	}
	select {
	case err := <-configured:
		t.Fatalf("the configure answered (%v) while A's transaction was open", err)
	default:
	}
	if err := a.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-configured; err != nil {
		t.Fatalf("configure once A's transaction committed: %v", err)
	}
	s, err := q.Settings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.MaxBacklog != 100 || s.Backlog != 2 {
		t.Errorf("settings %+v: want max_backlog 100, backlog 2 (A1, B1)", s)
	}
}
