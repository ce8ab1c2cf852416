package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/fairrelay/fairrelay/consume"
)

// ConsumerOptions configure Consume.
type ConsumerOptions struct {
	// Dial opens the consumer's connection, at the start and again
	// whenever it was lost. Required.
	Dial Dialer
	// Queue is the queue to read, declared durable (a classic queue) when
	// it does not exist; an existing one is read as it is, whatever its
	// arguments (a quorum queue, a dead-letter exchange); one that is not
	// durable, or is auto-delete, is refused (it loses its messages at a
	// broker restart, or when its last consumer leaves). Required.
	Queue string
	// Exchange, when set, is an exchange the queue is bound to with
	// BindingKey. It is declared (durable, of ExchangeKind, without
	// arguments: an existing one must match, or the broker refuses it)
	// unless its name starts with "amq.", RabbitMQ's own exchanges, which
	// always exist.
	Exchange string
	// ExchangeKind is the kind of exchange declared. Defaults to "topic".
	ExchangeKind string
	// BindingKey binds the queue to Exchange (see Endpoint.BindingKey).
	BindingKey string
	// Prefetch bounds the messages delivered and not acked yet. 0 takes
	// the default, 256; at most MaxPrefetch.
	Prefetch int
	// Logger receives a line when the connection is lost or back. Defaults
	// to slog.Default(); give slog.New(slog.DiscardHandler) to drop them.
	Logger *slog.Logger
	// Ready, when set, is called once the queue is declared and bound and
	// the consumer registered, before the first message is read.
	Ready func()
}

// MaxPrefetch is the most ConsumerOptions.Prefetch: AMQP 0-9-1 carries a
// prefetch count in 16 bits.
const MaxPrefetch = 65535

