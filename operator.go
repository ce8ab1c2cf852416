package fairrelay

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fairrelay/fairrelay/internal/store"
)

// The operator actions of SPEC §9 beyond redrive. Each is one write
// transaction at a tick that appends an audit row naming the action, the
// flow, the operator and the reason; when it does not apply it answers
// rejected and changes nothing, not even the tick. Their rejection reasons
// are checked in this order where they apply (SPEC §9).
const (
	RejectNotReady      = "not_ready"
	RejectNotBackingOff = "not_backing_off"
	RejectAlreadyPaused = "already_paused"
	RejectNotPaused     = "not_paused"
	actionExpedite      = "expedite"
	actionPause         = "pause"
	actionResume        = "resume"
	actionRedrive       = "redrive"
)

// ActionStatus is the answer of an operator action.
type ActionStatus string

const (
	// ActionReady: Expedite made the head eligible now (ActionResult.NextAt).
	ActionReady ActionStatus = "ready"
	// ActionPaused: Pause took the flow out of dispatch.
	ActionPaused ActionStatus = "paused"
	// ActionResumed: Resume put the flow back in dispatch.
	ActionResumed ActionStatus = "resumed"
	// ActionRejected: nothing changed, not even the tick; RejectReason says
	// why.
	ActionRejected ActionStatus = "rejected"
)

// ActionResult is the answer of Expedite, Pause and Resume (SPEC §9).
type ActionResult struct {
	Status ActionStatus `json:"status"`
	// NextAt is the expedited head's new next_at (the tick of the write),
	// for ActionReady.
	NextAt int64 `json:"next_at,omitempty"`
	// RejectReason is set for ActionRejected: one of RejectEmptyReason,
	// RejectNotReady, RejectNotBackingOff, RejectGenerationMismatch,
	// RejectAlreadyPaused, RejectNotPaused.
	RejectReason string `json:"reason,omitempty"`
}

// ExpediteParams cuts a head's backoff short (SPEC §9 expedite).
type ExpediteParams struct {
	// EventID is the backing-off head.
	EventID string
	// ExpectedGeneration must equal the event's generation (optimistic
	// concurrency: the backoff the operator saw).
	ExpectedGeneration int64
	// Reason, Operator and At as RedriveParams's.
	Reason   string
	Operator string
	At       int64
}

// Expedite makes a head that is backing off (ready with next_at > At)
// eligible at At: next_at = At, attempts unchanged, an audit row
// (action "expedite", the event's unchanged generation). Rejected, changing
// nothing: empty_reason; not_ready (the event is inflight, acked or
// quarantined); not_backing_off (ready and already eligible);
// generation_mismatch. A head of a paused flow gets its next_at but stays
// out of dispatch until Resume. Errors (SPEC §2 order): ErrClockRegressed;
// ErrInvalidInput naming at, id, expected_generation, operator or reason;
// ErrNotFound for an unknown id; ErrBusy; ErrDatabase.
func (q *Queue) Expedite(ctx context.Context, p ExpediteParams) (ActionResult, error) {
	var res ActionResult
	op := writeOp{name: actionExpedite, lanes: store.LaneSettle, at: p.At, read: store.ReadSet{Events: []string{p.EventID}},
		check: func() error {
			if err := checkID("id", p.EventID); err != nil {
				return err
			}
			if err := checkGeneration("expected_generation", p.ExpectedGeneration); err != nil {
				return err
			}
			return checkAudited(p.Operator, p.Reason)
		}}
	_, err := q.write(ctx, op, func(t *txn, rr *store.ReadResult) error {
		e := t.events[p.EventID]
		if e == nil {
			return errNoEvent(p.EventID)
		}
		reject := ""
		switch {
		case strings.TrimSpace(p.Reason) == "":
			reject = RejectEmptyReason
		case e.State != store.StateReady:
			reject = RejectNotReady
		case e.NextAt <= t.at:
			reject = RejectNotBackingOff
		case e.Generation != p.ExpectedGeneration:
			reject = RejectGenerationMismatch
		}
		if reject != "" {
			res = ActionResult{Status: ActionRejected, RejectReason: reject}
			return errUnchanged
		}
		f := t.flows[e.Flow]
		if f == nil {
			return errInconsistentFlow(e)
		}
		// Only a head backs off: an event behind one keeps next_at = its
		// enqueue tick, which the clock has passed.
		e.NextAt = t.at
		t.changedEvent(e)
		t.placeHead(f, t.at)
		t.changedFlow(f)
		t.appendAudit(store.AuditRow{EventID: &e.ID, Flow: e.Flow, Action: actionExpedite, Reason: p.Reason, Generation: &e.Generation}, p.Operator)
		res = ActionResult{Status: ActionReady, NextAt: t.at}
		return nil
	})
	return res, q.explainNoEvent(ctx, "expedite", err)
}

// FlowActionParams names a flow for Pause and Resume (SPEC §9).
type FlowActionParams struct {
	// Flow is the flow id.
	Flow string
	// Reason, Operator and At as RedriveParams's.
	Reason   string
	Operator string
	At       int64
}

