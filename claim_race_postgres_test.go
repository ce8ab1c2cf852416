package fairrelay_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
)

// Claims running side by side on PostgreSQL, with leases short enough that
// heads run out and are claimed again while other claims read them, never
// fail for a store that is consistent and never give two claims one token.
// A claim locks the flows it picked with SKIP LOCKED; a flow another claim
// or settle changed and committed after the statement began is locked in
// its new version, while the head joined to it was the statement's
// snapshot's (PostgreSQL's re-check of a locked row re-reads that row
// only): the claim failed "head seq N is missing: the store is
// inconsistent" (ErrDatabase) when the head had moved on, and, when the
// same head was claimed and had run out meanwhile, took it at a generation
// another claim already held (a breaker's report: 3–16 failed claims in 8 s
// with four claimers).
//
// The clock is logical: each claim call is one tick, so a lease of a few
// ticks runs out when other claims overtake a claimer, not when the machine
// is slow; an expired lease costs the head a one-tick backoff, never a long
// one or quarantine (the daemon's 1 s doubling backoff once left a flow
// waiting past the deadline on a loaded CI machine).
func TestPostgresConcurrentClaimsReadTheHeadTheyLocked(t *testing.T) {
	t.Parallel()
	pol := fairrelay.DaemonPolicy()
	pol.Lease, pol.MaxTickJump, pol.Jitter = 2, 0, 0
	pol.Budget, pol.BackoffBase, pol.BackoffCap = 1<<30, 1, 1
	q, _, _ := outboxStore(t, "frclaimrace_", pol)
	ctx := t.Context()
	const flows, perFlow, claimers = 24, 30, 4
	body := []byte(`{"delta":1}`)
	for i := range perFlow {
		var evs []fairrelay.NewEvent
		for f := range flows {
			group := ""
			if f < 16 {
				group = fmt.Sprintf("G%d", f%4)
			}
			evs = append(evs, fairrelay.NewEvent{ID: fmt.Sprintf("F%02d-%02d", f, i), Flow: fmt.Sprintf("F%02d", f), Group: group, Body: body})
		}
		if _, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: fairrelay.AtStored, Events: evs}); err != nil {
			t.Fatal(err)
		}
	}
	var (
		tick    atomic.Int64
		mu      sync.Mutex
		tokens  = map[fairrelay.Token]bool{}
		acked   atomic.Int64
		failed  atomic.Int64
		expired atomic.Int64
		wg      sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for c := range claimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; acked.Load() < flows*perFlow && ctx.Err() == nil; n++ {
				res, err := q.Claim(ctx, fairrelay.ClaimParams{At: tick.Add(1), Floor: true, Limit: 1 + (c+n)%3})
				if err != nil {
					if ctx.Err() == nil && failed.Add(1) <= 5 {
						t.Errorf("claimer %d: claim: %v", c, err)
					}
					continue
				}
				for _, cl := range res.Claims {
					mu.Lock()
					if tokens[cl.Token] {
						t.Errorf("claimer %d: token %v claimed twice", c, cl.Token)
					}
					tokens[cl.Token] = true
					mu.Unlock()
					r, err := q.Settle(ctx, fairrelay.SettleParams{Token: cl.Token, Outcome: fairrelay.OutcomeAccepted, At: fairrelay.AtStored})
					if err != nil {
						if ctx.Err() == nil && failed.Add(1) <= 5 {
							t.Errorf("claimer %d: settle %v: %v", c, cl.Token, err)
						}
						continue
					}
					if r.Status == fairrelay.SettleAcked {
						acked.Add(1)
					} else {
						expired.Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d claims or settles failed", n)
	}
	if got := acked.Load(); got != flows*perFlow {
		t.Errorf("acked %d of %d events before the deadline", got, flows*perFlow)
	}
	t.Logf("%d ticks, %d settles refused (lease run out)", tick.Load(), expired.Load())
	if expired.Load() == 0 {
		t.Errorf("no lease ran out: the test did not exercise claims of heads whose lease ran out")
	}
}