// Consume reads opts.Queue and applies every message through apply.Inbox
// with consume.Run (ack after the inbox committed; gap, retry and errors
// redelivered later: the message is held that long, unacked, then
// delivered again from the consumer itself, not nacked: see
// envelope.Redeliver), until ctx is done; then it returns nil. A lost connection is
// opened again (every second, logging each failure) and the consumer goes
// on; the broker requeues what was unacked on the old one. Errors: bad
// options, or a first connection or declaration that fails.
func Consume(ctx context.Context, opts ConsumerOptions, apply consume.Options) error {
	if opts.Dial == nil {
		return invalid("dial", "required")
	}
	if opts.Queue == "" || len(opts.Queue) > MaxNameBytes {
		return invalid("queue", "must be 1 to %d bytes, got %q", MaxNameBytes, opts.Queue)
	}
	if opts.Exchange != "" && opts.BindingKey == "" {
		return invalid("binding_key", "required with an exchange")
	}
	if opts.ExchangeKind == "" {
		opts.ExchangeKind = "topic"
	}
	if opts.Prefetch < 0 || opts.Prefetch > MaxPrefetch {
		// AMQP carries it in 16 bits: 65 536 went out as 0, which
		// RabbitMQ reads as no limit at all (a breaker's report).
		return invalid("prefetch", "must be 0 (the default, 256) to %d, got %d", MaxPrefetch, opts.Prefetch)
	}
	if opts.Prefetch == 0 {
		opts.Prefetch = 256
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	src := &source{opts: opts, counts: map[string]int{}, timers: map[*time.Timer]struct{}{}, wake: make(chan struct{}, 1)}
	defer src.close()
	// The first connection fails loudly: a typo is not an outage.
	if err := src.connect(); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if opts.Ready != nil {
		opts.Ready()
	}
	err := consume.Run(ctx, src, apply)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// source reads deliveries, reconnecting when the connection is lost.
type source struct {
	opts       ConsumerOptions
	conn       *amqp091.Connection
	deliveries <-chan amqp091.Delivery

	mu     sync.Mutex
	counts map[string]int // deliveries per message id seen by this consumer, until acked
	timers map[*time.Timer]struct{}
	// again holds the messages whose redelivery wait ran out, to be
	// delivered again from here (Redeliver); wake tells Next one came.
	// gen numbers the connections: a message of an older one was
	// requeued by the broker when it closed, and is not delivered again
	// from here.
	again []*envelope
	wake  chan struct{}
	gen   int
}

func (s *source) connect() error {
	conn, err := s.opts.Dial()
	if err != nil {
		return fmt.Errorf("amqp: connect: %w", err)
	}
	ch, err := conn.Channel()
	if err == nil {
		ch, err = s.declare(conn, ch)
	}
	var ds <-chan amqp091.Delivery
	if err == nil {
		ds, err = ch.Consume(s.opts.Queue, "", false, false, false, false, nil)
	}
	if err != nil {
		conn.Close()
		return fmt.Errorf("amqp: consume %s: %w", s.opts.Queue, err)
	}
	s.conn, s.deliveries = conn, ds
	s.mu.Lock()
	clear(s.counts) // what the old connection held unacked is requeued: a fresh count keeps the map bounded
	s.gen++
	s.again = nil
	s.mu.Unlock()
	return nil
}

// declare makes the queue when it does not exist, declares the exchange
// and binds them, on ch or the channel it returns in its place. An
// existing queue is used as it is, its durability and arguments the
// operator's: declared again without its arguments (a dead-letter
// exchange, a quorum queue, a length limit), it was refused with
// PRECONDITION_FAILED "inequivalent arg" (a breaker's report). A passive
// declaration that finds nothing closes its channel, so the creation goes
// on a new one.
func (s *source) declare(conn *amqp091.Connection, ch *amqp091.Channel) (*amqp091.Channel, error) {
	_, err := ch.QueueDeclarePassive(s.opts.Queue, true, false, false, false, nil)
	var ae *amqp091.Error
	if errors.As(err, &ae) && ae.Code == amqp091.NotFound {
		// Not there: made durable, on a new channel (the passive
		// declaration's was closed).
		if ch, err = conn.Channel(); err != nil {
			return ch, err
		}
		_, err = ch.QueueDeclare(s.opts.Queue, true, false, false, false, nil)
	} else if err == nil {
		// There: its arguments are the operator's, but a queue that is not
		// durable loses the messages the relay saw confirmed into it when
		// the broker restarts, and one that is auto-delete when this
		// consumer leaves (a reviewer's reports). A durable declaration
		// without arguments tells: the broker names 'durable' and
		// 'auto_delete' before the arguments when they differ. It closes
		// its channel when anything differs.
		var probe *amqp091.Channel
		if probe, err = conn.Channel(); err != nil {
			return ch, err
		}
		_, err = probe.QueueDeclare(s.opts.Queue, true, false, false, false, nil)
		switch {
		case errors.As(err, &ae) && ae.Code == amqp091.PreconditionFailed && strings.Contains(ae.Reason, "'durable'"):
			return ch, fmt.Errorf("queue %s is not durable: the messages in it would not survive a broker restart; make it durable: %w", s.opts.Queue, err)
		case errors.As(err, &ae) && ae.Code == amqp091.PreconditionFailed && strings.Contains(ae.Reason, "'auto_delete'"):
			return ch, fmt.Errorf("queue %s is auto-delete: the broker deletes it, with its messages, when its last consumer leaves; make it without auto-delete: %w", s.opts.Queue, err)
		case errors.As(err, &ae) && ae.Code == amqp091.PreconditionFailed:
			err = nil // its own arguments: read as it is
		case err == nil:
			probe.Close()
		}
	}
	if err != nil {
		return ch, err
	}
	if s.opts.Exchange != "" && (len(s.opts.Exchange) < 4 || s.opts.Exchange[:4] != "amq.") {
		// Declared, not only looked up: a passive declaration checks
		// nothing of an existing exchange, and one of another kind (a
		// direct exchange where a topic one is meant) was taken, its
		// queue bound by a key it reads literally, receiving nothing (a
		// reviewer's report). An existing exchange of the kind asked,
		// durable, with no arguments passes; any other is refused.
		if err := ch.ExchangeDeclare(s.opts.Exchange, s.opts.ExchangeKind, true, false, false, false, nil); err != nil {
			return ch, err
		}
	}
	if err := ch.Qos(s.opts.Prefetch, 0, false); err != nil {
		return ch, err
	}
	if s.opts.Exchange == "" {
		return ch, nil
	}
	return ch, ch.QueueBind(s.opts.Queue, s.opts.BindingKey, s.opts.Exchange, false, nil)
}

func (s *source) Next(ctx context.Context) (consume.Envelope, error) {
	for {
		if s.deliveries == nil {
			if err := s.connect(); err != nil {
				s.opts.Logger.Warn("amqp: consumer cannot connect; trying again in 1s", "err", err)
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(time.Second):
				}
				continue
			}
			s.opts.Logger.Info("amqp: consumer reconnected", "queue", s.opts.Queue)
		}
		s.mu.Lock()
		if len(s.again) > 0 {
			e := s.again[0]
			s.again = s.again[1:]
			s.counts[e.d.MessageId]++
			e.delivered = s.counts[e.d.MessageId]
			s.mu.Unlock()
			return e, nil
		}
		gen := s.gen
		s.mu.Unlock()
		select {
		case <-s.wake:
			continue
		case d, ok := <-s.deliveries:
			if ok {
				s.mu.Lock()
				s.counts[d.MessageId]++
				n := s.counts[d.MessageId]
				s.mu.Unlock()
				return &envelope{s: s, d: d, delivered: n, gen: gen}, nil
			}
			// The channel or connection is gone: the broker requeues
			// what was unacked on it.
			s.opts.Logger.Warn("amqp: consumer lost its connection; reconnecting", "queue", s.opts.Queue)
			s.conn.Close()
			s.deliveries = nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (s *source) close() {
	s.mu.Lock()
	for t := range s.timers {
		t.Stop()
	}
	s.timers = nil
	s.mu.Unlock()
	if s.conn != nil {
		s.conn.Close()
	}
}

// envelope is one delivery.
type envelope struct {
	s         *source
	d         amqp091.Delivery
	delivered int
	gen       int // the connection it came on (source.gen)
}

func (e *envelope) Message() (consume.Message, error) {
	header := func(k string) string {
		v, _ := e.d.Headers[k].(string)
		return v
	}
	return consume.Decode(e.d.MessageId, header, e.d.Body, e.delivered)
}

func (e *envelope) Ack() error {
	e.s.mu.Lock()
	delete(e.s.counts, e.d.MessageId)
	e.s.mu.Unlock()
	return e.d.Ack(false)
}

// Redeliver holds the message for delay, unacked, then delivers it again
// from this consumer (Next), without a nack: a nack with requeue is a
// delivery more for the broker, and a queue with a delivery limit (a
// quorum queue's x-delivery-limit, which RabbitMQ 4 sets to 20 unless told
// otherwise) drops the message past it, though the relay settled it long
// ago (a breaker's run: a busy inbox for a minute lost every message).
// AMQP has no delayed nack either, and a nack at once would come straight
// back. A message of a connection that has closed since is not delivered
// again from here: the broker requeued it. Delay 0 (Run handing back what
// it has not applied as it stops) nacks with requeue at once.
func (e *envelope) Redeliver(delay time.Duration) error {
	if delay <= 0 {
		return e.d.Nack(false, true)
	}
	e.s.mu.Lock()
	defer e.s.mu.Unlock()
	if e.s.timers == nil {
		return errors.New("amqp: consumer stopped")
	}
	var t *time.Timer
	t = time.AfterFunc(delay, func() {
		e.s.mu.Lock()
		defer e.s.mu.Unlock()
		delete(e.s.timers, t)
		if e.s.timers == nil || e.gen != e.s.gen {
			return // stopped, or requeued with its connection
		}
		e.s.again = append(e.s.again, e) // Run is done with e: it comes back from Next
		select {
		case e.s.wake <- struct{}{}:
		default:
		}
	})
	e.s.timers[t] = struct{}{}
	return nil
}

func (e *envelope) Reject() error {
	e.s.mu.Lock()
	delete(e.s.counts, e.d.MessageId)
	e.s.mu.Unlock()
	return e.d.Reject(false)
}
