package relay

import (
	"context"
	"errors"
	"time"

	"github.com/fairrelay/fairrelay"
)

// pruneLoop prunes the queue store every PruneInterval while ctx lives
// (Config.RetainAcked; SPEC §8), when retention is set.
func (r *Relay) pruneLoop(ctx context.Context) {
	if r.cfg.RetainAcked <= 0 {
		return
	}
	every(ctx, 0, r.cfg.PruneInterval, func() { r.prune(ctx) })
}

// every runs fn after first, then every interval after each run ends,
// until ctx is done.
func every(ctx context.Context, first, interval time.Duration, fn func()) {
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fn()
		t.Reset(interval)
	}
}

// prune runs one prune: batch after batch of at most PruneBatch events,
// each its own transaction followed by a rest as long as it took, until
// nothing older than the retention is left or ctx ends. A store error is logged and left for the next prune.
func (r *Relay) prune(ctx context.Context) {
	now := r.clock.Now()
	// Horizons are ticks (never below 0: a store younger than the
	// retention has nothing that old); IDsBefore 0 deletes no tombstone
	// (RetainIDs 0 keeps the ids for ever).
	p := fairrelay.PruneParams{At: now, Floor: true, AckedBefore: max(0, now-r.cfg.RetainAcked.Milliseconds()), Limit: r.cfg.PruneBatch}
	if r.cfg.RetainIDs > 0 {
		p.IDsBefore = min(max(0, now-r.cfg.RetainIDs.Milliseconds()), p.AckedBefore)
	}
	// The same retentions by the wall clock, less the jump a write may
	// make (the policy's max_tick_jump, 1 tick = 1 ms): a store whose tick
	// jumped further ahead (epoch milliseconds given as a tick, with
	// max_tick_jump off, or written before it was checked) made every
	// event acked before the jump due at once, and this prune, the first
	// at the relay's start, deleted them and forgot their ids (a fresh
	// user's report): an id sent again became a new event, a duplicate
	// delivery. A store's tick runs no faster than the wall clock but by
	// such jumps, so this holds nothing back otherwise.
	slack := time.Duration(r.q.Policy().MaxTickJump) * time.Millisecond
	p.AckedMinAge, p.IDsMinAge = max(0, r.cfg.RetainAcked-slack), max(0, r.cfg.RetainIDs-slack)
	var events, tombstones, forgotten, kept int64
	failed := false // a batch failed: what the prune holds back is not known
	for ctx.Err() == nil {
		start := r.cfg.Source.Elapsed()
		res, err := r.q.Prune(ctx, p)
		if err != nil {
			// An error may come after deletions that committed: count them.
			events += res.Events
			tombstones += res.Tombstones
			forgotten += res.Forgotten
			if res.Events > 0 || res.Tombstones > 0 {
				r.cfg.Metrics.pruned(res)
			}
			if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				r.log.Warn("relay: prune failed; trying again at the next prune", "err", err)
				r.cfg.Metrics.storeError()
			}
			failed = true
			break
		}
		r.clock.Observe(res.Tick)
		events += res.Events
		tombstones += res.Tombstones
		forgotten += res.Forgotten
		kept += res.WallKept
		r.cfg.Metrics.pruned(res)
		if !res.More {
			break
		}
		// Pace: rest as long as the batch took, so that a long prune
		// holds the store's write lock at most half of the time and
		// dispatch keeps the other half.
		rest := time.NewTimer(r.cfg.Source.Elapsed() - start)
		select {
		case <-ctx.Done():
			rest.Stop()
		case <-rest.C:
		}
	}
	if !failed {
		r.cfg.Metrics.pruneWallKept(kept)
	}
	switch {
	case kept > 0 && !r.pruneWallKept:
		r.log.Warn("relay: retention keeps events or ids that are due by the store's tick but were claimed more recently than the retention by the wall clock: the store's tick runs ahead of time (wall-clock milliseconds given as a tick?); they are pruned once they are that old by the wall clock too (docs/operations.md: a poisoned tick)",
			"kept", kept, "tick", now, "acked_before", p.AckedBefore, "ids_before", p.IDsBefore)
		r.pruneWallKept = true
	case kept == 0 && r.pruneWallKept && ctx.Err() == nil && !failed:
		// Only a prune that read its batches to the end says the hold
		// ended: one that failed before its first batch counted nothing
		// (it said so, then warned again at the next prune).
		r.log.Info("relay: retention no longer keeps anything back by the wall clock")
		r.pruneWallKept = false
	}
	if events > 0 || tombstones > 0 {
		// What became of the ids, counted: ids_kept, the pruned events
		// that left a tombstone; ids_forgotten, those that left none
		// (acked below ids_before: with --retain-ids equal to
		// --retain-acked, every one) and those of the tombstones deleted.
		// tombstones_deleted alone read as "no id forgotten" (a fresh
		// user's report, and again with equal retentions: 0 while every
		// pruned id was forgotten).
		r.log.Info("relay: pruned", "events", events, "ids_kept", events-forgotten, "ids_forgotten", forgotten+tombstones,
			"tombstones_deleted", tombstones, "acked_before", p.AckedBefore, "ids_before", p.IDsBefore)
	}
}
