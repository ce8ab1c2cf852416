package fairrelay_test

import (
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/harness/queuetest"
	"github.com/fairrelay/fairrelay/internal/pgtest"
)

// With Floor a write whose tick lies below the stored tick runs at
// the stored tick and reports it; without it, the same write fails with
// clock_regressed and changes nothing (SPEC §2, §7). On both backends, for
// an enqueue, a claim, a settle and an enqueue in the caller's transaction.
func TestTickFloor(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			dsn := filepath.Join(t.TempDir(), "queue.db")
			if backend == "postgres" {
				dsn = pgtest.Schema(t, "frfloor")
			}
			ctx := t.Context()
			q, err := fairrelay.Open(ctx, dsn, fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			if _, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: 10, Events: []fairrelay.NewEvent{{ID: "A1", Flow: "A", Body: []byte(`{"delta":1}`)}}}); err != nil {
				t.Fatal(err)
			}
			// Without the floor: refused, nothing written.
			if _, err := queuetest.Claims(q.Claim(ctx, fairrelay.ClaimParams{At: 7, Limit: 1})); !errors.Is(err, fairrelay.ErrClockRegressed) {
				t.Fatalf("claim at 7 after 10: %v, want clock_regressed", err)
			}
			// With Floor: run at the stored tick, and say so.
			cr, err := q.Claim(ctx, fairrelay.ClaimParams{At: 7, Limit: 1, Floor: true})
			if err != nil || len(cr.Claims) != 1 {
				t.Fatalf("claim at 7 with the floor: %+v, %v", cr, err)
			}
			cs := cr.Claims
			if lease := fairrelay.ReferencePolicy().Lease; cs[0].LeaseUntil != 10+lease {
				t.Errorf("lease until %d, want %d: the claim ran at the stored tick 10", cs[0].LeaseUntil, 10+lease)
			}
			sr, err := q.SettleMany(ctx, fairrelay.SettleManyParams{At: 3, Floor: true, Settles: []fairrelay.Settlement{{Token: cs[0].Token, Outcome: fairrelay.OutcomeAccepted}}})
			if err != nil || sr.Results[0].Status != fairrelay.SettleAcked {
				t.Fatalf("settle at 3 with the floor: %+v, %v", sr, err)
			}
			e1, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: 12, Floor: true, Events: []fairrelay.NewEvent{{ID: "A2", Flow: "A", Body: []byte(`{"delta":1}`)}}})
			if err != nil {
				t.Fatal(err)
			}
			e2, err := q.Enqueue(ctx, fairrelay.EnqueueParams{At: 0, Floor: true, ID: "A3", Flow: "A", Body: []byte(`{"delta":1}`)})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := []int64{cr.Tick, sr.Tick, e1[0].Tick, e2.Tick}, []int64{10, 10, 12, 12}; !slices.Equal(got, want) {
				t.Errorf("ticks reported %v, want %v", got, want)
			}
			c, err := q.Clock(ctx)
			if err != nil || c.Tick != 12 {
				t.Errorf("stored tick %+v (%v), want 12", c, err)
			}
		})
	}
}
