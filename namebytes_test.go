package fairrelay_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/harness/conformance"
)

// A name no stored row could hold — invalid UTF-8 or a NUL, which
// PostgreSQL's text cannot take — given to any operation answers as SPEC §2
// orders, the same on both backends: a write below the stored tick is
// clock_regressed, any other is invalid_input naming the field, and a read
// by id is invalid_input naming it. PostgreSQL answered each with a
// database error (SQLSTATE 22021) from the read or lock the write made
// before its checks, which a caller that retries database errors would
// retry for ever; SQLite answered not_found for a settle or an event read
// (a breaker's report: pause, resume, redrive, expedite, settle, the
// console's actions, waive, Event). A settle's outcome and detail, stored
// with the attempt, are held to the same: PostgreSQL failed the commit.
func TestNamesNoRowHoldsAnswerAsSPECOrders(t *testing.T) {
	t.Parallel()
	for _, b := range conformance.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			q := referenceQueue(t, b)
			if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "e1", Flow: "f1", Group: "g1", Body: []byte(`{}`), At: 10}); err != nil {
				t.Fatal(err)
			}
			cr, err := q.Claim(ctx, fairrelay.ClaimParams{At: 10, Limit: 1})
			if err != nil || len(cr.Claims) != 1 {
				t.Fatalf("claim: %+v %v", cr, err)
			}
			tok := cr.Claims[0].Token
			ops := []struct {
				name, field string
				call        func(name string, at int64) error
			}{
				{"Enqueue id", "id", func(n string, at int64) error {
					_, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: n, Flow: "f1", Body: []byte(`{}`), At: at})
					return err
				}},
				{"Enqueue flow", "flow", func(n string, at int64) error {
					_, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "e9", Flow: n, Body: []byte(`{}`), At: at})
					return err
				}},
				{"Enqueue group", "group", func(n string, at int64) error {
					_, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "e9", Flow: "f9", Group: n, Body: []byte(`{}`), At: at})
					return err
				}},
				{"Pause", "flow", func(n string, at int64) error {
					_, err := q.Pause(ctx, fairrelay.FlowActionParams{Flow: n, Reason: "r", At: at})
					return err
				}},
				{"Resume", "flow", func(n string, at int64) error {
					_, err := q.Resume(ctx, fairrelay.FlowActionParams{Flow: n, Reason: "r", At: at})
					return err
				}},
				{"Redrive", "id", func(n string, at int64) error {
					_, err := q.Redrive(ctx, fairrelay.RedriveParams{EventID: n, ExpectedGeneration: 1, Reason: "r", At: at})
					return err
				}},
				{"Expedite", "id", func(n string, at int64) error {
					_, err := q.Expedite(ctx, fairrelay.ExpediteParams{EventID: n, ExpectedGeneration: 1, Reason: "r", At: at})
					return err
				}},
				{"Settle", "id", func(n string, at int64) error {
					_, err := q.Settle(ctx, fairrelay.SettleParams{Token: fairrelay.Token{EventID: n, Generation: 1}, Outcome: fairrelay.OutcomeAccepted, At: at})
					return err
				}},
				{"SettleMany", "id", func(n string, at int64) error {
					_, err := q.SettleMany(ctx, fairrelay.SettleManyParams{At: at, Settles: []fairrelay.Settlement{
						{Token: tok, Outcome: fairrelay.OutcomeAccepted},
						{Token: fairrelay.Token{EventID: n, Generation: 1}, Outcome: fairrelay.OutcomeAccepted},
					}})
					return err
				}},
				// The text a settle stores with the attempt, on a live token:
				// PostgreSQL failed its commit with a database error (a
				// breaker's report).
				{"Settle outcome", "outcome", func(n string, at int64) error {
					_, err := q.Settle(ctx, fairrelay.SettleParams{Token: tok, Outcome: fairrelay.Outcome(n), At: at})
					return err
				}},
				{"Settle detail", "detail", func(n string, at int64) error {
					_, err := q.Settle(ctx, fairrelay.SettleParams{Token: tok, Outcome: fairrelay.OutcomeRetry, Detail: n, At: at})
					return err
				}},
				{"Configure", "group", func(n string, at int64) error {
					_, err := q.Configure(ctx, fairrelay.ConfigureParams{Group: n, Weight: ptr(int64(2)), At: at})
					return err
				}},
			}
			reads := []struct {
				name, field string
				call        func(name string) error
			}{
				{"Event", "id", func(n string) error { _, err := q.Event(ctx, n); return err }},
				{"Attempts", "id", func(n string) error { _, err := q.Attempts(ctx, n); return err }},
				{"Flow", "flow", func(n string) error { _, err := q.Flow(ctx, n); return err }},
			}
			before, err := q.Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"\xff", "a\x00b", "a\xc3"} {
				for _, op := range ops {
					if err := op.call(name, 5); !errors.Is(err, fairrelay.ErrClockRegressed) {
						t.Errorf("%s(%q) at tick 5, the store at 10: %v, want clock_regressed", op.name, name, err)
					}
					var fe *fairrelay.Error
					if err := op.call(name, 20); !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != op.field {
						t.Errorf("%s(%q) at tick 20: %v, want invalid_input naming %s", op.name, name, err, op.field)
					}
				}
				for _, r := range reads {
					var fe *fairrelay.Error
					if err := r.call(name); !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != r.field {
						t.Errorf("%s(%q): %v, want invalid_input naming %s", r.name, name, err, r.field)
					}
				}
			}
			after, err := q.Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if after.Clock != before.Clock || len(after.Events) != len(before.Events) || len(after.Audit) != len(before.Audit) {
				t.Errorf("refused operations changed the store: clock %+v → %+v, %d → %d events, %d → %d audit rows",
					before.Clock, after.Clock, len(before.Events), len(after.Events), len(before.Audit), len(after.Audit))
			}
		})
	}
}
