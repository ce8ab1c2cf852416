package relay

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/sink"
)

// answer is a delivery's result, waiting for its settle.
type answer struct {
	s          Settled // Claim, Outcome, Detail and Latency are set
	retryAfter time.Duration
}

// startDelivery starts the delivery of cl, counted in deliveries; its
// answer joins p.answers, and the claimer and the settler are woken when
// they act on it. The caller has counted it in p.delivering.
//
// A claim of a flow this relay is still delivering waits for that delivery
// to end before it is delivered (then only while its lease allows: see
// deliver), so that a flow never has two deliveries at once, whatever the
// clock says. The store grants such a claim only when the first lease looks
// expired at the claim's tick: this relay's clock jumped (it follows the
// stored tick, which another process may have written far ahead), or the
// delivery outlived its lease. The first delivery's settle is then skipped
// or answered stale, and the second delivery is the one that settles.
//
// start is the claim's start of slot time (timeshare): the slot is charged
// to the claim's group from then to the answer.
func (r *Relay) startDelivery(deliverCtx context.Context, p *pipeline, deliveries *sync.WaitGroup, cl fairrelay.Claim, start time.Duration) {
	r.cfg.Metrics.claim()
	deliveries.Add(1)
	done := make(chan struct{})
	p.mu.Lock()
	after := p.inDelivery[cl.Flow]
	p.inDelivery[cl.Flow] = done
	p.started = append(p.started, start)
	p.mu.Unlock()
	if after != nil {
		r.log.Warn("relay: claimed a flow still in delivery (its lease looked expired: did the stored tick jump ahead?); delivering the new claim once the first delivery ends",
			"flow", cl.Flow, "id", cl.Token.EventID, "generation", cl.Token.Generation, "lease_until", cl.LeaseUntil)
	}
	go func() {
		defer deliveries.Done()
		if after != nil {
			<-after
		}
		a := r.deliver(deliverCtx, &cl)
		r.ts.released(cl.Group, start)
		now := r.cfg.Source.Elapsed()
		p.mu.Lock()
		p.ended(start)
		// No young delivery left: a batch wait under way (claimer or
		// settler) has nothing more to wait for, since the deliveries still
		// under way are slow ones (youngDelivery). Without this wake-up it
		// would sit out its whole window beside a slow receiver after every
		// round of fast deliveries.
		settledDown := !p.batching(now)
		close(done)
		if p.inDelivery[cl.Flow] == done {
			delete(p.inDelivery, cl.Flow)
		}
		full := p.delivering == r.cfg.Workers
		p.delivering--
		first := len(p.answers) == 0
		p.answers = append(p.answers, a)
		last := p.delivering == 0
		p.mu.Unlock()
		// Observed once the answer waits for its settle.
		r.cfg.Metrics.delivered(a.s.Latency, a.s.Outcome)
		// Wake-ups cost a context switch each: only the answers a waiting
		// claimer or settler acts on wake it (the first slot freed, the
		// first answer, the last delivery, the last young one); the others
		// it finds when its batch wait ends.
		if full || first || last || settledDown {
			kick(p.claimKick)
		}
		if first || last || settledDown {
			kick(p.settleKick)
		}
	}()
}

// deliver sends one claim through the sink, with no transaction open, and
// returns the answer to settle.
func (r *Relay) deliver(deliverCtx context.Context, cl *fairrelay.Claim) answer {
	// The delivery must end before the lease does, with the margin left
	// for the settle.
	left := time.Duration(cl.LeaseUntil-r.clock.Now())*time.Millisecond - r.cfg.LeaseMargin
	timeout := min(r.cfg.DeliveryTimeout, left)
	start := r.cfg.Source.Elapsed()
	var res sink.Result
	var err error
	if timeout > 0 {
		ctx, cancel := context.WithTimeout(deliverCtx, timeout)
		res, err = r.callSink(ctx, sink.Delivery{
			EventID: cl.Token.EventID, Flow: cl.Flow, Seq: cl.Seq, Generation: cl.Token.Generation,
			Attempt: cl.Attempts, Body: cl.Body,
		})
		cancel()
	} else {
		err = errors.New("no time left in the lease to deliver")
	}
	latency := r.cfg.Source.Elapsed() - start
	outcome, detail := res.Outcome, res.Detail
	switch {
	case err != nil:
		// No answer: the receiver may or may not have applied the event;
		// a retry is safe because it deduplicates by id.
		outcome, detail, res.RetryAfter = fairrelay.OutcomeRetry, err.Error(), 0
	case outcome == "":
		outcome, detail = fairrelay.OutcomeRetry, "the sink returned no outcome"
	case fairrelay.CheckID("outcome", string(outcome)) != nil:
		// Settle refuses it (an outcome is stored as a name); an answer
		// the relay cannot record is no answer.
		outcome, detail = fairrelay.OutcomeRetry, fmt.Sprintf("the sink returned the outcome %q, which is not a name (fairrelay.CheckID)", outcome)
	}
	return answer{s: Settled{Claim: *cl, Outcome: outcome, Detail: detail, Latency: latency}, retryAfter: res.RetryAfter}
}

// callSink runs the sink's Deliver for d, turning a panic into an error
// (the delivery is retried, and its attempt's detail names the panic),
// logged at ERROR with the stack: a sink.Func that panicked on one event
// ended the relay with every head it had claimed still leased, and each
// relay that claimed the event after the lease ended the same way (a
// breaker's report).
func (r *Relay) callSink(ctx context.Context, d sink.Delivery) (res sink.Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			r.log.Error("relay: the sink panicked; the delivery is retried", "id", d.EventID, "flow", d.Flow, "seq", d.Seq,
				"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			res, err = sink.Result{}, fmt.Errorf("the sink panicked: %v", v)
		}
	}()
	return r.cfg.Sink.Deliver(ctx, d)
}
