package relay_test

import (
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/relay"
)

// A delivery that outlives its lease is never settled.
func TestNoSettleAfterLeaseRanOut(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testPolicy())
	arrived, release := blockFirst(h, "A1")
	h.enqueue(t, "A", 1)
	cfg := h.config(t)
	cfg.Workers = 1 // nobody re-claims A1 before the blocked delivery ends
	_, stop := h.start(t, cfg)
	waitClosed(t, arrived)
	h.time.Advance(2 * time.Second) // the lease (2000 ms) runs out
	close(release)
	// The worker skips its settle, then re-claims A1 (the inbox already has
	// it: duplicate).
	byGen := map[int64]relay.Settled{}
	for range 2 {
		s := h.next(t)
		byGen[s.Claim.Token.Generation] = s
	}
	if s := byGen[1]; !s.LeaseLost || s.Result.Status != "" {
		t.Fatalf("old claim: %+v, want lease lost and nothing sent", s)
	}
	if s := byGen[2]; s.Outcome != fairrelay.OutcomeDuplicate || s.Result.Status != fairrelay.SettleAcked {
		t.Fatalf("re-delivery: %+v", s)
	}
	stop()
}
