package relay_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/relay"
)

// An outbox transaction left open on a flow whose head is being delivered
// holds that flow's row; the relay goes on settling and claiming the other
// flows meanwhile, and settles the held head once the transaction commits
// (fairrelay.SettleManyParams.SkipHeld). Without that, A1's settle waits for the
// row, and so does every answer settled with it; answers pile up to
// 2 × Workers and the relay claims nothing more until the commit.
func TestOpenOutboxTransactionDoesNotStallTheRelay(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dsn := pgtest.Schema(t, "relay_ox_")
	h := newHarnessOn(t, patientPolicy(), dsn, filepath.Join(t.TempDir(), "inbox.db"))
	// Every delivery waits at the gate until the transaction is open.
	gate, arrived := make(chan struct{}), make(chan string, 64)
	h.intercept = func(w http.ResponseWriter, r *http.Request, d delivery) bool {
		arrived <- d.id
		select {
		case <-gate:
			return false
		case <-r.Context().Done():
			return true
		}
	}
	h.enqueue(t, "A", 1)
	const others = 20
	for i := range others {
		h.enqueue(t, fmt.Sprintf("B%02d", i), 1)
	}
	cfg := h.patient(t)
	cfg.Workers = 2
	reg := prometheus.NewRegistry()
	m, err := relay.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Metrics = m
	h.start(t, cfg)
	// A (created first) is claimed in the first rotation: wait until it is
	// being delivered.
	for id := ""; id != "A1"; {
		select {
		case id = <-arrived:
		case <-time.After(10 * time.Second):
			t.Fatal("A1 was not delivered within 10s")
		}
	}
	tx := h.holdFlowA(t, dsn)
	go func() {
		for range arrived {
		}
	}()
	close(gate)
	// A's row is held until the commit: every other flow's head is
	// delivered and acked meanwhile.
	for range others {
		if s := h.next(t); s.Claim.Flow == "A" || s.Result.Status != fairrelay.SettleAcked {
			t.Fatalf("settle while the outbox transaction is open: %+v, want a B flow's head acked", s)
		}
	}
	if a1 := h.event(t, "A1"); a1.State != fairrelay.StateInflight {
		t.Fatalf("A1 while its flow is held: %+v, want inflight", a1.EventState)
	}
	// A1's answer came before the last B flow's: its settle was tried,
	// and put off, in that settle's transaction or an earlier one.
	if n := counterValue(t, reg, "fairrelay_settles_held_total"); n < 1 {
		t.Fatalf("fairrelay_settles_held_total = %v, want at least 1", n)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"A1", "A2"} {
		if s := h.next(t); s.Claim.Token.EventID != want || s.Result.Status != fairrelay.SettleAcked {
			t.Fatalf("settle after the commit: %+v, want %s acked", s, want)
		}
	}
}

// A relay stopping while an outbox transaction holds the flow of an
// answer waiting for its settle tries that settle until the shutdown
// deadline, then returns, leaving the event to its lease (here a manual
// clock that never reaches it: a settler that kept waiting would never
// return).
func TestShutdownLeavesAHeldFlowsAnswer(t *testing.T) {
	t.Parallel()
	dsn := pgtest.Schema(t, "relay_oxs_")
	h := newHarnessOn(t, patientPolicy(), dsn, filepath.Join(t.TempDir(), "inbox.db"))
	arrived, release := blockFirst(h, "A1")
	h.enqueue(t, "A", 1)
	cfg := h.patient(t)
	cfg.ShutdownTimeout = 200 * time.Millisecond
	_, stop := h.start(t, cfg)
	waitClosed(t, arrived)
	h.holdFlowA(t, dsn)
	close(release)
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return within 20s of the signal while A's row was held")
	}
	if a1 := h.event(t, "A1"); a1.State != fairrelay.StateInflight {
		t.Fatalf("A1 after the shutdown: %+v, want inflight (left to its lease)", a1.EventState)
	}
	// Reported (OnSettle sees every answer), as not settled.
	if s := h.next(t); s.Claim.Token.EventID != "A1" || !s.LeaseLost || !s.Result.Held {
		t.Fatalf("report of A1: %+v, want not settled (LeaseLost), held", s)
	}
}

// holdFlowA opens an outbox transaction on the PostgreSQL queue dsn that
// appends A2 to flow A and stays open until the test commits it or ends
// (rolled back): it holds A's row.
func (h *harness) holdFlowA(t *testing.T, dsn string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	conn := pgtest.Connect(t, dsn)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		tx.Rollback(ctx)
		conn.Close(ctx)
	})
	if r, err := h.q.EnqueuePgxTx(ctx, tx, fairrelay.EnqueueParams{ID: "A2", Flow: "A", Body: []byte(`{"delta":1}`), At: fairrelay.AtStored}); err != nil || r.Status != fairrelay.EnqueueCreated {
		t.Fatalf("EnqueueTx: %+v %v", r, err)
	}
	return tx
}
