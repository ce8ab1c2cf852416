package relay

import (
	"context"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/sink"
)

// settleParams returns the settles of as at tick at, and their reports: an
// answer whose lease ran out by at is not sent (LeaseLost), since it would
// be expired anyway and someone may hold a newer lease.
func settleParams(at int64, as []answer) ([]fairrelay.Settlement, []Settled) {
	var ps []fairrelay.Settlement
	out := make([]Settled, len(as))
	for i, a := range as {
		out[i] = a.s
		out[i].At = at
		if at >= a.s.Claim.LeaseUntil {
			out[i].LeaseLost = true
			continue
		}
		p := fairrelay.Settlement{Token: a.s.Claim.Token, Outcome: a.s.Outcome, Detail: sink.Excerpt(a.s.Detail, fairrelay.MaxDetailBytes), Duration: max(a.s.Latency, 0)}
		if a.retryAfter > 0 {
			p.NotBefore = at + a.retryAfter.Milliseconds()
		}
		ps = append(ps, p)
	}
	return ps, out
}

// setResults gives the reports that were sent their results, in order.
func setResults(out []Settled, rs []fairrelay.SettleResult) {
	j := 0
	for i := range out {
		if !out[i].LeaseLost {
			out[i].Result = rs[j]
			j++
		}
	}
}

// settleLoop is the settler: it settles the answers waiting, all in one
// transaction, whenever the claimer does not (pipeline). After the claimer
// stopped, it settles what is left and returns once no delivery is under
// way and no answer waits. Answers whose flows another transaction holds,
// and answers whose settle failed (after a pause: retryWait), it tries
// again while their leases hold, until cutoff is done (the shutdown
// deadline), then leaves their events to their leases. Only an error the
// relay does not ride out (retryable) ends it early.
func (r *Relay) settleLoop(ctx, cutoff context.Context, p *pipeline) error {
	var batch batchWindow
	defer batch.reset()
	var heldRun heldStreak
	fails := 0 // failed settles in a row
	for {
		p.mu.Lock()
		if p.claimDone && p.delivering == 0 && len(p.answers) == 0 {
			p.mu.Unlock()
			return nil
		}
		if len(p.answers) == 0 || p.combine {
			p.mu.Unlock()
			<-p.settleKick
			continue
		}
		if p.delivering > 0 && p.batching(r.cfg.Source.Elapsed()) && batch.open() {
			// More answers are coming: wait a moment for them, to settle
			// them along.
			p.mu.Unlock()
			select {
			case <-p.settleKick:
			case <-batch.timer.C:
				batch.closed = true
			}
			continue
		}
		batch.reset()
		as := p.takeAnswers()
		p.settling = len(as)
		p.mu.Unlock()
		again, wrote, err := r.settle(ctx, as)
		if err != nil && !retryable(err) {
			r.log.Warn("relay: answers not settled; their events wait out their leases", "count", len(as))
			p.mu.Lock()
			p.settling = 0
			p.mu.Unlock()
			return err
		}
		failed := err != nil
		switch {
		case failed:
			r.health.failed("settle", err)
		case wrote:
			r.health.wrote()
		}
		if len(again) > 0 && cutoff.Err() != nil {
			// Past the shutdown deadline: no more waiting for those flows,
			// or for the store. Reported as not settled.
			why := "answers of flows another transaction holds not settled"
			if failed {
				why = "answers not settled: the store still fails"
			}
			r.log.Warn("relay: shutdown deadline: "+why+"; their events wait out their leases", "count", len(again))
			for _, a := range again {
				s := a.s
				s.LeaseLost, s.Result, s.At = true, fairrelay.SettleResult{Held: !failed}, r.clock.Now()
				r.report(s)
			}
			again = nil
		}
		p.mu.Lock()
		p.settling = 0
		if failed && again != nil {
			p.answers = append(as, p.answers...) // the oldest first, as before
		} else {
			p.recycle(as)
			p.answers = append(p.answers, again...)
		}
		p.mu.Unlock()
		kick(p.claimKick) // the acks may have made heads eligible
		switch {
		case failed:
			fails++
			pause(cutoff, r.retryWait(fails))
			continue
		case len(again) == len(as):
			// Only held flows' answers: wait before asking again, unless
			// new answers arrive.
			t := time.NewTimer(r.heldPause(&heldRun, again))
			select {
			case <-p.settleKick:
			case <-t.C:
			case <-cutoff.Done():
			}
			t.Stop()
		default:
			heldRun = heldStreak{}
		}
		fails = 0
	}
}

