package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/store/sqlitestore"
)

// A flow whose next event the receiver can never take — its id is another
// event's receipt already (an id a producer used again after the queue
// forgot it), or its body is one this receiver refuses for good — is held
// up for good: the relay quarantines the event, and a redrive meets the
// same answer (SPEC §2: the head blocks its flow; quarantine ends only by
// a redrive). The documented way out was to make the receiver accept the
// event as a no-op, which fairrelay's own receiver could not do (a fresh
// user's report). A waiver does that: an operator's decision, recorded
// with a reason, that the flow's next seq is taken by one event with no
// effect.

// WaiveParams name the event waived: its id, flow and seq, as the queue
// holds it (fairrelay inspect quarantined), why, and who decided.
type WaiveParams struct {
	// EventID and Flow follow fairrelay.CheckID's rule.
	EventID string
	Flow    string
	// Seq must be the one the flow waits for: its projected seq + 1.
	Seq int64
	// Reason is required (non-empty after trimming), as a redrive's.
	Reason string
	// Operator is who decided; may be empty.
	Operator string
}

// Check returns the error Waive gives p before it reads anything: an
// ErrInvalidInput naming id or flow (fairrelay.CheckID's rule), seq (below
// 1), reason (empty after trimming, or breaking fairrelay.CheckReason's
// rule) or operator (CheckID's rule, when given); nil when p is well formed
// (whether its seq is the one the flow waits for, Waive decides). For a
// caller that reads the inbox before it waives (fairrelay waive checks what
// is held at the seq): bad input is named first, not answered by that read.
func (p WaiveParams) Check() error {
	d := Delivery{EventID: p.EventID, Flow: p.Flow, Seq: p.Seq}
	if err := d.check(); err != nil {
		return err
	}
	if strings.TrimSpace(p.Reason) == "" {
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "reason", Message: "is empty: a waiver records why the event may go without its effect"}
	}
	// The rules of every other audited action's text (a breaker's
	// report: a newline, escape sequences, invalid UTF-8 and 100 KB were
	// stored, and PostgreSQL answered invalid UTF-8 with a database
	// error).
	if err := fairrelay.CheckReason("reason", p.Reason); err != nil {
		return err
	}
	if p.Operator != "" {
		if err := fairrelay.CheckID("operator", p.Operator); err != nil {
			return err
		}
	}
	return nil
}

// Waiver is one recorded waiver.
type Waiver struct {
	Flow     string `json:"flow"`
	Seq      int64  `json:"seq"`
	EventID  string `json:"id"`
	Reason   string `json:"reason"`
	Operator string `json:"operator,omitempty"`
	// WaivedAt is the wall-clock time it was written (UTC).
	WaivedAt time.Time `json:"waived_at"`
}

