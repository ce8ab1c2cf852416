package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/consume"
	"github.com/fairrelay/fairrelay/internal/errs"
	"github.com/fairrelay/fairrelay/relay"
	"github.com/fairrelay/fairrelay/sink"
	"github.com/fairrelay/fairrelay/sink/amqp"
	"github.com/fairrelay/fairrelay/sink/jetstream"
)

// BrokerOptions configure RunBroker.
type BrokerOptions struct {
	// URL is the broker: a nats:// server with JetStream, or an amqp://
	// RabbitMQ. Required. The benchmark makes a stream (or a queue bound to
	// amq.topic) of its own, with a random name, and deletes it at the end.
	URL string
	// User and Password log in to RabbitMQ (guest/guest when empty).
	User, Password string
	// Dir holds the queue store (SQLite); it must exist.
	Dir string
	// Events is how many events each rate is measured on, in all rounds
	// together. Defaults to 20000.
	Events int
	// Rounds is how many interleaved rounds the events are split into:
	// each round runs the three measurements one after the other on
	// Events/Rounds events, so that a change in the machine's load affects
	// every rate alike. Defaults to 5.
	Rounds int
	// Workers is the relay's workers, and the publishers of the concurrent
	// plain run. Defaults to 100.
	Workers int
	// OnPhase, when set, is told the name of each phase as it starts.
	OnPhase func(name string)
}

// BrokerReport is what RunBroker measured, in events per second.
type BrokerReport struct {
	Broker  string `json:"broker"`
	Events  int    `json:"events"`
	Workers int    `json:"workers"`
	// PlainLoop: one publisher, each publish waiting for its ack (the
	// client library alone).
	PlainLoop float64 `json:"plain_loop_per_s"`
	// PlainConcurrent: Workers such publishers at once.
	PlainConcurrent float64 `json:"plain_concurrent_per_s"`
	// Relay: events enqueued up front, every one its own flow, dispatched
	// by a relay with Workers workers through the sink until the last ack
	// was settled.
	Relay float64 `json:"relay_per_s"`
	// The relay's rate over each plain rate.
	RatioToLoop       float64 `json:"relay_to_plain_loop"`
	RatioToConcurrent float64 `json:"relay_to_plain_concurrent"`
	// The CPU time this process used per event in each measurement, in
	// microseconds (user and system; the broker's own is not counted).
	PlainLoopCPU       float64 `json:"plain_loop_cpu_us_per_event"`
	PlainConcurrentCPU float64 `json:"plain_concurrent_cpu_us_per_event"`
	RelayCPU           float64 `json:"relay_cpu_us_per_event"`
}

// brokerRig is one broker's part of the benchmark.
type brokerRig struct {
	name    string
	publish func(ctx context.Context, id string) error // the plain publisher's one publish
	sink    sink.Sink
	close   func()
}

// RunBroker measures, in one run and on one broker destination with a
// consumer that takes every message and does nothing: the plain publisher
// loop, Workers plain publishers, and the relay (SQLite queue → sink →
// broker) with Workers workers on unordered traffic. Errors: bad options,
// the broker's, the queue store's, or a relay delivery that did not ack.
func RunBroker(ctx context.Context, opts BrokerOptions) (*BrokerReport, error) {
	if opts.Events == 0 {
		opts.Events = 20000
	}
	if opts.Workers == 0 {
		opts.Workers = 100
	}
	if opts.Rounds == 0 {
		opts.Rounds = 5
	}
	if opts.Rounds < 1 || opts.Events < opts.Rounds || opts.Workers < 1 || opts.Workers > relay.MaxWorkers {
		return nil, fmt.Errorf("bench: rounds must be >= 1, events >= rounds and workers 1 to %d", relay.MaxWorkers)
	}
	phase := func(string) {}
	if opts.OnPhase != nil {
		phase = opts.OnPhase
	}
	tag := strconv.FormatInt(time.Now().UnixNano(), 36)
	var rig *brokerRig
	var err error
	switch schemeOf(opts.URL) {
	case "nats":
		rig, err = natsRig(ctx, opts, tag)
	case "amqp", "amqps":
		rig, err = amqpRig(ctx, opts, tag)
	default:
		return nil, fmt.Errorf("bench: --sink must be a nats:// or amqp:// URL, got %q", opts.URL)
	}
	if err != nil {
		return nil, err
	}
	defer rig.close()
	rep := &BrokerReport{Broker: rig.name, Events: opts.Events, Workers: opts.Workers}

	n := opts.Events / opts.Rounds
	rep.Events = n * opts.Rounds
	var loop, conc, rel, loopCPU, concCPU, relCPU time.Duration
	for round := range opts.Rounds {
		phase(fmt.Sprintf("round %d of %d: plain publisher loop", round+1, opts.Rounds))
		start, cpu := time.Now(), processCPU()
		for i := range n {
			if err := rig.publish(ctx, fmt.Sprintf("loop-%d-%d", round, i)); err != nil {
				return nil, fmt.Errorf("bench: plain publish: %w", err)
			}
		}
		loop, loopCPU = loop+time.Since(start), loopCPU+processCPU()-cpu

		phase(fmt.Sprintf("round %d of %d: %d plain publishers", round+1, opts.Rounds, opts.Workers))
		cpu = processCPU()
		d, err := concurrentPublish(ctx, rig, opts.Workers, n, fmt.Sprintf("conc-%d-", round))
		if err != nil {
			return nil, err
		}
		conc, concCPU = conc+d, concCPU+processCPU()-cpu

		phase(fmt.Sprintf("round %d of %d: relay", round+1, opts.Rounds))
		d, cpuUsed, err := relayRun(ctx, opts, rig.sink, n, round)
		if err != nil {
			return nil, err
		}
		rel, relCPU = rel+d, relCPU+cpuUsed
	}
	perEvent := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(rep.Events) }
	rep.PlainLoopCPU, rep.PlainConcurrentCPU, rep.RelayCPU = perEvent(loopCPU), perEvent(concCPU), perEvent(relCPU)
	rep.PlainLoop = perSecond(rep.Events, loop)
	rep.PlainConcurrent = perSecond(rep.Events, conc)
	rep.Relay = perSecond(rep.Events, rel)
	rep.RatioToLoop = rep.Relay / rep.PlainLoop
	rep.RatioToConcurrent = rep.Relay / rep.PlainConcurrent
	return rep, nil
}

