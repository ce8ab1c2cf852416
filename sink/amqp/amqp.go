// Package amqp is the RabbitMQ (AMQP 0-9-1) sink of fairrelay, on
// RabbitMQ's own Go client (github.com/rabbitmq/amqp091-go), and the
// consumer that applies what it published to an inbox (Consume).
//
// Each delivery is a persistent message published with mandatory set, on a
// channel in confirm mode, to the exchange and routing key that
// Options.Exchange and Options.RoutingKey make from the flow (defaults:
// "amq.topic", which every RabbitMQ has, and "fairrelay.{flow}"; the flow's
// token is topic.EncodeFlow of the flow id, so a flow is one topic word). The
// body is the event's body byte for byte; message_id is the event id; the
// headers Fairrelay-Flow (the flow id as enqueued), Fairrelay-Seq,
// Fairrelay-Generation and Fairrelay-Attempt are decimal strings.
//
// The broker's answer: a confirm (basic.ack) is accepted. A basic.return
// before it — mandatory, and no queue is bound for the routing key — is
// rejected (permanent: the head is quarantined), with the broker's words, as
// is a channel the broker closes for a missing exchange (404), refused
// access (403) or a message over its max_message_size. A nack, a timeout, a
// lost channel or connection are transient: the next delivery opens a new
// connection (and channel) when the old one is gone.
//
// RabbitMQ deduplicates nothing: a redelivery (for example after a confirm
// lost with the connection) puts a second copy in the queue. The consumer
// applies each message through an inbox keyed by event id and acks only
// after the inbox committed (Consume, package consume), so a copy has no
// second effect.
package amqp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/consume"
	"github.com/fairrelay/fairrelay/internal/errs"
	"github.com/fairrelay/fairrelay/sink"
	"github.com/fairrelay/fairrelay/sink/topic"
)

// The defaults of Options.Exchange and Options.RoutingKey.
const (
	// DefaultExchange is RabbitMQ's own topic exchange, which every
	// RabbitMQ has.
	DefaultExchange = "amq.topic"
	// DefaultRoutingKey makes one topic word of the flow: bind a queue with
	// "fairrelay.*" (or "fairrelay.#") to take every flow.
	DefaultRoutingKey = "fairrelay." + topic.Placeholder
)

// MaxNameBytes is AMQP's limit on an exchange name or routing key (a short
// string), in bytes.
const MaxNameBytes = 255

// Dialer opens a new connection; see Endpoint.Dialer.
type Dialer func() (*amqp091.Connection, error)

// Options configure a Sink.
type Options struct {
	// Dial opens the sink's connection, at the first delivery and again
	// whenever the connection was lost. Required.
	Dial Dialer
	// Exchange is the exchange's template (package topic). Defaults to
	// DefaultExchange. The exchange must exist: a missing one is a
	// permanent error.
	Exchange string
	// RoutingKey is the routing key's template. Defaults to
	// DefaultRoutingKey.
	RoutingKey string
	// Timeout bounds one publish and its confirm, the channel's opening
	// (and a reconnection) included. Defaults to 10s. The relay's own
	// per-delivery deadline applies as well.
	Timeout time.Duration
	// Channels is how many publishes wait for their confirms at once, each
	// on a channel of its own (so a basic.return is never taken for
	// another publish's). Set it to the relay's workers. Defaults to 64.
	Channels int
	// Logger receives a line when a connection is opened or found lost.
	// Defaults to slog.Default(); give slog.New(slog.DiscardHandler) to
	// drop them.
	Logger *slog.Logger
}

// Sink publishes deliveries to RabbitMQ. Safe for concurrent use.
type Sink struct {
	dial          Dialer
	exchange, key topic.Template
	timeout       time.Duration
	slots         chan struct{} // one per channel in use
	log           *slog.Logger

	mu     sync.Mutex
	conn   *amqp091.Connection // nil until the first delivery and after Close
	idle   []*channel          // confirm-mode channels of conn, free
	closed bool
	// live is conn, read without mu: Close closes it first, so that a
	// delivery opening a channel on it under mu (a broker that stopped
	// answering) returns, and Close is not held up behind it.
	live atomic.Pointer[amqp091.Connection]
	// closing is set by Close before it waits for mu: a delivery still
	// waiting to open a channel then gives up instead of dialling.
	closing atomic.Bool
}

