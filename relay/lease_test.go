package relay_test

import (
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/relay"
)

// A delivery that outlives its lease is never settled.
func TestNoSettleAfterLeaseRanOut(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testPolicy())
	arrived, release := blockFirst(h, "A1")
	h.enqueue(t, "A", 1)
	cfg := h.config(t)
	cfg.Workers = 1 // nobody re-claims A1 before the blocked delivery ends
	_, stop := h.start(t, cfg)
	waitClosed(t, arrived)
	h.time.Advance(2 * time.Second) // the lease (2000 ms) runs out
	close(release)
	// The worker skips its settle, then re-claims A1 (the inbox already has
	// it: duplicate).
	byGen := map[int64]relay.Settled{}
	for range 2 {
		s := h.next(t)
		byGen[s.Claim.Token.Generation] = s
	}
	if s := byGen[1]; !s.LeaseLost || s.Result.Status != "" {
		t.Fatalf("old claim: %+v, want lease lost and nothing sent", s)
	}
	if s := byGen[2]; s.Outcome != fairrelay.OutcomeDuplicate || s.Result.Status != fairrelay.SettleAcked {
		t.Fatalf("re-delivery: %+v", s)
	}
	stop()
}

// A relay never starts a second delivery of a flow it is still delivering,
// whatever the clock says (issue #15). Here another process writes a tick
// 100 000 ahead while A1's first delivery is held at the receiver: the
// relay's clock follows the stored tick, A1's lease looks expired to it,
// and its next claim takes A1 again (generation 2). That claim waits for
// the first delivery to end, then is delivered, its lease still holding;
// the first one's settle is skipped (its lease ran out by the jumped
// clock). No sleeps: the time source stays still; the jump comes from the
// store.
func TestNoSecondDeliveryOfAFlowInDelivery(t *testing.T) {
	t.Parallel()
	h := newHarness(t, patientPolicy()) // lease 60 s
	arrivals := make(chan delivery, 16)
	release := make(chan struct{})
	var first atomic.Bool
	h.intercept = func(w http.ResponseWriter, r *http.Request, d delivery) bool {
		arrivals <- d
		if d.id == "A1" && first.CompareAndSwap(false, true) {
			select {
			case <-release:
			case <-r.Context().Done():
				return true
			}
		}
		return false
	}
	held := make(chan struct{})
	cfg := h.patient(t)
	cfg.Logger = slog.New(&onMessage{prefix: "relay: claimed a flow still in delivery", do: func() { close(held) }})
	h.enqueue(t, "A", 1)
	h.start(t, cfg)
	if d := <-arrivals; d.id != "A1" {
		t.Fatalf("first delivery %+v, want A1", d)
	}
	c, err := h.q.Clock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	other, err := fairrelay.Open(t.Context(), h.queue, fairrelay.Config{Policy: patientPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Enqueue(t.Context(), fairrelay.EnqueueParams{ID: "B1", Flow: "B", Body: []byte(`{"delta":1}`), At: c.Tick + 100_000}); err != nil {
		t.Fatal(err)
	}
	for waiting := true; waiting; {
		select {
		case d := <-arrivals:
			if d.id == "A1" {
				t.Fatal("a second delivery of A1 started while the first was in flight")
			}
		case <-held:
			waiting = false
		case <-time.After(10 * time.Second):
			t.Fatal("A1 was not claimed again within 10 s of the jump")
		}
	}
	if a1 := h.event(t, "A1"); a1.State != fairrelay.StateInflight || a1.Generation != 2 {
		t.Fatalf("A1 after the jump: %+v, want inflight at generation 2", a1.EventState)
	}
	close(release)
	byGen := map[int64]relay.Settled{}
	h.until(t, func(all []relay.Settled) bool {
		for _, s := range all {
			if s.Claim.Flow == "A" {
				byGen[s.Claim.Token.Generation] = s
			}
		}
		return len(byGen) == 2
	})
	if s := byGen[1]; !s.LeaseLost {
		t.Errorf("first claim: %+v, want not settled (its lease ran out by the jumped clock)", s)
	}
	if s := byGen[2]; s.Outcome != fairrelay.OutcomeDuplicate || s.Result.Status != fairrelay.SettleAcked {
		t.Errorf("second claim: %+v, want delivered after the first (duplicate) and acked", s)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.overlap) > 0 {
		t.Errorf("deliveries of one flow at once: %v", h.overlap)
	}
	if led, receipts := h.ledger(t); receipts != 2 || led["A"].Total != 1 {
		t.Errorf("ledger %+v with %d receipts, want A applied once (and B1)", led, receipts)
	}
}
