package fairrelay_test

import (
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/pgtest"
)

// Under WithTickFloor a write whose tick lies below the stored tick runs at
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
			if _, err := q.EnqueueBatch(ctx, 10, []fairrelay.EnqueueParams{{ID: "A1", Flow: "A", Body: []byte(`{"delta":1}`)}}); err != nil {
				t.Fatal(err)
			}
			// Without the floor: refused, nothing written.
			if _, err := q.ClaimBatch(ctx, 7, 1); !errors.Is(err, fairrelay.ErrClockRegressed) {
				t.Fatalf("claim at 7 after 10: %v, want clock_regressed", err)
			}
			var ran []int64
			floor := fairrelay.WithTickFloor(ctx, func(tick int64) { ran = append(ran, tick) })
			cs, err := q.ClaimBatch(floor, 7, 1)
			if err != nil || len(cs) != 1 {
				t.Fatalf("claim at 7 under the floor: %v, %v", cs, err)
			}
			if lease := fairrelay.ReferencePolicy().Lease; cs[0].LeaseUntil != 10+lease {
				t.Errorf("lease until %d, want %d: the claim ran at the stored tick 10", cs[0].LeaseUntil, 10+lease)
			}
			rs, err := q.SettleBatch(floor, 3, []fairrelay.SettleParams{{Token: cs[0].Token, Outcome: fairrelay.OutcomeAccepted}})
			if err != nil || rs[0].Status != fairrelay.SettleAcked {
				t.Fatalf("settle at 3 under the floor: %+v, %v", rs, err)
			}
			if _, err := q.EnqueueBatch(floor, 12, []fairrelay.EnqueueParams{{ID: "A2", Flow: "A", Body: []byte(`{"delta":1}`)}}); err != nil {
				t.Fatal(err)
			}
			if _, err := q.EnqueueBatch(floor, 0, []fairrelay.EnqueueParams{{ID: "A3", Flow: "A", Body: []byte(`{"delta":1}`)}}); err != nil {
				t.Fatal(err)
			}
			if want := []int64{10, 10, 12, 12}; !slices.Equal(ran, want) {
				t.Errorf("ticks reported %v, want %v", ran, want)
			}
			c, err := q.Clock(ctx)
			if err != nil || c.Tick != 12 {
				t.Errorf("stored tick %+v (%v), want 12", c, err)
			}
		})
	}
}
