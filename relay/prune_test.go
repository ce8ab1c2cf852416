package relay_test

import (
	"errors"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/relay"
)

// TestRelayPrunesAckedEvents: with RetainAcked the relay deletes, on its
// own, the events acked longer ago than that by its clock, keeping their ids
// idempotent (SPEC §8 retention); events not acked stay. Its metrics count
// what it deleted and observe each batch's hold of the writer.
func TestRelayPrunesAckedEvents(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testPolicy())
	h.enqueue(t, "A", 1, 2, 3)
	reg := prometheus.NewRegistry()
	m, err := relay.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := h.config(t)
	cfg.Metrics = m
	cfg.RetainAcked, cfg.RetainIDs, cfg.PruneInterval, cfg.PruneBatch = time.Hour, 2*time.Hour, time.Millisecond, 2
	pruned := make(chan struct{})
	cfg.Logger = slog.New(&onMessage{prefix: "relay: pruned", do: func() { close(pruned) }})
	_, stop := h.start(t, cfg)
	h.until(t, acks(3))
	// B1 never gets acked (its receiver answers 503): a prune must leave an
	// event that is not acked, however old.
	h.mu.Lock()
	h.intercept = func(w http.ResponseWriter, r *http.Request, d delivery) bool {
		if d.flow != "B" {
			return false
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		return true
	}
	h.mu.Unlock()
	h.enqueue(t, "B", 1)
	// An hour and a minute later by the relay's clock, the three acks are
	// due for pruning, in batches of 2.
	h.time.Advance(time.Hour + time.Minute)
	waitClosed(t, pruned)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := counterValue(t, reg, "fairrelay_pruned_events_total"); n != 3 {
		t.Errorf("fairrelay_pruned_events_total = %v, want 3", n)
	}
	// Batches of 2: A1 and A2, then A3 (and any prune the relay ran before
	// the clock moved, which found nothing).
	if n, sum := histogram(t, reg, "fairrelay_prune_write_seconds"); n < 2 || sum <= 0 {
		t.Errorf("fairrelay_prune_write_seconds: %d observations summing to %v s, want at least the 2 batches, held for some time", n, sum)
	}
	for _, id := range []string{"A1", "A2", "A3"} {
		if _, err := h.q.Event(t.Context(), id); !errors.Is(err, fairrelay.ErrNotFound) {
			t.Fatalf("%s after the prune: %v, want not found", id, err)
		}
	}
	r, err := h.q.Enqueue(t.Context(), fairrelay.EnqueueParams{ID: "A2", Flow: "A", Body: []byte(`{"delta":2}`), At: fairrelay.AtStored})
	if err != nil || r.Status != fairrelay.EnqueueExisting || r.Seq != 2 {
		t.Fatalf("A2 enqueued again after its prune: %+v %v, want existing seq 2 (its tombstone)", r, err)
	}
	if e, err := h.q.Event(t.Context(), "B1"); err != nil || e.State == fairrelay.StateAcked {
		t.Fatalf("B1: %+v %v, want it kept, not acked", e, err)
	}
}

// The relay's prune line counts what became of the pruned events' ids:
// ids_kept (a tombstone each) and ids_forgotten. With RetainIDs equal to
// RetainAcked every pruned id goes with its event, which the line said as
// tombstones_deleted=0 and nothing else; with a longer RetainIDs every one
// is kept.
func TestRelayPruneLineCountsTheIDsForgotten(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		retainIDs          time.Duration
		kept, forgotten    int64
		enqueueAgainAnswer fairrelay.EnqueueStatus
	}{
		{time.Hour, 0, 3, fairrelay.EnqueueCreated},
		{2 * time.Hour, 3, 0, fairrelay.EnqueueExisting},
	} {
		t.Run(c.retainIDs.String(), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, testPolicy())
			h.enqueue(t, "A", 1, 2, 3)
			cfg := h.config(t)
			cfg.RetainAcked, cfg.RetainIDs, cfg.PruneInterval, cfg.PruneBatch = time.Hour, c.retainIDs, time.Millisecond, 2
			pruned := make(chan struct{})
			line := &onMessage{prefix: "relay: pruned", do: func() { close(pruned) }}
			cfg.Logger = slog.New(line)
			_, stop := h.start(t, cfg)
			h.until(t, acks(3))
			h.time.Advance(time.Hour + time.Minute)
			waitClosed(t, pruned)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			want := map[string]int64{"events": 3, "ids_kept": c.kept, "ids_forgotten": c.forgotten, "tombstones_deleted": 0}
			for k, v := range want {
				if got, ok := line.attrs[k]; !ok || got.Kind() != slog.KindInt64 || got.Int64() != v {
					t.Errorf("relay: pruned %s=%v, want %d (the line: %v)", k, got, v, line.attrs)
				}
			}
			// What the line says is what the store did: an id kept
			// answers existing, a forgotten one is a new event.
			r, err := h.q.Enqueue(t.Context(), fairrelay.EnqueueParams{ID: "A1", Flow: "A", Body: []byte(`{"delta":1}`), At: fairrelay.AtStored})
			if err != nil || r.Status != c.enqueueAgainAnswer {
				t.Errorf("A1 enqueued again: %+v %v, want %s", r, err, c.enqueueAgainAnswer)
			}
		})
	}
}

