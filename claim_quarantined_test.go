package fairrelay_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fairrelay/fairrelay"
)

// A claim that quarantines an expired inflight head whose round used the
// whole budget (SPEC §2) says so in ClaimResult.Quarantined, and a
// SettleMany's claims in SettleManyResult.Quarantined, so that a
// dispatcher can report it: no settle answers it. Under the reference
// policy (lease 5, budget 3), A1 claimed at 0, 10 and 20 and never settled
// is quarantined by the claim at 30, which takes B1 instead.
func TestClaimReportsTheHeadsItQuarantines(t *testing.T) {
	eachReferenceQueue(t, func(t *testing.T, q *fairrelay.Queue) {
		ctx := context.Background()
		if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "A1", Flow: "A", Body: []byte(`{"delta":1}`), At: 0}); err != nil {
			t.Fatal(err)
		}
		for _, at := range []int64{0, 10, 20} {
			cr, err := q.Claim(ctx, fairrelay.ClaimParams{At: at})
			if err != nil || len(cr.Claims) != 1 || len(cr.Quarantined) != 0 {
				t.Fatalf("claim at %d: %+v %v, want A1 claimed, nothing quarantined", at, cr, err)
			}
		}
		if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "B1", Flow: "B", Body: []byte(`{"delta":1}`), At: 25}); err != nil {
			t.Fatal(err)
		}
		r, err := q.SettleMany(ctx, fairrelay.SettleManyParams{At: 30, ClaimLimit: 2})
		if err != nil {
			t.Fatal(err)
		}
		want := []fairrelay.Quarantined{{ID: "A1", Flow: "A", Seq: 1, Generation: 3, Attempts: 3, Reason: fairrelay.ReasonBudgetExhausted}}
		if d := cmp.Diff(want, r.Quarantined); d != "" {
			t.Errorf("SettleMany's claims quarantined (-want +got):\n%s", d)
		}
		if len(r.Claims) != 1 || r.Claims[0].Token.EventID != "B1" {
			t.Errorf("claims %+v, want B1 only", r.Claims)
		}
		// Claim, the same, on a second flow.
		if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "C1", Flow: "C", Body: []byte(`{"delta":1}`), At: 30}); err != nil {
			t.Fatal(err)
		}
		for _, at := range []int64{40, 50} { // B1's lease ran out at 35: claimed again at 40, 50
			if _, err := q.Claim(ctx, fairrelay.ClaimParams{At: at, Limit: 2}); err != nil {
				t.Fatal(err)
			}
		}
		cr, err := q.Claim(ctx, fairrelay.ClaimParams{At: 60, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, x := range cr.Quarantined {
			ids = append(ids, x.ID)
		}
		if d := cmp.Diff([]string{"B1"}, ids); d != "" {
			t.Errorf("claim at 60 quarantined (-want +got):\n%s\n%+v", d, cr)
		}
	})
}
