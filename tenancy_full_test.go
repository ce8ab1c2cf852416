package fairrelay_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/harness/conformance"
	"github.com/fairrelay/fairrelay/internal/harness/queuetest"
)

// TestFullChangesNothing: on random workloads with store, group and flow
// limits, every enqueue that answers full changed nothing but the tick
// (SPEC §8: the snapshot, the settings and the groups' backlogs are as
// before, the clock's tick is the enqueue's), and names the first limit
// that applies, in the order store, group, flow, as counted from the
// snapshot before it; an enqueue of a new id under every limit is never
// full. Limits are raised, lowered below the backlog and lifted as the run
// goes; events are claimed and acked, so backlogs move both ways.
func TestFullChangesNothing(t *testing.T) {
	forWorkloads(t, func(t *testing.T, b conformance.Backend, rng *rand.Rand) {
		ctx := context.Background()
		q := referenceQueue(t, b)
		flows := []string{"a", "b", "c", "d", "e", "f"}
		groups := []string{"", "g1", "g2"}
		groupOf := map[string]string{"a": "g1", "b": "g1", "c": "g2", "d": "g2"} // e, f: their own
		var tokens []fairrelay.Settlement
		at, nextID := int64(0), 0
		full := map[string]int{}
		configure := func(p fairrelay.ConfigureParams) {
			p.At = at
			if _, err := q.Configure(ctx, p); err != nil {
				t.Fatalf("configure %+v: %v", p, err)
			}
		}
		for i := range 400 {
			at += int64(rng.IntN(2))
			switch op := rng.IntN(20); {
			case op < 2:
				configure(fairrelay.ConfigureParams{MaxBacklog: ptr(int64(rng.IntN(2) * (10 + rng.IntN(30)))), MaxFlowBacklog: ptr(int64(rng.IntN(2) * (1 + rng.IntN(4))))})
			case op < 4:
				configure(fairrelay.ConfigureParams{Group: groups[1+rng.IntN(2)], MaxBacklog: ptr(int64(rng.IntN(3) * (1 + rng.IntN(8))))})
			case op < 7:
				_, cs, err := queuetest.SettleClaims(q.SettleMany(ctx, fairrelay.SettleManyParams{At: at, Settles: tokens, ClaimLimit: 1 + rng.IntN(4)}))
				if err != nil {
					t.Fatal(err)
				}
				tokens = tokens[:0]
				for _, c := range cs {
					tokens = append(tokens, fairrelay.Settlement{Token: c.Token, Outcome: fairrelay.OutcomeAccepted})
				}
			default:
				nextID++
				flow := flows[rng.IntN(len(flows))]
				p := fairrelay.EnqueueParams{ID: fmt.Sprintf("e%d", nextID), Flow: flow, Group: groupOf[flow], Body: []byte(`{"delta":1}`), At: at}
				if rng.IntN(4) == 0 {
					flow = fmt.Sprintf("n%d", i) // a new flow, in a group or its own
					p.Flow, p.Group = flow, groups[rng.IntN(len(groups))]
				}
				before, err := q.Snapshot(ctx)
				if err != nil {
					t.Fatal(err)
				}
				settings, groupInfo := readLimits(t, q)
				limit := firstLimit(before, settings, groupInfo, p)
				r, err := q.Enqueue(ctx, p)
				if err != nil {
					t.Fatalf("enqueue %+v: %v", p, err)
				}
				switch {
				case r.Status == fairrelay.EnqueueFull && r.Limit != limit:
					t.Fatalf("enqueue %s in flow %s: full naming %q, but the first limit reached is %q", p.ID, p.Flow, r.Limit, limit)
				case r.Status != fairrelay.EnqueueFull && limit != "":
					t.Fatalf("enqueue %s in flow %s: %+v, but the %s limit is reached", p.ID, p.Flow, r, limit)
				case r.Status != fairrelay.EnqueueFull:
					continue
				}
				full[r.Limit]++
				after, err := q.Snapshot(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if after.Clock.Tick != at {
					t.Fatalf("full enqueue at %d: the tick is %d", at, after.Clock.Tick)
				}
				before.Clock.Tick = at
				if d := cmp.Diff(before, after); d != "" {
					t.Fatalf("a full enqueue (%s limit) changed the store (-before +after):\n%s", r.Limit, d)
				}
				settings2, groupInfo2 := readLimits(t, q)
				if d := cmp.Diff(settings, settings2); d != "" {
					t.Fatalf("a full enqueue changed the settings or backlog (-before +after):\n%s", d)
				}
				if d := cmp.Diff(groupInfo, groupInfo2); d != "" {
					t.Fatalf("a full enqueue changed the groups (-before +after):\n%s", d)
				}
			}
		}
		t.Logf("full answers by limit: %v", full)
		for _, l := range []string{fairrelay.LimitStore, fairrelay.LimitGroup, fairrelay.LimitFlow} {
			if full[l] == 0 {
				t.Errorf("no enqueue answered full with the %s limit: the property was not exercised", l)
			}
		}
	})
}

func readLimits(t *testing.T, q *fairrelay.Queue) (fairrelay.Settings, map[string]fairrelay.GroupInfo) {
	t.Helper()
	s, err := q.Settings(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	gs, err := q.Groups(context.Background(), "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]fairrelay.GroupInfo{}
	for _, g := range gs {
		out[g.Group] = g
	}
	return s, out
}

// firstLimit is the limit an enqueue of the new id p would go over (SPEC
// §8: store, group, flow, the first that applies), "" for none, counted
// from a snapshot: events not acked, in all, in the flow's group, in the
// flow.
func firstLimit(s *fairrelay.Snapshot, settings fairrelay.Settings, groups map[string]fairrelay.GroupInfo, p fairrelay.EnqueueParams) string {
	group := p.Group
	if group == "" {
		group = p.Flow
	}
	flowGroup := map[string]string{}
	for _, f := range s.Flows {
		flowGroup[f.Flow] = f.Group
		if f.Flow == p.Flow {
			group = f.Group
		}
	}
	var store, inGroup, inFlow int64
	for _, e := range s.Events {
		if e.State == fairrelay.StateAcked {
			continue
		}
		store++
		if flowGroup[e.Flow] == group {
			inGroup++
		}
		if e.Flow == p.Flow {
			inFlow++
		}
	}
	g, isRow := groups[group]
	switch {
	case settings.MaxBacklog > 0 && store >= settings.MaxBacklog:
		return fairrelay.LimitStore
	case isRow && g.MaxBacklog != nil && inGroup >= *g.MaxBacklog:
		return fairrelay.LimitGroup
	case settings.MaxFlowBacklog > 0 && inFlow >= settings.MaxFlowBacklog:
		return fairrelay.LimitFlow
	}
	return ""
}
