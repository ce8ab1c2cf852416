package relay

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/fairrelay/fairrelay"
)

// claimLoop is the claimer: it claims heads for the free delivery slots,
// starts their deliveries, and (combine) settles the answers with its
// claims, until claimCtx is done. A failed round trip is tried again after
// a pause (retryWait), the answers it held kept for the next try; only an
// error the relay does not ride out (retryable) ends the loop early.
func (r *Relay) claimLoop(claimCtx, deliverCtx, settleCtx context.Context, p *pipeline, deliveries *sync.WaitGroup) error {
	wait := r.cfg.PollInterval
	idle := false
	// changed: the last idle wait was ended by the queue's change signal.
	changed := false
	fails := 0 // failed writes in a row
	var batch batchWindow
	defer batch.reset()
	var held heldStreak
	for claimCtx.Err() == nil {
		p.mu.Lock()
		k := r.cfg.Workers - p.delivering
		if !p.combine && len(p.answers) >= 2*r.cfg.Workers {
			k = 0 // the settler is behind: let it catch up first
		}
		if k > 0 && p.delivering > 0 && p.batching(r.cfg.Source.Elapsed()) && batch.open() {
			// Deliveries are under way: wait a moment for more of them to
			// end, to claim their slots (and, combine, settle their
			// answers) in one transaction.
			p.mu.Unlock()
			if r.wait(claimCtx, p, batch.timer.C) == endTimer {
				batch.closed = true
			}
			continue
		}
		batch.reset()
		var ans []answer
		if p.combine {
			ans = p.takeAnswers()
			p.combining = len(ans)
		}
		p.mu.Unlock()
		if k == 0 && len(ans) == 0 {
			r.idle(claimCtx, p, r.cfg.MaxPollInterval)
			continue
		}
		// A change on a store with concurrent writers (PostgreSQL) is a
		// notification that an enqueue made a head claimable: claim it
		// without asking first (a claim there waits for nothing but other
		// claims). On SQLite every commit is a change, the relay's own
		// included, and a claim waits for the file's lock: ask first.
		claimNow := changed && !r.serial
		changed = false
		if idle && len(ans) == 0 && !r.health.failing() && !claimNow {
			// Idle: ask, with a read, whether anything can be claimed before
			// running a claim, which is a write (it advances the stored
			// tick) and would cost an fsync on every poll of an idle relay.
			// Not during an error streak: only a write tells that the store
			// takes writes again (a full disk still serves reads).
			stored, due, ok, err := r.q.NextDue(claimCtx)
			if claimCtx.Err() != nil {
				break // stopping: no claim after the signal
			}
			if err == nil {
				r.health.read()
				// Another process may have written a later tick: the clock
				// never stays below the stored tick (SPEC §7).
				r.clock.Observe(stored)
			} else {
				r.health.failed("next_due", err)
			}
			// A relay's clock moves while it only reads, and another relay
			// that starts now starts at the stored tick: its leases would
			// look expired to this one early. So an idle relay whose clock
			// ran a heartbeat ahead of the stored tick writes it (a claim,
			// which claims whatever is due): the clocks of the relays on
			// one store stay within a heartbeat of each other.
			behind := err == nil && r.clock.Now()-stored >= r.heartbeat
			if err == nil && !behind && (!ok || due > r.clock.Now()) {
				d := wait
				if ok {
					d = min(wait, time.Duration(due-r.clock.Now())*time.Millisecond)
				}
				changed = r.idle(claimCtx, p, d) == endChange
				wait = min(max(2*wait, time.Millisecond), r.cfg.MaxPollInterval)
				continue
			}
			// Due now, the heartbeat, or the read failed: the claim decides.
		}
		var cs []fairrelay.Claim
		var starts []time.Duration // each claim's start of slot time
		var settled []Settled
		var kinds []string
		kk := k // the heads this write may claim (caps: timeshare.plan)
		// The claim itself runs on settleCtx: a signal arriving mid-claim
		// must not leave us unsure whether it committed.
		ran, err := r.write(settleCtx, func(at int64) (int64, error) {
			var ps []fairrelay.Settlement
			ps, settled = settleParams(at, ans)
			var capped, ahead, long []string
			room := 0
			if k > 0 {
				kk, capped, ahead = r.ts.plan(k, relaxNone)
				if r.serial {
					room, long = r.ts.longRoom(kk)
				}
			}
			exclude := slices.Concat(capped, ahead)
			first := kk // the heads of the first claim
			if exclude, long = leaveOut(exclude, long); long != nil {
				// The long groups hold their share: the other groups
				// first (timeshare.longRoom), then the long ones' room.
				first = kk - max(room, 0)
			}
			tick := at
			switch {
			case len(ps) > 0:
				// A settle does not wait for a flow an outbox transaction
				// holds: the other answers of its batch would wait with it.
				res, err := r.q.SettleMany(settleCtx, fairrelay.SettleManyParams{At: at, Floor: true, SkipHeld: true, Settles: ps, ClaimLimit: first, Exclude: exclude, Relay: r.cfg.Name})
				if err != nil {
					return at, err
				}
				kinds, cs, tick = append(kinds, txSettleAndClaim), res.Claims, res.Tick
				setResults(settled, res.Results)
				r.reportQuarantined(res.Quarantined, res.Tick)
			case k > 0:
				res, err := r.q.Claim(settleCtx, fairrelay.ClaimParams{At: at, Limit: first, Floor: true, Exclude: exclude, Relay: r.cfg.Name})
				if err != nil {
					return at, err
				}
				kinds, cs, tick = append(kinds, txClaim), res.Claims, res.Tick
				r.reportQuarantined(res.Quarantined, res.Tick)
			default:
				cs = nil // every answer's lease ran out: nothing to write
				return at, nil
			}
			if long != nil && len(cs) < kk {
				// The long groups' room, and what the others left (they
				// have no more work now: the long groups' charges entitle
				// them to it, as before the split). A failed claim claims
				// nothing: the write before it committed.
				res, err := r.q.Claim(settleCtx, fairrelay.ClaimParams{At: tick, Limit: kk - len(cs), Floor: true, Exclude: slices.Concat(capped, ahead), Relay: r.cfg.Name})
				if err != nil {
					r.health.failed("claim", err)
				} else {
					kinds, cs, tick = append(kinds, txClaim), append(cs, res.Claims...), res.Tick
					r.reportQuarantined(res.Quarantined, res.Tick)
				}
			}
			starts = r.ts.started(starts, cs)
			r.ts.came(len(cs) < kk)
			relaxing := r.ts.short(len(cs) < kk && len(ahead) > 0)
			for relax := relaxOnce; relaxing && relax <= relaxAll && len(cs) < kk && len(ahead) > 0; relax++ {
				// Short, with groups left out for their charge, for a
				// quantum: nothing else is runnable, and a slot must not
				// stay idle while work exists (SPEC §11, work-conserving).
				// Claim again, still within the caps, from the least
				// ahead.
				var more []fairrelay.Claim
				more, ahead, tick = r.claimMore(settleCtx, tick, kk-len(cs), relax)
				if more != nil {
					kinds = append(kinds, txClaim)
				}
				cs = append(cs, more...)
				starts = r.ts.started(starts, more)
				r.ts.came(len(cs) < kk)
			}
			return tick, nil
		})
		if err != nil && retryable(err) {
			// Nothing of the write is known to have committed: its answers
			// wait for the next try (settleParams drops each once its lease
			// ran out), and its claims, if it committed after all, wait out
			// their leases.
			r.health.failed("claim", err)
			if len(ans) > 0 {
				p.mu.Lock()
				p.answers = append(ans, p.answers...)
				p.combining = 0
				p.mu.Unlock()
			}
			fails++
			pause(claimCtx, r.retryWait(fails))
			continue
		}
		if err != nil {
			if len(ans) > 0 {
				r.log.Warn("relay: answers not settled; their events wait out their leases", "count", len(ans))
			}
			return opError("claim", err)
		}
		fails = 0
		if len(kinds) > 0 {
			r.health.wrote()
			for _, kind := range kinds {
				r.cfg.Metrics.transaction(kind)
			}
		}
		var heldAns []answer
		heldAns, settled = r.reportSettles(ans, settled, ran)
		p.mu.Lock()
		p.combining = 0
		p.recycle(ans)
		p.answers = append(p.answers, heldAns...)
		if p.combine = r.mode.next(p.combine, settled, kk, cs, len(p.answers)+p.settling); !p.combine {
			kick(p.settleKick)
		}
		p.delivering += len(cs)
		p.mu.Unlock()
		heldOnly := len(heldAns) > 0 && len(settled) == 0 && len(cs) == 0
		if len(heldAns) == 0 {
			held = heldStreak{}
		}
		for i, cl := range cs {
			r.startDelivery(deliverCtx, p, deliveries, cl, starts[i])
		}
		switch {
		case heldOnly:
			// Only held flows' answers came back (and no claim): wait
			// before asking again — this pause instead of the idle one.
			if k > 0 {
				r.cfg.Metrics.idle()
			}
			r.idle(claimCtx, p, r.heldPause(&held, heldAns))
		case k > 0 && len(cs) == 0:
			r.cfg.Metrics.idle()
			idle = true
			changed = r.idle(claimCtx, p, wait) == endChange
			wait = min(max(2*wait, time.Millisecond), r.cfg.MaxPollInterval)
		case len(cs) > 0:
			idle = false
			wait = r.cfg.PollInterval
			if len(cs) < kk {
				// Nothing else is eligible now: more becomes so with an
				// ack, an enqueue (Wake) or time (a backoff, a lease).
				r.idle(claimCtx, p, wait)
			}
		}
	}
	return nil
}

