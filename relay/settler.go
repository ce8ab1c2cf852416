package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fairrelay/fairrelay"
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
		p := fairrelay.Settlement{Token: a.s.Claim.Token, Outcome: a.s.Outcome}
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
// way and no answer waits. Answers whose flows another transaction holds it
// tries again until cutoff is done (the shutdown deadline), then leaves
// their events to their leases.
func (r *Relay) settleLoop(ctx, cutoff context.Context, p *pipeline) error {
	var batch batchWindow
	defer batch.reset()
	var heldRun heldStreak
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
		if p.delivering > 0 && batch.open() {
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
		held, err := r.settle(ctx, as)
		if len(held) > 0 && cutoff.Err() != nil {
			// Past the shutdown deadline: no more waiting for those flows.
			// Reported as not settled, as when the database stays busy.
			r.log.Warn("relay: shutdown deadline: answers of flows another transaction holds not settled; their events wait out their leases", "count", len(held))
			for _, a := range held {
				s := a.s
				s.LeaseLost, s.Result, s.At = true, fairrelay.SettleResult{Held: true}, r.clock.Now()
				r.report(s)
			}
			held = nil
		}
		p.mu.Lock()
		p.settling = 0
		p.recycle(as)
		p.answers = append(p.answers, held...)
		p.mu.Unlock()
		kick(p.claimKick) // the acks may have made heads eligible
		if err != nil {
			return err
		}
		if len(held) == len(as) {
			// Only held flows' answers: wait before asking again, unless
			// new answers arrive.
			t := time.NewTimer(r.heldPause(&heldRun, held))
			select {
			case <-p.settleKick:
			case <-t.C:
			case <-cutoff.Done():
			}
			t.Stop()
		} else {
			heldRun = heldStreak{}
		}
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
		r.log.Warn("relay: settles wait for flows another transaction holds (an outbox transaction left open?); trying again up to every second",
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

// busyRetries bounds the settle attempts on a busy database; after them
// the events are left to their leases.
const busyRetries = 20

// settle settles as in one transaction (SettleMany) and reports each,
// but for the answers it returns: those whose flows another transaction
// held (SettleManyParams.SkipHeld), to settle again later. ErrBusy is retried with
// a growing pause, busyRetries times; any other error is returned, and the
// events are left to their leases.
func (r *Relay) settle(ctx context.Context, as []answer) (held []answer, err error) {
	var settled []Settled
	var ran int64
	for attempt := 1; ; attempt++ {
		ran, err = r.write(ctx, func(at int64) (int64, error) {
			var ps []fairrelay.Settlement
			ps, settled = settleParams(at, as)
			if len(ps) == 0 {
				return at, nil
			}
			res, err := r.q.SettleMany(ctx, fairrelay.SettleManyParams{At: at, Floor: true, SkipHeld: true, Settles: ps}) // as the claimer's
			if err != nil {
				return at, err
			}
			setResults(settled, res.Results)
			r.cfg.Metrics.transaction(txSettle)
			return res.Tick, nil
		})
		if errors.Is(err, fairrelay.ErrBusy) && attempt < busyRetries {
			t := time.NewTimer(time.Duration(attempt) * 10 * time.Millisecond)
			<-t.C
			continue
		}
		if errors.Is(err, fairrelay.ErrBusy) {
			r.log.Warn("relay: settle: database busy; leaving the events to their leases", "count", len(as), "err", err)
			for i := range settled {
				settled[i].LeaseLost = true
			}
			break
		}
		if err != nil {
			r.log.Warn("relay: answers not settled; their events wait out their leases", "count", len(as))
			return nil, fmt.Errorf("settle: %w", err)
		}
		break
	}
	held, _ = r.reportSettles(as, settled, ran)
	return held, nil
}