// A store whose tick jumped far ahead (wall-clock milliseconds given as a
// tick, max_tick_jump off) made every event acked before the jump due for
// pruning at once, and the relay's first prune, at its start, deleted them
// and forgot their ids (an id sent again became a new event: a duplicate
// delivery; a fresh user's report). The relay's retention holds back by
// the wall clock too: the acked event stays, warned about, until it is
// RetainAcked old by the wall clock, then its id stays in a tombstone
// until it is RetainIDs old. Both backends.
func TestRelayRetentionSurvivesATickJump(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			var h *harness
			if backend == "postgres" {
				h = newHarnessOn(t, testPolicy(), pgtest.Schema(t, "relay_q_"), pgtest.Schema(t, "relay_i_"))
			} else {
				h = newHarness(t, testPolicy())
			}
			ctx := t.Context()
			ackedThenJumped(t, h)
			logs := &logCounter{}
			cfg := h.config(t)
			cfg.RetainAcked, cfg.RetainIDs, cfg.PruneInterval, cfg.PruneBatch = time.Hour, 2*time.Hour, time.Millisecond, 2
			cfg.Logger = slog.New(logs)
			reg := prometheus.NewRegistry()
			m, err := relay.NewMetrics(reg)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Metrics = m
			_, stop := h.start(t, cfg)
			logs.until(t, "relay: retention keeps events or ids")
			// The gauge says so too (set before the warning is logged).
			if v := series(t, reg)["fairrelay_prune_wall_kept"]; v < 1 {
				t.Errorf("fairrelay_prune_wall_kept = %v, want at least 1 (A1 held)", v)
			}
			again := func(want fairrelay.EnqueueStatus) {
				t.Helper()
				r, err := h.q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "A1", Flow: "A", Body: []byte(`{"delta":1}`), At: fairrelay.AtStored})
				if err != nil || r.Status != want || (want == fairrelay.EnqueueExisting && r.Seq != 1) {
					t.Fatalf("A1 enqueued again: %+v %v, want %s", r, err, want)
				}
			}
			if e, err := h.q.Event(ctx, "A1"); err != nil || e.State != fairrelay.StateAcked {
				t.Fatalf("A1 after the jump: %+v %v, want it kept, acked", e, err)
			}
			again(fairrelay.EnqueueExisting)
			// An hour later by the wall clock: pruned, its id kept.
			h.time.Advance(time.Hour + time.Minute)
			logs.until(t, "relay: pruned")
			if _, err := h.q.Event(ctx, "A1"); !errors.Is(err, fairrelay.ErrNotFound) {
				t.Fatalf("A1 an hour later: %v, want pruned", err)
			}
			again(fairrelay.EnqueueExisting)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// ackedThenJumped has a relay deliver A1 (flow A) and stops it, then
// moves the store's tick far ahead, as a claim at an epoch-millisecond
// tick does (max_tick_jump off).
func ackedThenJumped(t *testing.T, h *harness) {
	t.Helper()
	h.enqueue(t, "A", 1)
	_, stop := h.start(t, h.config(t))
	h.until(t, acks(1))
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := h.q.Claim(t.Context(), fairrelay.ClaimParams{At: time.Now().UnixMilli()}); err != nil {
		t.Fatal(err)
	}
}

// until waits (10 s at most) for a record whose message starts with
// prefix.
func (l *logCounter) until(t *testing.T, prefix string) {
	t.Helper()
	waitUntil(t, 10*time.Second, func() bool { return l.count(prefix) > 0 }, func() string { return "no log line " + prefix })
}
