package relay

import (
	"context"
	"slices"
	"sync"
	"time"
)

// pipeline is what one Run's claimer, deliveries and settler share. The
// claimer claims as many heads as there are free delivery slots and starts
// a delivery for each; every answer waits in answers until a settle takes
// it. Who settles depends on the store and the traffic (settleMode):
//   - beside the claims: the settler settles every answer waiting in one
//     transaction (SettleMany) while the claimer claims, like River's
//     completer beside its producer. Only on a store with concurrent
//     writers; the default there.
//   - with the claims (combine): the claimer settles the answers waiting
//     with its next claim, in one transaction (SettleMany with a
//     ClaimLimit). Always on a one-writer store (SQLite); on the others
//     while the heads the claims need wait for those very settles (a claim
//     came back short while settles were waiting), which is ordered
//     traffic: the claims then see the acks at once instead of one
//     transaction later.
//
// mu guards every field but the channels.
type pipeline struct {
	mu         sync.Mutex
	delivering int // deliveries under way (at most Workers)
	// inDelivery maps each flow with a delivery under way (or waiting for
	// one: startDelivery) to a channel closed when the last of them ends.
	inDelivery map[string]chan struct{}
	// started holds the start (slot time, timeshare) of each delivery
	// under way, in no order.
	started    []time.Duration
	answers    []answer // answered, waiting for a settle
	spare      []answer // an emptied answers slice, for the next batch
	settling   int      // answers in the settler's transaction under way
	combining  int      // answers in the claimer's transaction under way
	combine    bool     // the claimer settles the answers with its claims
	claimDone  bool     // the claimer has stopped: the settler settles the rest
	claimKick  chan struct{}
	settleKick chan struct{}
}

// takeAnswers returns the answers waiting and leaves an empty slice in
// their place (the spare one, when there is one). mu must be held.
func (p *pipeline) takeAnswers() []answer {
	as := p.answers
	p.answers, p.spare = p.spare, nil
	return as
}

// recycle keeps as, whose answers have been settled and reported, as the
// spare slice: the batches reuse two slices instead of growing a new one
// each. mu must be held.
func (p *pipeline) recycle(as []answer) {
	if cap(as) > cap(p.spare) {
		clear(as)
		p.spare = as[:0]
	}
}

// kick wakes the goroutine waiting on c, now or at its next wait.
func kick(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// batchWait is how long the claimer waits for more free delivery slots, and
// the settler for more answers, while deliveries are under way, so that one
// transaction claims or settles many events (group commit).
const batchWait = time.Millisecond

// youngDelivery is how recently a delivery under way must have started for
// a batch wait to wait for it: one older (a slow receiver) is unlikely to
// end within the wait, and waiting for it only slows the others down.
const youngDelivery = 10 * time.Millisecond

// batching reports whether a batch wait is worth it at now: some delivery
// under way started less than youngDelivery ago. mu must be held.
func (p *pipeline) batching(now time.Duration) bool {
	for _, s := range p.started {
		if now-s < youngDelivery {
			return true
		}
	}
	return false
}

// ended removes one delivery that started at start. mu must be held.
func (p *pipeline) ended(start time.Duration) {
	if i := slices.Index(p.started, start); i >= 0 {
		p.started[i] = p.started[len(p.started)-1]
		p.started = p.started[:len(p.started)-1]
	}
}

// batchWindow is one such wait of batchWait: it opens at the first wait
// and closes when its timer fires, however many wake-ups came in between
// (the waiter goes on early anyway once no young delivery is left to wait
// for: batching is then false, and startDelivery wakes it).
// A timer rather than a reading of the time: every reading goes through
// Config.Source, which a test may hold still. The zero value is ready to
// open.
type batchWindow struct {
	timer  *time.Timer
	closed bool
}

// open reports whether the window is open, opening it at the first call
// after a reset; wait on timer.C and set closed when it fires.
func (w *batchWindow) open() bool {
	if w.timer == nil && !w.closed {
		w.timer = time.NewTimer(batchWait)
	}
	return !w.closed
}

// reset ends the window, so the next open opens a new one.
func (w *batchWindow) reset() {
	if w.timer != nil {
		w.timer.Stop()
	}
	*w = batchWindow{}
}

// idle waits d, or until a wake token (Wake), the queue's change signal
// (watchChanges), a kick of the pipeline or ctx is done — never a busy
// poll — and says which ended it.
func (r *Relay) idle(ctx context.Context, p *pipeline, d time.Duration) waitEnd {
	t := time.NewTimer(d)
	defer t.Stop()
	return r.wait(ctx, p, t.C)
}

// waitEnd is what ended a wait.
type waitEnd int

const (
	endOther  waitEnd = iota // ctx, a wake token, a kick of the pipeline
	endTimer                 // the wait's own timer
	endChange                // the queue's change signal
)

// wait waits for c, a wake token (Wake), the queue's change signal, a kick
// of the pipeline or ctx, and says which came.
func (r *Relay) wait(ctx context.Context, p *pipeline, c <-chan time.Time) waitEnd {
	select {
	case <-ctx.Done():
	case <-r.wake:
	case <-r.changed:
		return endChange
	case <-p.claimKick:
	case <-c:
		return endTimer
	}
	return endOther
}
