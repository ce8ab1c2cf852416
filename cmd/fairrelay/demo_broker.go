package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	js "github.com/nats-io/nats.go/jetstream"
	"github.com/schollz/progressbar/v3"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/consume"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/relay"
	"github.com/fairrelay/fairrelay/sink"
	"github.com/fairrelay/fairrelay/sink/amqp"
	"github.com/fairrelay/fairrelay/sink/jetstream"
)

// demoBroker is the demo's broker destination: a stream or queue of its
// own, the sink that publishes to it and the consumer that reads it.
type demoBroker struct {
	describe string
	sink     sink.Sink
	consume  func(ctx context.Context, opts consume.Options) error
	cleanup  func()
}

// openDemoBroker makes the destination on the broker that --sink names
// (nats, amqp, or one of their URLs), with names ending in a random tag.
func openDemoBroker(ctx context.Context, which string) (*demoBroker, error) {
	var b [4]byte
	rand.Read(b[:])
	tag := hex.EncodeToString(b[:])
	prefix := "fairrelay-demo-" + tag
	switch {
	case which == "nats" || strings.HasPrefix(which, "nats://"):
		raw := which
		if raw == "nats" {
			raw = "nats://127.0.0.1:4222"
		}
		e, err := jetstream.ParseEndpoint("sink", raw)
		if err != nil {
			return nil, underFlag("sink", err)
		}
		nc, err := jetstream.Connect(e, jetstream.ConnectOptions{Name: "fairrelay demo", Credentials: natsCredentials(), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "sink", Message: err.Error()}
		}
		j, _ := js.New(nc)
		stream := "FAIRRELAY_DEMO_" + tag
		if _, err := j.CreateStream(ctx, js.StreamConfig{Name: stream, Subjects: []string{prefix + ".*"}, Storage: js.FileStorage}); err != nil {
			nc.Close()
			return nil, fmt.Errorf("demo: create stream %s: %w", stream, err)
		}
		s, err := jetstream.New(jetstream.Options{Conn: nc, Subject: prefix + ".{flow}", Stream: stream, Timeout: 5 * time.Second})
		if err != nil {
			nc.Close()
			return nil, err
		}
		return &demoBroker{
			describe: fmt.Sprintf("NATS JetStream at %s: stream %s, subjects %s.<flow>, durable consumer demo", e.Server, stream, prefix),
			sink:     s,
			consume: func(ctx context.Context, opts consume.Options) error {
				return jetstream.Consume(ctx, jetstream.ConsumerOptions{Conn: nc, Stream: stream, Durable: "demo", AckWait: 5 * time.Second}, opts)
			},
			cleanup: func() {
				dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				j.DeleteStream(dctx, stream)
				nc.Close()
			},
		}, nil
	case which == "amqp" || strings.HasPrefix(which, "amqp://") || strings.HasPrefix(which, "amqps://"):
		raw := which
		if raw == "amqp" {
			raw = "amqp://127.0.0.1:5672/"
		}
		e, err := amqp.ParseEndpoint("sink", raw)
		if err != nil {
			return nil, underFlag("sink", err)
		}
		dial := e.Dialer("fairrelay demo", amqpCredentials())
		// The queue exists and is bound before the first publish, which
		// would be unroutable otherwise.
		conn, err := dial()
		if err != nil {
			return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "sink", Message: err.Error()}
		}
		queue, key := prefix, prefix+".*"
		ch, err := conn.Channel()
		if err == nil {
			_, err = ch.QueueDeclare(queue, true, false, false, false, nil)
		}
		if err == nil {
			err = ch.QueueBind(queue, key, e.Exchange, false, nil)
		}
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("demo: declare queue %s: %w", queue, err)
		}
		s, err := amqp.New(amqp.Options{Dial: dial, Exchange: e.Exchange, RoutingKey: prefix + ".{flow}", Timeout: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			conn.Close()
			return nil, err
		}
		return &demoBroker{
			describe: fmt.Sprintf("RabbitMQ at %s: exchange %s, routing keys %s.<flow>, queue %s", e.Server, e.Exchange, prefix, queue),
			sink:     s,
			consume: func(ctx context.Context, opts consume.Options) error {
				return amqp.Consume(ctx, amqp.ConsumerOptions{Dial: dial, Queue: queue, Exchange: e.Exchange, BindingKey: key, Logger: slog.New(slog.DiscardHandler)}, opts)
			},
			cleanup: func() {
				s.Close()
				if dch, err := conn.Channel(); err == nil {
					dch.QueueDelete(queue, false, false, false)
				}
				conn.Close()
			},
		}, nil
	}
	return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "sink",
		Message: fmt.Sprintf("must be webhook, nats, amqp, or a nats:// or amqp:// URL, got %q", redactDSN(which))}
}

