package pgstress

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/harness/queuetest"
)

// TestInvariantsWithConcurrentLanes runs the three lanes of the PostgreSQL
// backend (store.Lane) against each other on few flows, where they meet on
// the same rows all the time: two enqueuers append to 20 flows while four
// workers claim (ClaimBatch), deliver and settle (SettleBatch) in separate
// transactions and a fifth settles and claims in one (SettleAndClaim).
// Appends race with settles that drain a flow, the case a lost wake-up
// would leave stuck, and transactions of three lanes wait for each other's
// row locks, the case a deadlock would abort. At the end:
//   - every event was claimed once (generation 1, at tick 0 no lease runs
//     out), accepted by the inbox (no gap: no head skipped, per-flow order)
//     and acked, with one ticket each, rising with seq in each flow;
//   - the inbox's projection of each flow counts all its events;
//   - nothing was left behind: the drain ends only when every event is
//     acked, and fails naming the flows still waiting after the deadline.
func TestInvariantsWithConcurrentLanes(t *testing.T) {
	t.Parallel()
	// Not pgtest.Exclusive: about 14 connections. (A test waiting for that
	// lock would also hold back the server's xmin horizon the whole time,
	// leaving every dead row version of the other test in place.)
	ctx := context.Background()
	const (
		flows      = 20
		enqueuers  = 2
		batches    = 50 // per enqueuer, one event per flow each
		total      = flows * enqueuers * batches
		splitters  = 4
		deadlineIn = 3 * time.Minute
	)
	_, in, qdsn, _ := fresh(t, "frl")
	q, err := fairrelay.Open(ctx, qdsn+"&pool_max_conns=12", fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	body := []byte(`{"delta":1}`)

	ctx, cancel := context.WithTimeout(ctx, deadlineIn)
	defer cancel()
	var (
		mu       sync.Mutex
		recs     []record
		acked    atomic.Int64
		busy     atomic.Int64
		errs     []error
		wg       sync.WaitGroup
		failOnce sync.Once
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
		failOnce.Do(cancel)
	}
	retry := func(fn func() error) error {
		n, err := retryBusy(fn)
		busy.Add(int64(n))
		return err
	}
	var enqueued atomic.Int64
	for g := range enqueuers {
		wg.Go(func() {
			for b := range batches {
				// Keep the flows near empty: the next batch waits until
				// the workers have acked all but about one batch, so that
				// appends keep meeting the settles that drain their flows
				// (the race a lost wake-up would lose).
				for acked.Load() < enqueued.Load()-flows && ctx.Err() == nil {
					select {
					case <-ctx.Done():
					case <-time.After(200 * time.Microsecond):
					}
				}
				ps := make([]fairrelay.NewEvent, flows)
				for f := range flows {
					ps[f] = fairrelay.NewEvent{ID: fmt.Sprintf("g%d-b%02d-%s", g, b, flowName(f)), Flow: flowName(f), Body: body}
				}
				if err := retry(func() error {
					_, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: fairrelay.AtStored, Events: ps})
					return err
				}); err != nil {
					fail(fmt.Errorf("enqueuer %d: %w", g, err))
					return
				}
				enqueued.Add(flows)
			}
		})
	}
	// deliver hands the claims to the inbox and returns the settles and
	// the records.
	deliver := func(cs []fairrelay.Claim) ([]fairrelay.Settlement, []record, error) {
		var ps []fairrelay.Settlement
		var rs []record
		for _, c := range cs {
			o, err := in.Receive(ctx, inbox.Delivery{EventID: c.Token.EventID, Flow: c.Flow, Seq: c.Seq, Body: c.Body})
			if err != nil {
				return nil, nil, err
			}
			ps = append(ps, fairrelay.Settlement{Token: c.Token, Outcome: o})
			rs = append(rs, record{ID: c.Token.EventID, Flow: c.Flow, Seq: c.Seq, Generation: c.Token.Generation, Attempts: c.Attempts, Ticket: c.Ticket, Received: o})
		}
		return ps, rs, nil
	}
	settled := func(rs []record, res []fairrelay.SettleResult) {
		mu.Lock()
		for i := range rs {
			rs[i].Settled = res[i].Status
			recs = append(recs, rs[i])
		}
		mu.Unlock()
		acked.Add(int64(len(rs)))
	}
	// idle waits a little when nothing was runnable: the other lanes are
	// working, and there is nothing to wait on but the store itself.
	idle := func() bool {
		if acked.Load() >= total {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Millisecond):
			return true
		}
	}
	for w := range splitters {
		wg.Go(func() {
			k := 1 + w
			for acked.Load() < total && ctx.Err() == nil {
				var cs []fairrelay.Claim
				if err := retry(func() (err error) {
					cs, err = queuetest.Claims(q.Claim(ctx, fairrelay.ClaimParams{At: 0, Limit: k}))
					return err
				}); err != nil {
					fail(fmt.Errorf("worker %d: claim: %w", w, err))
					return
				}
				if len(cs) == 0 {
					idle()
					continue
				}
				ps, rs, err := deliver(cs)
				if err != nil {
					fail(fmt.Errorf("worker %d: %w", w, err))
					return
				}
				var res []fairrelay.SettleResult
				if err := retry(func() (err error) {
					res, err = queuetest.Settles(q.SettleMany(ctx, fairrelay.SettleManyParams{At: 0, Settles: ps}))
					return err
				}); err != nil {
					fail(fmt.Errorf("worker %d: settle: %w", w, err))
					return
				}
				settled(rs, res)
			}
		})
	}
	wg.Go(func() {
		var ps []fairrelay.Settlement
		var rs []record
		for ctx.Err() == nil {
			var res []fairrelay.SettleResult
			var cs []fairrelay.Claim
			k := 2
			if acked.Load()+int64(len(ps)) >= total {
				k = 0
			}
			if err := retry(func() (err error) {
				res, cs, err = queuetest.SettleClaims(q.SettleMany(ctx, fairrelay.SettleManyParams{At: 0, Settles: ps, ClaimLimit: k}))
				return err
			}); err != nil {
				fail(fmt.Errorf("settle-and-claim worker: %w", err))
				return
			}
			settled(rs, res)
			var err error
			if ps, rs, err = deliver(cs); err != nil {
				fail(fmt.Errorf("settle-and-claim worker: %w", err))
				return
			}
			if len(cs) == 0 && !idle() {
				return
			}
		}
	})
	wg.Wait()
	if len(errs) > 0 {
		t.Fatal(errors.Join(errs...))
	}
	if ctx.Err() != nil {
		heads, err := q.Heads(context.Background(), "", flows)
		t.Fatalf("%d of %d events acked after %v; heads left: %+v %v", acked.Load(), total, deadlineIn, heads, err)
	}
	t.Logf("%d events of %d flows through 2 enqueuers and 5 workers; %d busy answers retried", len(recs), flows, busy.Load())

	seen := map[string]bool{}
	tickets := map[int64]bool{}
	for _, r := range recs {
		if seen[r.ID] || tickets[r.Ticket] {
			t.Errorf("%s (ticket %d) delivered twice or its ticket handed out twice", r.ID, r.Ticket)
		}
		seen[r.ID], tickets[r.Ticket] = true, true
		if r.Generation != 1 || r.Attempts != 1 || r.Received != fairrelay.OutcomeAccepted || r.Settled != fairrelay.SettleAcked {
			t.Errorf("%s: generation %d attempt %d, received %s, settled %s", r.ID, r.Generation, r.Attempts, r.Received, r.Settled)
		}
	}
	if len(seen) != total {
		t.Fatalf("%d distinct events delivered, want %d", len(seen), total)
	}
	checkTicketsRiseWithSeq(t, recs)
	snap, err := q.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if snap.Clock.Ticket != total || len(snap.Events) != total {
		t.Errorf("store: ticket %d, %d events; want %d and %d", snap.Clock.Ticket, len(snap.Events), total, total)
	}
	for _, e := range snap.Events {
		if e.State != fairrelay.StateAcked {
			t.Errorf("event %s is %s", e.ID, e.State)
		}
	}
	is, err := in.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range is.Projection {
		if p.Seq != enqueuers*batches || p.Total != enqueuers*batches {
			t.Errorf("projection %s: seq %d total %d, want %d", p.Flow, p.Seq, p.Total, enqueuers*batches)
		}
	}
	if len(is.Projection) != flows {
		t.Errorf("%d projections, want %d", len(is.Projection), flows)
	}
}
