package inbox

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/fairrelay/fairrelay"
)

// PruneReceiptsParams selects the receipts PruneReceipts deletes.
type PruneReceiptsParams struct {
	// Before deletes the receipts written before this wall-clock time (the
	// receiver's clock when the receipt committed, kept to the
	// millisecond). A receipt written before inbox migration 007 has no
	// time of its own and counts as written when that migration ran.
	// Required, from 1970 on and not after now: ErrInvalidInput naming
	// "before" otherwise.
	Before time.Time
	// Limit is the most receipts deleted in the call's one transaction, at
	// least 1 (ErrInvalidInput naming "limit"). Small batches leave a
	// SQLite inbox's one writer to deliveries between them (Retain takes
	// 500 at a time).
	Limit int
}

// PruneReceiptsResult is what one PruneReceipts call deleted.
type PruneReceiptsResult struct {
	// Deleted is how many receipts the call deleted.
	Deleted int64 `json:"receipts"`
	// More is set when the call stopped at its Limit: call again for the
	// rest.
	More bool `json:"more"`
}

// PruneReceipts deletes, in one transaction, up to p.Limit receipts written
// before p.Before, oldest first: retention for an inbox, whose receipts are
// otherwise kept for good (each is about 120 bytes). Projections, held
// deliveries and waivers are untouched, so every flow's sequence check goes
// on as before.
//
// What a pruned receipt no longer does: a copy of its event delivered after
// the prune is not recognised as a duplicate. Its seq is at or below its
// flow's applied seq, so it answers sequence_conflict (SPEC §3 step 3, the
// receipt being gone), a permanent outcome the relay quarantines — it is
// never applied twice. Such a late copy comes from a sender that never
// learnt of the delivery's success: a relay whose lease ran out, or a head
// quarantined and redriven later. Keep receipts longer than the longest an
// event can wait for a redrive; should one come later still, Waive lets it
// through as a duplicate (it is allowed for a seq whose receipt was
// pruned).
//
// Errors: ErrInvalidInput naming "before" or "limit"; database errors
// (sqlitestore.ErrFileReplaced, wrapped, for a SQLite file replaced since
// Open); nothing is deleted when the call fails.
func (in *Inbox) PruneReceipts(ctx context.Context, p PruneReceiptsParams) (PruneReceiptsResult, error) {
	if p.Before.IsZero() {
		return PruneReceiptsResult{}, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "before",
			Message: "required: the receipts written before this time are deleted"}
	}
	if now := time.Now(); p.Before.After(now) {
		return PruneReceiptsResult{}, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "before",
			Message: fmt.Sprintf("%s is in the future (now %s): receipts are written at the time they commit, so this would delete ones not written yet",
				p.Before.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano))}
	}
	if p.Before.Before(time.UnixMilli(0)) {
		// Receipts are dated in Unix milliseconds from 1970 on; a time
		// before that deletes nothing, and one before year -292 million
		// overflowed to a time far ahead and deleted every receipt (a
		// breaker's report).
		return PruneReceiptsResult{}, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "before",
			Message: fmt.Sprintf("%s is before 1970-01-01T00:00:00Z, where receipts' times start", p.Before.UTC().Format(time.RFC3339Nano))}
	}
	if p.Limit < 1 {
		return PruneReceiptsResult{}, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "limit",
			Message: fmt.Sprintf("must be at least 1, got %d", p.Limit)}
	}
	before := p.Before.UnixMilli()
	tx, err := in.begin(ctx)
	if err != nil {
		return PruneReceiptsResult{}, dbError("prune receipts: begin transaction", in.translate(err))
	}
	defer tx.Rollback()
	var epoch int64
	if err := tx.QueryRowContext(ctx, q["ReceiptEpoch"]).Scan(&epoch); err != nil {
		return PruneReceiptsResult{}, dbError("prune receipts", in.translate(fmt.Errorf("ReceiptEpoch: %w", err)))
	}
	var n int64
	if epoch < before {
		r, err := tx.ExecContext(ctx, q["ReceiptPruneUndated"], p.Limit)
		if err != nil {
			return PruneReceiptsResult{}, dbError("prune receipts", in.translate(fmt.Errorf("ReceiptPruneUndated: %w", err)))
		}
		if n, err = r.RowsAffected(); err != nil {
			return PruneReceiptsResult{}, dbError("prune receipts", in.translate(err))
		}
	}
	if rest := int64(p.Limit) - n; rest > 0 {
		r, err := tx.ExecContext(ctx, q["ReceiptPruneBefore"], before, rest)
		if err != nil {
			return PruneReceiptsResult{}, dbError("prune receipts", in.translate(fmt.Errorf("ReceiptPruneBefore: %w", err)))
		}
		m, err := r.RowsAffected()
		if err != nil {
			return PruneReceiptsResult{}, dbError("prune receipts", in.translate(err))
		}
		n += m
	}
	if err := tx.Commit(); err != nil {
		return PruneReceiptsResult{}, dbError("prune receipts: commit", in.translate(err))
	}
	return PruneReceiptsResult{Deleted: n, More: n == int64(p.Limit)}, nil
}

