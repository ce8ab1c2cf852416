package inbox_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/syncbuf"
)

// PruneReceipts deletes the receipts written before its bound, oldest first
// (one written before inbox migration 007 counts as written when the
// migration ran), a batch at a time, and nothing else: projections stay,
// so a late copy of a pruned event answers sequence_conflict and is never
// applied twice, and a waiver lets it through as a duplicate. Bad input is
// refused naming the field, with nothing deleted. Both backends.
func TestPruneReceipts(t *testing.T) {
	eachBackend(t, "frinprune", inbox.Options{MaxDelta: 5}, func(t *testing.T, in *inbox.Inbox) {
		ctx := t.Context()
		d, receive := deliveryOf, receiver(t, in)
		for _, x := range []inbox.Delivery{d("A1", "A", 1, 1), d("A2", "A", 2, 2), d("A3", "A", 3, 3), d("B1", "B", 1, 4), d("C1", "C", 1, 5)} {
			receive(x, fairrelay.OutcomeAccepted)
		}
		now := time.Now()
		set := func(query string, args ...any) {
			t.Helper()
			if _, err := in.DB().ExecContext(ctx, query, args...); err != nil {
				t.Fatal(err)
			}
		}
		// A1 and A2 were written two hours ago; C1 before migration 007,
		// which ran three hours ago.
		set(`UPDATE receipt SET received_ms = $1 WHERE event_id = $2`, now.Add(-2*time.Hour).UnixMilli(), "A1")
		set(`UPDATE receipt SET received_ms = $1 WHERE event_id = $2`, now.Add(-2*time.Hour+time.Millisecond).UnixMilli(), "A2")
		set(`UPDATE receipt SET received_ms = NULL WHERE event_id = $1`, "C1")
		set(`UPDATE receipt_epoch SET migrated_ms = $1`, now.Add(-3*time.Hour).UnixMilli())

		ids := func() []string {
			t.Helper()
			rs, err := in.Receipts(ctx, "", 0, 100)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, r := range rs {
				out = append(out, r.ID)
			}
			return out
		}
		projections := func() []inbox.Projection {
			t.Helper()
			ps, err := in.Projections(ctx, "", 100)
			if err != nil {
				t.Fatal(err)
			}
			return ps
		}
		wantProj := []inbox.Projection{{Flow: "A", Seq: 3, Total: 6}, {Flow: "B", Seq: 1, Total: 4}, {Flow: "C", Seq: 1, Total: 5}}

		for _, bad := range []struct {
			p     inbox.PruneReceiptsParams
			field string
		}{
			{inbox.PruneReceiptsParams{Limit: 10}, "before"},
			{inbox.PruneReceiptsParams{Before: now.Add(time.Hour), Limit: 10}, "before"},
			// Before 1970; so far back that its Unix milliseconds
			// overflowed to a time ahead and deleted every receipt.
			{inbox.PruneReceiptsParams{Before: time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC), Limit: 10}, "before"},
			{inbox.PruneReceiptsParams{Before: time.Date(-300000000, 1, 1, 0, 0, 0, 0, time.UTC), Limit: 10}, "before"},
			{inbox.PruneReceiptsParams{Before: now.Add(-time.Hour), Limit: 0}, "limit"},
		} {
			_, err := in.PruneReceipts(ctx, bad.p)
			var fe *fairrelay.Error
			if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != bad.field {
				t.Errorf("prune %+v: %v, want invalid_input naming %s", bad.p, err, bad.field)
			}
		}
		if diff := cmp.Diff([]string{"A1", "A2", "A3", "B1", "C1"}, ids()); diff != "" {
			t.Fatalf("a refused prune deleted receipts (-want +got):\n%s", diff)
		}

		// Before the migration ran: the undated receipt stays.
		res, err := in.PruneReceipts(ctx, inbox.PruneReceiptsParams{Before: now.Add(-200 * time.Minute), Limit: 10})
		if err != nil || res != (inbox.PruneReceiptsResult{}) {
			t.Fatalf("prune before everything: %+v %v, want nothing deleted", res, err)
		}
		// An hour ago, two at a time: the undated C1 and the oldest, A1,
		// then A2.
		before := now.Add(-time.Hour)
		res, err = in.PruneReceipts(ctx, inbox.PruneReceiptsParams{Before: before, Limit: 2})
		if err != nil || res != (inbox.PruneReceiptsResult{Deleted: 2, More: true}) {
			t.Fatalf("first batch: %+v %v, want 2 deleted and more", res, err)
		}
		if diff := cmp.Diff([]string{"A2", "A3", "B1"}, ids()); diff != "" {
			t.Fatalf("after the first batch (-want +got):\n%s", diff)
		}
		res, err = in.PruneReceipts(ctx, inbox.PruneReceiptsParams{Before: before, Limit: 2})
		if err != nil || res != (inbox.PruneReceiptsResult{Deleted: 1}) {
			t.Fatalf("second batch: %+v %v, want 1 deleted, no more", res, err)
		}
		res, err = in.PruneReceipts(ctx, inbox.PruneReceiptsParams{Before: before, Limit: 2})
		if err != nil || res != (inbox.PruneReceiptsResult{}) {
			t.Fatalf("third batch: %+v %v, want nothing", res, err)
		}
		if diff := cmp.Diff([]string{"A3", "B1"}, ids()); diff != "" {
			t.Fatalf("after the prune (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(wantProj, projections()); diff != "" {
			t.Fatalf("the prune changed the projection (-want +got):\n%s", diff)
		}

		// A late copy of A1 is not applied again: its seq is behind A's.
		receive(d("A1", "A", 1, 1), fairrelay.OutcomeSequenceConflict)
		receive(d("C1", "C", 1, 5), fairrelay.OutcomeSequenceConflict)
		// A copy of a kept receipt is still a duplicate, and A goes on.
		receive(d("A3", "A", 3, 3), fairrelay.OutcomeDuplicate)
		receive(d("A4", "A", 4, 1), fairrelay.OutcomeAccepted)
		// An operator lets the late copy through: a duplicate from then on.
		if err := in.Waive(ctx, inbox.WaiveParams{EventID: "A1", Flow: "A", Seq: 1, Reason: "applied; its receipt was pruned"}); err != nil {
			t.Fatalf("waive a seq whose receipt was pruned: %v", err)
		}
		receive(d("A1", "A", 1, 1), fairrelay.OutcomeDuplicate)
		wantProj[0] = inbox.Projection{Flow: "A", Seq: 4, Total: 7}
		if diff := cmp.Diff(wantProj, projections()); diff != "" {
			t.Fatalf("projection after the late copies (-want +got):\n%s", diff)
		}
	})
}

