package inbox

import (
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/fairrelay/fairrelay"
)

// A broker consumer (package consume) meets deliveries it cannot apply yet:
// an event whose predecessor is not applied (gap), or one the inbox refuses
// for good until an operator fixes the cause (a permanent answer). Kept
// unacked at the broker, they fill its window of unacked messages
// (RabbitMQ's prefetch, JetStream's MaxAckPending) and, once it is full,
// the broker delivers nothing else: one stuck flow held up every flow (a
// breaker's report). Hold keeps such a delivery in the inbox's own
// database instead, so that the consumer can ack the broker's copy, and
// ReceiveHeld applies a flow's held deliveries in seq order once the next
// one can be applied. The HTTP receiver does not need them: the relay
// sends a flow's next event only after its head was answered.

// Hold keeps d, which Receive answered reason for (gap or a permanent
// outcome), until ReceiveHeld applies it. It is idempotent by event id,
// body, flow and seq: a second Hold of the same copy keeps one, and copies
// of one id with different bodies (a faulty publisher), or at another flow
// or seq (a stray copy), are kept apart, so that a bad copy cannot shadow a
// good one (inbox migration 006). It has committed when it returns held true, so
// a broker's copy of d may be acked then; held false means d is applied
// already (its receipt matches d) or waived (Waive), and nothing is kept. Errors:
// ErrInvalidInput as Receive's, checked first; database errors and ErrBusy,
// with nothing held; ErrInvalidInput naming reason for another outcome.
func (in *Inbox) Hold(ctx context.Context, d Delivery, reason fairrelay.Outcome) (held bool, err error) {
	if err := d.check(); err != nil {
		return false, err
	}
	if reason != fairrelay.OutcomeGap && reason.Class() != fairrelay.ClassPermanent {
		return false, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "reason",
			Message: fmt.Sprintf("%q: hold what answered gap or a permanent outcome", reason)}
	}
	tx, err := in.begin(ctx)
	if err != nil {
		return false, dbError("hold: begin transaction", in.translate(err))
	}
	defer tx.Rollback()
	if in.lock != "" {
		if _, err := tx.ExecContext(ctx, in.lock, d.Flow, d.EventID); err != nil {
			return false, dbError("hold", in.translate(err))
		}
	}
	switch _, same, err := receiptOf(ctx, tx, d); {
	case err != nil:
		return false, dbError("hold", in.translate(err))
	case same:
		return false, nil
	}
	// An event an operator waived is done too: its seq is taken (a
	// consumer whose Receive answered a refusal just before the waiver
	// committed would otherwise keep a copy that never applies; a
	// breaker's report).
	switch ok, err := waived(ctx, tx.Tx, d); {
	case err != nil:
		return false, dbError("hold", in.translate(err))
	case ok:
		return false, nil
	}
	sum := sha256.Sum256(d.Body)
	if _, err := tx.ExecContext(ctx, q["HeldInsert"], d.EventID, d.Flow, d.Seq, d.Body, sum[:], string(reason)); err != nil {
		return false, dbError("hold", in.translate(err))
	}
	if err := tx.Commit(); err != nil {
		return false, dbError("hold: commit", in.translate(err))
	}
	return true, nil
}

// HeldResult is what ReceiveHeld did for one flow.
type HeldResult struct {
	// Applied are the held deliveries applied (accepted), in order, and
	// Discarded counts those found applied already (duplicate): both are
	// gone from the held table.
	Applied   []Receipt
	Discarded int
	// Stopped is the answer of the flow's next event, held and refused —
	// a permanent outcome, or retry while the inbox is unavailable — with
	// its id in StoppedID (of several held copies of that seq, the first
	// by id); "" when the flow's next event is not held, or limit was
	// reached.
	Stopped   fairrelay.Outcome
	StoppedID string
	// Remaining reports whether deliveries of the flow past its last
	// applied seq stay held: the stopped one, later ones whose predecessor
	// is not here yet, or more than limit. Copies of seqs already applied
	// from other ids or bodies (which can never apply) stay in the held
	// table but do not count.
	Remaining bool
}

