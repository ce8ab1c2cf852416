package relay_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/relay"
)

// A signal mid-delivery: no new claims, the in-flight delivery finishes and
// is settled, Run returns nil.
func TestGracefulShutdownMidDelivery(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testPolicy())
	arrived, release := blockFirst(h, "A1")
	h.enqueue(t, "A", 1)
	h.enqueue(t, "B", 1)
	cfg := h.config(t)
	cfg.Workers = 1
	r, err := relay.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, signal := context.WithCancel(t.Context())
	defer signal()
	stopped := make(chan error, 1)
	go func() { stopped <- r.Run(ctx) }()
	waitClosed(t, arrived)
	// Run cannot return while A1 is in flight; release it once shutdown
	// began (signal has returned: the relay's ctx is done).
	signal()
	close(release)
	if err := <-stopped; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if s := h.next(t); s.Claim.Token.EventID != "A1" || s.Result.Status != fairrelay.SettleAcked {
		t.Fatalf("settle %+v", s)
	}
	if b1 := h.event(t, "B1"); b1.State != fairrelay.StateReady || b1.Generation != 0 {
		t.Fatalf("B1 was claimed after the signal: %+v", b1.EventState)
	}
}

// The shutdown deadline cuts a delivery off; it settles retry while its
// lease holds, and Run still returns nil.
func TestShutdownDeadline(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testPolicy())
	arrived, release := blockFirst(h, "A1")
	defer close(release)
	h.enqueue(t, "A", 1)
	cfg := h.config(t)
	cfg.ShutdownTimeout = 20 * time.Millisecond
	_, stop := h.start(t, cfg)
	waitClosed(t, arrived)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	s := h.next(t)
	if s.Outcome != fairrelay.OutcomeRetry || s.Result.Status != fairrelay.SettleReady {
		t.Fatalf("settle %+v", s)
	}
	if a1 := h.event(t, "A1"); a1.State != fairrelay.StateReady || a1.Attempts != 1 {
		t.Fatalf("A1: %+v", a1.EventState)
	}
}

// A relay stopped with events in flight (their settles lost) and a new
// relay on the same files: nothing lost, no effect applied twice.
func TestRestartWithEventsInFlight(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testPolicy())
	arrived := make(chan string, 2)
	release := make(chan struct{})
	var once sync.Map
	inner := h.in.Handler(inbox.HandlerOptions{})
	h.intercept = func(w http.ResponseWriter, r *http.Request, d delivery) bool {
		if d.id != "A3" && d.id != "B2" {
			return false
		}
		if _, dup := once.LoadOrStore(d.id, true); dup {
			return false
		}
		// Apply the effect, then hold the answer: the relay is "down"
		// before it hears back.
		inner.ServeHTTP(httptest.NewRecorder(), r)
		arrived <- d.id
		<-release
		w.WriteHeader(http.StatusServiceUnavailable)
		return true
	}
	for _, f := range []string{"A", "B", "C", "D"} {
		h.enqueue(t, f, 1, 2, 3, 4, 5)
	}
	cfg := h.config(t)
	cfg.Workers = 2
	cfg.ShutdownTimeout = time.Hour
	stopping := make(chan struct{})
	cfg.Logger = slog.New(&onMessage{prefix: "relay: stopping", do: func() { close(stopping) }})
	_, stop1 := h.start(t, cfg)
	<-arrived
	<-arrived
	stopped := make(chan error, 1)
	go func() { stopped <- stop1() }()
	<-stopping // no more claims from the first relay
	cfg.Logger = nil
	h.time.Advance(2 * time.Second) // both leases run out before the answers come
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"A3", "B2"} {
		if e := h.event(t, id); e.State != fairrelay.StateInflight {
			t.Fatalf("%s after the first relay: %+v", id, e.EventState)
		}
	}

	later := &manualTime{}
	cfg.Source = later
	_, stop2 := h.start(t, cfg)
	later.Advance(2 * time.Second) // the leases of A3 and B2 run out
	all := h.until(t, func(all []relay.Settled) bool {
		done := 0
		for _, id := range []string{"A5", "B5", "C5", "D5"} {
			if e := h.event(t, id); e.State == fairrelay.StateAcked {
				done++
			}
		}
		return done == 4
	})
	stop2()
	for _, s := range all {
		if (s.Claim.Token.EventID == "A3" || s.Claim.Token.EventID == "B2") && s.Result.Status == fairrelay.SettleAcked && s.Outcome != fairrelay.OutcomeDuplicate {
			t.Errorf("%s re-delivered as %s, want duplicate", s.Claim.Token.EventID, s.Outcome)
		}
	}
	led, receipts := h.ledger(t)
	if receipts != 20 {
		t.Errorf("receipts %d, want 20", receipts)
	}
	for _, f := range []string{"A", "B", "C", "D"} {
		if led[f].Seq != 5 || led[f].Total != 15 {
			t.Errorf("flow %s: %+v, want seq 5 total 15 (each effect once)", f, led[f])
		}
	}
	snap, err := h.q.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range snap.Events {
		if e.State != fairrelay.StateAcked {
			t.Errorf("%s is %s", e.ID, e.State)
		}
	}
}
