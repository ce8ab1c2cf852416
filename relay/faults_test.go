package relay_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/disktest"
	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/relay"
)

// The store faults a daemon must ride out (issue #15): a disk that fills
// and empties, PostgreSQL connections dropped under load, a PostgreSQL
// restart. In each, the relay keeps running (Run does not return), reports
// not ready while its round trips fail, logs once per error streak and
// once when it ends, resumes by itself, and every event is applied once,
// in order.

// Log messages the relay writes once per error streak.
const (
	streakStarts = "relay: store round trip failed"
	streakEnds   = "relay: store available again"
)

// faultPolicy has a lease of 10 s: long enough that no delivery's settle,
// retried while the store fails, outlives it, short enough that a claim
// whose commit the relay never heard of (a connection dropped during the
// commit) is claimed again within the test's patience.
func faultPolicy() fairrelay.Policy {
	p := testPolicy()
	p.Lease = 10_000
	return p
}

// faultRun is a relay under a fault: the harness, the relay, its logs and
// metrics, and counters of the deliveries the receiver saw.
type faultRun struct {
	h    *harness
	r    *relay.Relay
	stop func() error
	logs *logCounter
	reg  *prometheus.Registry

	flows, perFlow int

	mu      sync.Mutex
	seen    int
	waiters map[int]chan struct{}
}

// startFaultRun enqueues flows × perFlow events on h's queue and starts a
// relay with 4 workers on it, whose time source is source (nil: the
// harness's manual time), retrying failed round trips after 10 ms doubling
// to 200 ms.
func startFaultRun(t *testing.T, h *harness, flows, perFlow int, source relay.Monotonic) *faultRun {
	t.Helper()
	f := &faultRun{h: h, flows: flows, perFlow: perFlow, waiters: map[int]chan struct{}{}, logs: &logCounter{}, reg: prometheus.NewRegistry()}
	ps := make([]fairrelay.NewEvent, 0, flows*perFlow)
	for s := 1; s <= perFlow; s++ {
		for fl := range flows {
			ps = append(ps, fairrelay.NewEvent{ID: fmt.Sprintf("F%02d-%03d", fl, s), Flow: fmt.Sprintf("F%02d", fl), Body: fmt.Appendf(nil, `{"delta":%d}`, s)})
		}
	}
	if _, err := h.q.EnqueueMany(t.Context(), fairrelay.EnqueueManyParams{At: fairrelay.AtStored, Events: ps}); err != nil {
		t.Fatal(err)
	}
	h.intercept = func(http.ResponseWriter, *http.Request, delivery) bool {
		f.mu.Lock()
		f.seen++
		if c, ok := f.waiters[f.seen]; ok {
			close(c)
			delete(f.waiters, f.seen)
		}
		f.mu.Unlock()
		return false
	}
	m, err := relay.NewMetrics(f.reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := h.config(t)
	cfg.DeliveryTimeout, cfg.LeaseMargin, cfg.Metrics = 5*time.Second, time.Second, m
	cfg.RetryWait, cfg.MaxRetryWait = 10*time.Millisecond, 200*time.Millisecond
	cfg.Logger = slog.New(f.logs)
	if source != nil {
		cfg.Source = source
	}
	f.r, f.stop = h.start(t, cfg)
	return f
}

// delivered returns a channel closed once the receiver has seen n
// deliveries (register it before they happen).
func (f *faultRun) delivered(n int) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := make(chan struct{})
	if f.seen >= n {
		close(c)
	} else {
		f.waiters[n] = c
	}
	return c
}

// waitReady polls the relay's readiness until it is want (ready or not),
// failing after 30 s.
func (f *faultRun) waitReady(t *testing.T, want bool) {
	t.Helper()
	var err error
	waitUntil(t, 30*time.Second, func() bool {
		err = f.r.Ready(t.Context())
		return (err == nil) == want
	}, func() string { return fmt.Sprintf("readiness %v (%v), want %v", err == nil, err, want) })
}

// waitFailures waits until the error streak under way has at least n
// failed round trips: the relay tried again, and again, without exiting.
func (f *faultRun) waitFailures(t *testing.T, n int) {
	t.Helper()
	waitUntil(t, 30*time.Second, func() bool { return f.r.Health().Failures >= n },
		func() string {
			return fmt.Sprintf("health %+v, readiness %v: want %d failures in the streak", f.r.Health(), f.r.Ready(t.Context()), n)
		})
}

