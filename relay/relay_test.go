package relay_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/relay"
	"github.com/fairrelay/fairrelay/sink"
	"github.com/fairrelay/fairrelay/sink/webhook"
)

// manualTime is a Monotonic source the test advances by hand.
type manualTime struct{ ns atomic.Int64 }

func (m *manualTime) Elapsed() time.Duration  { return time.Duration(m.ns.Load()) }
func (m *manualTime) Advance(d time.Duration) { m.ns.Add(int64(d)) }

// testPolicy: lease 2000 ms, backoff 100 ms doubling to 1000 ms, no jitter
// so next_at is exact.
func testPolicy() fairrelay.Policy {
	return fairrelay.Policy{Entry: fairrelay.EntryFair, Lease: 2000, Budget: 3, BackoffBase: 100, BackoffCap: 1000}
}

// delivery is one request the receiver saw.
type delivery struct {
	id   string
	flow string
	seq  string
}

// harness is a queue store, an inbox behind a real HTTP server on loopback
// (signed webhooks), and a relay with a manual clock.
type harness struct {
	q       *fairrelay.Queue
	queue   string
	in      *inbox.Inbox
	srv     *httptest.Server
	key     []byte
	time    *manualTime
	settled chan relay.Settled

	mu       sync.Mutex
	seen     []delivery
	inflight map[string]int
	overlap  []string // flows that had two deliveries at once
	// intercept, when set, may answer a request itself (return true) or
	// wait before passing it on; it runs before the inbox.
	intercept func(w http.ResponseWriter, r *http.Request, d delivery) bool
}

func newHarness(t *testing.T, pol fairrelay.Policy) *harness {
	t.Helper()
	dir := t.TempDir()
	return newHarnessOn(t, pol, filepath.Join(dir, "queue.db"), filepath.Join(dir, "inbox.db"))
}

// newHarnessOn is newHarness on the given stores (SQLite paths or
// postgres:// URLs).
func newHarnessOn(t *testing.T, pol fairrelay.Policy, queueDSN, inboxDSN string) *harness {
	t.Helper()
	h := &harness{queue: queueDSN, time: &manualTime{}, settled: make(chan relay.Settled, 4096),
		inflight: map[string]int{}, key: []byte("test secret")}
	var err error
	if h.q, err = fairrelay.Open(t.Context(), h.queue, fairrelay.Config{Policy: pol}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.q.Close() })
	if h.in, err = inbox.Open(t.Context(), inboxDSN, inbox.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.in.Close() })
	handler := h.in.Handler(inbox.HandlerOptions{Verify: webhook.NewVerifier(h.key).Verify})
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := delivery{id: r.Header.Get(webhook.HeaderEventID), flow: r.Header.Get(webhook.HeaderFlow), seq: r.Header.Get(webhook.HeaderSeq)}
		// Read the body first: only then does the server notice a client
		// that gave up (r.Context() is cancelled).
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.mu.Lock()
		h.seen = append(h.seen, d)
		h.inflight[d.flow]++
		if h.inflight[d.flow] > 1 {
			h.overlap = append(h.overlap, d.flow)
		}
		intercept := h.intercept
		h.mu.Unlock()
		defer func() {
			h.mu.Lock()
			h.inflight[d.flow]--
			h.mu.Unlock()
		}()
		if intercept != nil && intercept(w, r, d) {
			return
		}
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *harness) enqueue(t *testing.T, flow string, deltas ...int) {
	t.Helper()
	c, err := h.q.Clock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range deltas {
		id := fmt.Sprintf("%s%d", flow, i+1)
		if _, err := h.q.Enqueue(t.Context(), fairrelay.EnqueueParams{ID: id, Flow: flow, Body: fmt.Appendf(nil, `{"delta":%d}`, d), At: c.Tick}); err != nil {
			t.Fatal(err)
		}
	}
}

