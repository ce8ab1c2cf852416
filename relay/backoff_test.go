package relay_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
)

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
