package fairrelay_test

import (
	"errors"
	"fmt"
	"strings"

	"github.com/fairrelay/fairrelay"
)

// The operations of SPEC §8 and §9 the property test draws: groups for
// enqueues, configure, prune, expedite, pause and resume. Each draws mostly
// what applies (as the model says) and sometimes what does not (an unknown
// id or flow, an empty reason, a wrong generation, one invalid field), so
// that every answer and every error of these operations is compared.

// groupFor draws the group an enqueue names for flow. For a flow that
// exists: mostly none, sometimes its own group (fine), now and then another
// one (invalid_input naming group, before existing, conflict and the
// limits). For a new flow, the group it was first drawn with, so that the
// items of one batch agree: none (its own group), a shared group, a group
// named like another flow (which makes that flow, when it is its own group,
// the group's first member), its own name, or a new group.
func (r *propertyRun) groupFor(flow string) string {
	if g := r.m.GroupOf(flow); g != "" {
		switch x := r.rng.IntN(40); {
		case x < 28:
			return ""
		case x < 39:
			return g
		default:
			return r.otherGroup(g)
		}
	}
	g, ok := r.intended[flow]
	if !ok {
		switch x := r.rng.IntN(20); {
		case x < 7:
			g = ""
		case x < 15:
			g = r.groups[r.rng.IntN(len(r.groups))]
		case x < 17:
			g = r.flows[r.rng.IntN(len(r.flows))]
		case x < 18:
			g = flow
		default:
			g = fmt.Sprintf("H%02d", len(r.groups))
			r.groups = append(r.groups, g)
		}
		r.intended[flow] = g
	}
	return g
}

// otherGroup returns a group name other than g.
func (r *propertyRun) otherGroup(g string) string {
	for {
		var o string
		if r.rng.IntN(2) == 0 {
			o = r.groups[r.rng.IntN(len(r.groups))]
		} else {
			o = r.flows[r.rng.IntN(len(r.flows))]
		}
		if o != g {
			return o
		}
	}
}

// someGroup draws a group to configure: a shared one, one named like a flow
// (its own group becomes a row; or a new row beside a flow of another
// group), or a new one that has no flow yet (an enqueue may name it later).
func (r *propertyRun) someGroup() string {
	switch x := r.rng.IntN(10); {
	case x < 6:
		return r.groups[r.rng.IntN(len(r.groups))]
	case x < 9:
		return r.flows[r.rng.IntN(len(r.flows))]
	default:
		g := fmt.Sprintf("K%02d", len(r.groups))
		r.groups = append(r.groups, g)
		return g
	}
}

func ptr(v int64) *int64 { return &v }

// configureParams draws a configure: the store's limits (often near the
// backlog, so enqueues answer full), a group's weight and limit, or, one
// time in ten, exactly one invalid field (the SPEC names no order among
// several).
func (r *propertyRun) configureParams() fairrelay.ConfigureParams {
	p := fairrelay.ConfigureParams{At: r.tick()}
	if r.rng.IntN(10) == 0 {
		switch r.rng.IntN(6) {
		case 0:
			p.Group, p.Weight = r.someGroup(), ptr(0)
		case 1:
			p.Group, p.Weight = r.someGroup(), ptr(fairrelay.MaxWeight+1)
		case 2:
			p.Weight = ptr(2) // without group
		case 3:
			p.MaxBacklog = ptr(-1)
			if r.rng.IntN(2) == 0 {
				p.Group = r.someGroup()
			}
		case 4:
			p.Group, p.MaxFlowBacklog = r.someGroup(), ptr(3) // with group
		default:
			p.MaxFlowBacklog = ptr(-2)
		}
		return p
	}
	if r.rng.IntN(5) < 2 {
		// The store's backlog only grows while heads stay quarantined or
		// paused: a store limit is lifted half the time, else set a few
		// events above it.
		storeLimit := int64(0)
		if r.rng.IntN(2) == 0 {
			storeLimit = r.m.Backlog() + r.rng.Int64N(10)
		}
		switch r.rng.IntN(3) {
		case 0:
			p.MaxBacklog = ptr(storeLimit)
		case 1:
			p.MaxFlowBacklog = ptr(r.limitNear(2))
		default:
			p.MaxBacklog, p.MaxFlowBacklog = ptr(storeLimit), ptr(r.limitNear(2))
		}
		return p
	}
	p.Group = r.someGroup()
	if r.rng.IntN(3) != 0 {
		weights := []int64{1, 1, 2, 3, 5, fairrelay.MaxWeight}
		p.Weight = ptr(weights[r.rng.IntN(len(weights))])
	}
	if r.rng.IntN(2) == 0 {
		p.MaxBacklog = ptr(r.limitNear(r.groupBacklog(p.Group)))
	}
	return p
}