// Retain prunes the receipts older than Keep at once, a batch at a time,
// and keeps the rest; it refuses bad params before any pass and returns
// when its context ends. Both backends.
func TestRetainPrunesOldReceipts(t *testing.T) {
	eachBackend(t, "frinretain", inbox.Options{}, func(t *testing.T, in *inbox.Inbox) {
		ctx := t.Context()
		d, receive := deliveryOf, receiver(t, in)
		for _, x := range []inbox.Delivery{d("A1", "A", 1, 1), d("A2", "A", 2, 1), d("B1", "B", 1, 1)} {
			receive(x, fairrelay.OutcomeAccepted)
		}
		old := time.Now().Add(-48 * time.Hour).UnixMilli()
		if _, err := in.DB().ExecContext(ctx, `UPDATE receipt SET received_ms = $1 WHERE event_id <> $2`, old, "A2"); err != nil {
			t.Fatal(err)
		}
		for _, bad := range []struct {
			p     inbox.RetainParams
			field string
		}{
			{inbox.RetainParams{}, "keep"},
			{inbox.RetainParams{Keep: time.Hour, Interval: -time.Second}, "interval"},
			{inbox.RetainParams{Keep: time.Hour, Batch: -1}, "batch"},
		} {
			err := in.Retain(ctx, bad.p)
			var fe *fairrelay.Error
			if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != bad.field {
				t.Errorf("retain %+v: %v, want invalid_input naming %s", bad.p, err, bad.field)
			}
		}
		pruned := make(chan int64, 10)
		failed := make(chan error, 10)
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- in.Retain(rctx, inbox.RetainParams{Keep: 24 * time.Hour, Interval: time.Hour, Batch: 1,
				Pruned: func(n int64) { pruned <- n }, Failed: func(err error) { failed <- err }})
		}()
		var total int64
		for total < 2 {
			select {
			case n := <-pruned:
				if n != 1 {
					t.Fatalf("a batch of 1 deleted %d", n)
				}
				total += n
			case err := <-failed:
				t.Fatal(err)
			case <-time.After(30 * time.Second):
				t.Fatalf("retain deleted %d of 2 old receipts in 30s", total)
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("retain returned %v when its context ended", err)
		}
		rs, err := in.Receipts(ctx, "", 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]inbox.Receipt{{ID: "A2", Flow: "A", Seq: 2}}, rs); diff != "" {
			t.Fatalf("receipts after retain (-want +got):\n%s", diff)
		}
	})
}