// concurrentPublish publishes n messages with workers publishers at once.
func concurrentPublish(ctx context.Context, rig *brokerRig, workers, n int, prefix string) (time.Duration, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				if err := rig.publish(ctx, prefix+strconv.FormatInt(i, 10)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	d := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return 0, fmt.Errorf("bench: plain publish: %w", err)
	}
	return d, nil
}

// relayRun loads n events, each its own flow, into a fresh queue store and
// times a relay from its start to the last ack; it returns the wall time
// and the process's CPU time in between.
func relayRun(ctx context.Context, opts BrokerOptions, s sink.Sink, n, round int) (time.Duration, time.Duration, error) {
	path := filepath.Join(opts.Dir, fmt.Sprintf("broker-bench-%d.db", round))
	defer removeDB(path)
	q, err := fairrelay.Open(ctx, path, fairrelay.Config{Policy: fairrelay.DaemonPolicy()})
	if err != nil {
		return 0, 0, err
	}
	defer q.Close()
	// Event ids differ between rounds: JetStream would answer duplicate.
	ps := make([]fairrelay.NewEvent, 0, 1000)
	for i := range n {
		ps = append(ps, fairrelay.NewEvent{ID: fmt.Sprintf("relay-%d-%d", round, i), Flow: FlowID(i), Body: []byte(`{"delta":1}`)})
		if len(ps) == cap(ps) || i == n-1 {
			if _, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: 0, Events: ps}); err != nil {
				return 0, 0, err
			}
			ps = ps[:0]
		}
	}
	var acked atomic.Int64
	done := make(chan struct{})
	failed := make(chan relay.Settled, 1)
	r, err := relay.New(ctx, relay.Config{Queue: q, Sink: s, Workers: opts.Workers, Logger: slog.New(slog.DiscardHandler), OnSettle: func(st relay.Settled) {
		if st.Result.Status != fairrelay.SettleAcked {
			select {
			case failed <- st:
			default:
			}
			return
		}
		if acked.Add(1) == int64(n) {
			close(done)
		}
	}})
	if err != nil {
		return 0, 0, err
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan error, 1)
	start, cpu := time.Now(), processCPU()
	go func() { ran <- r.Run(rctx) }()
	select {
	case <-done:
	case st := <-failed:
		return 0, 0, fmt.Errorf("bench: the relay settled %s %q (%s), not an ack", st.Claim.Token.EventID, st.Outcome, st.Detail)
	case err := <-ran:
		return 0, 0, fmt.Errorf("bench: the relay stopped: %v", err)
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	d, cpuUsed := time.Since(start), processCPU()-cpu
	stop()
	return d, cpuUsed, <-ran
}