// RetainParams configure Retain.
type RetainParams struct {
	// Keep is how long a receipt is kept after it was written; positive
	// (ErrInvalidInput naming "keep"). Keep it longer than the longest an
	// event can wait at the sender before a delivery that may be late: the
	// relay's --retain-ids (default 30 days), so that an id a producer
	// sends again after the queue forgot it still answers id_conflict here
	// rather than applying again.
	Keep time.Duration
	// Interval is the time from the end of one pass to the start of the
	// next; 0 means one minute, negative is ErrInvalidInput naming
	// "interval".
	Interval time.Duration
	// Batch is the most receipts deleted in one transaction
	// (PruneReceiptsParams.Limit); 0 means 500, negative is
	// ErrInvalidInput naming "batch".
	Batch int
	// Logger gets a line per pass that deleted receipts (info: "inbox:
	// pruned receipts", receipts=N, before=RFC 3339) and one per failed
	// pass (warn, err=…). Defaults to slog.Default(); give
	// slog.New(slog.DiscardHandler) to drop them.
	Logger *slog.Logger
	// Pruned, when set, is called after each batch that deleted receipts
	// with how many it deleted (for a metric).
	Pruned func(n int64)
	// Failed, when set, is called with each error that ended a pass.
	Failed func(err error)
}

// Retain prunes the receipts older than p.Keep (PruneReceipts) until ctx
// ends: a pass at once and then p.Interval after each pass ends. A pass
// deletes p.Batch receipts per transaction and, between two, rests as long
// as the last one took, so that on SQLite a delivery never waits long for
// the writer. An error ends the pass (reported through p.Logger and
// p.Failed) and the next pass tries again: the receiver goes on taking
// deliveries meanwhile, only its inbox grows. It returns nil when ctx
// ends, or ErrInvalidInput for bad params before any pass.
func (in *Inbox) Retain(ctx context.Context, p RetainParams) error {
	switch {
	case p.Keep <= 0:
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "keep", Message: fmt.Sprintf("must be a positive duration, got %s", p.Keep)}
	case p.Interval < 0:
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "interval", Message: fmt.Sprintf("must not be negative (0: one minute), got %s", p.Interval)}
	case p.Batch < 0:
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "batch", Message: fmt.Sprintf("must not be negative (0: 500), got %d", p.Batch)}
	}
	if p.Interval == 0 {
		p.Interval = time.Minute
	}
	if p.Batch == 0 {
		p.Batch = 500
	}
	if p.Logger == nil {
		p.Logger = slog.Default()
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		in.retainPass(ctx, p)
		t.Reset(p.Interval)
	}
}

// retainPass runs one pass of Retain.
func (in *Inbox) retainPass(ctx context.Context, p RetainParams) {
	before := time.Now().Add(-p.Keep)
	var total int64
	for ctx.Err() == nil {
		start := time.Now()
		res, err := in.PruneReceipts(ctx, PruneReceiptsParams{Before: before, Limit: p.Batch})
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			p.Logger.Warn("inbox: pruning receipts failed; trying again at the next pass", "err", err, "receipts", total)
			if p.Failed != nil {
				p.Failed(err)
			}
			break
		}
		total += res.Deleted
		if res.Deleted > 0 && p.Pruned != nil {
			p.Pruned(res.Deleted)
		}
		if !res.More {
			break
		}
		rest := time.NewTimer(time.Since(start))
		select {
		case <-ctx.Done():
		case <-rest.C:
		}
		rest.Stop()
	}
	if total > 0 {
		p.Logger.Info("inbox: pruned receipts", "receipts", total, "before", before.UTC().Format(time.RFC3339Nano))
	}
}