// flakyBroker answers no ack (an error, as a timeout would) to the first
// attempt of every event whose seq is a multiple of n, without publishing:
// a broker with a bad network, to show the backoff.
func flakyBroker(s sink.Sink, n int) sink.Sink {
	if n <= 0 {
		return s
	}
	return sink.Func(func(ctx context.Context, d sink.Delivery) (sink.Result, error) {
		if d.Attempt == 1 && d.Seq%int64(n) == 0 {
			return sink.Result{}, errors.New("demo: the broker did not answer (simulated)")
		}
		return s.Deliver(ctx, d)
	})
}

// runBrokerDemo is the demo over a broker: relay → broker → consumer →
// inbox. The relay's job ends at the broker's ack, so every event is acked
// in the queue; the poison head A1 is held by the consumer instead (its
// inbox answers unsupported_delta), with A2 behind it, until the receiver's
// limit is raised.
func runBrokerDemo(ctx context.Context, out, errOut io.Writer, o demoOptions) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	b, err := openDemoBroker(ctx, o.sink)
	if err != nil {
		return err
	}
	defer b.cleanup()
	q, in, err := openDemoStores(ctx, o)
	if err != nil {
		return err
	}
	defer q.Close()
	defer in.Close()

	// The consumer: applies each message through the inbox, redelivers
	// what it cannot apply yet after 200 ms doubling to 1 s.
	var heldA1 atomic.Bool
	consumerCtx, stopConsumer := context.WithCancel(context.WithoutCancel(ctx))
	consumerDone := make(chan error, 1)
	go func() {
		consumerDone <- b.consume(consumerCtx, consume.Options{Inbox: in, Logger: slog.New(slog.DiscardHandler), RedeliverBase: 200 * time.Millisecond, RedeliverCap: time.Second,
			OnApplied: func(a consume.Applied) {
				if a.Message.Delivery.EventID == "A1" && a.Outcome == fairrelay.OutcomeUnsupportedDelta {
					heldA1.Store(true)
				}
			}})
	}()
	defer func() { stopConsumer(); <-consumerDone }()

	d, err := startDemoRelay(ctx, q, flakyBroker(b.sink, o.flakyPer), o.workers)
	if err != nil {
		return err
	}
	defer d.stop()
	r, settled, relayDone := d.r, d.settled, d.done

	work := demoWorkload(o.flows, o.events)
	fmt.Fprintf(out, "fairrelay demo over %s.\nA relay with %d workers publishes; a consumer applies each message through the inbox and acks it after the inbox committed; %s\n\n",
		b.describe, o.workers, demoWhere(o))
	fmt.Fprintf(out, "Enqueueing the article's sample (A1 delta 10 against a receiver that supports 5, A2, B1-B3, C1-C3)\n")
	fmt.Fprintf(out, "and %s, while the relay runs.", demoSpread(o.events, o.flows))
	if o.flakyPer > 0 {
		fmt.Fprintf(out, " The broker gives no answer to the first attempt of every event whose seq in its flow is a multiple of %d.", o.flakyPer)
	}
	fmt.Fprint(out, "\n\n")

	tty := isTerminal(errOut)
	bar := progressbar.NewOptions(len(work), progressbar.OptionSetWriter(errOut), progressbar.OptionSetWidth(30),
		progressbar.OptionSetVisibility(tty), progressbar.OptionShowCount(), progressbar.OptionSetDescription("acked by the broker"),
		progressbar.OptionOnCompletion(func() {
			if tty {
				fmt.Fprintln(errOut)
			}
		}))
	st := &demoStats{bar: bar}
	if err := enqueueDemo(ctx, r, q, work, func() { st.drain(settled) }); err != nil {
		return err
	}
	// First: every event acked by the broker, every one but A1 and A2
	// applied, and A1 refused by the inbox.
	if err := st.untilApplied(ctx, settled, relayDone, in, func(receipts int) bool {
		return st.acked == len(work) && receipts == len(work)-2 && heldA1.Load()
	}); err != nil {
		return err
	}
	fmt.Fprintf(out, "The broker acked every event, so the queue acked them all: the relay's job ends at the broker.\n"+
		"The consumer's inbox answered unsupported_delta to A1: the consumer holds it in the inbox (retried every second)\n"+
		"and A2 waits there behind it (gap); every other flow was applied:\n\n")
	if err := demoFlowTable(ctx, out, q, in, false); err != nil {
		return err
	}
	in.SetMaxDelta(1000)
	fmt.Fprintf(out, "\nThe receiver now supports deltas up to 1000: A1 applies at its next retry, then A2.\n")
	if err := st.untilApplied(ctx, settled, relayDone, in, func(receipts int) bool { return receipts == len(work) }); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nFinal state (%d deliveries: %d acked by the broker, %d retried):\n\n", st.delivered, st.acked, st.retried)
	if err := demoFlowTable(ctx, out, q, in, true); err != nil {
		return err
	}
	return demoBrokerCheck(ctx, out, q, in, len(work))
}

