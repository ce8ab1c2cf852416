package relay

import (
	"context"
	"time"
)

// changeGap is the least time between two wake-ups by the queue's change
// signal. The first change after a quiet spell wakes the claimer at once;
// later ones within changeGap wake it once, at the gap's end. A claim is a
// write (on SQLite an fsync, behind the application's own writes for the
// file's one lock), and on SQLite the relay's own commits are changes too:
// waking at every commit of a busy store would run a claim per event
// instead of one per batch, and the claims would queue for the lock. 10 ms
// is the busy claimer's own poll (PollInterval's default): under load the
// signal adds no claims; idle, it costs nothing.
const changeGap = 10 * time.Millisecond

// watchChanges wakes the claimer at the changes the queue signals
// (Queue.Changes: on PostgreSQL an enqueue's notification, delivered at its
// commit; on SQLite a commit to the file), at most once per changeGap,
// until ctx is done, so that an event committed by another process is
// claimed within milliseconds instead of at the next idle poll. While the
// watch is lost (its connection dropped; the queue re-establishes it with
// backoff) polling alone finds new events, at most MaxPollInterval late:
// it logs a warning when that starts and a line when the watch holds
// again. The returned channel is closed once the watch has ended.
func (r *Relay) watchChanges(ctx context.Context) <-chan struct{} {
	lost := false // only the watch's goroutine calls status
	status := func(err error) {
		switch {
		case err != nil && !lost:
			lost = true
			r.log.Warn("relay: change notifications lost; new events are found by polling until they are back",
				"err", err, "max_poll_interval", r.cfg.MaxPollInterval)
		case err == nil && lost:
			lost = false
			r.log.Info("relay: change notifications back")
		}
	}
	changes := r.q.Changes(ctx, status)
	done := make(chan struct{})
	go func() {
		defer close(done)
		gap := time.NewTimer(0)
		<-gap.C
		for range changes {
			kick(r.changed)
			// Changes meanwhile wait in the channel (they coalesce).
			gap.Reset(changeGap)
			select {
			case <-gap.C:
			case <-ctx.Done():
				gap.Stop()
			}
		}
	}()
	return done
}