func (h *harness) config(t *testing.T) relay.Config {
	s, err := webhook.New(webhook.Options{URL: h.srv.URL, Key: h.key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return relay.Config{
		Queue: h.q, Sink: s, Workers: 4, DeliveryTimeout: 500 * time.Millisecond, LeaseMargin: 100 * time.Millisecond,
		ShutdownTimeout: 5 * time.Second, PollInterval: time.Millisecond, MaxPollInterval: 5 * time.Millisecond,
		Source: h.time, OnSettle: func(s relay.Settled) { h.settled <- s },
	}
}

// start runs a relay; stop cancels it and returns Run's error.
func (h *harness) start(t *testing.T, cfg relay.Config) (r *relay.Relay, stop func() error) {
	t.Helper()
	r, err := relay.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() { cancel(); runErr = <-done })
		return runErr
	}
	t.Cleanup(func() { stop() })
	return r, stop
}

// next returns the next settle, failing after 10s.
func (h *harness) next(t *testing.T) relay.Settled {
	t.Helper()
	select {
	case s := <-h.settled:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no settle within 10s")
		return relay.Settled{}
	}
}

// until collects settles until done says so.
func (h *harness) until(t *testing.T, done func(all []relay.Settled) bool) []relay.Settled {
	t.Helper()
	var all []relay.Settled
	for !done(all) {
		all = append(all, h.next(t))
	}
	return all
}

func acks(n int) func([]relay.Settled) bool {
	return func(all []relay.Settled) bool {
		k := 0
		for _, s := range all {
			if s.Result.Status == fairrelay.SettleAcked {
				k++
			}
		}
		return k >= n
	}
}

