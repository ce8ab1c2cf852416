package refmodel

import (
	"sort"

	"github.com/fairrelay/fairrelay"
)

// The read-only views below serve the property test: choosing operations
// that apply, and checking the fairness bounds of SPEC §7 and §8 against
// the model's state. None of them changes anything.

// Event returns the state and generation of event id, and whether it exists
// (a pruned event does not).
func (m *Model) Event(id string) (fairrelay.State, int64, bool) {
	e, ok := m.events[id]
	if !ok {
		return "", 0, false
	}
	return e.state, e.generation, true
}

// BackingOff lists, sorted, the ready events whose next_at lies after at:
// the heads an expedite at at applies to.
func (m *Model) BackingOff(at int64) []string {
	var out []string
	for _, e := range m.events {
		if e.state == fairrelay.StateReady && e.nextAt > at {
			out = append(out, e.id)
		}
	}
	sort.Strings(out)
	return out
}

// Flows lists every flow id, sorted.
func (m *Model) Flows() []string {
	out := make([]string, 0, len(m.flows))
	for id := range m.flows {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// Paused reports whether flow id exists and is paused.
func (m *Model) Paused(id string) bool {
	f := m.flows[id]
	return f != nil && f.paused
}

// GroupOf returns the group of flow id (its own name when it joined none),
// "" when the flow does not exist.
func (m *Model) GroupOf(id string) string {
	if f := m.flows[id]; f != nil {
		return f.groupName()
	}
	return ""
}

// FlowPosition is one flow's place in the dispatch order inside its group.
type FlowPosition struct {
	Flow   string
	Group  string // its own name when it joined none
	Served int64
	Ord    int64 // creation position
}

// Positions lists every flow's group, served and creation position.
func (m *Model) Positions() []FlowPosition {
	out := make([]FlowPosition, 0, len(m.flows))
	for _, f := range m.flows {
		out = append(out, FlowPosition{Flow: f.id, Group: f.groupName(), Served: f.served, Ord: f.ord})
	}
	return out
}

// GroupPosition is one entry of the rotation of SPEC §8: a group with a
// place in it, or a flow that is its own group.
type GroupPosition struct {
	Group  string
	Served int64
	Ord    int64 // creation position
	Weight int64
	// Turn is how many claims the group can take before its served moves
	// to the back: what is left of a turn in progress, else its weight.
	Turn int64
}

// GroupPositions lists the rotation.
func (m *Model) GroupPositions() []GroupPosition {
	ps := m.places()
	out := make([]GroupPosition, 0, len(ps))
	for _, p := range ps {
		gp := GroupPosition{Group: p.name, Served: p.served, Ord: p.ord, Weight: 1, Turn: 1}
		if p.row != nil {
			gp.Weight, gp.Turn = p.row.weight, p.row.weight
			if p.row.left > 0 && p.row.left <= p.row.weight {
				gp.Turn = p.row.left
			}
		}
		out = append(out, gp)
	}
	return out
}

// Eligible lists the flows a claim at tick at could pick: those whose head is
// eligible (not paused) and not moved to quarantined by the budget
// [decision]. It changes nothing.
func (m *Model) Eligible(at int64) map[string]bool {
	out := map[string]bool{}
	for _, f := range m.flows {
		if h := f.head(); h != nil && eligible(f, h, at) && !m.exhausted(f, h, at) {
			out[f.id] = true
		}
	}
	return out
}

// IsGroupRow reports whether group name has a row: a group a flow named or
// joined, or a configured one (not a flow that is its own group).
func (m *Model) IsGroupRow(name string) bool { return m.groups[name] != nil }

// Backlog counts the events not acked in the store (SPEC §8).
func (m *Model) Backlog() int64 { return m.backlog(func(*flow) bool { return true }) }
