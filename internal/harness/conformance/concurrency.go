package conformance

import (
	"fmt"
	"sync"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/harness/queuetest"
)

// runConcurrency has several Queue handles on one store (as several
// processes would) claim and settle at once, and checks the invariants: one
// live lease per flow, no head skipped, every event acked once, per-flow
// order at the receiver.
func runConcurrency(t *testing.T, b Backend) {
	const flows, perFlow, handles, workers = 12, 6, 3, 4
	x := h{t: t, Env: Open(t, b, fairrelay.ReferencePolicy())}
	for f := range flows {
		for s := 1; s <= perFlow; s++ {
			x.enqueue(fmt.Sprintf("F%02d-%d", f, s), fmt.Sprintf("F%02d", f), 1, 0)
		}
	}
	qs := []*fairrelay.Queue{x.Queue}
	for range handles - 1 {
		q, err := fairrelay.Open(bg, x.QueueDSN, fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { q.Close() })
		qs = append(qs, q)
	}
	var (
		mu     sync.Mutex
		leased = map[string]string{} // flow -> event currently leased
		errs   []error
	)
	var wg sync.WaitGroup
	for w := range handles * workers {
		q := qs[w%handles]
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Every claim and settle happens at tick 0, so no lease runs out
			// and any double lease is a real violation.
			for {
				c, err := queuetest.ClaimOne(bg, q, 0)
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				if c == nil {
					return
				}
				mu.Lock()
				if other, ok := leased[c.Flow]; ok {
					errs = append(errs, fmt.Errorf("flow %s leased twice: %s and %s", c.Flow, other, c.Token.EventID))
				}
				leased[c.Flow] = c.Token.EventID
				mu.Unlock()
				o, err := x.Inbox.Receive(bg, inboxDelivery(c.Token.EventID, c.Flow, c.Seq, string(c.Body)))
				if err == nil && o != fairrelay.OutcomeAccepted {
					err = fmt.Errorf("%s received %s: per-flow order broken", c.Token.EventID, o)
				}
				mu.Lock()
				delete(leased, c.Flow)
				mu.Unlock()
				if err == nil {
					var r fairrelay.SettleResult
					r, err = q.Settle(bg, fairrelay.SettleParams{Token: c.Token, Outcome: o, At: 0})
					if err == nil && r.Status != fairrelay.SettleAcked {
						err = fmt.Errorf("%s settled %s", c.Token.EventID, r.Status)
					}
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	s := x.snapshot()
	for _, e := range s.Events {
		if e.State != fairrelay.StateAcked || e.Generation != 1 {
			t.Errorf("%s %s generation %d: want acked once", e.ID, e.State, e.Generation)
		}
	}
	if s.Clock.Ticket != flows*perFlow {
		t.Errorf("ticket %d, want %d: one claim per event", s.Clock.Ticket, flows*perFlow)
	}
	if n := len(x.inboxSnapshot().Receipts); n != flows*perFlow {
		t.Errorf("%d receipts, want %d", n, flows*perFlow)
	}
}
