package fairrelay_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/pgtest"
)

// A write at a tick below the stored one fails with clock_regressed, and
// its message names AtStored: a Go caller who left At at 0 beside a moving
// store meant it, most likely. Every write that takes AtStored says the
// same, on both backends (PostgreSQL's enqueue is checked by its SQL
// function, the others in Go), and errors.Is still matches the sentinel.
func TestClockRegressedNamesAtStored(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			dsn := filepath.Join(t.TempDir(), "queue.db")
			if backend == "postgres" {
				dsn = pgtest.Schema(t, "frclockhint")
			}
			ctx := t.Context()
			q, err := fairrelay.Open(ctx, dsn, fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			body := []byte(`{"delta":1}`)
			if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "A1", Flow: "A", Body: body, At: 10}); err != nil {
				t.Fatal(err)
			}
			cr, err := q.Claim(ctx, fairrelay.ClaimParams{At: 10, Limit: 1})
			if err != nil || len(cr.Claims) != 1 {
				t.Fatalf("claim: %+v, %v", cr, err)
			}
			tok := cr.Claims[0].Token
			one := func(r any, err error) error { return err }
			weight := int64(2)
			for op, err := range map[string]error{
				"enqueue":   one(q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "B1", Flow: "B", Body: body})),
				"enqueue ":  one(q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{Events: []fairrelay.NewEvent{{ID: "B1", Flow: "B", Body: body}}})),
				"claim":     one(q.Claim(ctx, fairrelay.ClaimParams{Limit: 1})),
				"settle":    one(q.Settle(ctx, fairrelay.SettleParams{Token: tok, Outcome: fairrelay.OutcomeAccepted})),
				"settle ":   one(q.SettleMany(ctx, fairrelay.SettleManyParams{Settles: []fairrelay.Settlement{{Token: tok, Outcome: fairrelay.OutcomeAccepted}}})),
				"redrive":   one(q.Redrive(ctx, fairrelay.RedriveParams{EventID: "A1", ExpectedGeneration: 1, Reason: "r"})),
				"expedite":  one(q.Expedite(ctx, fairrelay.ExpediteParams{EventID: "A1", ExpectedGeneration: 1, Reason: "r"})),
				"pause":     one(q.Pause(ctx, fairrelay.FlowActionParams{Flow: "A", Reason: "r"})),
				"resume":    one(q.Resume(ctx, fairrelay.FlowActionParams{Flow: "A", Reason: "r"})),
				"configure": one(q.Configure(ctx, fairrelay.ConfigureParams{Group: "A", Weight: &weight})),
				"prune":     one(q.Prune(ctx, fairrelay.PruneParams{AckedBefore: 0, IDsBefore: 0})),
			} {
				op = strings.TrimSpace(op)
				want := op + " at tick 0: the store is at tick 10 (give At: fairrelay.AtStored to write at the store's current tick)"
				if !errors.Is(err, fairrelay.ErrClockRegressed) || err.Error() != want {
					t.Errorf("%s at 0: %v; want clock_regressed saying %q", op, err, want)
				}
			}
			if err := q.CheckTick(ctx, "enqueue", 0, false); !errors.Is(err, fairrelay.ErrClockRegressed) || !strings.Contains(err.Error(), "fairrelay.AtStored") {
				t.Errorf("CheckTick at 0: %v; want clock_regressed naming AtStored", err)
			}
			if c, err := q.Clock(ctx); err != nil || c.Tick != 10 {
				t.Errorf("stored tick %+v (%v), want 10: the refused writes changed nothing", c, err)
			}
		})
	}
}