func (h *harness) event(t *testing.T, id string) *fairrelay.EventRecord {
	t.Helper()
	e, err := h.q.Event(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func (h *harness) ledger(t *testing.T) (map[string]inbox.Projection, int) {
	t.Helper()
	s, err := h.in.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return s.ByFlow(), len(s.Receipts)
}

// Under 4 workers each flow arrives at the receiver in seq order, one
// delivery at a time, and every event is applied once.
func TestOrderPerFlowUnderWorkers(t *testing.T) {
	t.Parallel()
	testOrderPerFlow(t, newHarness(t, patientPolicy()))
}

// The same on PostgreSQL: queue store and inbox each in a fresh schema.
func TestOrderPerFlowUnderWorkersPostgres(t *testing.T) {
	t.Parallel()
	testOrderPerFlow(t, newHarnessOn(t, patientPolicy(), pgtest.Schema(t, "relay_q_"), pgtest.Schema(t, "relay_i_")))
}

// patientPolicy is testPolicy with a lease of 60 s, for a config with a
// 30 s delivery timeout (patient): a test that waits for every event to be
// accepted must not see a delivery time out on a loaded machine, since its
// retry would wait for a backoff the manual clock never reaches.
func patientPolicy() fairrelay.Policy {
	p := testPolicy()
	p.Lease = 60_000
	return p
}

// patient is h.config with the 30 s delivery timeout patientPolicy allows.
func (h *harness) patient(t *testing.T) relay.Config {
	cfg := h.config(t)
	cfg.DeliveryTimeout = 30 * time.Second
	return cfg
}

func testOrderPerFlow(t *testing.T, h *harness) {
	const flows, events = 8, 6
	for f := range flows {
		h.enqueue(t, fmt.Sprintf("F%d", f), 1, 2, 3, 4, 5, 6)
	}
	_, stop := h.start(t, h.patient(t))
	all := h.until(t, acks(flows*events))
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, s := range all {
		if s.Outcome != fairrelay.OutcomeAccepted {
			t.Errorf("%s: outcome %s (%s), want accepted only", s.Claim.Token.EventID, s.Outcome, s.Detail)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.overlap) > 0 {
		t.Errorf("flows delivered twice at once: %v", h.overlap)
	}
	next := map[string]int{}
	for _, d := range h.seen {
		next[d.flow]++
		if want := fmt.Sprint(next[d.flow]); d.seq != want {
			t.Errorf("flow %s: got seq %s, want %s", d.flow, d.seq, want)
		}
	}
	led, receipts := h.ledger(t)
	if receipts != flows*events {
		t.Errorf("receipts %d, want %d", receipts, flows*events)
	}
	for f, p := range led {
		if p.Seq != events || p.Total != 21 {
			t.Errorf("flow %s: %+v, want seq 6 total 21", f, p)
		}
	}
}

// One worker under the fair policy serves the flows in rotation (SPEC §5
// result 1 through the daemon).
func TestFairRotation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, patientPolicy())
	for _, f := range []string{"A", "B", "C"} {
		h.enqueue(t, f, 1, 1, 1)
	}
	cfg := h.patient(t)
	cfg.Workers = 1
	_, stop := h.start(t, cfg)
	all := h.until(t, acks(9))
	stop()
	var order []string
	for _, s := range all {
		order = append(order, s.Claim.Token.EventID)
	}
	if got, want := strings.Join(order, " "), "A1 B1 C1 A2 B2 C2 A3 B3 C3"; got != want {
		t.Fatalf("order %s, want %s", got, want)
	}
}

// A permanent answer quarantines A1 without holding back B; A2 is never
// delivered; a redrive through Do (after the receiver gains the capability)
// completes A.
func TestQuarantineOnPermanentAnswerThenRedrive(t *testing.T) {
	t.Parallel()
	h := newHarness(t, patientPolicy())
	h.in.SetMaxDelta(5)
	h.enqueue(t, "A", 10, 1)
	h.enqueue(t, "B", 1, 2, 3)
	r, stop := h.start(t, h.patient(t))
	quarantined := func(all []relay.Settled) bool {
		q := false
		for _, s := range all {
			q = q || s.Result.Status == fairrelay.SettleQuarantined
		}
		return q && acks(3)(all)
	}
	all := h.until(t, quarantined)
	for _, s := range all {
		if s.Result.Status == fairrelay.SettleQuarantined && (s.Claim.Token.EventID != "A1" || s.Outcome != fairrelay.OutcomeUnsupportedDelta) {
			t.Errorf("quarantined %s with %s, want A1 with unsupported_delta", s.Claim.Token.EventID, s.Outcome)
		}
	}
	a1 := h.event(t, "A1")
	if a1.State != fairrelay.StateQuarantined || *a1.Reason != "unsupported_delta" {
		t.Fatalf("A1: %+v", a1.EventState)
	}
	if a2 := h.event(t, "A2"); a2.State != fairrelay.StateReady || a2.Generation != 0 {
		t.Fatalf("A2 was touched: %+v", a2.EventState)
	}
	h.mu.Lock()
	for _, d := range h.seen {
		if d.id == "A2" {
			t.Error("A2 was delivered behind a quarantined head")
		}
	}
	h.mu.Unlock()

	h.in.SetMaxDelta(1000)
	err := r.Do(t.Context(), func(at int64) error {
		_, err := h.q.Redrive(t.Context(), fairrelay.RedriveParams{EventID: "A1", ExpectedGeneration: a1.Generation, Reason: "receiver upgraded", At: at})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	h.until(t, acks(2))
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	led, _ := h.ledger(t)
	if led["A"].Seq != 2 || led["A"].Total != 11 || led["B"].Total != 6 {
		t.Fatalf("ledger %+v", led)
	}
}

// A 503 backs off by the policy's delay; a Retry-After raises next_at to its
// floor; nothing is lost: once the clock passes next_at the event goes.
func TestBackoffOn503AndRetryAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		retryAfter string
		delay      int64
	}{
		{"503", "", 100},
		{"Retry-After", "3", 3000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, testPolicy())
			var first atomic.Bool
			h.intercept = func(w http.ResponseWriter, r *http.Request, d delivery) bool {
				if first.CompareAndSwap(false, true) {
					if tc.retryAfter != "" {
						w.Header().Set("Retry-After", tc.retryAfter)
					}
					w.WriteHeader(http.StatusServiceUnavailable)
					return true
				}
				return false
			}
			h.enqueue(t, "A", 1)
			_, stop := h.start(t, h.config(t))
			s := h.next(t)
			if s.Outcome != fairrelay.OutcomeRetry || s.Result.Status != fairrelay.SettleReady || s.Result.NextAt != s.At+tc.delay {
				t.Fatalf("first settle: %+v, want ready at %d+%d", s, s.At, tc.delay)
			}
			nextAt := s.Result.NextAt
			h.time.Advance(time.Duration(tc.delay) * time.Millisecond)
			s = h.next(t)
			if s.Result.Status != fairrelay.SettleAcked {
				t.Fatalf("second settle: %+v", s)
			}
			if claimedAt := s.Claim.LeaseUntil - 2000; claimedAt < nextAt {
				t.Fatalf("re-claimed at tick %d, before next_at %d", claimedAt, nextAt)
			}
			stop()
		})
	}
}

