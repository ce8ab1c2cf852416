package refmodel

import (
	"strings"

	"github.com/fairrelay/fairrelay"
)

// Expedite is SPEC §9 expedite: a ready head backing off (next_at > at)
// becomes eligible at at, attempts unchanged, with an audit row carrying the
// event's unchanged generation. Rejections, in order: empty_reason,
// not_ready, not_backing_off, generation_mismatch.
func (m *Model) Expedite(p fairrelay.ExpediteParams) (fairrelay.ActionResult, error) {
	if err := m.checkClock(p.At); err != nil {
		return fairrelay.ActionResult{}, err
	}
	e, ok := m.events[p.EventID]
	if !ok {
		return fairrelay.ActionResult{}, errorCode(fairrelay.CodeNotFound, "no event %q", p.EventID)
	}
	reject := ""
	switch {
	case strings.TrimSpace(p.Reason) == "":
		reject = fairrelay.RejectEmptyReason
	case e.state != fairrelay.StateReady:
		reject = fairrelay.RejectNotReady
	case e.nextAt <= p.At:
		reject = fairrelay.RejectNotBackingOff
	case e.generation != p.ExpectedGeneration:
		reject = fairrelay.RejectGenerationMismatch
	}
	if reject != "" {
		return fairrelay.ActionResult{Status: fairrelay.ActionRejected, RejectReason: reject}, nil
	}
	m.tick = p.At
	e.nextAt = p.At
	id, gen := e.id, e.generation
	m.appendAudit(fairrelay.AuditEntry{ID: &id, Flow: e.flow, Action: "expedite", Reason: p.Reason, Generation: &gen, At: p.At}, p.Operator)
	return fairrelay.ActionResult{Status: fairrelay.ActionReady, NextAt: p.At}, nil
}

// Pause is SPEC §9 pause: the flow's head is never eligible while it is
// paused. Rejections, in order: empty_reason, already_paused.
func (m *Model) Pause(p fairrelay.FlowActionParams) (fairrelay.ActionResult, error) {
	return m.flowAction("pause", p)
}

// Resume is SPEC §9 resume: the flow is eligible again, its served
// unchanged. Rejections, in order: empty_reason, not_paused.
func (m *Model) Resume(p fairrelay.FlowActionParams) (fairrelay.ActionResult, error) {
	return m.flowAction("resume", p)
}

func (m *Model) flowAction(action string, p fairrelay.FlowActionParams) (fairrelay.ActionResult, error) {
	if err := m.checkClock(p.At); err != nil {
		return fairrelay.ActionResult{}, err
	}
	f, ok := m.flows[p.Flow]
	if !ok {
		return fairrelay.ActionResult{}, errorCode(fairrelay.CodeNotFound, "no flow %q", p.Flow)
	}
	reject := ""
	switch {
	case strings.TrimSpace(p.Reason) == "":
		reject = fairrelay.RejectEmptyReason
	case action == "pause" && f.paused:
		reject = fairrelay.RejectAlreadyPaused
	case action == "resume" && !f.paused:
		reject = fairrelay.RejectNotPaused
	}
	if reject != "" {
		return fairrelay.ActionResult{Status: fairrelay.ActionRejected, RejectReason: reject}, nil
	}
	m.tick = p.At
	f.paused = action == "pause"
	// SPEC §9: no event and no generation for pause and resume.
	m.appendAudit(fairrelay.AuditEntry{Flow: f.id, Action: action, Reason: p.Reason, At: p.At}, p.Operator)
	if f.paused {
		return fairrelay.ActionResult{Status: fairrelay.ActionPaused}, nil
	}
	return fairrelay.ActionResult{Status: fairrelay.ActionResumed}, nil
}
