package fairrelay_test

import (
	"fmt"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/harness/refmodel"
)

// fairnessTracker checks, under the fair policy, the bound of SPEC §7 in the
// two-level form of §8, against the model's dispatch state:
//
//   - Groups (§8's weighted bound): a group with an eligible head — a group
//     row, or a flow that is its own group — is claimed after at most as
//     many claims of other groups as the turns of the groups ahead of it
//     when it last became eligible: groups with a smaller served, or the
//     same served and an earlier creation (the fair policy's tie rule; new
//     groups join with served = the current ticket, after every group
//     already there). A group's turn is what is left of the turn it is in,
//     else its weight (1 for a flow that is its own group), so the bound is
//     at most the sum of the other groups' weights; with every weight 1 it
//     is §7's "as many claims as there were flows ahead of it".
//   - Flows inside a group (§2's rotation, by flow served): a flow whose
//     head is eligible is claimed after at most as many claims of other
//     flows of its group as there were flows of its group ahead of it.
//
// A group or flow is tracked from the first claim that finds it eligible; no
// claim ran between the moment it became eligible and that claim, and served
// and turns change only at claims, so the count is the same. A configure
// that sets a weight may lengthen a turn ahead: it ends every watch, and the
// next claim starts them again from the new state.
type fairnessTracker struct {
	on      bool
	groups  map[string]*fairnessWatch // by group
	flows   map[string]*fairnessWatch // by flow
	checked int                       // group claims checked
	// checkedRows counts the claims checked of groups that are rows (with
	// other flows or a weight), checkedMembers those checked inside such a
	// group against other members.
	checkedRows, checkedMembers int
	violations                  []string
}

type fairnessWatch struct {
	group  string // the flow's group, for a flow's watch
	bound  int    // turns (groups) or flows ahead when it became eligible
	claims int    // claims of other groups (other flows of the group) since
}

func (f *fairnessTracker) reset() {
	f.groups, f.flows = map[string]*fairnessWatch{}, map[string]*fairnessWatch{}
}

// before runs before a claim at tick at: it starts watching groups and flows
// that became eligible and stops watching those that are not eligible any
// more (their heads were quarantined, or they were paused). It returns the
// eligible flows.
func (f *fairnessTracker) before(r *propertyRun, at int64) map[string]bool {
	if !f.on || at < r.m.Tick() {
		return nil
	}
	eligible := r.m.Eligible(at)
	live := map[string]bool{}
	for _, p := range r.m.Positions() {
		if eligible[p.Flow] {
			live[p.Group] = true
		}
	}
	for g := range f.groups {
		if !live[g] {
			delete(f.groups, g)
		}
	}
	for fl := range f.flows {
		if !eligible[fl] {
			delete(f.flows, fl)
		}
	}
	gs := r.m.GroupPositions()
	for _, g := range gs {
		if !live[g.Group] || f.groups[g.Group] != nil {
			continue
		}
		ahead := 0
		for _, o := range gs {
			if o.Served < g.Served || (o.Served == g.Served && tieBefore(r.policy, o.Group, o.Ord, g.Group, g.Ord)) {
				ahead += int(o.Turn)
			}
		}
		f.groups[g.Group] = &fairnessWatch{group: g.Group, bound: ahead}
	}
	pos := r.m.Positions()
	for _, p := range pos {
		if !eligible[p.Flow] || f.flows[p.Flow] != nil {
			continue
		}
		ahead := 0
		for _, o := range pos {
			if o.Group == p.Group && (o.Served < p.Served || (o.Served == p.Served && tieBefore(r.policy, o.Flow, o.Ord, p.Flow, p.Ord))) {
				ahead++
			}
		}
		f.flows[p.Flow] = &fairnessWatch{group: p.Group, bound: ahead}
	}
	return eligible
}

// tieBefore is the policy's tie rule on equal served: creation order (fair)
// or name (seed).
func tieBefore(pol fairrelay.Policy, a string, aOrd int64, b string, bOrd int64) bool {
	if pol.Entry == fairrelay.EntryFair {
		return aOrd < bOrd
	}
	return a < b
}

// claim accounts one claim of flow c.Flow in group: the group's wait ends
// and must be within its bound, as must the flow's inside the group; every
// other watched group waited one more claim, and every other watched flow
// of the same group too.
func (f *fairnessTracker) claim(r *propertyRun, c fairrelay.Claim, group string, row bool, eligible map[string]bool) {
	if eligible == nil {
		return
	}
	if w := f.groups[group]; w != nil {
		if w.claims > w.bound {
			f.violations = append(f.violations, fmt.Sprintf("%s: group %s was claimed after %d claims of other groups, but the groups ahead of it when it became eligible had %d claims of turn left",
				r.lastTag, group, w.claims, w.bound))
		}
		f.checked++
		if row {
			f.checkedRows++
		}
		delete(f.groups, group)
	}
	for g, w := range f.groups {
		if g != group {
			w.claims++
		}
	}
	if w := f.flows[c.Flow]; w != nil {
		if w.claims > w.bound {
			f.violations = append(f.violations, fmt.Sprintf("%s: flow %s was claimed after %d claims of other flows of group %s, but only %d flows of it were ahead of it when its head became eligible",
				r.lastTag, c.Flow, w.claims, group, w.bound))
		}
		if row {
			f.checkedMembers++
		}
		delete(f.flows, c.Flow)
	}
	for fl, w := range f.flows {
		if fl != c.Flow && w.group == group {
			w.claims++
		}
	}
}

