package fairrelay_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fairrelay/fairrelay"
)

// Queue.Events pages through the events by flow and then seq, bodies
// included, acked ones too, alike on every backend; the last event of a
// page asks for the next.
func TestEventsPageByFlowAndSeq(t *testing.T) {
	eachReferenceQueue(t, func(t *testing.T, q *fairrelay.Queue) {
		ctx := context.Background()
		evs := []fairrelay.NewEvent{
			{ID: "B1", Flow: "B", Body: []byte(`{"delta":1}`)},
			{ID: "A1", Flow: "A", Body: []byte{0xff, 0x00, 'x'}},
			{ID: "A2", Flow: "A", Body: []byte(`{"delta":2}`)},
			{ID: "C1", Flow: "C", Body: []byte(`{"delta":3}`)},
		}
		if _, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: 1, Events: evs}); err != nil {
			t.Fatal(err)
		}
		type got struct {
			ID, Flow string
			Seq      int64
			State    fairrelay.State
			Body     string
		}
		var all []got
		afterFlow, afterSeq := "", int64(0)
		for {
			es, err := q.Events(ctx, afterFlow, afterSeq, 3)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range es {
				all = append(all, got{e.ID, e.Flow, e.Seq, e.State, string(e.Body)})
			}
			if len(es) < 3 {
				break
			}
			afterFlow, afterSeq = es[len(es)-1].Flow, es[len(es)-1].Seq
		}
		want := []got{
			{"A1", "A", 1, fairrelay.StateReady, "\xff\x00x"},
			{"A2", "A", 2, fairrelay.StateReady, `{"delta":2}`},
			{"B1", "B", 1, fairrelay.StateReady, `{"delta":1}`},
			{"C1", "C", 1, fairrelay.StateReady, `{"delta":3}`},
		}
		if d := cmp.Diff(want, all); d != "" {
			t.Errorf("events in pages of 3 (-want +got):\n%s", d)
		}
		if _, err := q.Events(ctx, "", 0, 0); fairrelay.CodeOf(err) != fairrelay.CodeInvalidInput {
			t.Errorf("limit 0: %v, want invalid_input", err)
		}
		if _, err := q.Events(ctx, "A", -1, 1); fairrelay.CodeOf(err) != fairrelay.CodeInvalidInput {
			t.Errorf("after_seq -1: %v, want invalid_input", err)
		}
		// A seq with no flow would be ignored (every flow sorts after ""):
		// refused, naming it.
		var fe *fairrelay.Error
		if _, err := q.Events(ctx, "", 2, 1); !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != "after_seq" {
			t.Errorf("after_seq 2 without a flow: %v, want invalid_input naming after_seq", err)
		}
	})
}
