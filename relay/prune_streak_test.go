package relay_test

import (
	"context"
	"database/sql"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	_ "modernc.org/sqlite"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/relay"
)

// transcript is a slog handler that keeps every message, in order.
type transcript struct {
	mu  sync.Mutex
	all []string
}

func (m *transcript) Enabled(context.Context, slog.Level) bool { return true }
func (m *transcript) Handle(_ context.Context, r slog.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.all = append(m.all, r.Message)
	return nil
}
func (m *transcript) WithAttrs([]slog.Attr) slog.Handler { return m }
func (m *transcript) WithGroup(string) slog.Handler      { return m }

// until waits (10 s at most) for a message starting with prefix.
func (m *transcript) until(t *testing.T, prefix string) {
	t.Helper()
	waitFor(t, func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, s := range m.all {
			if strings.HasPrefix(s, prefix) {
				return true
			}
		}
		return false
	}, "a log line "+prefix)
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s in 10 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// histogramCount is the sample count of the histogram name in reg.
func histogramCount(t *testing.T, reg *prometheus.Registry, name string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}

// The relay warns once per streak of prunes that keep back by the wall
// clock what the ticks make due, and says when a streak ends. A prune that
// fails counts nothing: it does not end the streak (it said "no longer
// keeps anything back" while A1 was still kept, then warned again at the
// next prune).
func TestRelayPruneFailureDoesNotEndTheWallClockStreak(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testPolicy())
	ctx := t.Context()
	h.enqueue(t, "A", 1)
	_, stop := h.start(t, h.config(t))
	h.until(t, acks(1))
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// The jump: a claim at an epoch-millisecond tick.
	if _, err := h.q.Claim(ctx, fairrelay.ClaimParams{At: time.Now().UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := relay.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	logs := &transcript{}
	cfg := h.config(t)
	cfg.Metrics = m
	cfg.RetainAcked, cfg.RetainIDs, cfg.PruneInterval, cfg.PruneBatch = time.Hour, 2*time.Hour, time.Millisecond, 2
	cfg.Logger = slog.New(logs)
	_, stop = h.start(t, cfg)
	logs.until(t, "relay: retention keeps events or ids")
	db, err := sql.Open("sqlite", "file:"+h.queue+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// One prune fails: its first statement finds no tombstone table.
	if _, err := db.Exec(`ALTER TABLE tombstone RENAME TO tombstone_gone`); err != nil {
		t.Fatal(err)
	}
	logs.until(t, "relay: prune failed")
	if _, err := db.Exec(`ALTER TABLE tombstone_gone RENAME TO tombstone`); err != nil {
		t.Fatal(err)
	}
	// Two prunes that succeed after it (each observes its batch's hold).
	n := histogramCount(t, reg, "fairrelay_prune_write_seconds")
	waitFor(t, func() bool { return histogramCount(t, reg, "fairrelay_prune_write_seconds") >= n+2 }, "two prunes after the failure")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if e, err := h.q.Event(ctx, "A1"); err != nil || e.State != fairrelay.StateAcked {
		t.Fatalf("A1: %+v %v, want it still kept", e, err)
	}
	logs.mu.Lock()
	defer logs.mu.Unlock()
	warned, ended := 0, 0
	for _, s := range logs.all {
		switch {
		case strings.HasPrefix(s, "relay: retention keeps events or ids"):
			warned++
		case strings.HasPrefix(s, "relay: retention no longer keeps anything back"):
			ended++
		}
	}
	if warned != 1 || ended != 0 {
		t.Errorf("warned %d times, said the hold ended %d times; want 1 and 0 (A1 is kept throughout)", warned, ended)
	}
}