// groupOfClaim returns the group of a claimed flow as the model has it, and
// whether that group is a row of its own (not a flow that is its own group).
func groupOfClaim(m *refmodel.Model, flow string) (string, bool) {
	g := m.GroupOf(flow)
	return g, g != flow || m.IsGroupRow(g)
}

// TestFairnessTrackerCatchesOvertakes shows that the two checks of
// fairnessTracker can fail, on claim sequences made up to break them
// (the model only provides the dispatch state): a group of weight 3
// claimed a fourth time while a group of weight 1 waits, and a flow of a
// group claimed twice while another flow of it waits.
func TestFairnessTrackerCatchesOvertakes(t *testing.T) {
	t.Parallel()
	pol := fairrelay.ReferencePolicy()
	pol.Entry = fairrelay.EntryFair
	r := &propertyRun{t: t, policy: pol, m: refmodel.New(pol)}
	r.fair.reset()
	r.fair.on = true
	body := []byte(`{"delta":1}`)
	var evs []fairrelay.NewEvent
	for i, f := range []string{"h1", "h2", "h3", "h4", "g1", "g2"} {
		evs = append(evs, fairrelay.NewEvent{ID: fmt.Sprint("e", i), Flow: f, Group: string(f[0] - 'a' + 'A'), Body: body})
	}
	if _, err := r.m.EnqueueBatch(0, evs); err != nil {
		t.Fatal(err)
	}
	if _, err := r.m.Configure(fairrelay.ConfigureParams{Group: "H", Weight: ptr(3)}); err != nil {
		t.Fatal(err)
	}
	eligible := r.fair.before(r, 0)
	for _, f := range []string{"h1", "h2", "h3", "h4"} { // H's turn is 3 claims; G waits
		r.fair.claim(r, fairrelay.Claim{Flow: f}, "H", true, eligible)
	}
	r.fair.claim(r, fairrelay.Claim{Flow: "g1"}, "G", true, eligible)
	if len(r.fair.violations) != 1 {
		t.Fatalf("a fourth claim of a group of weight 3 before a waiting group of weight 1: want 1 violation, got %q", r.fair.violations)
	}
	r.fair.reset()
	r.fair.violations = nil
	eligible = r.fair.before(r, 0)
	r.fair.claim(r, fairrelay.Claim{Flow: "g1"}, "G", true, eligible)
	r.fair.claim(r, fairrelay.Claim{Flow: "g1"}, "G", true, eligible) // g2 waits
	r.fair.claim(r, fairrelay.Claim{Flow: "g2"}, "G", true, eligible)
	if len(r.fair.violations) != 1 {
		t.Fatalf("a flow claimed twice while another flow of its group waits: want 1 violation, got %q", r.fair.violations)
	}
}

// TestFairnessBoundCatchesSeedEntry shows that the group check of
// fairnessTracker fails where the SPEC says the bound does not hold: under
// the seed policy new flows start at served 0 and overtake a waiting one
// (SPEC §5 item 10: B, C, D created one after another while A waits with
// A2 are each claimed before A2), and so do new groups. The claims are the
// model's (the SPEC read literally), so this holds whatever a backend does.
func TestFairnessBoundCatchesSeedEntry(t *testing.T) {
	t.Parallel()
	for _, group := range []bool{false, true} {
		pol := fairrelay.ReferencePolicy()
		r := &propertyRun{t: t, policy: pol, m: refmodel.New(pol)}
		r.fair.reset()
		r.fair.on = true
		enqueue := func(id, flow string, at int64) {
			p := fairrelay.EnqueueParams{ID: id, Flow: flow, Body: []byte(`{"delta":1}`), At: at}
			if group {
				p.Group = "T" + flow // each flow in a group of its own name
			}
			if _, err := r.m.Enqueue(p); err != nil {
				t.Fatal(err)
			}
		}
		claim := func(at int64) {
			eligible := r.fair.before(r, at)
			c, err := r.m.Claim(at)
			if err != nil || c == nil {
				t.Fatalf("claim at %d: %v, %v", at, c, err)
			}
			g, row := groupOfClaim(r.m, c.Flow)
			r.fair.claim(r, *c, g, row, eligible)
			if _, err := r.m.Settle(c.Token, fairrelay.OutcomeAccepted, at); err != nil {
				t.Fatal(err)
			}
		}
		enqueue("A1", "A", 0)
		enqueue("A2", "A", 0)
		claim(0) // A1; A2 waits from here on
		for i, f := range []string{"B", "C", "D"} {
			enqueue(f+"1", f, int64(i+1))
			claim(int64(i + 1)) // the new flow, at served 0
		}
		claim(4) // A2, after three claims with none ahead of it
		if len(r.fair.violations) == 0 {
			t.Errorf("groups %t: new flows overtook A2 under the seed policy, but the tracker saw no violation", group)
		}
	}
}