// finish waits until every event is acked (read with check, a handle of
// its own on the queue store) and the relay has no streak under way, stops
// the relay, and checks what the issue asks: Run returned nil (it never
// exited), every event applied once and in order, one log line when each
// streak started and one when it ended. It returns the settles reported.
func (f *faultRun) finish(t *testing.T, check *fairrelay.Queue) []relay.Settled {
	t.Helper()
	waitUntil(t, 90*time.Second, func() bool {
		hs, err := check.Heads(t.Context(), "", f.flows+1)
		if err != nil {
			return false // the store may still be failing
		}
		for _, h := range hs {
			if h.Head != nil {
				return false
			}
		}
		return len(hs) == f.flows && f.r.Health().Failures == 0
	}, func() string { return fmt.Sprintf("not every event acked; health %+v", f.r.Health()) })
	if err := f.stop(); err != nil {
		t.Fatalf("Run: %v, want nil: the relay must ride out store errors", err)
	}
	var all []relay.Settled
	for len(f.h.settled) > 0 {
		all = append(all, <-f.h.settled)
	}
	for _, s := range all {
		if s.Outcome != fairrelay.OutcomeAccepted && s.Outcome != fairrelay.OutcomeDuplicate {
			t.Errorf("%s: outcome %s (%s): the receiver saw it out of order or changed", s.Claim.Token.EventID, s.Outcome, s.Detail)
		}
		if s.Result.Status == fairrelay.SettleQuarantined {
			t.Errorf("%s quarantined", s.Claim.Token.EventID)
		}
	}
	led, receipts := f.h.ledger(t)
	if receipts != f.flows*f.perFlow {
		t.Errorf("receipts %d, want %d (each event applied once)", receipts, f.flows*f.perFlow)
	}
	for fl := range f.flows {
		name := fmt.Sprintf("F%02d", fl)
		if p := led[name]; p.Seq != int64(f.perFlow) || p.Total != int64(f.perFlow*(f.perFlow+1)/2) {
			t.Errorf("flow %s: %+v, want seq %d total %d", name, p, f.perFlow, f.perFlow*(f.perFlow+1)/2)
		}
	}
	f.h.mu.Lock()
	if len(f.h.overlap) > 0 {
		t.Errorf("deliveries of one flow at once: %v", f.h.overlap)
	}
	f.h.mu.Unlock()
	hl := f.r.Health()
	starts, ends := f.logs.count(streakStarts), f.logs.count(streakEnds)
	errs := counterValue(t, f.reg, "fairrelay_store_errors_total")
	if hl.Streaks < 1 || starts != hl.Streaks || ends != hl.Streaks || errs < float64(hl.Streaks) {
		t.Errorf("%d streaks, %d failed round trips: logged %d starts and %d ends, want one of each per streak", hl.Streaks, int(errs), starts, ends)
	}
	t.Logf("%d deliveries of %d events; %d error streaks, %d failed round trips", len(all), f.flows*f.perFlow, hl.Streaks, int(errs))
	return all
}