// Inbox migration 007 records its own time to the millisecond (SQLite's
// was cut to the second, so that receipts written before it counted as up
// to a second older than they are), and a receipt written after it
// without a time — by a process of an older fairrelay still running, whose
// insert names no received_ms — is dated when written, not taken for one
// written before the migration and pruned early (a breaker's reports).
// Both backends.
func TestReceiptsWrittenAroundMigration007AreDated(t *testing.T) {
	eachDSN(t, "frindated", func(t *testing.T, dsn string) {
		ctx := t.Context()
		start := time.Now().UnixMilli()
		in, err := inbox.Open(ctx, dsn, inbox.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		end := time.Now().UnixMilli()
		var epoch int64
		if err := in.DB().QueryRowContext(ctx, `SELECT migrated_ms FROM receipt_epoch`).Scan(&epoch); err != nil {
			t.Fatal(err)
		}
		if epoch < start || epoch > end+1 {
			t.Errorf("migration 007 ran between %d and %d ms, and recorded %d", start, end, epoch)
		}
		// The insert of a build before migration 007.
		before := time.Now().UnixMilli()
		if _, err := in.DB().ExecContext(ctx, `INSERT INTO receipt (event_id, flow_id, seq, body, body_sha256) VALUES ($1, $2, $3, $4, $5)`,
			"OLD1", "O", 1, []byte{}, make([]byte, 32)); err != nil {
			t.Fatal(err)
		}
		after := time.Now().UnixMilli()
		var got *int64
		if err := in.DB().QueryRowContext(ctx, `SELECT received_ms FROM receipt WHERE event_id = $1`, "OLD1").Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got == nil || *got < before || *got > after+1 {
			t.Fatalf("a receipt an older build wrote: received_ms %v, want between %d and %d", got, before, after)
		}
		res, err := in.PruneReceipts(ctx, inbox.PruneReceiptsParams{Before: time.UnixMilli(before - 1000), Limit: 10})
		if err != nil || res.Deleted != 0 {
			t.Fatalf("prune of receipts older than a second: %+v %v; want the new receipt kept", res, err)
		}
	})
}

// Without RetainParams.Logger a failed pass is logged to slog.Default():
// before, with no Logger given, it was not logged at all, and a receiver's
// inbox grew without a word (the closing notes' "loggers that discard by
// default"). Not parallel: it replaces the process's default logger.
func TestRetainLogsToTheDefaultLoggerWithoutALogger(t *testing.T) {
	logs := syncbuf.DefaultLog(t)
	in, err := inbox.Open(t.Context(), filepath.Join(t.TempDir(), "inbox.db"), inbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	failed := make(chan error, 1)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- in.Retain(ctx, inbox.RetainParams{Keep: time.Hour, Interval: time.Hour, Failed: func(err error) {
			select {
			case failed <- err:
			default:
			}
		}})
	}()
	<-failed
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "pruning receipts failed") || !strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("the default logger got %q: want the failed pass at WARN", logs.String())
	}
}
