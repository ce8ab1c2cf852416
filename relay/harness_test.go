package relay_test

import (
	"bytes"
	"context"
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

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/relay"
	"github.com/fairrelay/fairrelay/sink/webhook"
)

// manualTime is a Monotonic source the test advances by hand.
type manualTime struct{ ns atomic.Int64 }

func (m *manualTime) Elapsed() time.Duration { return time.Duration(m.ns.Load()) }

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
	// The queue's wall clock (claims' ClaimedWall, the relay's retention by
	// the wall clock) runs with the manual clock from now.
	start := time.Now()
	now := func() time.Time { return start.Add(h.time.Elapsed()) }
	if h.q, err = fairrelay.Open(t.Context(), h.queue, fairrelay.Config{Policy: pol, Now: now}); err != nil {
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
	return runRelay(t, cfg)
}

// runRelay creates and runs a relay of cfg; stop cancels it and returns
// Run's error (the test's cleanup stops it too).
func runRelay(t *testing.T, cfg relay.Config) (r *relay.Relay, stop func() error) {
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

// nextQuarantine receives the next report of Config.OnQuarantine from ch,
// failing the test after 10 seconds.
func nextQuarantine(t *testing.T, ch <-chan relay.Quarantine) relay.Quarantine {
	t.Helper()
	select {
	case q := <-ch:
		return q
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for OnQuarantine")
		return relay.Quarantine{}
	}
}

// onMessage is a slog.Handler that runs do once, at the first record whose
// message starts with prefix: the relay logs when it stops claiming. Once
// do has run, attrs holds that record's attributes.
type onMessage struct {
	prefix string
	do     func()
	once   sync.Once
	attrs  map[string]slog.Value
}

func (h *onMessage) Enabled(context.Context, slog.Level) bool { return true }

func (h *onMessage) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, h.prefix) {
		h.once.Do(func() {
			h.attrs = map[string]slog.Value{}
			r.Attrs(func(a slog.Attr) bool {
				h.attrs[a.Key] = a.Value
				return true
			})
			h.do()
		})
	}
	return nil
}

func (h *onMessage) WithAttrs([]slog.Attr) slog.Handler { return h }

func (h *onMessage) WithGroup(string) slog.Handler { return h }

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