// The pause before settling again answers whose flows another transaction
// held (an open outbox transaction, fairrelay.SettleManyParams.SkipHeld) while
// nothing else was settled: it doubles from minHeldWait up to maxHeldWait
// as long as they stay held.
const (
	minHeldWait = 2 * time.Millisecond
	maxHeldWait = time.Second
)

// heldStreak paces the retries of answers whose flows another
// transaction holds, while nothing else is settled: the pause doubles from
// minHeldWait to maxHeldWait. The zero value starts a streak.
type heldStreak struct {
	wait   time.Duration // the next pause; 0 before the streak's first
	since  time.Duration // Config.Source's reading at the first pause
	warned bool
}

// heldPause returns the next pause of streak h, and warns once, about a
// second into the streak, that those flows have been held for a while (an
// outbox transaction left open?).
func (r *Relay) heldPause(h *heldStreak, held []answer) time.Duration {
	now := r.cfg.Source.Elapsed()
	if h.wait == 0 {
		h.since, h.wait = now, minHeldWait
	}
	if !h.warned && now-h.since >= time.Second {
		h.warned = true
		flows := make([]string, 0, min(len(held), 5))
		for _, a := range held[:min(len(held), 5)] {
			flows = append(flows, a.s.Claim.Flow)
		}
		r.log.Warn("relay: settles wait for flows another transaction holds (an outbox transaction left open, or a long one: a large batch?); trying again up to every second",
			"count", len(held), "flows", flows)
	}
	d := h.wait
	h.wait = min(2*h.wait, maxHeldWait)
	return d
}

// heldBack splits the answers as settled (settled[i] reports as[i]) into
// those whose settles came back Held — to settle again later — and the
// reports of the others, which it returns in settled's place (reusing its
// memory).
func heldBack(as []answer, settled []Settled) (held []answer, reports []Settled) {
	reports = settled[:0]
	for i, s := range settled {
		if s.Result.Held {
			held = append(held, as[i])
			continue
		}
		reports = append(reports, s)
	}
	return held, reports
}

// settle settles as in one transaction (SettleMany) and reports each, but
// for the answers it returns to settle again later (again): those whose
// flows another transaction held (SettleManyParams.SkipHeld), or all of as
// when the transaction failed (err is then set, and nothing is reported:
// settleParams reports each answer as not settled once its lease ran out).
// wrote says whether a transaction committed (none when every answer's
// lease had run out).
func (r *Relay) settle(ctx context.Context, as []answer) (again []answer, wrote bool, err error) {
	var settled []Settled
	ran, err := r.write(ctx, func(at int64) (int64, error) {
		var ps []fairrelay.Settlement
		ps, settled = settleParams(at, as)
		if len(ps) == 0 {
			return at, nil
		}
		res, err := r.q.SettleMany(ctx, fairrelay.SettleManyParams{At: at, Floor: true, SkipHeld: true, Settles: ps, Relay: r.cfg.Name}) // as the claimer's
		if err != nil {
			return at, err
		}
		setResults(settled, res.Results)
		r.cfg.Metrics.transaction(txSettle)
		wrote = true
		return res.Tick, nil
	})
	if err != nil {
		return as, false, opError("settle", err)
	}
	again, _ = r.reportSettles(as, settled, ran)
	return again, wrote, nil
}
