package relay_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/harness/conformance"
	"github.com/fairrelay/fairrelay/relay"
)

// The queue gauges count what paging through every flow's head counts —
// events not acked by state, and flows — on both backends, with ready,
// inflight, quarantined and acked heads, events behind them, flows in a
// group and on their own, and paused flows (one with an inflight head);
// they read Overview's exact counts instead of a read per 1000 flows.
// Overview's MaxCount bounds its counts, and a negative one is refused
// naming max_count.
func TestQueueGaugesCountWhatTheHeadsHold(t *testing.T) {
	t.Parallel()
	for _, b := range conformance.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			path, _ := b.New(t)
			q, err := fairrelay.Open(ctx, path, fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			at := int64(0)
			// Flows F0..F6 of 1 to 3 events; F4..F6 in group g.
			for f := range 7 {
				group := ""
				if f >= 4 {
					group = "g"
				}
				for s := range 1 + f%3 {
					at++
					p := fairrelay.EnqueueParams{ID: fmt.Sprintf("e%d-%d", f, s), Flow: fmt.Sprintf("F%d", f), Group: group, Body: []byte(`{"delta":1}`), At: at}
					if _, err := q.Enqueue(ctx, p); err != nil {
						t.Fatal(err)
					}
				}
			}
			at++
			cr, err := q.Claim(ctx, fairrelay.ClaimParams{At: at, Limit: 5})
			if err != nil || len(cr.Claims) != 5 {
				t.Fatalf("claim: %+v %v", cr, err)
			}
			// Of the five heads claimed: two acked, two quarantined, one
			// left inflight; two flows' heads stay ready.
			for i, c := range cr.Claims[:4] {
				at++
				out := fairrelay.OutcomeAccepted
				if i >= 2 {
					out = fairrelay.OutcomeUnsupportedDelta
				}
				if _, err := q.Settle(ctx, fairrelay.SettleParams{Token: c.Token, Outcome: out, At: at}); err != nil {
					t.Fatal(err)
				}
			}
			// The inflight head's flow paused (it leaves the due index on
			// PostgreSQL, where its inflight head was counted nowhere: a
			// breaker's report), and a flow whose head is ready.
			at++
			if _, err := q.Pause(ctx, fairrelay.FlowActionParams{Flow: cr.Claims[4].Flow, Reason: "hold", At: at}); err != nil {
				t.Fatal(err)
			}
			readyFlow := ""
			for f := range 7 {
				if n := fmt.Sprintf("F%d", f); !slices.ContainsFunc(cr.Claims, func(c fairrelay.Claim) bool { return c.Flow == n }) {
					readyFlow = n
				}
			}
			at++
			if _, err := q.Pause(ctx, fairrelay.FlowActionParams{Flow: readyFlow, Reason: "hold", At: at}); err != nil {
				t.Fatal(err)
			}
			// What the heads hold, flow by flow (the gauges' definition).
			want := map[string]float64{"ready": 0, "inflight": 0, "quarantined": 0, "flows": 0, "paused": 0}
			hs, err := q.Heads(ctx, "", 1000)
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range hs {
				want["flows"]++
				if h.Paused {
					want["paused"]++
				}
				if h.Head != nil {
					want[string(h.Head.State)]++
					want["ready"] += float64(h.Seq - h.Head.Seq)
				}
			}
			if want["inflight"] != 1 || want["quarantined"] != 2 || want["flows"] != 7 || want["paused"] != 2 {
				t.Fatalf("the store's heads: %v, want 1 inflight, 2 quarantined, 7 flows, 2 paused", want)
			}
			reg := prometheus.NewRegistry()
			if err := relay.RegisterQueueGauges(reg, q); err != nil {
				t.Fatal(err)
			}
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]float64{}
			for _, mf := range mfs {
				for _, m := range mf.GetMetric() {
					switch mf.GetName() {
					case "fairrelay_events":
						got[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
					case "fairrelay_flows":
						got["flows"] = m.GetGauge().GetValue()
					case "fairrelay_flows_paused":
						got["paused"] = m.GetGauge().GetValue()
					}
				}
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("gauges (-heads +gauges):\n%s", d)
			}

			o, err := q.Overview(ctx, fairrelay.OverviewParams{MaxCount: 1})
			if err != nil || o.Quarantined != 1 || o.Inflight != 1 || o.FlowsCounted {
				t.Errorf("Overview MaxCount 1: %+v %v, want each count at most 1 and no flow count", o, err)
			}
			var fe *fairrelay.Error
			if _, err := q.Overview(ctx, fairrelay.OverviewParams{MaxCount: -1}); !errors.As(err, &fe) || fe.Field != "max_count" {
				t.Errorf("Overview MaxCount -1: %v, want invalid_input naming max_count", err)
			}
		})
	}
}
