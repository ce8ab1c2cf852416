package fairrelay_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fairrelay/fairrelay"
)

// A reason that is blank after trimming — tabs, line breaks and the
// Unicode separators included — is SPEC §2's empty_reason rejection for
// every audited action, not an input error (a breaker's report: "\t" and
// "\n" answered invalid_input for their control characters), and writes
// nothing. A control character inside a reason that is not blank is still
// invalid_input naming reason (CheckReason: one audit row, one line).
func TestBlankReasonsAreRejectedAsEmpty(t *testing.T) {
	eachReferenceQueue(t, func(t *testing.T, q *fairrelay.Queue) {
		ctx := context.Background()
		if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "A1", Flow: "A", Body: []byte(`{"delta":1}`), At: 1}); err != nil {
			t.Fatal(err)
		}
		before, err := q.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, reason := range []string{"", " ", "\t", "\n", " \r\n\t ", "\u2028", "\u00a0"} {
			r, err := q.Redrive(ctx, fairrelay.RedriveParams{EventID: "A1", ExpectedGeneration: 0, Reason: reason, At: 2})
			if err != nil || r.RejectReason != fairrelay.RejectEmptyReason {
				t.Errorf("redrive, reason %q: %+v %v, want rejected empty_reason", reason, r, err)
			}
			a, err := q.Expedite(ctx, fairrelay.ExpediteParams{EventID: "A1", ExpectedGeneration: 0, Reason: reason, At: 2})
			if err != nil || a.RejectReason != fairrelay.RejectEmptyReason {
				t.Errorf("expedite, reason %q: %+v %v, want rejected empty_reason", reason, a, err)
			}
			for name, act := range map[string]func(context.Context, fairrelay.FlowActionParams) (fairrelay.ActionResult, error){"pause": q.Pause, "resume": q.Resume} {
				a, err := act(ctx, fairrelay.FlowActionParams{Flow: "A", Reason: reason, At: 2})
				if err != nil || a.RejectReason != fairrelay.RejectEmptyReason {
					t.Errorf("%s, reason %q: %+v %v, want rejected empty_reason", name, reason, a, err)
				}
			}
		}
		after, err := q.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if after.Clock != before.Clock || len(after.Audit) != len(before.Audit) {
			t.Errorf("rejections wrote: clock %+v → %+v, audit %d → %d rows", before.Clock, after.Clock, len(before.Audit), len(after.Audit))
		}
		_, err = q.Pause(ctx, fairrelay.FlowActionParams{Flow: "A", Reason: "on\thold", At: 2})
		var fe *fairrelay.Error
		if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != "reason" {
			t.Errorf("pause, reason with a tab inside: %v, want invalid_input naming reason", err)
		}
	})
}
