package refmodel

import (
	"crypto/sha256"

	"github.com/fairrelay/fairrelay"
)

// Configure is SPEC §8 configure: with Group, that group's weight and
// max_backlog (the group row is made when missing, see the package doc);
// without, the store's max_backlog and max_flow_backlog. It returns the tick
// it ran at.
func (m *Model) Configure(p fairrelay.ConfigureParams) (int64, error) {
	if err := m.checkClock(p.At); err != nil {
		return 0, err
	}
	switch {
	case p.Weight != nil && p.Group == "":
		return 0, invalid("weight", "a weight needs a group")
	case p.Weight != nil && (*p.Weight < 1 || *p.Weight > fairrelay.MaxWeight):
		return 0, invalid("weight", "%d is not in [1, %d]", *p.Weight, fairrelay.MaxWeight)
	case p.MaxBacklog != nil && *p.MaxBacklog < 0:
		return 0, invalid("max_backlog", "%d is negative", *p.MaxBacklog)
	case p.MaxFlowBacklog != nil && p.Group != "":
		return 0, invalid("max_flow_backlog", "is the store's, not a group's")
	case p.MaxFlowBacklog != nil && *p.MaxFlowBacklog < 0:
		return 0, invalid("max_flow_backlog", "%d is negative", *p.MaxFlowBacklog)
	}
	m.tick = p.At
	if p.Group == "" {
		if p.MaxBacklog != nil {
			m.maxBacklog = *p.MaxBacklog
		}
		if p.MaxFlowBacklog != nil {
			m.maxFlowBacklog = *p.MaxFlowBacklog
		}
		return p.At, nil
	}
	g := m.groupRow(p.Group)
	if p.Weight != nil {
		g.weight = *p.Weight
		g.left = min(g.left, g.weight) // a turn in progress is cut to the new weight
	}
	if p.MaxBacklog != nil {
		g.maxBacklog = *p.MaxBacklog
	}
	return p.At, nil
}

// Prune is SPEC §8 retention: it deletes the tombstones acked before
// IDsBefore and every event acked before AckedBefore, keeping a tombstone of
// those acked at or after IDsBefore. p.Limit is not modelled (callers pass
// 0).
func (m *Model) Prune(p fairrelay.PruneParams) (fairrelay.PruneResult, error) {
	if err := m.checkClock(p.At); err != nil {
		return fairrelay.PruneResult{}, err
	}
	if p.AckedBefore < 0 || p.AckedBefore > fairrelay.MaxTick {
		return fairrelay.PruneResult{}, invalid("acked_before", "%d is not a tick", p.AckedBefore)
	}
	if p.IDsBefore < 0 || p.IDsBefore > fairrelay.MaxTick {
		return fairrelay.PruneResult{}, invalid("ids_before", "%d is not a tick", p.IDsBefore)
	}
	if p.IDsBefore > p.AckedBefore {
		return fairrelay.PruneResult{}, invalid("ids_before", "%d > acked_before %d", p.IDsBefore, p.AckedBefore)
	}
	m.tick = p.At
	res := fairrelay.PruneResult{Tick: p.At}
	for id, ts := range m.tombstones {
		if ts.ackedAt < p.IDsBefore {
			delete(m.tombstones, id)
			res.Tombstones++
		}
	}
	for _, f := range m.flows {
		kept := f.events[:0:0]
		for _, e := range f.events {
			if e.state != fairrelay.StateAcked || e.ackedAt >= p.AckedBefore {
				kept = append(kept, e)
				continue
			}
			if e.ackedAt >= p.IDsBefore {
				m.tombstones[e.id] = tombstone{flow: e.flow, seq: e.seq, sum: sha256.Sum256(e.body), ackedAt: e.ackedAt}
			} else {
				res.Forgotten++
			}
			delete(m.events, e.id)
			res.Events++
		}
		f.events = kept
	}
	return res, nil
}
