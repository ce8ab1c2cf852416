package relay_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/syncbuf"
	"github.com/fairrelay/fairrelay/relay"
)

// Without Config.Logger a quarantine is logged to slog.Default(): with a
// relay that discarded its logs by default, a Go program built from the
// README's snippet said nothing when a head was quarantined (the closing
// notes' "loggers that discard by default").
func TestRelayLogsToTheDefaultLoggerWithoutALogger(t *testing.T) {
	quarantined := make(chan struct{})
	syncbuf.DefaultLogger(t, &onMessage{prefix: "relay: quarantined", do: func() { close(quarantined) }})
	pol := testPolicy()
	pol.Budget = 1
	h := newHarness(t, pol)
	h.enqueue(t, "A", 1)
	// Another relay's claim, never settled: its lease runs out with the
	// whole budget spent, and this relay's claim quarantines the head.
	if cr, err := h.q.Claim(t.Context(), fairrelay.ClaimParams{At: fairrelay.AtStored, Limit: 1}); err != nil || len(cr.Claims) != 1 {
		t.Fatalf("claim: %+v %v", cr, err)
	}
	cfg := h.config(t)
	cfg.Logger = nil
	_, stop := h.start(t, cfg)
	h.time.Advance(time.Duration(pol.Lease)*time.Millisecond + time.Minute)
	waitClosed(t, quarantined)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// Without QueueGaugesOptions a failed read of the store is logged to
// slog.Default(); before, with no Logger given, it was not logged at all.
func TestQueueGaugesLogToTheDefaultLoggerWithoutALogger(t *testing.T) {
	logs := syncbuf.DefaultLog(t)
	q, err := fairrelay.Open(t.Context(), filepath.Join(t.TempDir(), "q.db"), fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := relay.RegisterQueueGauges(reg, q); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	series(t, reg)
	if !strings.Contains(logs.String(), "could not read the store") || !strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("the default logger got %q: want the failed read at WARN", logs.String())
	}
}
