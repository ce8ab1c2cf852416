package relay_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/relay"
)

// Another process writing a later tick (here: far ahead) neither errors nor
// stalls the relay: its clock is raised to the stored tick.
func TestStoredTickAheadOfTheDaemonClock(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testPolicy())
	_, stop := h.start(t, h.config(t))
	other, err := fairrelay.Open(t.Context(), h.queue, fairrelay.Config{Policy: testPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	const ahead = 50_000_000
	if _, err := other.Enqueue(t.Context(), fairrelay.EnqueueParams{ID: "A1", Flow: "A", Body: []byte(`{"delta":1}`), At: ahead}); err != nil {
		t.Fatal(err)
	}
	s := h.next(t)
	if s.Result.Status != fairrelay.SettleAcked || s.At < ahead {
		t.Fatalf("settle %+v, want acked at >= %d", s, ahead)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func TestClock(t *testing.T) {
	t.Parallel()
	src := &manualTime{}
	src.Advance(time.Hour) // the source's origin is arbitrary
	c := relay.NewClock(src, 100)
	if n := c.Now(); n != 100 {
		t.Fatalf("start %d, want the stored tick 100", n)
	}
	src.Advance(5 * time.Millisecond)
	if n := c.Now(); n != 105 {
		t.Fatalf("after 5ms: %d", n)
	}
	c.Observe(50)
	if n := c.Now(); n != 105 {
		t.Fatalf("observing an older tick moved the clock: %d", n)
	}
	c.Observe(1000)
	src.Advance(3 * time.Millisecond)
	if n := c.Now(); n != 1003 {
		t.Fatalf("after observing 1000 and 3ms: %d", n)
	}
	src.Advance(-time.Second) // a broken source stepping back stalls, never regresses
	if n := c.Now(); n != 1003 {
		t.Fatalf("source stepped back: %d", n)
	}
}

// TestIdleRelayDoesNotWrite checks that idle workers ask NextDue (a read)
// instead of claiming (a write that advances the stored tick) on every poll
// while the only head waits out its backoff, and that they claim it once it
// is due.
func TestIdleRelayDoesNotWrite(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testPolicy())
	var first atomic.Bool
	h.intercept = func(w http.ResponseWriter, r *http.Request, d delivery) bool {
		if first.CompareAndSwap(false, true) {
			w.WriteHeader(http.StatusServiceUnavailable)
			return true
		}
		return false
	}
	// Readings nobody waits for are dropped (a non-blocking send).
	st := signalTime{manualTime: h.time, read: make(chan struct{})}
	cfg := h.config(t)
	cfg.Source = st
	h.enqueue(t, "A", 1)
	h.start(t, cfg)
	if s := h.next(t); s.Result.Status != fairrelay.SettleReady || s.Result.NextAt != s.At+100 {
		t.Fatalf("first delivery: %+v, want ready 100 ms later", s)
	}
	// Every poll reads the clock, and a worker's next reading comes after
	// its previous claim committed: 100 readings span several polls of each
	// of the 4 workers.
	// First let the claim that follows a delivery (a busy worker claims at
	// once, a write) finish: from here on every worker is idle.
	st.waitReads(t, 100)
	before, err := h.q.Clock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	h.time.Advance(50 * time.Millisecond) // a later tick, still inside the backoff
	// Claiming on these polls would have moved the stored tick to 50.
	st.waitReads(t, 100)
	after, err := h.q.Clock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if after.Tick != before.Tick {
		t.Fatalf("stored tick moved from %d to %d while the only head waited out its backoff: idle polls wrote", before.Tick, after.Tick)
	}
	h.time.Advance(60 * time.Millisecond) // now due
	if s := h.next(t); s.Claim.Token.EventID != "A1" || s.Result.Status != fairrelay.SettleAcked {
		t.Fatalf("once due: %+v", s)
	}
}

// An idle relay's clock moves while it only reads. A relay started beside
// it starts at the stored tick: if that lagged far behind, its leases would
// look expired to the first one at once, which would deliver the same head
// again while the second still holds it. The idle relay writes its clock
// (a heartbeat claim) once it runs (lease - timeout - margin) / 2 ahead of
// the stored tick, so the lease the second grants outlasts its delivery
// for both.
func TestIdleRelayKeepsTheStoredTickWithinAHeartbeat(t *testing.T) {
	t.Parallel()
	// Lease 60 s, delivery timeout 30 s + margin 100 ms: a heartbeat of
	// 14.95 s. Either relay may claim A1 (both run when it is enqueued);
	// whichever does holds its delivery, and the other must not take it.
	h := newHarness(t, patientPolicy())
	arrived, release := make(chan delivery, 4), make(chan struct{})
	h.intercept = func(w http.ResponseWriter, r *http.Request, d delivery) bool {
		arrived <- d
		<-release
		return false
	}
	defer close(release)
	first := signalTime{manualTime: &manualTime{}, read: make(chan struct{})}
	cfg := h.patient(t)
	cfg.Source = first
	h.start(t, cfg)
	first.waitReads(t, 100)
	first.Advance(70 * time.Second) // idle for 70 s, past a lease: only reads, and the heartbeat
	first.waitReads(t, 100)
	if c, err := h.q.Clock(t.Context()); err != nil || c.Tick != 70_000 {
		t.Fatalf("stored tick %+v (%v) after the idle relay's clock reached 70000, want 70000 (a heartbeat)", c, err)
	}
	// A second relay starts at the stored tick and claims A1.
	cfg2 := h.patient(t)
	cfg2.Source = &manualTime{}
	second, _ := h.start(t, cfg2)
	if err := second.Do(t.Context(), func(at int64) error {
		_, err := h.q.EnqueueMany(t.Context(), fairrelay.EnqueueManyParams{At: at, Events: []fairrelay.NewEvent{{ID: "A1", Flow: "A", Body: []byte(`{"delta":1}`)}}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-arrived: // A1's delivery, held at the receiver
	case <-time.After(10 * time.Second):
		t.Fatal("A1 was not delivered within 10 s")
	}
	first.waitReads(t, 100) // the first relay polls while the delivery is held
	if e := h.event(t, "A1"); e.State != fairrelay.StateInflight || e.Generation != 1 {
		t.Fatalf("A1 %+v while a delivery holds its lease, want inflight, generation 1", e)
	}
}