// untilApplied takes the relay's settles until done holds for the inbox's
// receipt count (polled every 50 ms: the consumer writes it), the relay
// stops, or ctx ends.
func (s *demoStats) untilApplied(ctx context.Context, ch <-chan relay.Settled, relayDone <-chan error, in *inbox.Inbox, done func(receipts int) bool) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		snap, err := in.Snapshot(ctx)
		if err != nil {
			return err
		}
		s.drain(ch)
		if done(len(snap.Receipts)) {
			return nil
		}
		select {
		case x := <-ch:
			s.add(x)
		case <-tick.C:
		case err := <-relayDone:
			return fmt.Errorf("demo: the relay stopped: %v", err)
		case <-ctx.Done():
			return errors.New("demo: did not finish in time")
		}
	}
}

// demoBrokerCheck verifies the end state over a broker: every event acked
// in the queue, none quarantined, one receipt per event, A at seq 2 total 11.
func demoBrokerCheck(ctx context.Context, out io.Writer, q *fairrelay.Queue, in *inbox.Inbox, events int) error {
	snap, err := q.Snapshot(ctx)
	if err != nil {
		return err
	}
	is, err := in.Snapshot(ctx)
	if err != nil {
		return err
	}
	acked := 0
	for _, e := range snap.Events {
		if e.State == fairrelay.StateAcked {
			acked++
		}
	}
	a := is.ByFlow()["A"]
	if acked != events || len(is.Receipts) != events || a.Seq != 2 || a.Total != 11 {
		return fmt.Errorf("demo: end state is wrong: %d of %d events acked, %d receipts, A at seq %d total %d", acked, events, len(is.Receipts), a.Seq, a.Total)
	}
	fmt.Fprintf(out, "\n%d receipts for %d events: each applied once, each flow in order (A: seq 2, total 11). Nothing was quarantined:\n"+
		"over a broker, a poison event is held by the consumer, and no redrive is needed once the cause is fixed.\n", len(is.Receipts), events)
	return nil
}