// ReceiveHeld applies up to limit of flow's held deliveries (Hold) in seq
// order, each in a transaction of its own with its receipt and effect
// (Receive's), for as long as the flow's next event is held and is
// accepted. Of several held copies of the next seq (other ids or bodies),
// each is tried in turn until one is accepted; the held copy of an
// applied event is deleted in the same transaction. It stops at a next
// event that is refused, which stays held, and reports its answer. An
// unavailable inbox (SetUnavailable) applies nothing and answers retry.
// A refused copy's record of its answer is written on its own: nothing
// Options.Apply wrote before it refused stays. Errors: ErrInvalidInput
// naming flow (fairrelay.CheckID's rule) or limit (below 1); database
// errors and ErrBusy (with fairrelay.ErrCommitUnknown in the chain of a
// commit that failed and could not be read back, as Receive's); an error
// of Options.Apply (ErrApply); each with what was applied before it kept.
func (in *Inbox) ReceiveHeld(ctx context.Context, flow string, limit int) (HeldResult, error) {
	var r HeldResult
	if err := fairrelay.CheckID("flow", flow); err != nil {
		return r, err
	}
	if limit < 1 {
		return r, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "limit", Message: fmt.Sprintf("must be at least 1, got %d", limit)}
	}
	for {
		if in.unavailable.Load() {
			r.Stopped, r.Remaining = fairrelay.OutcomeRetry, true
			return r, nil
		}
		if len(r.Applied) >= limit {
			pseq, err := in.appliedSeq(ctx, flow)
			if err != nil {
				return r, err
			}
			return r, in.heldAhead(ctx, flow, pseq, &r)
		}
		out, d, next, err := in.receiveHeldOne(ctx, flow)
		if err != nil {
			return r, err
		}
		switch out {
		case "":
			// Held copies of events applied meanwhile (the broker
			// delivered another copy, which was applied) go.
			if _, err := in.db.ExecContext(ctx, q["HeldDeleteApplied"], flow, next-1); err != nil {
				return r, dbError("receive held", in.translate(err))
			}
			return r, in.heldAhead(ctx, flow, next-1, &r)
		case fairrelay.OutcomeAccepted:
			r.Applied = append(r.Applied, Receipt{ID: d.EventID, Flow: d.Flow, Seq: d.Seq})
		case fairrelay.OutcomeDuplicate:
			r.Discarded++
		case fairrelay.OutcomeSequenceConflict, fairrelay.OutcomeGap:
			// Another receiver applied the flow's next seq meanwhile:
			// go on from the new next seq.
		default:
			r.Stopped, r.StoppedID, r.Remaining = out, d.EventID, true
			return r, nil
		}
	}
}

// heldAhead sets r.Remaining: whether deliveries of flow past pseq, its
// last applied seq, are held.
func (in *Inbox) heldAhead(ctx context.Context, flow string, pseq int64, r *HeldResult) error {
	if err := in.db.QueryRowContext(ctx, q["HeldAhead"], flow, pseq).Scan(&r.Remaining); err != nil {
		return dbError("receive held", in.translate(err))
	}
	return nil
}

// appliedSeq is flow's last applied seq (0: none yet).
func (in *Inbox) appliedSeq(ctx context.Context, flow string) (int64, error) {
	pseq, _, err := projectionOf(ctx, in.db, flow)
	if err != nil {
		return 0, dbError("receive held", in.translate(err))
	}
	return pseq, nil
}

// heldCopy is one held delivery of a flow's next seq.
type heldCopy struct {
	id   string
	body []byte
	sum  []byte
}

