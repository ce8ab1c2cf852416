package relay_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/relay"
)

// A scrape's read of the store gives up after QueueGaugesOptions.ReadTimeout,
// not after the store's lock timeout: with the flow table locked (a
// migration, a VACUUM FULL) a scrape waited the 5 s lock timeout, past
// common scrape timeouts, so the whole page timed out and up 0 was never
// seen (an SRE's report). Here the lock timeout is a minute: only the read
// timeout can end the read, and the error it logs says so.
func TestQueueGaugesReadGivesUpAtItsTimeout(t *testing.T) {
	t.Parallel()
	dsn := pgtest.Schema(t, "relay_gaugeslock_")
	q, err := fairrelay.Open(t.Context(), dsn, fairrelay.Config{Policy: fairrelay.DaemonPolicy(), BusyTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if _, err := q.Enqueue(t.Context(), fairrelay.EnqueueParams{ID: "a", Flow: "A", Body: []byte(`{"delta":1}`), At: fairrelay.AtStored}); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	if err := relay.RegisterQueueGauges(reg, q, relay.QueueGaugesOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil)), ReadTimeout: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	// Before the lock a read answers, but on a loaded machine (CI's race
	// run beside other work) one may take longer than the 200 ms itself:
	// a few scrapes, the first that answers counts.
	for try := 1; series(t, reg)["fairrelay_queue_gauges_up"] != 1; try++ {
		if try == 20 {
			t.Fatalf("up = 0 in %d scrapes before the lock, want 1:\n%s", try, logs.String())
		}
	}
	logs.Reset() // what the locked scrape logs, alone
	defer pgtest.LockTable(t, dsn, "flow")()
	got := series(t, reg)
	if got["fairrelay_queue_gauges_up"] != 0 || got["fairrelay_events,state=ready"] != 1 {
		t.Errorf("a scrape with the flow table locked: up %v, ready %v; want up 0 and the last value (1)", got["fairrelay_queue_gauges_up"], got["fairrelay_events,state=ready"])
	}
	if !strings.Contains(logs.String(), "the read took longer than its 200ms") {
		t.Errorf("the failed read's log does not say the read timed out:\n%s", logs.String())
	}
}
