package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/sink/webhook"
)

// A receiver's own effect (Options.Apply) commits with its receipt or not
// at all: an accepted delivery keeps the rows Apply wrote and its receipt;
// a refusal Apply answers, an error or an outcome Apply may not answer
// keeps neither; a duplicate or a gap never calls it. The effect's table
// is read in a delivery of its own whose Apply answers retry (rolled back).
func TestApplyCommitsTheEffectWithTheReceipt(t *testing.T) {
	eachDSN(t, "inbox_apply", testApply) // an Apply of each backend's own
}

func testApply(t *testing.T, dsn string) {
	errBoom := errors.New("boom")
	var calls atomic.Int64
	var shipped atomic.Int64 // the rows in shipment, as the last count read them
	apply := func(ctx context.Context, tx *sql.Tx, d inbox.Delivery) (fairrelay.Outcome, error) {
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS shipment (event_id TEXT PRIMARY KEY, body TEXT NOT NULL)`); err != nil {
			return "", err
		}
		if d.Flow == "count" {
			var n int64
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM shipment`).Scan(&n); err != nil {
				return "", err
			}
			shipped.Store(n)
			return fairrelay.OutcomeRetry, nil
		}
		calls.Add(1)
		if _, err := tx.ExecContext(ctx, `INSERT INTO shipment (event_id, body) VALUES ($1, $2)`, d.EventID, string(d.Body)); err != nil {
			return "", err
		}
		switch string(d.Body) {
		case `{"bad":true}`:
			return fairrelay.OutcomeInvalidBody, nil
		case `{"refused":true}`:
			return fairrelay.OutcomeRejected, nil
		case `{"later":true}`:
			return fairrelay.OutcomeRetry, nil
		case `{"boom":true}`:
			return "", errBoom
		case `{"odd":true}`:
			return fairrelay.OutcomeDuplicate, nil
		case `{"unknown_customer":true}`:
			return "", fairrelay.InvalidInput("customer", "unknown")
		case `{"commits":true}`:
			return fairrelay.OutcomeAccepted, tx.Commit()
		}
		return fairrelay.OutcomeAccepted, nil
	}
	in, err := inbox.Open(t.Context(), dsn, inbox.Options{Apply: apply, MaxDelta: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	ctx := t.Context()
	n := 0 // the count deliveries' seq
	count := func() int64 {
		t.Helper()
		n++
		out, err := in.Receive(ctx, inbox.Delivery{EventID: "count-" + string(rune('a'+n)), Flow: "count", Seq: 1, Body: []byte("{}")})
		if err != nil || out != fairrelay.OutcomeRetry {
			t.Fatalf("count: %s %v", out, err)
		}
		return shipped.Load()
	}
	receive := func(id string, seq int64, body string, want fairrelay.Outcome) {
		t.Helper()
		out, err := in.Receive(ctx, inbox.Delivery{EventID: id, Flow: "F", Seq: seq, Body: []byte(body)})
		if err != nil || out != want {
			t.Fatalf("receive %s seq %d %s: %s %v, want %s", id, seq, body, out, err, want)
		}
	}
	// Not a ledger body, and a "delta" over MaxDelta: the receiver's
	// own effect decides, not the ledger's rules.
	receive("e1", 1, `{"order":"o-1","delta":500}`, fairrelay.OutcomeAccepted)
	if got := count(); got != 1 || calls.Load() != 1 {
		t.Fatalf("after e1: %d rows, %d calls; want 1, 1", got, calls.Load())
	}
	receive("e1", 1, `{"order":"o-1","delta":500}`, fairrelay.OutcomeDuplicate)
	receive("e3", 3, `{"order":"o-3"}`, fairrelay.OutcomeGap)
	if calls.Load() != 1 {
		t.Fatalf("a duplicate and a gap called Apply: %d calls, want 1", calls.Load())
	}
	for _, c := range []struct {
		body string
		want fairrelay.Outcome
	}{{`{"bad":true}`, fairrelay.OutcomeInvalidBody}, {`{"refused":true}`, fairrelay.OutcomeRejected}, {`{"later":true}`, fairrelay.OutcomeRetry}} {
		receive("e2", 2, c.body, c.want)
		if got := count(); got != 1 {
			t.Fatalf("after e2 answered %s: %d rows, want 1 (its row rolled back)", c.want, got)
		}
	}
	_, err = in.Receive(ctx, inbox.Delivery{EventID: "e2", Flow: "F", Seq: 2, Body: []byte(`{"boom":true}`)})
	if !errors.Is(err, errBoom) || fairrelay.CodeOf(err) == fairrelay.CodeDatabase {
		t.Fatalf("Apply's error: %v (code %q), want it wrapped, not a database error", err, fairrelay.CodeOf(err))
	}
	_, err = in.Receive(ctx, inbox.Delivery{EventID: "e2", Flow: "F", Seq: 2, Body: []byte(`{"odd":true}`)})
	if err == nil || !strings.Contains(err.Error(), `"duplicate"`) {
		t.Fatalf("Apply answering duplicate: %v, want an error naming it", err)
	}
	if got := count(); got != 1 {
		t.Fatalf("after Apply's errors: %d rows, want 1", got)
	}
	// An Apply error that wraps ErrInvalidInput is Apply's (ErrApply),
	// not a malformed delivery: the handler answers 500 and a broker
	// consumer redelivers, rather than 400 and a reject (a breaker's
	// report).
	_, err = in.Receive(ctx, inbox.Delivery{EventID: "e2", Flow: "F", Seq: 2, Body: []byte(`{"unknown_customer":true}`)})
	if !errors.Is(err, inbox.ErrApply) || !errors.Is(err, fairrelay.ErrInvalidInput) {
		t.Fatalf("Apply's invalid input: %v, want it as ErrApply, its own error kept", err)
	}
	// An Apply that ends tx itself is Apply's error too, not a database
	// error (its writes went without a receipt: misuse, said as such).
	_, err = in.Receive(ctx, inbox.Delivery{EventID: "m1", Flow: "M", Seq: 1, Body: []byte(`{"commits":true}`)})
	if !errors.Is(err, inbox.ErrApply) || fairrelay.CodeOf(err) == fairrelay.CodeDatabase || !strings.Contains(err.Error(), "ended tx itself") {
		t.Fatalf("Apply that commits tx: %v (code %q), want ErrApply naming the misuse", err, fairrelay.CodeOf(err))
	}
	committed := count() // the misused call's row, committed by Apply itself
	receive("e2", 2, `{"order":"o-2"}`, fairrelay.OutcomeAccepted)
	if got := count(); got != committed+1 {
		t.Fatalf("after e2: %d rows, want %d", got, committed+1)
	}
	// A held copy that Apply refuses leaves nothing of Apply's writes,
	// however often it is tried again (ReceiveHeld committed them with
	// the copy's reason: an effect without a receipt at every retry).
	h := inbox.Delivery{EventID: "h1", Flow: "H", Seq: 1, Body: []byte(`{"refused":true}`)}
	if out, err := in.Receive(ctx, h); err != nil || out != fairrelay.OutcomeRejected {
		t.Fatalf("receive h1: %s %v", out, err)
	}
	if _, err := in.Hold(ctx, h, fairrelay.OutcomeRejected); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		r, err := in.ReceiveHeld(ctx, "H", 10)
		if err != nil || r.Stopped != fairrelay.OutcomeRejected {
			t.Fatalf("receive held: %+v %v, want stopped rejected", r, err)
		}
	}
	if got := count(); got != committed+1 {
		t.Fatalf("after the held copy's refusals: %d rows, want %d (none of the refused copy's)", got, committed+1)
	}
	s, err := in.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := &inbox.Snapshot{
		Receipts:   []inbox.Receipt{{ID: "e1", Flow: "F", Seq: 1}, {ID: "e2", Flow: "F", Seq: 2}},
		Projection: []inbox.Projection{{Flow: "F", Seq: 2, Total: 0}},
	}
	if d := cmp.Diff(want, s); d != "" {
		t.Fatalf("inbox (-want +got):\n%s", d)
	}

}