// receiveHeldOne applies a held delivery of flow's next seq, if any, trying
// each held copy of that seq until one is applied: its answer and the
// delivery; "" when none is held, with next, the flow's next seq. When
// none is applied, the first copy's answer.
func (in *Inbox) receiveHeldOne(ctx context.Context, flow string) (fairrelay.Outcome, Delivery, int64, error) {
	pseq, err := in.appliedSeq(ctx, flow)
	if err != nil {
		return "", Delivery{}, 0, err
	}
	next := pseq + 1
	rows, err := in.db.QueryContext(ctx, q["HeldCandidates"], flow, next)
	if err != nil {
		return "", Delivery{}, 0, dbError("receive held", in.translate(err))
	}
	var copies []heldCopy
	for rows.Next() {
		var c heldCopy
		if err := rows.Scan(&c.id, &c.body, &c.sum); err != nil {
			rows.Close()
			return "", Delivery{}, 0, dbError("receive held", in.translate(err))
		}
		copies = append(copies, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return "", Delivery{}, 0, dbError("receive held", in.translate(err))
	}
	var first fairrelay.Outcome
	var firstD Delivery
	for _, c := range copies {
		d := Delivery{EventID: c.id, Flow: flow, Seq: next, Body: c.body}
		out, err := in.receiveHeldCopy(ctx, d, c.sum)
		if err != nil {
			return "", Delivery{}, 0, err
		}
		if out.Class() == fairrelay.ClassAck {
			return out, d, next, nil
		}
		if first == "" {
			first, firstD = out, d
		}
	}
	return first, firstD, next, nil
}

// receiveHeldCopy receives d, a held copy (sum the SHA-256 of its body), in
// a transaction that deletes the copy when it is applied.
func (in *Inbox) receiveHeldCopy(ctx context.Context, d Delivery, sum []byte) (fairrelay.Outcome, error) {
	tx, err := in.begin(ctx)
	if err != nil {
		return "", dbError("receive held: begin transaction", in.translate(err))
	}
	defer tx.Rollback()
	// receive takes the flow's and the id's locks (PostgreSQL) and reads
	// again: another receiver may have applied the flow's next event
	// since the read of the candidates (the answer is then gap,
	// sequence_conflict or duplicate).
	out, err := in.receive(ctx, tx.Tx, d)
	if err != nil {
		return "", receiveError("receive held", err, in.translate)
	}
	if out.Class() == fairrelay.ClassPermanent {
		// What refuses it now, for Held (it may have been held for a
		// gap), in a transaction of its own: the refused delivery's is
		// rolled back first, so that nothing Options.Apply wrote before it
		// refused stays (a breaker's report: committed with the reason, an
		// effect without a receipt at every retry of the held copy).
		tx.Rollback()
		if err := in.noteHeldReason(ctx, d, sum, out); err != nil {
			return "", err
		}
		return out, nil
	}
	if out.Class() != fairrelay.ClassAck {
		return out, nil
	}
	if _, err := tx.ExecContext(ctx, q["HeldDeleteOne"], d.EventID, sum, d.Flow, d.Seq); err != nil {
		return "", dbError("receive held", in.translate(err))
	}
	if err := in.commitReceipt(ctx, tx, d, "receive held"); err != nil {
		return "", err
	}
	return out, nil
}

// noteHeldReason records out as what refuses the held copy d (sum the
// SHA-256 of its body), in a transaction of its own.
func (in *Inbox) noteHeldReason(ctx context.Context, d Delivery, sum []byte, out fairrelay.Outcome) error {
	tx, err := in.begin(ctx)
	if err != nil {
		return dbError("receive held: begin transaction", in.translate(err))
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, q["HeldReason"], d.EventID, sum, string(out), d.Flow, d.Seq); err != nil {
		return dbError("receive held", in.translate(err))
	}
	if err := tx.Commit(); err != nil {
		return dbError("receive held: commit", in.translate(err))
	}
	return nil
}

// HeldFlows lists up to limit flows that have held deliveries, by flow id
// after the given one ("" starts at the first): what a consumer retries on
// its own (a flow whose next event answered a permanent outcome is applied
// once the cause is fixed). Errors: ErrInvalidInput (limit below 1;
// "after" not valid UTF-8 or holding a control character,
// fairrelay.CheckSearch); database errors.
func (in *Inbox) HeldFlows(ctx context.Context, after string, limit int) ([]string, error) {
	if limit < 1 {
		return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "limit", Message: fmt.Sprintf("must be at least 1, got %d", limit)}
	}
	if err := fairrelay.CheckSearch("after", after); err != nil {
		return nil, err
	}
	rows, err := in.db.QueryContext(ctx, q["HeldFlows"], after, limit)
	if err != nil {
		return nil, dbError("held flows", in.translate(err))
	}
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var f string
		if err := rows.Scan(&f); err != nil {
			return nil, dbError("held flows", in.translate(err))
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, dbError("held flows", in.translate(err))
	}
	return out, nil
}

// HeldCount counts the held deliveries. Errors: database errors.
func (in *Inbox) HeldCount(ctx context.Context) (int64, error) {
	var n int64
	if err := in.db.QueryRowContext(ctx, q["HeldCount"]).Scan(&n); err != nil {
		return 0, dbError("held count", in.translate(err))
	}
	return n, nil
}

