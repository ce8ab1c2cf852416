package relay

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairrelay/fairrelay"
)

// The group label is bounded: the first MetricGroups groups get their own
// series, every later one OtherGroups.
func TestGroupLabelIsBounded(t *testing.T) {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for i := range MetricGroups + 10 {
		g := fmt.Sprintf("g%03d", i)
		m.groupSlotTime(g, time.Millisecond)
		want := g
		if i >= MetricGroups {
			want = OtherGroups
		}
		if got := m.groupLabel(g); got != want {
			t.Fatalf("label of group %d: %q, want %q", i, got, want)
		}
	}
	if n := len(m.labelled); n != MetricGroups {
		t.Errorf("%d groups labelled, want %d", n, MetricGroups)
	}
}

// plan leaves out the groups at their cap and the groups a quantum ahead,
// and claims no more heads than the smallest room left under a cap.
func TestPlanExcludesAndBoundsTheClaim(t *testing.T) {
	src := &stepTime{}
	ts := newTimeshare(src, 1, 10*time.Millisecond, 2, nil)
	ts.caps = map[string]int64{"one": 1}
	start := ts.claimed([]fairrelay.Claim{{Group: "a"}, {Group: "a"}, {Group: "b"}})
	src.d = 50 * time.Millisecond
	ts.released("b", start) // b: 50 ms; a holds 2 (its cap), accruing
	limit, capped, ahead := ts.plan(8, relaxNone)
	if limit != 1 || len(capped) != 1 || capped[0] != "a" || len(ahead) != 0 {
		// "one" (cap 1, nothing held) bounds the claim to 1; a is at its
		// cap; b (50 ms) is the floor.
		t.Errorf("plan: limit %d, capped %v, ahead %v; want 1, [a], []", limit, capped, ahead)
	}
	ts.claimed([]fairrelay.Claim{{Group: "c"}}) // c enters at the floor
	src.d = 100 * time.Millisecond
	ts.released("c", 50*time.Millisecond) // c: 50 + 50 ms, b: 50 ms
	if _, _, ahead := ts.plan(8, relaxNone); len(ahead) != 1 || ahead[0] != "c" {
		t.Errorf("ahead %v, want [c]: 100 ms, the floor 67 ms (b at 50 ms, then one slot over three groups for 50 ms), quantum 10 ms", ahead)
	}
	if _, _, ahead := ts.plan(8, relaxAll); len(ahead) != 0 {
		t.Errorf("relaxed: ahead %v, want none", ahead)
	}
}
