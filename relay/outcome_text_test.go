package relay_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/sink"
)

// A sink's answer the store cannot hold — an outcome that is not a name,
// a detail with NUL or invalid UTF-8 — is recorded, not a failing settle:
// the outcome as retry (no answer the relay can record is no answer) with
// a detail saying why, the detail through sink.Excerpt (U+FFFD for each
// bad byte). Settle refuses both as invalid input (a breaker's report:
// PostgreSQL failed the commit with a database error, which the relay
// would have retried until the lease ran out, every delivery again), so
// the relay must never send them. Both backends.
func TestSinkAnswersTheStoreCannotHoldAreRecorded(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, h *harness) {
		var calls atomic.Int32
		cfg := h.patient(t)
		cfg.Sink = sink.Func(func(_ context.Context, d sink.Delivery) (sink.Result, error) {
			switch calls.Add(1) {
			case 1:
				return sink.Result{Outcome: "weird\x00", Detail: "x"}, nil
			case 2:
				return sink.Result{Outcome: fairrelay.OutcomeRetry, Detail: "bad\x00detail\xff"}, nil
			}
			return sink.Result{Outcome: fairrelay.OutcomeAccepted}, nil
		})
		h.enqueue(t, "A", 1)
		_, stop := h.start(t, cfg)
		first := h.next(t)
		h.time.Advance(time.Second) // past the backoff (100 ms)
		second := h.next(t)
		h.time.Advance(time.Second)
		if first.Outcome != fairrelay.OutcomeRetry || !strings.Contains(first.Detail, "not a name") || first.Result.Status != fairrelay.SettleReady {
			t.Errorf("an outcome with a NUL: settled %q %q %q, want retry, ready, saying it is not a name", first.Outcome, first.Detail, first.Result.Status)
		}
		if second.Result.Status != fairrelay.SettleReady {
			t.Errorf("a detail with NUL and invalid UTF-8: settled %q, want ready", second.Result.Status)
		}
		h.until(t, acks(1))
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		as, err := h.q.Attempts(t.Context(), "A1")
		if err != nil || len(as) != 3 {
			t.Fatalf("attempts: %+v %v, want 3", as, err)
		}
		if d := as[1].Detail; d != "bad\uFFFDdetail\uFFFD" || !utf8.ValidString(d) {
			t.Errorf("second attempt's detail %q, want the bad bytes as U+FFFD", d)
		}
	}
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); run(t, newHarness(t, patientPolicy())) })
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		run(t, newHarnessOn(t, patientPolicy(), pgtest.Schema(t, "relay_q_"), pgtest.Schema(t, "relay_i_")))
	})
}