// claimMore is a work-conserving claim of SPEC §11: up to n more heads at
// tick at, with the exclusions of relaxation level relax (timeshare.plan).
// It returns the claims, the groups it left out for their charge and the
// tick it ran at. When it fails it claims nothing (nil, nil, at): the
// write before it committed, so its failure is only recorded, and the
// claimer tries again at its next round.
func (r *Relay) claimMore(ctx context.Context, at int64, n, relax int) ([]fairrelay.Claim, []string, int64) {
	n, capped, ahead := r.ts.plan(n, relax)
	res, err := r.q.Claim(ctx, fairrelay.ClaimParams{At: at, Limit: n, Floor: true, Exclude: append(capped, ahead...), Relay: r.cfg.Name})
	if err != nil {
		r.health.failed("claim", err)
		return nil, nil, at
	}
	r.reportQuarantined(res.Quarantined, res.Tick)
	return res.Claims, ahead, res.Tick
}

// leaveOut appends to exclude the long groups it does not hold yet (up to
// fairrelay.MaxExclude names in all) and returns them too (nil for none):
// the long groups a claim would otherwise take.
func leaveOut(exclude, long []string) ([]string, []string) {
	if len(long) == 0 {
		return exclude, nil
	}
	have := make(map[string]bool, len(exclude))
	for _, n := range exclude {
		have[n] = true
	}
	var left []string
	for _, n := range long {
		if have[n] || len(exclude) == fairrelay.MaxExclude {
			continue
		}
		have[n] = true
		exclude = append(exclude, n)
		left = append(left, n)
	}
	return exclude, left
}
