package fairrelay_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fairrelay/fairrelay"
)

// The reads of one event, Attempts and Event, answer not_found for a pruned
// event's id and say that it was pruned, with its flow, seq and acked tick
// (a fresh user's report: enqueue of the id answered existing while inspect
// attempts answered "no event with id", with nothing to tie the two). An id
// never enqueued keeps the plain answer. The writes that name an event
// (redrive, expedite, settle) answer the same.
func TestCallsOnAPrunedEventSayItWasPruned(t *testing.T) {
	eachReferenceQueue(t, func(t *testing.T, q *fairrelay.Queue) {
		ctx := context.Background()
		if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "A1", Flow: "A", Body: []byte(`{"delta":1}`), At: 1}); err != nil {
			t.Fatal(err)
		}
		cr, err := q.Claim(ctx, fairrelay.ClaimParams{At: 2, Limit: 1})
		if err != nil || len(cr.Claims) != 1 {
			t.Fatalf("claim: %+v %v", cr, err)
		}
		if _, err := q.Settle(ctx, fairrelay.SettleParams{Token: cr.Claims[0].Token, Outcome: fairrelay.OutcomeAccepted, At: 3}); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Attempts(ctx, "A1"); err != nil {
			t.Fatalf("attempts before the prune: %v", err)
		}
		if r, err := q.Prune(ctx, fairrelay.PruneParams{At: 4, AckedBefore: 4}); err != nil || r.Events != 1 {
			t.Fatalf("prune: %+v %v", r, err)
		}
		const want = `no event with id "A1": it was pruned (seq 1 of flow "A", acked at tick 3)`
		_, err = q.Attempts(ctx, "A1")
		if fairrelay.CodeOf(err) != fairrelay.CodeNotFound || !strings.Contains(err.Error(), want) {
			t.Errorf("attempts of the pruned id: %v, want not_found saying %q", err, want)
		}
		_, err = q.Event(ctx, "A1")
		if fairrelay.CodeOf(err) != fairrelay.CodeNotFound || !strings.Contains(err.Error(), want) {
			t.Errorf("event of the pruned id: %v, want not_found saying %q", err, want)
		}
		_, err = q.Attempts(ctx, "B1")
		if fairrelay.CodeOf(err) != fairrelay.CodeNotFound || strings.Contains(err.Error(), "pruned") {
			t.Errorf("attempts of an id never enqueued: %v, want not_found without pruned", err)
		}
		// The writes that name an event say the same (a fresh user: redrive
		// of a pruned id said only "no event"), and change nothing.
		token := cr.Claims[0].Token
		writes := []struct {
			name string
			call func(id string) error
		}{
			{"redrive", func(id string) error {
				_, err := q.Redrive(ctx, fairrelay.RedriveParams{EventID: id, ExpectedGeneration: 1, Reason: "r", At: 4})
				return err
			}},
			{"expedite", func(id string) error {
				_, err := q.Expedite(ctx, fairrelay.ExpediteParams{EventID: id, ExpectedGeneration: 1, Reason: "r", At: 4})
				return err
			}},
			{"settle", func(id string) error {
				tk := token
				tk.EventID = id
				_, err := q.Settle(ctx, fairrelay.SettleParams{Token: tk, Outcome: fairrelay.OutcomeAccepted, At: 4})
				return err
			}},
			{"settle many", func(id string) error {
				tk := token
				tk.EventID = id
				_, err := q.SettleMany(ctx, fairrelay.SettleManyParams{At: 4, ClaimLimit: 1,
					Settles: []fairrelay.Settlement{{Token: tk, Outcome: fairrelay.OutcomeAccepted}}})
				return err
			}},
		}
		before, err := q.Clock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range writes {
			if err := w.call("A1"); fairrelay.CodeOf(err) != fairrelay.CodeNotFound || !strings.Contains(err.Error(), want) {
				t.Errorf("%s of the pruned id: %v, want not_found saying %q", w.name, err, want)
			}
			if err := w.call("B1"); fairrelay.CodeOf(err) != fairrelay.CodeNotFound || strings.Contains(err.Error(), "pruned") ||
				!strings.Contains(err.Error(), `no event with id "B1"`) {
				t.Errorf("%s of an id never enqueued: %v, want not_found without pruned", w.name, err)
			}
		}
		if after, err := q.Clock(ctx); err != nil || after != before {
			t.Errorf("clock after the refused writes: %+v %v, want %+v", after, err, before)
		}
		// With its tombstone gone too, the id is unknown.
		if _, err := q.Prune(ctx, fairrelay.PruneParams{At: 5, AckedBefore: 5, IDsBefore: 5}); err != nil {
			t.Fatal(err)
		}
		_, err = q.Attempts(ctx, "A1")
		if fairrelay.CodeOf(err) != fairrelay.CodeNotFound || strings.Contains(err.Error(), "pruned") {
			t.Errorf("attempts once the tombstone is gone: %v, want not_found without pruned", err)
		}
	})
}
