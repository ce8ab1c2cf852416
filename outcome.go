package fairrelay

import "strings"

// Outcome is what the receiver answered for one delivery (SPEC §2 settle,
// SPEC §3). Settle maps it to the event's next state by its Class.
type Outcome string

// The outcomes of SPEC §2–§3.
const (
	// OutcomeAccepted: receipt and effect committed together. Acks.
	OutcomeAccepted Outcome = "accepted"
	// OutcomeDuplicate: the receiver already has this event, same flow, seq
	// and body. Acks.
	OutcomeDuplicate Outcome = "duplicate"
	// OutcomeIDConflict: the receiver has this id with another flow, seq or
	// body. Permanent.
	OutcomeIDConflict Outcome = "id_conflict"
	// OutcomeSequenceConflict: another id already took this seq. Permanent.
	OutcomeSequenceConflict Outcome = "sequence_conflict"
	// OutcomeUnsupportedDelta: the receiver lacks the capability (the
	// ledger's max_delta). Permanent.
	OutcomeUnsupportedDelta Outcome = "unsupported_delta"
	// OutcomeInvalidBody: the body is not what the receiver's contract
	// takes. Permanent.
	OutcomeInvalidBody Outcome = "invalid_body"
	// OutcomeRejected: the receiver refused the event for good in a way the
	// operator configured as permanent (for example an HTTP status listed as
	// permanent for the webhook sink). Permanent.
	OutcomeRejected Outcome = "rejected"
	// OutcomeRetry: the receiver was unavailable; try again later. Transient.
	OutcomeRetry Outcome = "retry"
	// OutcomeGap: the receiver has not yet seen the previous seq. Transient.
	OutcomeGap Outcome = "gap"
)

// Class is how settle treats an outcome.
type Class int

const (
	// ClassTransient outcomes back off within the budget.
	ClassTransient Class = iota
	// ClassAck outcomes settle the event as acked.
	ClassAck
	// ClassPermanent outcomes quarantine the head at once.
	ClassPermanent
)

// Class returns how settle treats o. Any outcome that is not known to ack or
// to be permanent is transient: an unknown answer is never silently
// permanent (SPEC §2).
func (o Outcome) Class() Class {
	switch o {
	case OutcomeAccepted, OutcomeDuplicate:
		return ClassAck
	case OutcomeIDConflict, OutcomeSequenceConflict, OutcomeUnsupportedDelta, OutcomeInvalidBody, OutcomeRejected:
		return ClassPermanent
	}
	return ClassTransient
}

// Outcomes lists every outcome ParseOutcome accepts.
func Outcomes() []Outcome {
	return []Outcome{OutcomeAccepted, OutcomeDuplicate, OutcomeIDConflict, OutcomeSequenceConflict,
		OutcomeUnsupportedDelta, OutcomeInvalidBody, OutcomeRejected, OutcomeRetry, OutcomeGap}
}

// ParseOutcome parses one of the outcome names. An unknown name is an input
// error (ErrInvalidInput naming field "outcome"), so a typo in an operator's
// command never settles anything; receivers' unknown answers are mapped to
// OutcomeRetry by the sinks instead.
func ParseOutcome(s string) (Outcome, error) {
	for _, o := range Outcomes() {
		if string(o) == s {
			return o, nil
		}
	}
	names := make([]string, 0, len(Outcomes()))
	for _, o := range Outcomes() {
		names = append(names, string(o))
	}
	return "", invalid("outcome", "unknown outcome %q (want one of %s)", s, strings.Join(names, ", "))
}
