package relay

import (
	"fmt"
	"slices"
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

// The long groups (their deliveries hold a slot 10 ms or more) together
// take at most their weighted share of the slots while other groups are
// active; with every group long, or none, only the charges decide.
func TestLongRoomBoundsTheLongGroupsToTheirShare(t *testing.T) {
	src := &stepTime{}
	ts := newTimeshare(src, 8, time.Second, 0, nil)
	at := src.d
	ts.claimed([]fairrelay.Claim{{Group: "slow1"}, {Group: "slow2"}, {Group: "slow3"}, {Group: "fast1"}, {Group: "fast2"}, {Group: "fast3"}})
	if room, long := ts.longRoom(4); room != 4 || long != nil {
		t.Errorf("before any delivery ended: room %d, long %v; want 4, none", room, long)
	}
	src.d = time.Millisecond
	for _, g := range []string{"fast1", "fast2", "fast3"} {
		ts.released(g, at)
	}
	src.d = 2 * time.Second
	// slow1-3 hold their slots for 2 s now: long by the deliveries under
	// way. Share: 8 slots × 3 of 6 groups = 4; held 3; room 1.
	room, long := ts.longRoom(4)
	slices.Sort(long)
	if room != 1 || !slices.Equal(long, []string{"slow1", "slow2", "slow3"}) {
		t.Errorf("three long groups holding 3 of their 4: room %d, long %v; want 1, [slow1 slow2 slow3]", room, long)
	}
	if room, long := ts.longRoom(1); room != 1 || long != nil {
		t.Errorf("one free slot, room for it: room %d, long %v; want 1, none", room, long)
	}
	ts.claimed([]fairrelay.Claim{{Group: "slow1"}, {Group: "slow2"}})
	if room, long := ts.longRoom(2); room != -1 || len(long) != 3 {
		t.Errorf("holding 5 of their 4: room %d, long %v; want -1 and all three", room, long)
	}
	for _, g := range []string{"slow1", "slow1", "slow2", "slow2", "slow3"} {
		ts.released(g, at)
	}
	// Ended, still long by their holds: room 4 again.
	if room, long := ts.longRoom(5); room != 4 || len(long) != 3 {
		t.Errorf("after their answers: room %d, long %v; want 4 and all three", room, long)
	}
	// Weights count: fast1 of weight 6 makes the long share 8 × 3/11 =
	// 2.2, rounded down (up, it would be a whole slot more).
	ts.weights = map[string]int64{"fast1": 6}
	if room, _ := ts.longRoom(5); room != 2 {
		t.Errorf("weighted: room %d, want 2", room)
	}
	// A share below one slot still gets one: weight 22 beside the long
	// groups' 3 makes it 8 × 3/27 = 0.9 (rounded down, 0: the long groups
	// would be left out of every full claim, for good).
	ts.weights = map[string]int64{"fast1": 22}
	if room, _ := ts.longRoom(5); room != 1 {
		t.Errorf("a share below one slot: room %d, want 1", room)
	}
	// Every active group long: the charges alone decide.
	ts.weights = map[string]int64{}
	src.d += 10 * time.Second // the fast groups go idle: unseen, and
	ts.came(true)             // two claims came back short since
	ts.came(true)
	ts.claimed([]fairrelay.Claim{{Group: "slow1"}})
	if room, long := ts.longRoom(5); room != 5 || long != nil {
		t.Errorf("only long groups active: room %d, long %v; want 5, none", room, long)
	}
}

// An idle group re-enters at the floor V, which is never below the
// smallest charge of the active groups (SPEC §11's entry point: no credit
// banked below it), and keeps a debt it had.
func TestIdleGroupReentersAtTheFloor(t *testing.T) {
	src := &stepTime{}
	ts := newTimeshare(src, 8, 10*time.Millisecond, 0, nil)
	ts.plan(8, relaxNone)
	ts.claimed([]fairrelay.Claim{{Group: "a"}, {Group: "b"}})
	src.d = 5 * time.Millisecond
	ts.released("a", 0) // a: 5 ms, answered so fast it uses little of its share
	src.d = 30 * time.Millisecond
	ts.plan(8, relaxNone) // the floor: 8 slots over 2 groups for 30 ms, 120 ms
	if f := time.Duration(ts.floor); f != 120*time.Millisecond {
		t.Fatalf("floor %s, want 120ms", f)
	}
	ts.claimed([]fairrelay.Claim{{Group: "c"}})
	if got, least := effectiveOf(ts, "c"), effectiveOf(ts, "a"); got != 120*time.Millisecond || got < least {
		t.Errorf("c entered at %s, want the floor 120ms, not below the smallest active charge %s", got, least)
	}
	ts.groups["d"] = &groupTime{charge: float64(time.Second)}
	ts.claimed([]fairrelay.Claim{{Group: "d"}})
	if got := effectiveOf(ts, "d"); got != time.Second {
		t.Errorf("d, idle with a debt, entered at %s, want its own 1s", got)
	}
}

// The charges of deliveries under way grow between the claim's plan (which
// raises V to the smallest active charge) and its return: an idle group
// then enters at the smallest active charge, not below it at V (a
// breaker's case: 250 ms of credit).
func TestIdleGroupEntersNoLowerThanTheActiveCharges(t *testing.T) {
	src := &stepTime{}
	ts := newTimeshare(src, 8, 10*time.Millisecond, 0, nil)
	ts.plan(8, relaxNone)
	a := claimsOf("a", 7)
	ts.claimed(a)
	src.d = 100 * time.Millisecond
	ts.plan(8, relaxNone) // V: 8 slots for 100 ms over one group, 800 ms; a at 700 ms
	src.d = 150 * time.Millisecond
	ts.claimed([]fairrelay.Claim{{Group: "b"}}) // the claim returns: a at 7 × 150 ms
	if got, want := effectiveOf(ts, "b"), 1050*time.Millisecond; got != want {
		t.Errorf("b entered at %s, want a's %s (V is 800ms)", got, want)
	}
}

// claimsOf is n claims of group g.
func claimsOf(g string, n int) []fairrelay.Claim {
	cs := make([]fairrelay.Claim, n)
	for i := range cs {
		cs[i].Group = g
	}
	return cs
}

// effectiveOf is group g's effective charge now.
func effectiveOf(ts *timeshare, g string) time.Duration {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return time.Duration(ts.effective(g, ts.groups[g], ts.src.Elapsed()))
}

// A claim raises a group behind the floor by its effective charge, which
// counts its deliveries under way, as the floor does: raising the charge of
// its ended deliveries to the floor counted those under way twice, and a
// group with many short deliveries under way ran ahead of its share at
// every claim.
func TestClaimRaisesTheEffectiveCharge(t *testing.T) {
	src := &stepTime{}
	ts := newTimeshare(src, 8, 10*time.Millisecond, 0, nil)
	ts.plan(8, relaxNone)
	ts.claimed([]fairrelay.Claim{{Group: "a"}, {Group: "a"}, {Group: "a"}, {Group: "a"}, {Group: "b"}})
	src.d = time.Second
	ts.plan(8, relaxNone) // the floor: 8 slots over 2 groups for 1 s, 4 s
	if f := time.Duration(ts.floor); f != 4*time.Second {
		t.Fatalf("floor %s, want 4s", f)
	}
	// b holds one delivery 1 s under way: effective 1 s, behind the
	// floor; nothing has ended, so it banks at most a quantum.
	ts.claimed([]fairrelay.Claim{{Group: "b"}})
	if got, want := effectiveOf(ts, "b"), 4*time.Second-10*time.Millisecond; got != want {
		t.Errorf("b's effective charge after its claim %s, want the floor less a quantum, %s", got, want)
	}
}

// A group behind the floor because another group's long deliveries held
// the slots beyond that group's share keeps that debt, up to those slots
// × MaxHold / weight, and no more.
func TestClaimKeepsTheDebtOfAGroupWithoutASlot(t *testing.T) {
	src := &stepTime{}
	ts := newTimeshare(src, 8, 10*time.Millisecond, 0, nil)
	ts.plan(8, relaxNone)
	a := claimsOf("a", 7)
	ts.claimed([]fairrelay.Claim{{Group: "b"}})
	ts.claimed(a) // 7 slots of 8, beyond a's share of two groups, 4
	src.d = 50 * time.Millisecond
	ts.released("b", 0) // b: 50 ms; a holds 7 slots for 1 s
	src.d = time.Second
	for range a {
		ts.released("a", 0) // a: 7 s, peak 7, longest hold 1 s
	}
	ts.plan(8, relaxNone) // the floor: 4 s
	ts.claimed([]fairrelay.Claim{{Group: "b"}})
	if got, want := effectiveOf(ts, "b"), 50*time.Millisecond; got != want {
		t.Errorf("b's effective charge after its claim %s, want its own %s: a held the slots", got, want)
	}
	src.d = 3 * time.Second
	ts.plan(8, relaxNone) // the floor: 4 s + 2 s × 4 = 12 s
	ts.claimed([]fairrelay.Claim{{Group: "b"}})
	if got, want := effectiveOf(ts, "b"), 12*time.Second-7*time.Second; got != want {
		t.Errorf("b's effective charge after its second claim %s, want the floor less a's 7 slots × 1 s, %s", got, want)
	}
}

// Slots held within a group's share, rounded up, do not count: with more
// groups than slots each group holding its one slot is beyond its fraction
// of a slot, and counting those let a group that trails the floor on one
// relay while its flows are busy on another bank a whole delivery.
func TestClaimCountsNoSlotWithinAShare(t *testing.T) {
	src := &stepTime{}
	ts := newTimeshare(src, 2, 10*time.Millisecond, 0, nil)
	ts.plan(2, relaxNone)
	ts.claimed([]fairrelay.Claim{{Group: "b"}})
	ts.claimed([]fairrelay.Claim{{Group: "x"}})
	src.d = 50 * time.Millisecond
	ts.released("b", 0)
	ts.claimed([]fairrelay.Claim{{Group: "y"}}) // x and y: one slot each of 2, among 3 groups
	src.d = time.Second
	ts.released("x", 0)
	ts.released("y", 50*time.Millisecond)
	ts.plan(2, relaxNone)
	f := time.Duration(ts.floor)
	ts.claimed([]fairrelay.Claim{{Group: "b"}})
	if got, want := effectiveOf(ts, "b"), f-10*time.Millisecond; got != want {
		t.Errorf("b's effective charge after its claim %s, want the floor %s less a quantum, %s", got, f, want)
	}
}
