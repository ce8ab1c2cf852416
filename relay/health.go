package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/fairrelay/fairrelay"
)

// Health is a snapshot of the relay's store round trips (Relay.Health).
// Durations are measured on Config.Source.
type Health struct {
	// Failures counts the failed store round trips (reads and writes, each
	// try of each) of the error streak under way; 0 when none is. A streak
	// starts at a failed round trip and ends at the next write that
	// succeeds: a read alone does not end it, since on a full disk reads
	// succeed while writes fail.
	Failures int
	// Failing is how long the streak under way has lasted; 0 with none.
	Failing time.Duration
	// Err is the last error of the streak under way; nil with none.
	Err error
	// SinceOK is how long ago the last store round trip succeeded (New's
	// read of the stored tick is the first).
	SinceOK time.Duration
	// Streaks counts the error streaks since New, the one under way
	// included.
	Streaks int
}

// health keeps the relay's record of its store round trips: the claimer
// and the settler report each, Ready and Health read it. It logs when a
// streak starts, once a minute while it lasts (failingReminder) and when it
// ends, never per try. Safe for concurrent use.
type health struct {
	src     Monotonic
	log     *slog.Logger
	metrics *Metrics

	mu       sync.Mutex
	lastOK   time.Duration // src's reading at the last round trip that succeeded
	failures int           // failed round trips in the streak under way; 0: none
	since    time.Duration // src's reading at the streak's first failure
	err      error         // the streak's last error
	streaks  int
	told     time.Duration // src's reading when the streak was last logged
}

// failingReminder is how often a streak under way is logged again: a
// store down for an hour left one line at its start and nothing after, so
// the logs of the last minutes said nothing of it (an operator's report).
const failingReminder = time.Minute

func newHealth(src Monotonic, log *slog.Logger, m *Metrics) *health {
	return &health{src: src, log: log, metrics: m, lastOK: src.Elapsed()}
}

// failed records a failed round trip of op ("claim", "settle", "next_due").
func (h *health) failed(op string, err error) {
	h.mu.Lock()
	now := h.src.Elapsed()
	first := h.failures == 0
	h.failures++
	h.err = err
	if first {
		h.since = now
		h.streaks++
	}
	remind := !first && now-h.told >= failingReminder
	if first || remind {
		h.told = now
	}
	n, lasted := h.failures, now-h.since
	h.mu.Unlock()
	h.metrics.storeError()
	if op == "claim" && errors.Is(err, fairrelay.ErrCommitUnknown) {
		// Every time, streak or not: the heads such a claim took, if it
		// committed, hold their flows for a lease with nothing else
		// naming them (an SRE's report: a flow waited 30 s in silence).
		h.log.Warn("relay: a claim's commit went unanswered; if it committed, the heads it took stay leased until their leases end (up to the lease) and are then claimed again: `fairrelay inspect heads` shows them inflight", "err", err)
	}
	switch {
	case first:
		h.log.Warn("relay: store round trip failed; retrying with backoff until a write succeeds (logged at the start of a streak, then once a minute)",
			"op", op, "err", err)
	case remind:
		h.log.Warn("relay: store round trips still failing; retrying with backoff until a write succeeds",
			"op", op, "failed_round_trips", n, "for", lasted, "err", err)
	}
}

// read records a read that succeeded; it does not end a streak.
func (h *health) read() {
	h.mu.Lock()
	h.lastOK = h.src.Elapsed()
	h.mu.Unlock()
}

// wrote records a write that succeeded, which ends the streak under way.
func (h *health) wrote() {
	h.mu.Lock()
	now := h.src.Elapsed()
	h.lastOK = now
	n, lasted := h.failures, now-h.since
	h.failures, h.err = 0, nil
	h.mu.Unlock()
	if n > 0 {
		h.log.Info("relay: store available again", "failed_round_trips", n, "after", lasted)
	}
}

// failing reports whether a streak is under way.
func (h *health) failing() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.failures > 0
}

func (h *health) snapshot() Health {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.src.Elapsed()
	s := Health{Failures: h.failures, Err: h.err, SinceOK: now - h.lastOK, Streaks: h.streaks}
	if h.failures > 0 {
		s.Failing = now - h.since
	}
	return s
}

