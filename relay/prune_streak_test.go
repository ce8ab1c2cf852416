package relay_test

import (
	"database/sql"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	_ "modernc.org/sqlite"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/relay"
)

// The relay warns once per streak of prunes that keep back by the wall
// clock what the ticks make due, and says when a streak ends. A prune that
// fails counts nothing: it does not end the streak (it said "no longer
// keeps anything back" while A1 was still kept, then warned again at the
// next prune).
func TestRelayPruneFailureDoesNotEndTheWallClockStreak(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testPolicy())
	ctx := t.Context()
	ackedThenJumped(t, h)
	reg := prometheus.NewRegistry()
	m, err := relay.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logCounter{}
	cfg := h.config(t)
	cfg.Metrics = m
	cfg.RetainAcked, cfg.RetainIDs, cfg.PruneInterval, cfg.PruneBatch = time.Hour, 2*time.Hour, time.Millisecond, 2
	cfg.Logger = slog.New(logs)
	_, stop := h.start(t, cfg)
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
	batches := func() uint64 { n, _ := histogram(t, reg, "fairrelay_prune_write_seconds"); return n }
	n := batches()
	waitUntil(t, 10*time.Second, func() bool { return batches() >= n+2 }, func() string { return "no two prunes after the failure" })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if e, err := h.q.Event(ctx, "A1"); err != nil || e.State != fairrelay.StateAcked {
		t.Fatalf("A1: %+v %v, want it still kept", e, err)
	}
	warned, ended := logs.count("relay: retention keeps events or ids"), logs.count("relay: retention no longer keeps anything back")
	if warned != 1 || ended != 0 {
		t.Errorf("warned %d times, said the hold ended %d times; want 1 and 0 (A1 is kept throughout)", warned, ended)
	}
}