// HeldCounts counts the held deliveries in one read: waiting, those that
// may still apply (past their flow's last applied seq: waiting for a
// predecessor, or refused until the cause is fixed), and superseded, copies
// of seqs applied already under another id or body (a faulty publisher's),
// which can never apply and stay for Held to list. Errors: database errors.
func (in *Inbox) HeldCounts(ctx context.Context) (waiting, superseded int64, err error) {
	if err := in.db.QueryRowContext(ctx, q["HeldCounts"]).Scan(&waiting, &superseded); err != nil {
		return 0, 0, dbError("held counts", in.translate(err))
	}
	return waiting, superseded, nil
}

// DropSuperseded deletes the superseded held deliveries (HeldCounts):
// copies of seqs applied already under another id or body, which can never
// apply, kept so that an operator can see them (Held, `fairrelay inspect
// --inbox I held`) until they are dropped. It returns how many it deleted;
// held deliveries that may still apply are untouched. Errors: database
// errors (sqlitestore.ErrFileReplaced, wrapped, for a SQLite file replaced
// since Open).
func (in *Inbox) DropSuperseded(ctx context.Context) (int64, error) {
	tx, err := in.begin(ctx)
	if err != nil {
		return 0, dbError("drop superseded: begin transaction", in.translate(err))
	}
	defer tx.Rollback()
	r, err := tx.ExecContext(ctx, q["HeldDropSuperseded"])
	if err != nil {
		return 0, dbError("drop superseded", in.translate(err))
	}
	n, err := r.RowsAffected()
	if err != nil {
		return 0, dbError("drop superseded", in.translate(err))
	}
	if err := tx.Commit(); err != nil {
		return 0, dbError("drop superseded: commit", in.translate(err))
	}
	return n, nil
}

// HeldDelivery is one held delivery as Held lists it.
type HeldDelivery struct {
	ID   string `json:"id"`
	Flow string `json:"flow"`
	Seq  int64  `json:"seq"`
	// Reason is the inbox's last answer to it: gap (its predecessor was
	// not applied) or the permanent outcome that refuses it.
	Reason fairrelay.Outcome `json:"reason"`
	// State is HeldWaiting or HeldSuperseded, as HeldCounts counts them.
	State string `json:"state"`
}

// The states of a held delivery (HeldDelivery.State).
const (
	// HeldWaiting: past its flow's last applied seq; it applies in order
	// once its predecessor is, or holds its flow up while refused.
	HeldWaiting = "waiting"
	// HeldSuperseded: a copy of a seq its flow has applied (under another
	// id or body): it never applies and holds nothing up; prune
	// --superseded-held drops it (DropSuperseded).
	HeldSuperseded = "superseded"
)

// Held lists held deliveries (Hold) as Receipts lists receipts: in (flow,
// seq, id) order, after afterFlow's afterSeq, up to limit and then the rest
// of the last row's seq, so that a page never splits the copies of one seq
// (a faulty publisher's, under other ids) and the next page, after that
// seq, misses none. Copies of one id with different bodies are one row.
// Errors as Receipts.
func (in *Inbox) Held(ctx context.Context, afterFlow string, afterSeq int64, limit int) ([]HeldDelivery, error) {
	if err := checkPage(afterFlow, afterSeq, limit); err != nil {
		return nil, err
	}
	out, err := in.heldRows(ctx, q["HeldPage"], afterFlow, afterSeq, limit)
	if err != nil || len(out) < limit {
		return out, err
	}
	last := out[len(out)-1]
	rest, err := in.heldRows(ctx, q["HeldPageRest"], last.Flow, last.Seq, last.ID)
	if err != nil {
		return nil, err
	}
	return append(out, rest...), nil
}

func (in *Inbox) heldRows(ctx context.Context, query string, args ...any) ([]HeldDelivery, error) {
	rows, err := in.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, dbError("inbox held", in.translate(err))
	}
	defer rows.Close()
	out := []HeldDelivery{}
	for rows.Next() {
		var h HeldDelivery
		if err := rows.Scan(&h.ID, &h.Flow, &h.Seq, &h.Reason, &h.State); err != nil {
			return nil, dbError("inbox held", in.translate(err))
		}
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, dbError("inbox held", in.translate(err))
	}
	return out, nil
}
