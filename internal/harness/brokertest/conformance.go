package brokertest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/consume"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/errs"
	"github.com/fairrelay/fairrelay/sink"
	"github.com/fairrelay/fairrelay/sink/sinktest"
)

// Rig is one fresh broker destination under test — a stream and durable
// consumer, an exchange and queue — which NewRig deletes when the test ends.
type Rig struct {
	// Sink publishes to the destination.
	Sink sink.Sink
	// Consume applies the destination's messages through opts.Inbox with
	// the broker's consumer until ctx is done (jetstream.Consume,
	// amqp.Consume). It may be called again after it returned: the next
	// consumer goes on where the last one stopped.
	Consume func(ctx context.Context, opts consume.Options) error
	// DedupByID is set when the broker itself answers duplicate to a
	// second message with the same id (JetStream within its window).
	DedupByID bool
}

// NewRig makes a fresh destination for t.
type NewRig func(t *testing.T) Rig

// Consumer is a running Rig.Consume.
type Consumer struct {
	cancel context.CancelFunc
	done   chan error
}

// StartConsumer runs rig.Consume in the background until Stop or the end
// of the test; a Consume that returns an error before that fails the test.
func StartConsumer(t testing.TB, rig Rig, opts consume.Options) *Consumer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := &Consumer{cancel: cancel, done: make(chan error, 1)}
	go func() { c.done <- rig.Consume(ctx, opts) }()
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("consumer: %v", err)
		}
	})
	return c
}

// Stop stops the consumer, waits for it and returns its error. Calling it
// again returns nil.
func (c *Consumer) Stop() error {
	c.cancel()
	err, ok := <-c.done
	if ok {
		close(c.done)
	}
	return err
}

// RunConformance runs sink/sinktest over the broker round trip. sinktest's
// contract wants the receiver's answer from Deliver; a broker sink answers
// with the broker's ack, and the inbox behind the broker answers later. So
// each delivery here is published through rig.Sink, taken from the broker by
// rig.Consume and applied to the subtest's inbox, and the answer is the
// inbox's: the suite checks what travels (the body byte for byte, the event
// id, flow and seq in the headers), the consumer's handling of every answer,
// and concurrency across flows. The consumer redelivers nothing during a
// subtest (its redelivery wait is an hour).
//
// A broker that answers duplicate by itself (DedupByID) is asked again until
// its duplicate window has passed (at most 10s), so that the inbox answers:
// the suite's "same id, changed body" step needs the inbox's id_conflict,
// which a deduplication by id alone cannot see. The broker's own duplicate
// answer has tests of its own in the sink packages.
func RunConformance(t *testing.T, newRig NewRig) {
	sinktest.Run(t, func(t *testing.T, in *inbox.Inbox) sink.Sink {
		rig := newRig(t)
		w := &waiters{m: map[string]chan consume.Applied{}}
		StartConsumer(t, rig, consume.Options{Inbox: in, RedeliverBase: time.Hour, RedeliverCap: time.Hour, OnApplied: w.applied})
		return sink.Func(func(ctx context.Context, d sink.Delivery) (sink.Result, error) {
			return w.roundTrip(ctx, rig, d)
		})
	}, sinktest.HoldsGaps())
}

// waiters routes the consumer's reports to the deliveries waiting for them,
// by event id (a subtest delivers one copy of an id at a time).
type waiters struct {
	mu sync.Mutex
	m  map[string]chan consume.Applied
}

func (w *waiters) applied(a consume.Applied) {
	w.mu.Lock()
	ch := w.m[a.Message.Delivery.EventID]
	w.mu.Unlock()
	if ch != nil {
		select {
		case ch <- a:
		default:
		}
	}
}

func (w *waiters) roundTrip(ctx context.Context, rig Rig, d sink.Delivery) (sink.Result, error) {
	ch := make(chan consume.Applied, 1)
	w.mu.Lock()
	w.m[d.EventID] = ch
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.m, d.EventID)
		w.mu.Unlock()
	}()
	res, err := rig.Sink.Deliver(ctx, d)
	deadline := time.Now().Add(10 * time.Second)
	for err == nil && rig.DedupByID && res.Outcome == fairrelay.OutcomeDuplicate && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return sink.Result{}, ctx.Err()
		case <-time.After(20 * time.Millisecond): // polling the broker's window, not synchronising
		}
		res, err = rig.Sink.Deliver(ctx, d)
	}
	if err != nil || res.Outcome != fairrelay.OutcomeAccepted {
		return res, err
	}
	select {
	case a := <-ch:
		if a.Outcome == "" {
			return sink.Result{}, errs.Join(errors.New("the consumer did not apply it"), a.Err)
		}
		return sink.Result{Outcome: a.Outcome, Detail: "inbox: " + string(a.Outcome) + "; broker: " + res.Detail}, nil
	case <-ctx.Done():
		return sink.Result{}, ctx.Err()
	}
}