// Waive records, in one transaction, that seq p.Seq of flow p.Flow is taken
// by event p.EventID with no effect: the flow's projection moves to p.Seq
// (its total unchanged), and from then on a delivery of that event at that
// seq answers duplicate, so the sender acks it (after a redrive, for a
// quarantined head) and the flow goes on; a broker consumer's held events
// after it apply at its next retry (its held copies of the event itself
// are deleted). Any other delivery answers as before. The same waiver
// again (this id, flow and seq waived already) is already so: nil, nothing
// written, the first waiver's reason and operator kept. A seq the flow
// applied already under another event's receipt (that event's delivery
// answered sequence_conflict, for good) can be waived for it too: it then
// answers duplicate, and the projection stays as the receipt left it;
// so can a seq at most the flow's applied seq whose receipt was pruned
// (PruneReceipts), which answers sequence_conflict to every delivery,
// its own event's late copy included. The body is not compared: the queue never changes an event's body, so
// the id, flow and seq name the event. The waived id is not a receipt: a
// delivery of the same id in another flow answers as Receive says.
// Errors (nothing written): ErrInvalidInput naming id or flow (CheckID's
// rule), seq (below 1, or not the seq the flow waits for: its projected
// seq + 1; a flow applied up to seq P can only waive P+1, a seq at most P
// that another event's receipt took, or one whose receipt was pruned; a seq waived already for another
// event is refused naming that event), id (the held events contradict it:
// heldContradicts),
// reason (empty,
// or breaking fairrelay.CheckReason's rule: one line of at most
// MaxReasonBytes of printable UTF-8) or operator (CheckID's rule);
// database errors and ErrBusy.
func (in *Inbox) Waive(ctx context.Context, p WaiveParams) error {
	if err := p.Check(); err != nil {
		return err
	}
	d := Delivery{EventID: p.EventID, Flow: p.Flow, Seq: p.Seq}
	tx, err := in.begin(ctx)
	if err != nil {
		return dbError("waive: begin transaction", in.translate(err))
	}
	defer tx.Rollback()
	if in.lock != "" {
		if _, err := tx.ExecContext(ctx, in.lock, d.Flow, d.EventID); err != nil {
			return dbError("waive", in.translate(err))
		}
	}
	pseq, total, err := projectionOf(ctx, tx, d.Flow)
	if err != nil {
		return dbError("waive", in.translate(err))
	}
	if d.Seq <= pseq {
		// Taken already: say by what, so that an operator who runs the
		// same waive again (or waives a seq a receipt took) knows what
		// the inbox holds and that nothing was written.
		var id string
		err := tx.QueryRowContext(ctx, q["WaiverGet"], d.Flow, d.Seq).Scan(&id)
		switch {
		case err == nil && id == d.EventID:
			// Already so: nothing to write, and nothing went wrong (two
			// fresh users' reports: a script that retried waive, then
			// redrive, stopped at the exit 2 of the harmless repeat).
			return nil
		case err == nil:
			return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "seq",
				Message: fmt.Sprintf("seq %d of flow %q is waived already, for event %q, not %q; the flow waits for seq %d", d.Seq, d.Flow, id, d.EventID, pseq+1)}
		case !errors.Is(err, sql.ErrNoRows):
			return dbError("waive", in.translate(fmt.Errorf("WaiverGet: %w", err)))
		}
		// A seq another event's receipt took: this event answers
		// sequence_conflict for good, and its flow waits behind it in the
		// queue. Waived, it answers duplicate, and the flow goes on; the
		// projection stays as the receipt left it (an SRE's report: such a
		// head had no way out but hand SQL).
		// A seq with neither receipt nor waiver had its receipt pruned
		// (PruneReceipts): every delivery at it answers
		// sequence_conflict, its own event's late copy too, which the
		// waiver lets through as a duplicate.
		err = tx.QueryRowContext(ctx, q["ReceiptIDAt"], d.Flow, d.Seq).Scan(&id)
		switch {
		case err == nil && id != d.EventID, errors.Is(err, sql.ErrNoRows):
			if err := in.heldContradicts(ctx, tx.Tx, d); err != nil {
				return err
			}
			return in.recordWaiver(ctx, tx, d, p, -1, 0)
		case err != nil && !errors.Is(err, sql.ErrNoRows):
			return dbError("waive", in.translate(fmt.Errorf("ReceiptIDAt: %w", err)))
		}
	}
	if d.Seq != pseq+1 {
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "seq",
			Message: fmt.Sprintf("flow %q has applied up to seq %d: only seq %d, the one it waits for, can be waived, not %d", d.Flow, pseq, pseq+1, d.Seq)}
	}
	if err := in.heldContradicts(ctx, tx.Tx, d); err != nil {
		return err
	}
	return in.recordWaiver(ctx, tx, d, p, d.Seq, total)
}

// recordWaiver writes p's waiver of d in tx and commits: the waiver, the
// flow's projection moved to seq with total (seq -1: left as it is, for a
// seq applied already), and the event's held copies gone.
func (in *Inbox) recordWaiver(ctx context.Context, tx *sqlitestore.WriteTx, d Delivery, p WaiveParams, seq, total int64) error {
	var op any
	if p.Operator != "" {
		op = p.Operator
	}
	if _, err := tx.ExecContext(ctx, q["WaiverInsert"], d.Flow, d.Seq, d.EventID, p.Reason, op,
		time.Now().UTC().Format(time.RFC3339Nano)); err != nil {
		return dbError("waive", in.translate(fmt.Errorf("WaiverInsert: %w", err)))
	}
	if seq >= 0 {
		if _, err := tx.ExecContext(ctx, q["ProjectionUpsert"], d.Flow, seq, total); err != nil {
			return dbError("waive", in.translate(fmt.Errorf("ProjectionUpsert: %w", err)))
		}
	}
	// A broker consumer's held copies of the event go with it: they would
	// never apply.
	if _, err := tx.ExecContext(ctx, q["HeldDeleteWaived"], d.Flow, d.Seq, d.EventID); err != nil {
		return dbError("waive", in.translate(fmt.Errorf("HeldDeleteWaived: %w", err)))
	}
	if err := tx.Commit(); err != nil {
		return dbError("waive: commit", in.translate(err))
	}
	return nil
}