// A receiver slower than the delivery timeout is a retry with backoff.
func TestBackoffOnTimeout(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testPolicy())
	var first atomic.Bool
	h.intercept = func(w http.ResponseWriter, r *http.Request, d delivery) bool {
		if first.CompareAndSwap(false, true) {
			<-r.Context().Done() // the relay gives up first
			return true
		}
		return false
	}
	h.enqueue(t, "A", 1)
	_, stop := h.start(t, h.config(t)) // delivery timeout 500 ms
	s := h.next(t)
	if s.Outcome != fairrelay.OutcomeRetry || s.Result.Status != fairrelay.SettleReady || s.Result.NextAt != s.At+100 ||
		!strings.Contains(s.Detail, "deadline") {
		t.Fatalf("timeout settle: %+v", s)
	}
	h.time.Advance(100 * time.Millisecond)
	if s := h.next(t); s.Result.Status != fairrelay.SettleAcked {
		t.Fatalf("after the backoff: %+v", s)
	}
	stop()
}

// blockFirst makes the first delivery of id signal arrived and wait for
// release (or its request's end) before going on to the inbox.
func blockFirst(h *harness, id string) (arrived, release chan struct{}) {
	arrived, release = make(chan struct{}), make(chan struct{})
	var once atomic.Bool
	h.intercept = func(w http.ResponseWriter, r *http.Request, d delivery) bool {
		if d.id == id && once.CompareAndSwap(false, true) {
			close(arrived)
			select {
			case <-release:
			case <-r.Context().Done():
				return true
			}
		}
		return false
	}
	return arrived, release
}

func waitClosed(t *testing.T, ch chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out")
	}
}

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

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testPolicy()) // lease 2000 ms
	for _, tc := range []struct {
		change func(*relay.Config)
		field  string
	}{
		{func(c *relay.Config) { c.DeliveryTimeout = 1900 * time.Millisecond }, "lease"},
		{func(c *relay.Config) {
			c.DeliveryTimeout = 1500 * time.Millisecond
			c.LeaseMargin = 500 * time.Millisecond
		}, "lease"},
		{func(c *relay.Config) { c.Workers = -1 }, "workers"},
		{func(c *relay.Config) { c.Workers = relay.MaxWorkers + 1 }, "workers"},
		{func(c *relay.Config) { c.Sink = nil }, "sink"},
		{func(c *relay.Config) { c.Queue = nil }, "queue"},
		{func(c *relay.Config) { c.MaxPollInterval = time.Microsecond }, "poll_interval"},
	} {
		cfg := h.config(t)
		tc.change(&cfg)
		_, err := relay.New(t.Context(), cfg)
		var fe *fairrelay.Error
		if !errors.As(err, &fe) || fe.Field != tc.field || !errors.Is(err, fairrelay.ErrInvalidInput) {
			t.Errorf("want field %s, got %v", tc.field, err)
		}
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	h := newHarness(t, patientPolicy())
	h.in.SetMaxDelta(5)
	h.enqueue(t, "A", 10, 1)
	h.enqueue(t, "B", 1, 2)
	reg := prometheus.NewRegistry()
	m, err := relay.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.RegisterQueueGauges(reg, h.q); err != nil {
		t.Fatal(err)
	}
	cfg := h.patient(t)
	cfg.Metrics = m
	_, stop := h.start(t, cfg)
	h.until(t, func(all []relay.Settled) bool { return len(all) == 3 })
	stop()
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range mt.GetLabel() {
				name += "," + l.GetName() + "=" + l.GetValue()
			}
			switch {
			case mt.Counter != nil:
				got[name] = mt.GetCounter().GetValue()
			case mt.Gauge != nil:
				got[name] = mt.GetGauge().GetValue()
			case mt.Histogram != nil:
				got[name] = float64(mt.GetHistogram().GetSampleCount())
			}
		}
	}
	for name, want := range map[string]float64{
		"fairrelay_claims_total":                                               3,
		"fairrelay_settles_total,outcome=accepted,status=acked":                2,
		"fairrelay_settles_total,outcome=unsupported_delta,status=quarantined": 1,
		"fairrelay_delivery_seconds":                                           3,
		"fairrelay_events,state=quarantined":                                   1,
		"fairrelay_events,state=ready":                                         1,
		"fairrelay_events,state=inflight":                                      0,
		"fairrelay_flows":                                                      2,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
}