// Over HTTP and from a broker, an Apply error that wraps ErrInvalidInput
// is the receiver's failure, tried again (500; redelivered), not a
// malformed delivery (400; rejected, which a broker drops): a breaker's
// report.
func TestApplysInvalidInputIsNotAMalformedDelivery(t *testing.T) {
	t.Parallel()
	var fail atomic.Bool
	fail.Store(true)
	in, err := inbox.Open(t.Context(), filepath.Join(t.TempDir(), "inbox.db"), inbox.Options{
		Apply: func(ctx context.Context, tx *sql.Tx, d inbox.Delivery) (fairrelay.Outcome, error) {
			if fail.Load() {
				return "", fairrelay.InvalidInput("customer", "unknown customer in %s", d.EventID)
			}
			return fairrelay.OutcomeAccepted, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	srv := httptest.NewServer(in.Handler(inbox.HandlerOptions{Verify: webhook.NewVerifier(testKey).Verify}))
	defer srv.Close()
	if code, m := post(t, srv.URL+"/", http.MethodPost, "A1", "A", 1, `{"x":1}`, "good"); code != http.StatusInternalServerError {
		t.Fatalf("an Apply error over HTTP: %d %v, want 500 (the relay retries)", code, m)
	}
	fail.Store(false)
	if code, m := post(t, srv.URL+"/", http.MethodPost, "A1", "A", 1, `{"x":1}`, "good"); code != http.StatusOK || m["status"] != "accepted" {
		t.Fatalf("the same delivery once Apply takes it: %d %v, want 200 accepted", code, m)
	}
}

// An Apply whose own statement meets a serialization failure (or a
// deadlock, or a busy database) answers busy, as the inbox's own
// statements do — Handler's 503 with Retry-After — and stays Apply's
// (ErrApply): it answered a plain 500 (a reviewer's report).
func TestApplysBusyErrorIsBusy(t *testing.T) {
	t.Parallel()
	in, err := inbox.Open(t.Context(), pgtest.Schema(t, "inbox_apply_busy"), inbox.Options{
		Apply: func(ctx context.Context, tx *sql.Tx, d inbox.Delivery) (fairrelay.Outcome, error) {
			return "", fmt.Errorf("update stock: %w", &pgconn.PgError{Code: "40001", Message: "could not serialize access"})
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	_, err = in.Receive(t.Context(), inbox.Delivery{EventID: "A1", Flow: "A", Seq: 1, Body: []byte(`{}`)})
	if !errors.Is(err, fairrelay.ErrBusy) || !errors.Is(err, inbox.ErrApply) {
		t.Fatalf("Apply's serialization failure: %v (code %q), want busy and ErrApply", err, fairrelay.CodeOf(err))
	}
}

// A panic in Apply is an error of Apply (ErrApply, the panic's value in
// it): everything rolled back, no receipt, and the next delivery of the
// event applies it. It reached Receive's caller as a panic, which in a
// broker consumer ended the process, and the message, unacked, ended the
// next one (a breaker's report). Both backends.
func TestAPanicInApplyIsAnError(t *testing.T) {
	var called sync.Map // event id → called before: each backend's event panics once
	eachBackend(t, "frinpanic", inbox.Options{Apply: func(ctx context.Context, tx *sql.Tx, d inbox.Delivery) (fairrelay.Outcome, error) {
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS effect (id TEXT PRIMARY KEY)`); err != nil {
			return "", err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO effect (id) VALUES ($1)`, d.EventID); err != nil {
			return "", err
		}
		if _, again := called.LoadOrStore(d.EventID, true); !again {
			panic("a bug on the first body")
		}
		return fairrelay.OutcomeAccepted, nil
	}}, func(t *testing.T, in *inbox.Inbox) {
		id := "A1-" + path.Base(t.Name()) // the backend's own event
		out, err := in.Receive(t.Context(), deliveryOf(id, "A", 1, 1))
		if !errors.Is(err, inbox.ErrApply) || !strings.Contains(err.Error(), "panicked on "+id+": a bug on the first body") {
			t.Fatalf("a panicking Apply: %q %v, want an ErrApply naming the panic", out, err)
		}
		if rs, err := in.Receipts(t.Context(), "", 0, 10); err != nil || len(rs) != 0 {
			t.Fatalf("receipts after the panic: %v %v, want none", rs, err)
		}
		receiver(t, in)(deliveryOf(id, "A", 1, 1), fairrelay.OutcomeAccepted)
		var n int
		if err := in.DB().QueryRowContext(t.Context(), `SELECT count(*) FROM effect`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("effects: %d %v, want 1 (the panicking call's rolled back)", n, err)
		}
	})
}