// Pause takes a flow out of dispatch: its head is never eligible while the
// flow is paused, and keeps blocking the flow whatever its state (SPEC §9).
// The head is left as it is: an inflight head may still settle (its ack
// makes the next event the head, which waits too), and one whose lease
// runs out is neither claimed nor quarantined until Resume. Writes an audit
// row (action "pause", no event, no generation). Rejected, changing
// nothing: empty_reason, already_paused. Errors: ErrClockRegressed;
// ErrInvalidInput naming at, flow, operator or reason; ErrNotFound for a
// flow that does not exist; ErrBusy; ErrDatabase.
func (q *Queue) Pause(ctx context.Context, p FlowActionParams) (ActionResult, error) {
	return q.flowAction(ctx, actionPause, p)
}

// Resume puts a paused flow back in dispatch with its served unchanged
// (SPEC §9): its head is eligible again as its state says (ready at its
// next_at; inflight when its lease runs out, when the budget rule of §2
// applies as usual). Writes an audit row (action "resume"). Rejected,
// changing nothing: empty_reason, not_paused. Errors as Pause.
func (q *Queue) Resume(ctx context.Context, p FlowActionParams) (ActionResult, error) {
	return q.flowAction(ctx, actionResume, p)
}

func (q *Queue) flowAction(ctx context.Context, action string, p FlowActionParams) (ActionResult, error) {
	var res ActionResult
	op := writeOp{name: action, lanes: store.LaneSettle, at: p.At, read: store.ReadSet{Flows: []string{p.Flow}},
		check: func() error {
			if err := checkID("flow", p.Flow); err != nil {
				return err
			}
			return checkAudited(p.Operator, p.Reason)
		}}
	body := func(t *txn, rr *store.ReadResult) error {
		res = ActionResult{}
		f := t.flows[p.Flow]
		if f == nil {
			return &Error{Code: CodeNotFound, Message: "no flow with id " + quote(p.Flow)}
		}
		reject := ""
		switch {
		case strings.TrimSpace(p.Reason) == "":
			reject = RejectEmptyReason
		case action == actionPause && f.Paused:
			reject = RejectAlreadyPaused
		case action == actionResume && !f.Paused:
			reject = RejectNotPaused
		}
		if reject != "" {
			res = ActionResult{Status: ActionRejected, RejectReason: reject}
			return errUnchanged
		}
		if action == actionPause {
			f.Paused, f.PausedBy, f.PausedReason, f.PausedAt = true, p.Operator, p.Reason, t.at
			t.parkHead(f)
			res.Status = ActionPaused
		} else {
			f.Paused, f.PausedBy, f.PausedReason, f.PausedAt = false, "", "", 0
			if err := t.refile(f); err != nil {
				return err
			}
			res.Status = ActionResumed
		}
		t.changedFlow(f)
		t.appendAudit(store.AuditRow{Flow: f.Flow, Action: action, Reason: p.Reason}, p.Operator)
		return nil
	}
	// A pause of a flow committed between the action's lock of its flows
	// and its lanes meets it only after taking the settle lane, and a
	// settle holding that flow waits for the lane: PostgreSQL's deadlock
	// detector ends one of the two (a breaker's report). The victim kept
	// nothing, so the action runs again: the flow exists for its first
	// lock now.
	var err error
	for attempt := 1; ; attempt++ {
		_, err = q.write(ctx, op, body)
		if err == nil || attempt == flowActionAttempts || !errors.Is(err, store.ErrDeadlock) || ctx.Err() != nil {
			break
		}
	}
	return res, err
}

// flowActionAttempts bounds how often a pause or resume runs again after
// its transaction was a deadlock's victim.
const flowActionAttempts = 3

// refile files an unpaused flow's head in the index its state calls for: a
// ready head in the runnable index (or the due index until its next_at); an
// inflight head in the due index until its lease runs out, where the claim's
// promotion applies the budget rule; a quarantined head, or none, in
// neither.
func (t *txn) refile(f *store.FlowRow) error {
	if f.HeadSeq > f.Seq {
		t.parkHead(f)
		return nil
	}
	h, err := t.head(f)
	if err != nil {
		return err
	}
	switch h.State {
	case store.StateReady:
		t.placeHead(f, h.NextAt)
	case store.StateInflight:
		if f.Runnable {
			// A member flow whose expired head a claim had promoted before
			// the pause (only a claim parks a member): it still is.
			f.WaitUntil = nil
			return nil
		}
		lease := h.LeaseUntil
		f.WaitUntil = &lease
	default:
		t.parkHead(f)
	}
	return nil
}

// appendAudit appends an audit row at the transaction's tick and wall
// clock, naming the operator when one was given.
func (t *txn) appendAudit(a store.AuditRow, operator string) {
	a.At, a.Wall = t.at, t.wall
	if operator != "" {
		a.Operator = &operator
	}
	t.audit = append(t.audit, a)
}

func errInconsistentFlow(e *store.EventRow) error {
	return fmt.Errorf("event %q: flow %q is missing: the store is inconsistent", e.ID, e.Flow)
}
