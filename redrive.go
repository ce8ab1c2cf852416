package fairrelay

import (
	"context"
	"strings"

	"github.com/fairrelay/fairrelay/internal/store"
)

// RedriveParams is an operator's decision to put a quarantined head back in
// dispatch (SPEC §2 redrive).
type RedriveParams struct {
	// EventID is the quarantined event.
	EventID string
	// ExpectedGeneration must equal the event's current generation
	// (optimistic concurrency, not authentication).
	ExpectedGeneration int64
	// Reason says why; it must be non-empty after trimming (else the
	// redrive is rejected, empty_reason) and follow CheckReason (at most
	// MaxReasonBytes bytes of UTF-8, one line, no control characters). It
	// is kept in the audit row.
	Reason string
	// Operator names who decided; optional, and when given it follows
	// CheckID's rule.
	Operator string
	// At is the tick of the write; AtStored runs it at the store's tick.
	At int64
}

// RedriveStatus is the answer of redrive.
type RedriveStatus string

const (
	// RedriveReady: the event is ready again with a new generation and a
	// fresh round of attempts; an audit row was appended.
	RedriveReady RedriveStatus = "ready"
	// RedriveRejected: nothing changed, not even the tick; RejectReason says
	// why.
	RedriveRejected RedriveStatus = "rejected"
)

// Reasons a redrive is rejected, checked in this order (SPEC §2).
const (
	RejectEmptyReason        = "empty_reason"
	RejectNotQuarantined     = "not_quarantined"
	RejectGenerationMismatch = "generation_mismatch"
)

// RedriveResult is the answer of Redrive: the new generation when ready, the
// reject reason when rejected.
type RedriveResult struct {
	Status       RedriveStatus `json:"status"`
	Generation   int64         `json:"generation,omitempty"`
	RejectReason string        `json:"reason,omitempty"`
}

// Redrive is the only way out of quarantine (SPEC §2): for an event that is
// quarantined now at ExpectedGeneration, in one transaction it becomes ready
// at At with generation+1 and attempts 0 (lifetime attempts, ids, seq and
// body unchanged) and an audit row records the operator, the reason, the
// quarantine reason it cleared and the new generation. Otherwise it answers
// rejected and changes nothing, not even the tick. Errors (SPEC §2 order):
// ErrClockRegressed; ErrInvalidInput naming at, id, expected_generation
// (negative), operator (CheckID's rule) or reason (CheckReason's: one line,
// no control characters);
// ErrNotFound for an unknown id; ErrBusy; ErrDatabase (an audit insert that
// fails rolls the whole redrive back).
func (q *Queue) Redrive(ctx context.Context, p RedriveParams) (RedriveResult, error) {
	var res RedriveResult
	op := writeOp{name: "redrive", lanes: store.LaneSettle, at: p.At, read: store.ReadSet{Events: []string{p.EventID}},
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
		switch {
		case strings.TrimSpace(p.Reason) == "":
			res = RedriveResult{Status: RedriveRejected, RejectReason: RejectEmptyReason}
			return errUnchanged
		case e.State != store.StateQuarantined:
			res = RedriveResult{Status: RedriveRejected, RejectReason: RejectNotQuarantined}
			return errUnchanged
		case e.Generation != p.ExpectedGeneration:
			res = RedriveResult{Status: RedriveRejected, RejectReason: RejectGenerationMismatch}
			return errUnchanged
		}
		f := t.flows[e.Flow]
		previous := e.Reason
		e.State, e.Reason = store.StateReady, ""
		e.Generation++
		e.Attempts = 0
		e.NextAt = t.at
		t.changedEvent(e)
		// A quarantined event is always its flow's head.
		t.placeHead(f, t.at)
		t.changedFlow(f)
		t.appendAudit(store.AuditRow{EventID: &e.ID, Flow: e.Flow, Action: actionRedrive, Reason: p.Reason,
			PreviousReason: &previous, Generation: &e.Generation}, p.Operator)
		res = RedriveResult{Status: RedriveReady, Generation: e.Generation}
		return nil
	})
	return res, q.explainNoEvent(ctx, "redrive", err)
}
