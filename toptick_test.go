package fairrelay_test

import (
	"path/filepath"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/pgtest"
)

// A lease and a backoff end at MaxTick at the latest: no operation's tick
// goes past it, so a lease ending later never ran out and its flow stayed
// inflight for good, and a head backing off past it could be freed only by
// expedite (a breaker's report: a claim at MaxTick-3 under a 5-tick lease,
// a retry at MaxTick-1 under a 2-tick backoff). On both backends.
func TestLeaseAndBackoffEndByTheLastTick(t *testing.T) {
	t.Parallel()
	const top = fairrelay.MaxTick
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			dsn := filepath.Join(t.TempDir(), "queue.db")
			if backend == "postgres" {
				dsn = pgtest.Schema(t, "frtop")
			}
			ctx := t.Context()
			q, err := fairrelay.Open(ctx, dsn, fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			body := []byte(`{"delta":1}`)
			if _, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: 0, Events: []fairrelay.NewEvent{{ID: "A1", Flow: "A", Body: body}, {ID: "B1", Flow: "B", Body: body}}}); err != nil {
				t.Fatal(err)
			}
			cr, err := q.Claim(ctx, fairrelay.ClaimParams{At: top - 3, Limit: 2})
			if err != nil || len(cr.Claims) != 2 {
				t.Fatalf("claim at MaxTick-3: %+v, %v", cr, err)
			}
			for _, c := range cr.Claims {
				if c.LeaseUntil != top {
					t.Errorf("%s: lease until %d, want MaxTick %d (the lease of 5 ticks would end beyond it)", c.Token.EventID, c.LeaseUntil, int64(top))
				}
			}
			b := cr.Claims[1]
			if b.Token.EventID != "B1" {
				t.Fatalf("second claim %s, want B1", b.Token.EventID)
			}
			sr, err := q.SettleMany(ctx, fairrelay.SettleManyParams{At: top - 1, Settles: []fairrelay.Settlement{{Token: b.Token, Outcome: fairrelay.OutcomeRetry}}})
			if err != nil || sr.Results[0].Status != fairrelay.SettleReady || sr.Results[0].NextAt != top {
				t.Fatalf("retry of B1 at MaxTick-1: %+v, %v; want ready, next_at MaxTick", sr, err)
			}
			// At MaxTick both flows go on: A1's lease ran out (claimed
			// again, generation 2), B1 is due.
			cr, err = q.Claim(ctx, fairrelay.ClaimParams{At: top, Limit: 2})
			if err != nil || len(cr.Claims) != 2 {
				t.Fatalf("claim at MaxTick: %+v, %v; want A1 and B1 again", cr, err)
			}
			for _, c := range cr.Claims {
				if c.Token.Generation != 2 {
					t.Errorf("%s claimed at generation %d, want 2", c.Token.EventID, c.Token.Generation)
				}
			}
		})
	}
}