// A disk that fills and empties under load, on SQLite. The queue store
// lives on a tmpfs of its own: mid-run the test truncates the store's WAL
// and fills the file system to its last byte, so that the relay's writes
// fail as they would on a full disk (ENOSPC from the kernel, SQLITE_FULL),
// then deletes the filler. Readiness goes false during the fault and true
// after; nothing is lost or delivered twice (a failed SQLite commit
// changes nothing, and the time source stands still, so no lease runs
// out). Why a tmpfs: it is a real full file system, filled and emptied
// from outside, with no hook into the store; mounting one needs
// CAP_SYS_ADMIN (root here), and where the test cannot mount it skips,
// saying so.
func TestRidesOutAFullDisk(t *testing.T) {
	t.Parallel()
	disk := disktest.SmallDisk(t, 16<<20)
	queue := filepath.Join(disk, "queue.db")
	h := newHarnessOn(t, patientPolicy(), queue, filepath.Join(t.TempDir(), "inbox.db"))
	check, err := fairrelay.Open(t.Context(), queue, fairrelay.Config{Policy: patientPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close()
	const flows, perFlow = 20, 20
	f := startFaultRun(t, h, flows, perFlow, nil)
	<-f.delivered(100)
	free := disktest.FillDisk(t, disk, queue)
	f.waitReady(t, false)
	f.waitFailures(t, 3)
	free()
	f.waitReady(t, true)
	all := f.finish(t, check)
	if len(all) != flows*perFlow {
		t.Errorf("%d settles reported for %d events, want one each", len(all), flows*perFlow)
	}
	f.h.mu.Lock()
	defer f.h.mu.Unlock()
	if len(f.h.seen) != flows*perFlow {
		t.Errorf("%d deliveries of %d events, want each delivered once", len(f.h.seen), flows*perFlow)
	}
}

// PostgreSQL connections dropped under load: every 60 deliveries the test
// terminates every backend of the relay's pool (found by the
// application_name the test gave its URL; pg_terminate_backend) on the
// shared server. The relay reconnects and goes on; every event is applied
// once, in order. The time source is the system's: a claim whose commit
// the relay never heard of (a connection dropped during the commit) waits
// out its lease and is delivered then, once.
func TestRidesOutDroppedPostgresConnections(t *testing.T) {
	t.Parallel()
	app := "fairrelay_drop_" + randomHex(t)
	dsn := pgtest.Schema(t, "relay_drop_")
	check, err := fairrelay.Open(t.Context(), dsn, fairrelay.Config{Policy: faultPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close()
	h := newHarnessOn(t, faultPolicy(), dsn+"&application_name="+app, filepath.Join(t.TempDir(), "inbox.db"))
	const flows, perFlow, drops = 30, 20, 8
	f := startFaultRun(t, h, flows, perFlow, relay.SystemMonotonic())
	admin := pgtest.Connect(t, pgtest.URL(t))
	defer admin.Close(context.Background())
	killed := 0
	for i := 1; i <= drops; i++ {
		select {
		case <-f.delivered(60 * i):
		case <-time.After(60 * time.Second):
			t.Fatalf("fewer than %d deliveries within 60 s of the last drop; health %+v", 60*i, f.r.Health())
		}
		var n int
		if err := admin.QueryRow(t.Context(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE application_name = $1 AND pid <> pg_backend_pid()`, app).Scan(&n); err != nil {
			t.Fatal(err)
		}
		killed += n
	}
	if killed == 0 {
		t.Fatal("no backend of the relay was terminated: the test tested nothing")
	}
	f.finish(t, check)
	t.Logf("%d backends terminated in %d drops", killed, drops)
}

// A real PostgreSQL restart under load. The test owns a private cluster
// (initdb and pg_ctl, as the postgres user when run as root, on a free
// loopback port; see privateCluster), so the shared server the other
// tests use is never touched. Mid-run it stops the server (fast shutdown:
// every connection is dropped), waits until the relay reports not ready
// and has tried again several times, starts the server again, and waits
// for readiness. Nothing is lost, nothing applied twice.
func TestRidesOutAPostgresRestart(t *testing.T) {
	t.Parallel()
	pg := privateCluster(t)
	dsn := pg.url + "&schema=relay_restart"
	check, err := fairrelay.Open(t.Context(), dsn, fairrelay.Config{Policy: faultPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close()
	h := newHarnessOn(t, faultPolicy(), dsn, filepath.Join(t.TempDir(), "inbox.db"))
	const flows, perFlow = 30, 20
	f := startFaultRun(t, h, flows, perFlow, relay.SystemMonotonic())
	<-f.delivered(150)
	pg.stop(t)
	f.waitReady(t, false)
	f.waitFailures(t, 3)
	pg.start(t)
	f.waitReady(t, true)
	f.finish(t, check)
}

// waitUntil polls cond until it holds, failing with what() after timeout.
// It polls state another goroutine or process changes and nothing here can
// signal (readiness, a store another connection writes).
func waitUntil(t *testing.T, timeout time.Duration, cond func() bool, what func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", timeout, what())
		}
		time.Sleep(5 * time.Millisecond) // polling, not synchronising
	}
}

func randomHex(t *testing.T) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// logCounter is a slog.Handler that counts records by message.
type logCounter struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logCounter) Enabled(context.Context, slog.Level) bool { return true }

func (l *logCounter) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}

func (l *logCounter) WithAttrs([]slog.Attr) slog.Handler { return l }

func (l *logCounter) WithGroup(string) slog.Handler { return l }

// count returns how many records' messages start with prefix.
func (l *logCounter) count(prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if strings.HasPrefix(m, prefix) {
			n++
		}
	}
	return n
}

// An error that waiting does not cure still stops the relay: here a stored
// tick at the end of the range of ticks (another process wrote it), past
// which the relay's clock, moving on, makes every write invalid_input
// naming at. Run returns that error (the CLI exits 1) instead of retrying
// forever, and Ready says the relay stopped.
func TestStopsOnAnErrorWaitingDoesNotCure(t *testing.T) {
	t.Parallel()
	h := newHarness(t, patientPolicy())
	cfg := h.patient(t)
	r, err := relay.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Ready(t.Context()); err == nil || !strings.Contains(err.Error(), "not running") {
		t.Fatalf("Ready before Run: %v, want not running", err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(t.Context()) }()
	waitUntil(t, 10*time.Second, func() bool { return r.Ready(t.Context()) == nil },
		func() string { return fmt.Sprintf("not ready: %v", r.Ready(t.Context())) })
	if _, err := h.q.Enqueue(t.Context(), fairrelay.EnqueueParams{ID: "A1", Flow: "A", Body: []byte(`{"delta":1}`), At: fairrelay.MaxTick}); err != nil {
		t.Fatal(err)
	}
	if s := h.next(t); s.Result.Status != fairrelay.SettleAcked || s.At != fairrelay.MaxTick {
		t.Fatalf("A1: %+v, want acked at the last tick", s)
	}
	h.time.Advance(time.Minute) // past a heartbeat: the idle relay writes its clock
	select {
	case err := <-done:
		var fe *fairrelay.Error
		if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != "at" {
			t.Fatalf("Run: %v, want invalid_input naming at", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Run still running 10 s after its clock left the range of ticks; health %+v", r.Health())
	}
	if err := r.Ready(t.Context()); err == nil || !strings.Contains(err.Error(), "stopped") {
		t.Fatalf("Ready after Run: %v, want stopped", err)
	}
}