// groupBacklog counts the events not acked of group g's flows, as the
// model has them.
func (r *propertyRun) groupBacklog(g string) int64 {
	n := int64(0)
	for _, e := range r.m.Snapshot().Events {
		if e.State != fairrelay.StateAcked && r.m.GroupOf(e.Flow) == g {
			n++
		}
	}
	return n
}

// limitNear draws a limit: none one time in three, else from a little
// below n to well above it, so that it refuses for a while, or only later.
func (r *propertyRun) limitNear(n int64) int64 {
	if r.rng.IntN(3) == 0 {
		return 0
	}
	return max(1, n-1+r.rng.Int64N(8))
}

func describeConfigure(p fairrelay.ConfigureParams) string {
	s := fmt.Sprintf("at %d group %q", p.At, p.Group)
	for _, f := range []struct {
		name string
		v    *int64
	}{{"weight", p.Weight}, {"max_backlog", p.MaxBacklog}, {"max_flow_backlog", p.MaxFlowBacklog}} {
		if f.v != nil {
			s += fmt.Sprintf(" %s %d", f.name, *f.v)
		}
	}
	return s
}

// pruneParams draws a prune whose horizons fall anywhere in the run's
// ticks, one time in ten with ids_before above acked_before and one in ten
// with horizons that are not ticks (negative, beyond MaxTick): each
// invalid_input.
func (r *propertyRun) pruneParams() fairrelay.PruneParams {
	p := fairrelay.PruneParams{At: r.tick()}
	p.AckedBefore = r.rng.Int64N(max(p.At, r.m.Tick()) + 3)
	p.IDsBefore = r.rng.Int64N(p.AckedBefore + 1)
	switch r.rng.IntN(20) {
	case 0, 1:
		p.IDsBefore = p.AckedBefore + 1 + r.rng.Int64N(3)
	case 2: // not ticks (invalid_input naming them)
		p.AckedBefore = -1 - r.rng.Int64N(3)
	case 3:
		p.AckedBefore, p.IDsBefore = fairrelay.MaxTick+1, fairrelay.MaxTick+1
	}
	return p
}

// expediteParams draws an expedite: mostly of a head backing off at its
// tick, else of any event (not_ready, not_backing_off), an unknown or
// pruned id (not_found), an empty reason or a wrong generation.
func (r *propertyRun) expediteParams() fairrelay.ExpediteParams {
	p := fairrelay.ExpediteParams{Reason: "the receiver is back", Operator: "op", At: r.m.Tick()}
	if r.rng.IntN(4) == 0 {
		p.At = r.tick()
	}
	if r.rng.IntN(2) == 0 {
		p.Operator = ""
	}
	if r.rng.IntN(10) == 0 {
		p.Reason = "  "
	}
	backingOff := r.m.BackingOff(p.At)
	switch {
	case r.rng.IntN(15) == 0 || len(r.ids) == 0:
		p.EventID = "nope"
		return p
	case len(backingOff) > 0 && r.rng.IntN(5) != 0:
		p.EventID = backingOff[r.rng.IntN(len(backingOff))]
	default:
		p.EventID = r.ids[r.rng.IntN(len(r.ids))]
	}
	_, gen, _ := r.m.Event(p.EventID)
	p.ExpectedGeneration = gen
	if r.rng.IntN(5) == 0 {
		p.ExpectedGeneration = max(0, gen+int64(r.rng.IntN(3))-1)
	}
	return p
}

// flowActionParams draws a pause (pause true) or a resume: mostly of a
// flow it applies to, else of any flow (already_paused, not_paused), an
// unknown flow (not_found) or with an empty reason.
func (r *propertyRun) flowActionParams(pause bool) fairrelay.FlowActionParams {
	p := fairrelay.FlowActionParams{Reason: "tenant asked", Operator: "op", At: r.tick()}
	if r.rng.IntN(2) == 0 {
		p.Operator = ""
	}
	if r.rng.IntN(10) == 0 {
		p.Reason = " "
	}
	flows := r.m.Flows()
	if len(flows) == 0 || r.rng.IntN(15) == 0 {
		p.Flow = "nope"
		return p
	}
	var applies []string
	for _, f := range flows {
		if r.m.Paused(f) != pause {
			applies = append(applies, f)
		}
	}
	if len(applies) > 0 && r.rng.IntN(4) != 0 {
		p.Flow = applies[r.rng.IntN(len(applies))]
	} else {
		p.Flow = flows[r.rng.IntN(len(flows))]
	}
	return p
}

// count records one answer (label) or error for the run's log.
func (r *propertyRun) count(label string, err error) {
	if err != nil {
		label = strings.Fields(label)[0] + " error " + string(fairrelay.CodeOf(err)) + " " + errField(err)
	}
	r.seen[strings.TrimSpace(label)]++
}

// errField is the field an invalid_input error names ("" for others).
func errField(err error) string {
	var e *fairrelay.Error
	if errors.As(err, &e) {
		return e.Field
	}
	return ""
}