// onMessage is a slog.Handler that runs do once, at the first record whose
// message starts with prefix: the relay logs when it stops claiming.
type onMessage struct {
	prefix string
	do     func()
	once   sync.Once
}

func (h *onMessage) Enabled(context.Context, slog.Level) bool { return true }
func (h *onMessage) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, h.prefix) {
		h.once.Do(h.do)
	}
	return nil
}
func (h *onMessage) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *onMessage) WithGroup(string) slog.Handler      { return h }

// signalTime is manualTime that reports every reading on a channel, so a
// test can tell that workers went round their loop without sleeping.
type signalTime struct {
	*manualTime
	read chan struct{}
}

// waitReads waits for n readings of the clock, failing after 10 s: a relay
// that reads its clock on every poll has polled that often.
func (st signalTime) waitReads(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		select {
		case <-st.read:
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d clock readings in 10 s: the relay stopped polling", i)
		}
	}
}

func (s signalTime) Elapsed() time.Duration {
	select {
	case s.read <- struct{}{}:
	default:
	}
	return s.manualTime.Elapsed()
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

// metricValue reads one counter of reg by name and label pairs, 0 when it
// has no such series yet.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					found = found || (l.GetName() == labels[i] && l.GetValue() == labels[i+1])
				}
				if !found {
					continue series
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// The claimer takes as many heads as there are free delivery slots in one
// transaction: 16 eligible flows, 16 workers, one claim transaction while
// every delivery is held at the receiver.
func TestOneClaimTransactionFillsTheFreeSlots(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, h *harness) {
		const n = 16
		for f := range n {
			h.enqueue(t, fmt.Sprintf("F%02d", f), 1)
		}
		arrived, release := make(chan string, n), make(chan struct{})
		h.intercept = func(w http.ResponseWriter, r *http.Request, d delivery) bool {
			arrived <- d.id
			<-release
			return false
		}
		reg := prometheus.NewRegistry()
		m, err := relay.NewMetrics(reg)
		if err != nil {
			t.Fatal(err)
		}
		// Held deliveries must not time out.
		cfg := h.patient(t)
		cfg.Workers, cfg.Metrics = n, m
		_, stop := h.start(t, cfg)
		for range n {
			select {
			case <-arrived:
			case <-time.After(10 * time.Second):
				t.Fatal("fewer than 16 deliveries arrived within 10 s")
			}
		}
		claims := metricValue(t, reg, "fairrelay_claims_total")
		txs := metricValue(t, reg, "fairrelay_transactions_total", "kind", "claim")
		close(release)
		h.until(t, acks(n))
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if claims != n || txs != 1 {
			t.Fatalf("with every delivery held: %v claims in %v claim transactions, want %d in 1", claims, txs, n)
		}
	}
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); run(t, newHarness(t, patientPolicy())) })
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		run(t, newHarnessOn(t, patientPolicy(), pgtest.Schema(t, "relay_q_"), pgtest.Schema(t, "relay_i_")))
	})
}

