package relay

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
)

// A streak starts at a failed round trip and ends at the next write that
// succeeds, not at a read (a full disk still serves reads); each is logged
// once, however many tries the streak took.
func TestHealthLogsOncePerStreak(t *testing.T) {
	t.Parallel()
	var logged bytes.Buffer
	src := &stepTime{}
	h := newHealth(src, slog.New(slog.NewTextHandler(&logged, nil)), nil)
	disk := errors.New("database or disk is full")
	h.failed("claim", disk)
	src.d += time.Second
	h.failed("claim", disk)
	h.read()
	h.failed("claim", disk)
	if s := h.snapshot(); s.Failures != 3 || s.Streaks != 1 || s.Failing != time.Second || s.Err != disk || s.SinceOK != 0 {
		t.Fatalf("in the streak: %+v, want 3 failures for 1 s, the read 0 s ago", s)
	}
	h.wrote()
	if s := h.snapshot(); s.Failures != 0 || s.Streaks != 1 || s.Err != nil {
		t.Fatalf("after a write: %+v, want the streak over", s)
	}
	h.failed("settle", disk)
	h.wrote()
	if n := strings.Count(logged.String(), "store round trip failed"); n != 2 {
		t.Errorf("%d start lines for 2 streaks of 3 and 1 failures, want 2:\n%s", n, logged.String())
	}
	if n := strings.Count(logged.String(), "store available again"); n != 2 || !strings.Contains(logged.String(), "failed_round_trips=3") {
		t.Errorf("%d end lines, want 2, the first counting 3 failures:\n%s", n, logged.String())
	}
}

// A streak that lasts is logged again once a minute, with how long it has
// lasted and how many round trips failed (a store down for an hour left one
// line at its start: an operator's report); a short one only at its start.
func TestHealthRemindsOfALongStreak(t *testing.T) {
	t.Parallel()
	var logged bytes.Buffer
	src := &stepTime{}
	h := newHealth(src, slog.New(slog.NewTextHandler(&logged, nil)), nil)
	down := errors.New("connection refused")
	for range 150 { // 150 tries a second apart: 2.5 minutes
		h.failed("claim", down)
		src.d += time.Second
	}
	if n := strings.Count(logged.String(), "store round trip failed"); n != 1 {
		t.Errorf("%d start lines, want 1:\n%s", n, logged.String())
	}
	if n := strings.Count(logged.String(), "store round trips still failing"); n != 2 ||
		!strings.Contains(logged.String(), "failed_round_trips=61 for=1m0s") || !strings.Contains(logged.String(), "failed_round_trips=121 for=2m0s") {
		t.Errorf("%d reminders, want 2, at 1 and 2 minutes:\n%s", n, logged.String())
	}
}

// The pause after n failures in a row doubles from RetryWait up to
// MaxRetryWait, drawn between half and all of it.
func TestRetryWaitIsBoundedWithJitter(t *testing.T) {
	t.Parallel()
	r := &Relay{cfg: Config{RetryWait: 10 * time.Millisecond, MaxRetryWait: 5 * time.Second}}
	for n := 1; n <= 40; n++ {
		full := min(10*time.Millisecond<<min(n-1, 20), 5*time.Second)
		seen := map[time.Duration]bool{}
		for range 50 {
			d := r.retryWait(n)
			if d < full/2 || d > full {
				t.Fatalf("after %d failures: %s, want within [%s, %s]", n, d, full/2, full)
			}
			seen[d] = true
		}
		if len(seen) < 2 {
			t.Fatalf("after %d failures: always %v: no jitter", n, seen)
		}
	}
}

// A claim whose commit went unanswered is logged each time, in a streak or
// not, saying that the heads it may have taken wait out their leases: a
// flow waited a lease in silence after one (an SRE's report). Other
// failures, and a settle's unknown commit (sent again, it answers stale),
// keep to the streak's lines.
func TestHealthNamesAClaimWhoseCommitWentUnanswered(t *testing.T) {
	t.Parallel()
	var logged bytes.Buffer
	h := newHealth(&stepTime{}, slog.New(slog.NewTextHandler(&logged, nil)), nil)
	unknown := fmt.Errorf("claim: %w", fmt.Errorf("may have committed: %w", fairrelay.ErrCommitUnknown))
	h.failed("claim", errors.New("connection refused"))
	h.failed("claim", unknown)
	h.failed("claim", unknown)
	h.failed("settle", unknown)
	const line = "relay: a claim's commit went unanswered; if it committed, the heads it took stay leased"
	if n := strings.Count(logged.String(), line); n != 2 {
		t.Errorf("%d lines for 2 claims whose commits went unanswered in one streak, want 2:\n%s", n, logged.String())
	}
}
