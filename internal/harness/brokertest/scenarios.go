package brokertest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/consume"
	"github.com/fairrelay/fairrelay/relay"
	"github.com/fairrelay/fairrelay/sink"
)

// SlowFlows checks that one flow's events reach the consumer in order, and
// are all applied, while the deliveries of four other flows hang (each
// waits until its 2s delivery timeout, then backs off and hangs again): the
// relay gives the ordered flow its turns without waiting for them. Then the
// slow flows are let through and everything ends applied once.
func SlowFlows(t *testing.T, newRig NewRig) {
	rig := newRig(t)
	in := OpenInbox(t)
	var mu sync.Mutex
	var arrivals []consume.Applied // flow A's, in the order the consumer applied them
	StartConsumer(t, rig, consumerOptions(in, func(a consume.Applied) {
		if a.Message.Delivery.Flow == "A" {
			mu.Lock()
			arrivals = append(arrivals, a)
			mu.Unlock()
		}
	}))
	gate := make(chan struct{})
	slow := sink.Func(func(ctx context.Context, d sink.Delivery) (sink.Result, error) {
		if strings.HasPrefix(d.Flow, "slow") {
			select {
			case <-gate:
			case <-ctx.Done():
				return sink.Result{}, ctx.Err()
			}
		}
		return rig.Sink.Deliver(ctx, d)
	})
	r := StartRelay(t, slow, 8)
	var evs []Event
	for i := range 20 {
		evs = append(evs, Event{ID: fmt.Sprintf("slow%d-%d", i%4, i/4), Flow: fmt.Sprintf("slow%d", i%4), Delta: 1})
	}
	const ordered = 100
	for i := range ordered {
		evs = append(evs, Event{ID: fmt.Sprintf("A%d", i+1), Flow: "A", Delta: 1 + i%5})
	}
	r.Enqueue(t, evs)

	// Flow A completes at the consumer while the slow flows still hang.
	deadline := time.Now().Add(60 * time.Second)
	for {
		s, err := in.Snapshot(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		p := s.ByFlow()
		if p["A"].Seq == ordered {
			for f, fp := range p {
				if f != "A" {
					t.Fatalf("flow %s applied %d events before its deliveries were let through", f, fp.Seq)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("flow A reached seq %d of %d in 60s while other flows were slow", p["A"].Seq, ordered)
		}
		time.Sleep(20 * time.Millisecond) // polling the consumer's database writes, not synchronising
	}
	mu.Lock()
	next := int64(1)
	for _, a := range arrivals {
		switch {
		case a.Outcome == fairrelay.OutcomeAccepted && a.Message.Delivery.Seq == next:
			next++
		case a.Outcome == fairrelay.OutcomeDuplicate && a.Message.Delivery.Seq < next:
			// a copy the relay published again (a lost ack): harmless
		default:
			t.Errorf("flow A: seq %d answered %q (%v) when seq %d was due: not in order", a.Message.Delivery.Seq, a.Outcome, a.Err, next)
		}
	}
	mu.Unlock()

	close(gate)
	r.WaitAcked(t, int64(len(evs)), 60*time.Second)
	WaitLedger(t, in, len(evs), 30*time.Second)
	WantLedger(t, in, evs)
}

// Outage runs 600 events over 12 flows through a relay, the broker and a
// consumer into an inbox. 300 are enqueued; after 200 acks it calls stop
// (which takes the broker away, or cuts the clients off) and enqueues the
// other 300, so that the relay has work after the interruption. With a
// start, it waits until a delivery failed and calls start (which brings the
// broker back). After 400 acks it restarts the consumer. Every event must end
// acked in the queue and applied once, in order, in the inbox, and nothing
// is quarantined.
func Outage(t *testing.T, newRig NewRig, stop, start func(t *testing.T)) {
	rig := newRig(t)
	in := OpenInbox(t)
	c := StartConsumer(t, rig, consumerOptions(in, nil))
	r := StartRelay(t, rig.Sink, 8)
	evs := Ledger(600, 12)
	r.Enqueue(t, evs[:300])
	r.WaitAcked(t, 200, 60*time.Second)
	failed := r.Failures()
	stop(t)
	r.Enqueue(t, evs[300:])
	if start != nil {
		r.WaitSettled(t, "a failed delivery while the broker is down", 30*time.Second,
			func([]relay.Settled) bool { return r.Failures() > failed })
		start(t)
	}
	r.WaitAcked(t, 400, 120*time.Second)
	if err := c.Stop(); err != nil {
		t.Fatalf("consumer: %v", err)
	}
	StartConsumer(t, rig, consumerOptions(in, nil))
	r.WaitAcked(t, int64(len(evs)), 120*time.Second)
	WaitLedger(t, in, len(evs), 60*time.Second)
	WantLedger(t, in, evs)
	snap, err := r.Q.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range snap.Events {
		if e.State != fairrelay.StateAcked {
			t.Errorf("event %s is %s", e.ID, e.State)
		}
	}
	t.Logf("%d deliveries settled a transient outcome during the outage", r.Failures())
}