// On SQLite (one writer) the claimer settles each answer with its next
// claim: one flow of three events under one worker is one claim
// transaction, then three SettleAndClaim, and no separate settle.
func TestSQLiteSettlesWithTheNextClaim(t *testing.T) {
	t.Parallel()
	h := newHarness(t, patientPolicy())
	h.enqueue(t, "A", 1, 2, 3)
	reg := prometheus.NewRegistry()
	m, err := relay.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := h.patient(t)
	cfg.Workers, cfg.Metrics = 1, m
	_, stop := h.start(t, cfg)
	h.until(t, acks(3))
	got := map[string]float64{}
	for _, kind := range []string{"claim", "settle_and_claim", "settle"} {
		got[kind] = metricValue(t, reg, "fairrelay_transactions_total", "kind", kind)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got["claim"] != 1 || got["settle_and_claim"] != 3 || got["settle"] != 0 {
		t.Fatalf("transactions %v, want claim 1, settle_and_claim 3, settle 0", got)
	}
}

// Several relays on one PostgreSQL queue (the usual high-availability
// setup), each with its own pool and clock, dispatch one backlog together:
// none stops on clock_regressed (their writes wait for lane locks while the
// others commit later ticks: fairrelay.ClaimParams.Floor), every event is
// applied once, in order within its flow, never two deliveries of a flow at
// once.
func TestSeveralRelaysOnOnePostgresQueue(t *testing.T) {
	t.Parallel()
	const relays, flows, perFlow = 3, 100, 30
	dsn := pgtest.Schema(t, "relay_ha_")
	ctx := t.Context()
	var (
		mu       sync.Mutex
		last     = map[string]int64{} // flow → seq applied
		inflight = map[string]int{}
		overlap  []string
		applied  int
		all      = make(chan struct{})
	)
	receiver := sink.Func(func(_ context.Context, d sink.Delivery) (sink.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		if inflight[d.Flow]++; inflight[d.Flow] > 1 {
			overlap = append(overlap, d.EventID)
		}
		defer func() { inflight[d.Flow]-- }()
		switch {
		case d.Seq <= last[d.Flow]:
			return sink.Result{Outcome: fairrelay.OutcomeDuplicate}, nil
		case d.Seq > last[d.Flow]+1:
			return sink.Result{Outcome: fairrelay.OutcomeGap}, nil
		}
		last[d.Flow] = d.Seq
		if applied++; applied == flows*perFlow {
			close(all)
		}
		return sink.Result{Outcome: fairrelay.OutcomeAccepted}, nil
	})
	runErr := make(chan error, relays)
	var stops []context.CancelFunc
	var qs []*fairrelay.Queue
	for i := range relays {
		q, err := fairrelay.Open(ctx, dsn, fairrelay.Config{Policy: fairrelay.DaemonPolicy()})
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		qs = append(qs, q)
		if i == 0 {
			ps := make([]fairrelay.NewEvent, 0, flows*perFlow)
			for s := range perFlow {
				for f := range flows {
					ps = append(ps, fairrelay.NewEvent{ID: fmt.Sprintf("F%03d-%02d", f, s+1), Flow: fmt.Sprintf("F%03d", f), Body: []byte(`{"delta":1}`)})
				}
			}
			if _, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: fairrelay.AtStored, Events: ps}); err != nil {
				t.Fatal(err)
			}
		}
		r, err := relay.New(ctx, relay.Config{Queue: q, Sink: receiver, Workers: 16})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		stops = append(stops, stop)
		go func() { runErr <- r.Run(runCtx) }()
	}
	select {
	case <-all:
	case err := <-runErr:
		t.Fatalf("a relay stopped before the backlog was done: %v", err)
	case <-time.After(2 * time.Minute):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("%d of %d events applied in 2 minutes", applied, flows*perFlow)
	}
	for _, stop := range stops {
		stop()
	}
	for range relays {
		if err := <-runErr; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(overlap) > 0 {
		t.Errorf("deliveries of one flow at once: %v", overlap)
	}
	hs, err := qs[0].Heads(ctx, "", flows+1)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		if h.Head != nil {
			t.Errorf("flow %s: head %+v left, want every event acked", h.Flow, h.Head)
		}
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

// counterValue returns the value of the unlabelled counter name in reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s", name)
	return 0
}