var _ sink.Sink = (*Sink)(nil)

// channel is a confirm-mode channel with its return and close listeners.
type channel struct {
	conn    *amqp091.Connection
	ch      *amqp091.Channel
	returns chan amqp091.Return
	closes  chan *amqp091.Error
}

func invalid(field, format string, args ...any) error {
	return fairrelay.InvalidInput(field, format, args...)
}

// New checks opts and returns a Sink; it connects at the first delivery.
// Errors: fairrelay.ErrInvalidInput naming "dial", "exchange",
// "routing_key", "timeout" or "channels".
func New(opts Options) (*Sink, error) {
	if opts.Dial == nil {
		return nil, invalid("dial", "required")
	}
	if opts.Exchange == "" {
		opts.Exchange = DefaultExchange
	}
	if opts.RoutingKey == "" {
		opts.RoutingKey = DefaultRoutingKey
	}
	exch, err := ParseExchange(opts.Exchange)
	if err != nil {
		return nil, err
	}
	key, err := topic.Parse("routing_key", opts.RoutingKey)
	if err != nil {
		return nil, err
	}
	if n := len(key.Literal("")); n > MaxNameBytes {
		return nil, invalid("routing_key", "%d bytes without the flow: AMQP allows %d", n, MaxNameBytes)
	}
	if opts.Timeout < 0 {
		return nil, invalid("timeout", "must not be negative, got %s", opts.Timeout)
	}
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.Channels < 0 || opts.Channels > 2000 {
		return nil, invalid("channels", "must be 1 to 2000, got %d", opts.Channels)
	}
	if opts.Channels == 0 {
		opts.Channels = 64
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Sink{dial: opts.Dial, exchange: exch, key: key, timeout: opts.Timeout,
		slots: make(chan struct{}, opts.Channels), log: opts.Logger}, nil
}

// ParseExchange parses an exchange template and checks that its literal
// text is a valid exchange name: letters, digits, '-', '_', '.' and ':'
// (the AMQP 0-9-1 grammar). Errors: fairrelay.ErrInvalidInput naming
// "exchange".
func ParseExchange(s string) (topic.Template, error) {
	tpl, err := topic.Parse("exchange", s)
	if err != nil {
		return tpl, err
	}
	lit := tpl.Literal("")
	for i := 0; i < len(lit); i++ {
		c := lit[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-_.:", c) >= 0) {
			return tpl, invalid("exchange", "%q: an exchange name holds letters, digits, '-', '_', '.' and ':' only", s)
		}
	}
	if len(lit) > MaxNameBytes {
		return tpl, invalid("exchange", "%d bytes: AMQP allows %d", len(lit), MaxNameBytes)
	}
	return tpl, nil
}

// CheckFlow is the sample flow whose exchange Check asks for when the
// exchange's template names the flow.
const CheckFlow = "fairrelay-check"

// Check asks the broker whether the exchange deliveries go to exists, on a
// connection of its own that it closes: the one exchange, or, for a
// template that names the flow, the exchange of the flow CheckFlow (a
// sample: other flows' exchanges are not asked for). A missing exchange
// would reject every delivery to it, quarantining each head, so a relay
// checks before it starts (fairrelay relay refuses a missing exchange that
// does not name the flow, and warns of one that does). Errors:
// fairrelay.ErrInvalidInput naming "exchange" when the broker answers that
// the exchange does not exist (404); any other failure (no connection, a
// broker that does not answer within Timeout) is returned as it is, and
// says nothing of the exchange.
func (s *Sink) Check(ctx context.Context) error {
	name := s.exchange.Expand(CheckFlow)
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	type answer struct{ err error }
	done := make(chan answer, 1)
	go func() {
		conn, err := s.dial()
		if err != nil {
			done <- answer{fmt.Errorf("amqp: connect: %w", err)}
			return
		}
		defer conn.Close()
		// A broker that does not answer: closing the connection when ctx
		// ends ends the calls below.
		stop := context.AfterFunc(ctx, func() { conn.Close() })
		defer stop()
		ch, err := conn.Channel()
		if err != nil {
			done <- answer{fmt.Errorf("amqp: open channel: %w", err)}
			return
		}
		defer ch.Close()
		done <- answer{ch.ExchangeDeclarePassive(name, "topic", true, false, false, false, nil)}
	}()
	select {
	case a := <-done:
		var ae *amqp091.Error
		if errors.As(a.err, &ae) && ae.Code == amqp091.NotFound {
			return invalid("exchange", "the broker has no exchange %q (%s): declare it, or name another with ?exchange=; every delivery to it would be rejected and its head quarantined", name, ae.Reason)
		}
		if a.err != nil {
			return fmt.Errorf("amqp: check exchange %q: %w", name, a.err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("amqp: check exchange %q: no answer: %w", name, ctx.Err())
	}
}

// Close closes the connection; deliveries after it fail.
func (s *Sink) Close() error {
	// Within the Timeout, whatever the broker does: a connection that no
	// longer answers is cut when its close handshake has not ended by
	// then (it waited for the heartbeat, tens of seconds).
	s.closing.Store(true)
	var err error
	first := s.live.Load()
	if first != nil {
		err = first.CloseDeadline(time.Now().Add(s.timeout))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.idle = nil
	if s.conn == nil {
		return nil
	}
	if s.conn != first {
		err = s.conn.CloseDeadline(time.Now().Add(s.timeout))
	}
	s.live.Store(nil)
	s.conn = nil
	if errors.Is(err, amqp091.ErrClosed) {
		return nil
	}
	return err
}

// Deliver publishes d and waits for the broker's confirm (see the package
// doc for the answers). The error is non-nil when no answer came: ctx done,
// timeout, channel or connection lost; the relay then settles retry.
func (s *Sink) Deliver(ctx context.Context, d sink.Delivery) (sink.Result, error) {
	if err := ctx.Err(); err != nil {
		return sink.Result{}, err
	}
	exch, key := s.exchange.Expand(d.Flow), s.key.Expand(d.Flow)
	if len(exch) > MaxNameBytes || len(key) > MaxNameBytes {
		return rejected("amqp: exchange %q (%d bytes) or routing key %q (%d bytes) for flow %q is over AMQP's %d bytes",
			exch, len(exch), key, len(key), d.Flow, MaxNameBytes), nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	c, err := s.acquire(ctx)
	if err != nil {
		return sink.Result{}, err
	}
	reuse := false // only a channel whose publish ended cleanly serves again
	defer func() { s.release(c, reuse) }()
	contentType := "application/octet-stream"
	if json.Valid(d.Body) {
		contentType = "application/json"
	}
	dc, err := c.ch.PublishWithDeferredConfirmWithContext(ctx, exch, key, true, false, amqp091.Publishing{
		MessageId:    d.EventID,
		DeliveryMode: amqp091.Persistent,
		ContentType:  contentType,
		Body:         d.Body,
		Headers: amqp091.Table{
			consume.HeaderFlow:       d.Flow,
			consume.HeaderSeq:        strconv.FormatInt(d.Seq, 10),
			consume.HeaderGeneration: strconv.FormatInt(d.Generation, 10),
			consume.HeaderAttempt:    strconv.FormatInt(d.Attempt, 10),
		},
	})
	if err != nil {
		return c.lost(d, err)
	}
	select {
	case <-dc.Done():
	case <-ctx.Done():
		// The confirm (or a return) may still come on this channel: it is
		// closed rather than reused, so no later publish takes it for its own.
		return sink.Result{}, fmt.Errorf("amqp: publish %s: no confirm: %w", d.EventID, ctx.Err())
	}
	if c.ch.IsClosed() {
		// The confirmations of a closed channel end as nacks: look at why
		// it closed instead.
		return c.lost(d, amqp091.ErrClosed)
	}
	reuse = true
	if !dc.Acked() {
		return sink.Result{Outcome: fairrelay.OutcomeRetry, Detail: "amqp: nack: the broker could not take the message"}, nil
	}
	// A basic.return comes before the confirm of the same publish, from the
	// same reader goroutine: when it exists, it is in the buffer by now.
	select {
	case r, ok := <-c.returns:
		if ok {
			return rejected("amqp: returned unroutable: %d %s (exchange %q, routing key %q): no queue is bound for it",
				r.ReplyCode, r.ReplyText, exch, key), nil
		}
	default:
	}
	return sink.Result{Outcome: fairrelay.OutcomeAccepted, Detail: fmt.Sprintf("confirmed: exchange %q, routing key %q", exch, key)}, nil
}

func rejected(format string, args ...any) sink.Result {
	return sink.Result{Outcome: fairrelay.OutcomeRejected, Detail: fmt.Sprintf(format, args...)}
}

// lost answers a publish whose channel failed: the broker's reason when it
// closed the channel for a permanent cause, else an error (transient).
func (c *channel) lost(d sink.Delivery, err error) (sink.Result, error) {
	var cause *amqp091.Error
	select {
	case cause = <-c.closes:
	default:
	}
	if cause == nil {
		errors.As(err, &cause)
	}
	if cause != nil && permanentClose(cause) {
		return rejected("amqp: %d %s", cause.Code, cause.Reason), nil
	}
	if cause != nil {
		err = cause
	}
	return sink.Result{}, fmt.Errorf("amqp: publish %s: %w", d.EventID, err)
}

// permanentClose reports whether the broker closed the channel for a cause
// that the same publish meets again: a missing exchange (404), refused
// access (403), a message over the broker's size limit.
func permanentClose(e *amqp091.Error) bool {
	switch e.Code {
	case amqp091.NotFound, amqp091.AccessRefused, amqp091.ContentTooLarge:
		return true
	case amqp091.PreconditionFailed:
		return strings.Contains(e.Reason, "larger than configured max size")
	}
	return false
}

// acquire takes a slot and a free channel of the current connection,
// opening the connection (again) and the channel when needed.
func (s *Sink) acquire(ctx context.Context) (*channel, error) {
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("amqp: all %d channels busy: %w", cap(s.slots), ctx.Err())
	}
	if c := s.takeIdle(); c != nil {
		return c, nil
	}
	// Opening a channel (and a connection, when the last one was lost)
	// waits for the broker, under the sink's lock: on a broker that
	// stopped answering, each delivery waited out the dial's own 5 s
	// behind the one before, whatever its Timeout (eight at once: 5 to
	// 40 s; a breaker's report). The caller waits until ctx is done; the
	// opening goes on without it, and its channel serves the next
	// delivery.
	type opened struct {
		c   *channel
		err error
	}
	done := make(chan opened, 1)
	go func() {
		c, err := s.channel()
		done <- opened{c, err}
	}()
	select {
	case o := <-done:
		if o.err != nil {
			<-s.slots
			return nil, o.err
		}
		return o.c, nil
	case <-ctx.Done():
		go func() {
			if o := <-done; o.err == nil {
				s.release(o.c, true)
			} else {
				<-s.slots
			}
		}()
		return nil, fmt.Errorf("amqp: open a channel: the broker did not answer: %w", ctx.Err())
	}
}

// openingTimeouts is how many Timeouts a channel's opening may take before
// its connection is taken for lost and closed (channel).
const openingTimeouts = 3

// takeIdle returns a channel of the current connection that served
// before, nil when there is none (or the sink is closed: channel says so).
func (s *Sink) takeIdle() *channel {
	if !s.mu.TryLock() {
		// Another delivery is opening a channel under the lock, perhaps
		// on a broker that does not answer: not behind it.
		return nil
	}
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	return s.popIdle()
}

// popIdle, with s.mu held, takes the last idle channel that is still of
// the current connection, dropping those that are not; nil when none is.
func (s *Sink) popIdle() *channel {
	for len(s.idle) > 0 {
		c := s.idle[len(s.idle)-1]
		s.idle = s.idle[:len(s.idle)-1]
		if c.conn == s.conn && !c.ch.IsClosed() {
			return c
		}
	}
	return nil
}

func (s *Sink) channel() (*channel, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.closing.Load() {
		return nil, errors.New("amqp: sink closed")
	}
	if c := s.popIdle(); c != nil {
		return c, nil
	}
	if s.conn == nil || s.conn.IsClosed() {
		if s.conn != nil {
			s.log.Warn("amqp: connection lost; reconnecting")
		}
		s.idle = nil
		conn, err := s.dial()
		if err != nil {
			s.conn = nil
			return nil, fmt.Errorf("amqp: connect: %w", err)
		}
		s.conn = conn
		s.live.Store(conn)
		s.log.Info("amqp: connected", "server", conn.RemoteAddr().String())
	}
	// A broker that takes the connection's bytes and heartbeats but does
	// not answer (stopped reading it: a resource alarm; a request lost)
	// held this opening, and the lock with it, for ever, and every
	// delivery after it failed with all channels busy (a reviewer's
	// report). An opening is two round trips (channel.open, confirm.select)
	// where a delivery is one: one not answered within three Timeouts is
	// lost, not slow (a bound of one Timeout closed healthy connections on
	// a link of a round trip above Timeout/2, for ever; a reviewer again).
	// The connection is then closed, which ends the opening; the next
	// delivery connects again.
	conn := s.conn
	stuck := time.AfterFunc(openingTimeouts*s.timeout, func() { conn.CloseDeadline(time.Now()) })
	ch, err := conn.Channel()
	if err == nil {
		if err = ch.Confirm(false); err != nil {
			ch.Close()
			err = fmt.Errorf("confirm mode: %w", err)
		}
	}
	if !stuck.Stop() {
		if err == nil {
			ch.Close()
		}
		err = fmt.Errorf("no answer within %s; the connection was closed: %w", openingTimeouts*s.timeout, errs.Join(err, amqp091.ErrClosed))
		s.conn = nil // the next delivery dials anew, not on the closing one
		s.live.Store(nil)
	}
	if err != nil {
		return nil, fmt.Errorf("amqp: open channel: %w", err)
	}
	return &channel{conn: s.conn, ch: ch,
		returns: ch.NotifyReturn(make(chan amqp091.Return, 1)),
		closes:  ch.NotifyClose(make(chan *amqp091.Error, 1))}, nil
}

// release frees c's slot; c serves again when reuse is set and it is still
// a channel of the current connection, else it is closed.
func (s *Sink) release(c *channel, reuse bool) {
	defer func() { <-s.slots }()
	if !s.mu.TryLock() {
		// Not behind a delivery opening a channel under the lock (see
		// takeIdle): c is kept or closed when the lock is free.
		go func() {
			s.mu.Lock()
			s.keep(c, reuse)
		}()
		return
	}
	s.keep(c, reuse)
}

// keep, with s.mu held, keeps c for reuse or closes it, and unlocks s.mu.
func (s *Sink) keep(c *channel, reuse bool) {
	if reuse && !s.closed && c.conn == s.conn && !c.ch.IsClosed() {
		s.idle = append(s.idle, c)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	if !c.ch.IsClosed() {
		// Closing waits for the broker's close-ok: on a broker that
		// stopped answering, until the connection's heartbeat gives up
		// (a delivery of Timeout 2 s took 15 s; a breaker's report).
		// Nothing waits for it here.
		go c.ch.Close()
	}
}
