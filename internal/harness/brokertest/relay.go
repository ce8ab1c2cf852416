package brokertest

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/consume"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/relay"
	"github.com/fairrelay/fairrelay/sink"
)

// Relay is a relay daemon on a fresh SQLite queue store, running until the
// test ends, with short backoffs and a large budget (base 20 ms doubling to
// 500 ms, 1000 attempts) so that a broker outage of seconds quarantines
// nothing, and a delivery timeout of 2s.
type Relay struct {
	Q *fairrelay.Queue
	R *relay.Relay

	mu       sync.Mutex
	settled  []relay.Settled
	changed  chan struct{} // closed and replaced on every settle
	acked    atomic.Int64
	failures atomic.Int64 // settles of a transient outcome (retry: no answer, or the broker's)
}

// StartRelay starts a relay with workers workers delivering through s.
func StartRelay(t testing.TB, s sink.Sink, workers int) *Relay {
	t.Helper()
	pol := fairrelay.DaemonPolicy()
	pol.Lease, pol.Budget, pol.BackoffBase, pol.BackoffCap = 5000, 1000, 20, 500
	q, err := fairrelay.Open(t.Context(), filepath.Join(t.TempDir(), "queue.db"), fairrelay.Config{Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	r := &Relay{Q: q, changed: make(chan struct{})}
	r.R, err = relay.New(t.Context(), relay.Config{Queue: q, Sink: s, Workers: workers, DeliveryTimeout: 2 * time.Second,
		LeaseMargin: time.Second, OnSettle: r.onSettle})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.R.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	})
	return r
}

func (r *Relay) onSettle(s relay.Settled) {
	if s.Result.Status == fairrelay.SettleAcked {
		r.acked.Add(1)
	}
	if s.Outcome.Class() == fairrelay.ClassTransient {
		r.failures.Add(1)
	}
	r.mu.Lock()
	r.settled = append(r.settled, s)
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// Acked is how many settles acked an event so far.
func (r *Relay) Acked() int64 { return r.acked.Load() }

// Failures is how many deliveries settled a transient outcome so far.
func (r *Relay) Failures() int64 { return r.failures.Load() }

// Event is one ledger event to enqueue.
type Event struct {
	ID, Flow string
	Delta    int
}

// Ledger returns n events round-robin over flows f00, f01, …, with deltas 1
// to 5, ids e0000, e0001, ….
func Ledger(n, flows int) []Event {
	evs := make([]Event, n)
	for i := range evs {
		evs[i] = Event{ID: fmt.Sprintf("e%04d", i), Flow: fmt.Sprintf("f%02d", i%flows), Delta: 1 + i%5}
	}
	return evs
}

// Enqueue enqueues evs, in order, through the relay (at its tick).
func (r *Relay) Enqueue(t testing.TB, evs []Event) {
	t.Helper()
	ps := make([]fairrelay.NewEvent, len(evs))
	for i, e := range evs {
		ps[i] = fairrelay.NewEvent{ID: e.ID, Flow: e.Flow, Body: fmt.Appendf(nil, `{"delta":%d}`, e.Delta)}
	}
	if err := r.R.Do(t.Context(), func(at int64) error {
		_, err := r.Q.EnqueueMany(t.Context(), fairrelay.EnqueueManyParams{At: at, Events: ps})
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// WaitSettled waits up to timeout until done holds for the settles so far.
func (r *Relay) WaitSettled(t testing.TB, what string, timeout time.Duration, done func([]relay.Settled) bool) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		r.mu.Lock()
		ok, changed := done(r.settled), r.changed
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
	}
}

// WaitAcked waits up to timeout until n settles acked.
func (r *Relay) WaitAcked(t testing.TB, n int64, timeout time.Duration) {
	t.Helper()
	r.WaitSettled(t, fmt.Sprintf("%d acks", n), timeout, func([]relay.Settled) bool { return r.Acked() >= n })
}

// Quarantines checks that s refuses for good: through a relay, one event is
// delivered once, settled rejected and quarantined (no retry), with a
// detail that contains detail (the broker's words).
func Quarantines(t *testing.T, s sink.Sink, detail string) {
	t.Helper()
	r := StartRelay(t, s, 4)
	r.Enqueue(t, []Event{{ID: "X1", Flow: "A", Delta: 1}})
	var got relay.Settled
	r.WaitSettled(t, "the settle of X1", 30*time.Second, func(ss []relay.Settled) bool {
		if len(ss) > 0 {
			got = ss[0]
		}
		return len(ss) > 0
	})
	if got.Outcome != fairrelay.OutcomeRejected || got.Result.Status != fairrelay.SettleQuarantined {
		t.Fatalf("X1 settled %q → %q (%s), want rejected → quarantined", got.Outcome, got.Result.Status, got.Detail)
	}
	if !strings.Contains(got.Detail, detail) {
		t.Errorf("detail %q does not contain %q", got.Detail, detail)
	}
	e, err := r.Q.Event(t.Context(), "X1")
	if err != nil {
		t.Fatal(err)
	}
	if e.State != fairrelay.StateQuarantined || e.Reason == nil || *e.Reason != string(fairrelay.OutcomeRejected) || e.LifetimeAttempts != 1 {
		t.Fatalf("X1: %s (%v) after %d attempts, want quarantined (rejected) after 1", e.State, e.Reason, e.LifetimeAttempts)
	}
}

// WantLedger checks the inbox against evs: one receipt per event, and each
// flow's projection at its last seq with the sum of its deltas.
func WantLedger(t testing.TB, in *inbox.Inbox, evs []Event) {
	t.Helper()
	want := map[string]inbox.Projection{}
	for _, e := range evs {
		p := want[e.Flow]
		want[e.Flow] = inbox.Projection{Flow: e.Flow, Seq: p.Seq + 1, Total: p.Total + int64(e.Delta)}
	}
	s, err := in.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Receipts) != len(evs) {
		t.Errorf("%d receipts for %d events", len(s.Receipts), len(evs))
	}
	got := s.ByFlow()
	for f, p := range want {
		if got[f] != p {
			t.Errorf("flow %s: projection %+v, want %+v", f, got[f], p)
		}
	}
}

// WaitLedger polls the inbox (written by the consumer's goroutines) until
// it holds n receipts, up to timeout.
func WaitLedger(t testing.TB, in *inbox.Inbox, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s, err := in.Snapshot(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Receipts) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the inbox holds %d receipts after %s, want %d", len(s.Receipts), timeout, n)
		}
		time.Sleep(20 * time.Millisecond) // polling another goroutine's database writes, not synchronising
	}
}

// OpenInbox opens a fresh inbox on a SQLite file, closed when the test ends.
func OpenInbox(t testing.TB) *inbox.Inbox {
	t.Helper()
	in, err := inbox.Open(t.Context(), filepath.Join(t.TempDir(), "inbox.db"), inbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	return in
}

// consumerOptions are the scenarios' consumer options: quick redeliveries.
func consumerOptions(in *inbox.Inbox, onApplied func(consume.Applied)) consume.Options {
	return consume.Options{Inbox: in, RedeliverBase: 20 * time.Millisecond, RedeliverCap: 500 * time.Millisecond, OnApplied: onApplied}
}