// Health returns a snapshot of the relay's store round trips.
func (r *Relay) Health() Health { return r.health.snapshot() }

// readyProbeAfter is how old the last successful store round trip may be
// before Ready makes one of its own: an idle relay reads at least every
// MaxPollInterval, a busy one writes with every claim and settle, but one
// whose delivery slots are all held by slow deliveries may not touch the
// store for a whole delivery timeout.
const readyProbeAfter = 2 * time.Second

// Ready returns nil when the relay is ready: Run is dispatching (not yet
// stopping), no error streak is under way (see Health), and the last store
// round trip succeeded within the last 2 s — or, when it is older, a read of
// the store's clock made now succeeds. Otherwise its error says why. It is
// meant for a readiness probe (the CLI serves it at /readyz); ctx bounds
// that read.
func (r *Relay) Ready(ctx context.Context) error {
	switch r.phase.Load() {
	case phaseNew:
		return errors.New("not running yet")
	case phaseStopping:
		return errors.New("stopping: no new claims")
	case phaseStopped:
		return errors.New("stopped")
	}
	s := r.health.snapshot()
	if s.Failures > 0 {
		return fmt.Errorf("store round trips failing for %s (%d failed): %w", s.Failing.Round(time.Millisecond), s.Failures, s.Err)
	}
	if s.SinceOK <= readyProbeAfter {
		return nil
	}
	if _, err := r.q.Clock(ctx); err != nil {
		return fmt.Errorf("no store round trip for %s, and a read of the store's clock failed: %w", s.SinceOK.Round(time.Millisecond), err)
	}
	r.health.read()
	return nil
}

// Run's phases, for Ready.
const (
	phaseNew int32 = iota
	phaseRunning
	phaseStopping
	phaseStopped
)

// retryable reports whether the relay rides out err, the error of a store
// round trip — the database unreachable, restarting, busy, out of space —
// by trying again after a pause, rather than stopping: every error but
// those waiting does not cure: ErrInvalidInput (a configuration the store
// refuses, or a stored tick beyond the range of ticks) and ErrFileReplaced
// (a SQLite store's file removed or replaced under the relay, which kept
// retrying its writes to the old file for ever while /healthz answered 200,
// so no supervisor restarted it: an SRE's drill), and ErrNotDatabase (the
// store is no longer there to write: a PostgreSQL store's schema or tables
// dropped under the relay, which retried once a minute for ever; a fresh
// user's report. A restarted relay refuses the schema at start, naming it),
// and ErrClosed (the Queue closed under the relay, by a deferred Close
// that ran before the relay stopped: retried for ever, Run never returned;
// a library user's report).
func retryable(err error) bool {
	return !errors.Is(err, fairrelay.ErrInvalidInput) && !errors.Is(err, fairrelay.ErrFileReplaced) &&
		!errors.Is(err, fairrelay.ErrNotDatabase) && !errors.Is(err, fairrelay.ErrClosed)
}

// retryWait returns the pause before the next try after n failed round
// trips in a row (n >= 1): Config.RetryWait doubled n-1 times, at most
// Config.MaxRetryWait, drawn at random between half and all of it, so
// that the relays of one store do not retry in step.
func (r *Relay) retryWait(n int) time.Duration {
	d := r.cfg.RetryWait
	for i := 1; i < n && d < r.cfg.MaxRetryWait; i++ {
		d *= 2
	}
	d = min(d, r.cfg.MaxRetryWait)
	return d/2 + rand.N(d/2+1)
}

// pause waits d, or until ctx is done. Unlike idle, nothing else ends it:
// the answers that keep arriving must not turn a backoff into a busy loop.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// opError returns err, the error of the relay's op ("claim", "settle"),
// prefixed with op unless its message already starts with it (the Queue's
// errors name their operation: "claim: claim: begin transaction" was a
// library user's report).
func opError(op string, err error) error {
	if strings.HasPrefix(err.Error(), op+": ") {
		return err
	}
	return fmt.Errorf("%s: %w", op, err)
}
