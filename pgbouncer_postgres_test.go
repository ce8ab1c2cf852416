package fairrelay_test

import (
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/internal/store/pgstore"
)

// A queue store and an inbox work through PgBouncer in session pooling, as
// many PostgreSQL deployments put it in front of the server: open (schema
// made, migrations), the store's own settings, an enqueue that notifies a
// listening relay, a claim and its settle, an inbox's receive. Before,
// nothing could be opened through it: the store sent lock_timeout and
// search_path as startup parameters, which PgBouncer refuses
// ("unsupported startup parameter: lock_timeout"). A real PgBouncer on
// loopback (pgtest.PgBouncer).
func TestThroughPgBouncerInSessionPooling(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dsn := pgtest.PgBouncer(t, pgtest.Schema(t, "frt_pgb"), "session")
	q, err := fairrelay.Open(ctx, dsn, fairrelay.Config{Policy: fairrelay.ReferencePolicy(), BusyTimeout: 3 * time.Second})
	if err != nil {
		t.Fatalf("open through PgBouncer: %v", err)
	}
	defer q.Close()
	cfg, schema, err := pgstore.PoolConfig(dsn, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := pgtest.Settings(t, cfg.ConnConfig, "search_path", "lock_timeout"); got["search_path"] != schema || got["lock_timeout"] != "3000" {
		t.Errorf("a connection through PgBouncer has %v, want search_path %s and lock_timeout 3000", got, schema)
	}
	changes := q.Changes(ctx, nil)
	wait := func(what string) {
		t.Helper()
		select {
		case <-changes:
		case <-time.After(20 * time.Second): // a bound on a failure, not synchronisation
			t.Fatalf("no change signalled in 20 s %s", what)
		}
	}
	wait("once listening") // the first signal: listening, whatever committed before
	if r, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "A1", Flow: "A", Body: []byte(`{"delta":1}`), At: fairrelay.AtStored}); err != nil || r.Status != fairrelay.EnqueueCreated {
		t.Fatalf("enqueue: %+v %v", r, err)
	}
	wait("after an enqueue") // its notification, through the listener's session
	cr, err := q.Claim(ctx, fairrelay.ClaimParams{At: fairrelay.AtStored, Limit: 1})
	if err != nil || len(cr.Claims) != 1 {
		t.Fatalf("claim: %+v %v", cr, err)
	}
	if sr, err := q.Settle(ctx, fairrelay.SettleParams{Token: cr.Claims[0].Token, Outcome: fairrelay.OutcomeAccepted, At: fairrelay.AtStored}); err != nil || sr.Status != fairrelay.SettleAcked {
		t.Fatalf("settle: %+v %v", sr, err)
	}
	in, err := inbox.Open(ctx, pgtest.PgBouncer(t, pgtest.Schema(t, "frt_pgbin"), "session"), inbox.Options{})
	if err != nil {
		t.Fatalf("inbox through PgBouncer: %v", err)
	}
	defer in.Close()
	if out, err := in.Receive(ctx, inbox.Delivery{EventID: "A1", Flow: "A", Seq: 1, Body: []byte(`{"delta":1}`)}); err != nil || out != fairrelay.OutcomeAccepted {
		t.Fatalf("receive: %v %v", out, err)
	}
}
