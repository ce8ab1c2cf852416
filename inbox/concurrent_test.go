package inbox_test

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/pgtest"
)

// TestConcurrentDeliveriesOfOneEvent: a relay whose lease ran out
// redelivers an event while the first delivery is still in flight, so one
// event can arrive twice at the same moment. Both receives must answer by
// SPEC §3 as if one came first: accepted and duplicate — never an error,
// and never a sequence_conflict, which would quarantine a delivered event.
// Each round also sends the flow's next event alongside, which may answer
// gap (transient) but must not disturb the two. Run on both backends.
func TestConcurrentDeliveriesOfOneEvent(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			dsn := filepath.Join(t.TempDir(), "inbox.db")
			if backend == "postgres" {
				dsn = pgtest.Schema(t, "frinrace")
			}
			in, err := inbox.Open(t.Context(), dsn, inbox.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			const rounds = 100
			accepted := map[string]int64{} // flow → seq accepted
			for i := range rounds {
				flow := fmt.Sprintf("F%d", i%7)
				seq := accepted[flow] + 1
				d := inbox.Delivery{EventID: fmt.Sprintf("%s-%d", flow, seq), Flow: flow, Seq: seq, Body: []byte(`{"delta":1}`)}
				next := inbox.Delivery{EventID: fmt.Sprintf("%s-%d", flow, seq+1), Flow: flow, Seq: seq + 1, Body: []byte(`{"delta":1}`)}
				var wg sync.WaitGroup
				outs := make([]fairrelay.Outcome, 3)
				errs := make([]error, 3)
				for g, dv := range []inbox.Delivery{d, d, next} {
					wg.Go(func() { outs[g], errs[g] = in.Receive(t.Context(), dv) })
				}
				wg.Wait()
				for g, err := range errs {
					if err != nil {
						t.Fatalf("round %d: receive %d: %v", i, g, err)
					}
				}
				pair := []fairrelay.Outcome{outs[0], outs[1]}
				if !cmp.Equal(pair, []fairrelay.Outcome{fairrelay.OutcomeAccepted, fairrelay.OutcomeDuplicate}) &&
					!cmp.Equal(pair, []fairrelay.Outcome{fairrelay.OutcomeDuplicate, fairrelay.OutcomeAccepted}) {
					t.Fatalf("round %d: one event delivered twice at once answered %v, want accepted and duplicate", i, pair)
				}
				accepted[flow] = seq
				switch outs[2] {
				case fairrelay.OutcomeAccepted:
					accepted[flow] = seq + 1
				case fairrelay.OutcomeGap:
				default:
					t.Fatalf("round %d: the flow's next event answered %s, want accepted or gap", i, outs[2])
				}
			}
			snap, err := in.Snapshot(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]int64{}
			for f, p := range snap.ByFlow() {
				if p.Total != p.Seq {
					t.Errorf("flow %s: total %d after %d events of delta 1", f, p.Total, p.Seq)
				}
				got[f] = p.Seq
			}
			if d := cmp.Diff(accepted, got); d != "" {
				t.Errorf("projection (-accepted +stored):\n%s", d)
			}
		})
	}
}