func natsRig(ctx context.Context, opts BrokerOptions, tag string) (*brokerRig, error) {
	e, err := jetstream.ParseEndpoint("sink", opts.URL)
	if err != nil {
		return nil, err
	}
	nc, err := jetstream.Connect(e, jetstream.ConnectOptions{Name: "fairrelay bench", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	j, _ := js.New(nc)
	name, prefix := "FRBENCH_"+tag, "frbench-"+tag
	st, err := j.CreateStream(ctx, js.StreamConfig{Name: name, Subjects: []string{prefix + ".*"}, Storage: js.FileStorage})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("bench: create stream: %w", err)
	}
	cleanup := func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		j.DeleteStream(dctx, name)
		nc.Close()
	}
	// The no-op consumer: takes every message, acks nothing (AckNone).
	cons, err := st.CreateOrUpdateConsumer(ctx, js.ConsumerConfig{AckPolicy: js.AckNonePolicy})
	var cc js.ConsumeContext
	if err == nil {
		cc, err = cons.Consume(func(js.Msg) {})
	}
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("bench: consumer: %w", err)
	}
	s, err := jetstream.New(jetstream.Options{Conn: nc, Subject: prefix + ".{flow}", Stream: name})
	if err != nil {
		cc.Stop()
		cleanup()
		return nil, err
	}
	body := []byte(`{"delta":1}`)
	return &brokerRig{
		name: "NATS JetStream",
		publish: func(ctx context.Context, id string) error {
			// What the sink sends: its headers and Nats-Msg-Id.
			m := nats.NewMsg(prefix + "." + id)
			m.Data = body
			m.Header.Set(consume.HeaderFlow, id)
			m.Header.Set(consume.HeaderSeq, "1")
			m.Header.Set(consume.HeaderGeneration, "1")
			m.Header.Set(consume.HeaderAttempt, "1")
			_, err := j.PublishMsg(ctx, m, js.WithMsgID(id), js.WithExpectStream(name))
			return err
		},
		sink:  s,
		close: func() { cc.Stop(); cleanup() },
	}, nil
}

func amqpRig(ctx context.Context, opts BrokerOptions, tag string) (*brokerRig, error) {
	e, err := amqp.ParseEndpoint("sink", opts.URL)
	if err != nil {
		return nil, err
	}
	queue, prefix := "frbench-"+tag, "frbench-"+tag
	dial := e.Dialer("fairrelay bench", amqp.Credentials{User: opts.User, Password: opts.Password})
	conn, err := dial()
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err == nil {
		_, err = ch.QueueDeclare(queue, true, false, false, false, nil)
	}
	if err == nil {
		err = ch.QueueBind(queue, prefix+".*", e.Exchange, false, nil)
	}
	var deliveries <-chan amqp091.Delivery
	if err == nil {
		// The no-op consumer: takes every message, acks nothing
		// (auto-ack).
		deliveries, err = ch.Consume(queue, "", true, false, false, false, nil)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("bench: declare queue: %w", err)
	}
	go func() {
		for range deliveries {
		}
	}()
	s, err := amqp.New(amqp.Options{Dial: dial, Exchange: e.Exchange, RoutingKey: prefix + ".{flow}", Channels: opts.Workers, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		conn.Close()
		return nil, err
	}
	// The plain publishers' channels: one each, in confirm mode, as the
	// sink's.
	chans := make(chan *amqp091.Channel, opts.Workers+1)
	body := []byte(`{"delta":1}`)
	return &brokerRig{
		name: "RabbitMQ",
		publish: func(ctx context.Context, id string) error {
			var pc *amqp091.Channel
			select {
			case pc = <-chans:
			default:
				if pc, err = conn.Channel(); err != nil {
					return err
				}
				if err := pc.Confirm(false); err != nil {
					return err
				}
			}
			dc, err := pc.PublishWithDeferredConfirmWithContext(ctx, e.Exchange, prefix+"."+id, true, false, amqp091.Publishing{
				MessageId: id, DeliveryMode: amqp091.Persistent, ContentType: "application/json", Body: body,
				Headers: amqp091.Table{consume.HeaderFlow: id, consume.HeaderSeq: "1", consume.HeaderGeneration: "1", consume.HeaderAttempt: "1"},
			})
			if err != nil {
				return err
			}
			if ok, err := dc.WaitContext(ctx); err != nil || !ok {
				return errs.Join(err, errors.New("nack"))
			}
			chans <- pc
			return nil
		},
		sink: s,
		close: func() {
			s.Close()
			if dch, err := conn.Channel(); err == nil {
				dch.QueueDelete(queue, false, false, false)
			}
			conn.Close()
		},
	}, nil
}

func schemeOf(raw string) string {
	for i := 0; i < len(raw); i++ {
		if raw[i] == ':' {
			return raw[:i]
		}
	}
	return ""
}

// WriteBrokerTable prints rep as a table.
func WriteBrokerTable(w io.Writer, rep *BrokerReport) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s, %d events, every one its own flow, %d workers\t\t\n", rep.Broker, rep.Events, rep.Workers)
	fmt.Fprintf(tw, "plain publisher loop (one publish at a time)\t%.0f events/s\t\n", rep.PlainLoop)
	fmt.Fprintf(tw, "%d plain publishers\t%.0f events/s\t\n", rep.Workers, rep.PlainConcurrent)
	fmt.Fprintf(tw, "relay (SQLite queue → sink → broker)\t%.0f events/s\t\n", rep.Relay)
	fmt.Fprintf(tw, "relay / plain loop\t%.2f\t\n", rep.RatioToLoop)
	fmt.Fprintf(tw, "relay / %d plain publishers\t%.2f\t\n", rep.Workers, rep.RatioToConcurrent)
	fmt.Fprintf(tw, "CPU of this process per event: loop, %d publishers, relay\t%.0f, %.0f, %.0f µs\t\n",
		rep.Workers, rep.PlainLoopCPU, rep.PlainConcurrentCPU, rep.RelayCPU)
	return tw.Flush()
}