// heldContradicts refuses a waiver whose id the inbox's own held events
// (a broker consumer's, inbox/held.go) show to be the wrong one: the flow's
// seq d.Seq is held for other ids only, or d.EventID is held at another
// seq of the flow (a fresh user's report: waiving the next held event's
// id at the refused one's seq was accepted, and no command undoes a
// waiver). With nothing held at the seq and the id not held in the flow
// nothing here can tell, and the waiver goes on. Errors: ErrInvalidInput
// naming id; the database's.
func (in *Inbox) heldContradicts(ctx context.Context, tx *sql.Tx, d Delivery) error {
	rows, err := tx.QueryContext(ctx, q["HeldIDsAt"], d.Flow, d.Seq)
	if err != nil {
		return dbError("waive", in.translate(fmt.Errorf("HeldIDsAt: %w", err)))
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return dbError("waive", in.translate(fmt.Errorf("HeldIDsAt: %w", err)))
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return dbError("waive", in.translate(fmt.Errorf("HeldIDsAt: %w", err)))
	}
	if len(ids) > 0 && !slices.Contains(ids, d.EventID) {
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "id",
			Message: fmt.Sprintf("seq %d of flow %q is held for event %s, not %q (inspect --inbox I held): waive the id held there", d.Seq, d.Flow, quoteAll(ids), d.EventID)}
	}
	var seq int64
	err = tx.QueryRowContext(ctx, q["HeldSeqOf"], d.Flow, d.EventID).Scan(&seq)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return dbError("waive", in.translate(fmt.Errorf("HeldSeqOf: %w", err)))
	case seq != d.Seq:
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "id",
			Message: fmt.Sprintf("event %q is held at seq %d of flow %q, not at seq %d, the one the flow waits for (inspect --inbox I held)", d.EventID, seq, d.Flow, d.Seq)}
	}
	return nil
}

// quoteAll is ids quoted and joined with " or ".
func quoteAll(ids []string) string {
	q := make([]string, len(ids))
	for i, id := range ids {
		q[i] = strconv.Quote(id)
	}
	return strings.Join(q, " or ")
}

// waived reports whether d is the event a waiver took its seq for. It is
// asked only where Receive would refuse d (SPEC §3's id_conflict or
// sequence_conflict: a waived seq is at or below the flow's projected
// seq), so a delivery that applies pays nothing for it.
// waivedElsewhere reports whether d's id is waived at another place than
// d's: the id is held there, as by a receipt (SPEC §3 step 2:
// id_conflict). Errors: the database's.
func waivedElsewhere(ctx context.Context, tx *sql.Tx, d Delivery) (bool, error) {
	var one int
	err := tx.QueryRowContext(ctx, q["WaiverElsewhere"], d.EventID, d.Flow, d.Seq).Scan(&one)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("WaiverElsewhere: %w", err)
	}
	return true, nil
}

func waived(ctx context.Context, tx *sql.Tx, d Delivery) (bool, error) {
	var id string
	err := tx.QueryRowContext(ctx, q["WaiverGet"], d.Flow, d.Seq).Scan(&id)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("WaiverGet: %w", err)
	}
	return id == d.EventID, nil
}

// Waivers lists up to limit waivers in (flow, seq) order, starting after
// the waiver of flow afterFlow at seq afterSeq ("" and 0: from the first).
// Errors: ErrInvalidInput as Receipts'; database errors.
func (in *Inbox) Waivers(ctx context.Context, afterFlow string, afterSeq int64, limit int) ([]Waiver, error) {
	if err := checkPage(afterFlow, afterSeq, limit); err != nil {
		return nil, err
	}
	rows, err := in.db.QueryContext(ctx, q["WaiverPage"], afterFlow, afterSeq, limit)
	if err != nil {
		return nil, dbError("inbox waivers", in.translate(err))
	}
	defer rows.Close()
	out := []Waiver{}
	for rows.Next() {
		var w Waiver
		var op sql.NullString
		var at string
		if err := rows.Scan(&w.Flow, &w.Seq, &w.EventID, &w.Reason, &op, &at); err != nil {
			return nil, dbError("inbox waivers", in.translate(err))
		}
		w.Operator = op.String
		if w.WaivedAt, err = time.Parse(time.RFC3339Nano, at); err != nil {
			return nil, dbError("inbox waivers", fmt.Errorf("waiver of %s seq %d: waived_at %q: %w", w.Flow, w.Seq, at, err))
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, dbError("inbox waivers", in.translate(err))
	}
	return out, nil
}
