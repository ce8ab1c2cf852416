// Package consume is the receiving end of a broker sink: it takes the
// messages sink/jetstream or sink/amqp published, applies each through an
// inbox (SPEC §3) and acknowledges it to the broker only after the inbox
// transaction committed. The broker-specific sources are in those packages
// (jetstream.Consume, amqp.Consume); this package holds what they share.
//
// What the consumer does with the inbox's answer:
//
//	accepted, duplicate         ack: the effect is committed (now or before);
//	                            after accepted, the flow's held events that
//	                            now follow on are applied (inbox ReceiveHeld)
//	gap, permanent outcome      hold: kept in the inbox (inbox Hold), then
//	                            ack; a permanent answer is logged as an error
//	retry, database error       redeliver later, after min(base·2^(n-1), cap),
//	                            n the broker's delivery count (also when the
//	                            hold itself failed)
//	not a fairrelay message     reject (never applied; a dead-letter exchange
//	                            or the stream's advisories keep it): its
//	                            headers are missing or malformed, or the
//	                            inbox refuses its id, flow or seq as invalid
//	                            input (fairrelay.CheckID)
//
// Exactly once, beyond the broker's deduplication: a broker delivers at
// least once — JetStream's Nats-Msg-Id deduplication covers only the
// stream's window (2 minutes by default), a RabbitMQ queue deduplicates
// nothing, and any consumer that crashes between its effect and its ack gets
// the message again. The inbox makes the effect happen once anyway: it keys
// receipts by event id and writes the receipt and the effect in one
// transaction, so a second copy answers duplicate and is acked without a
// second effect, however late it comes. Its seq check keeps each flow's
// effects in order even when the broker redelivers out of order: an event
// whose predecessor is not applied yet answers gap and waits for its next
// delivery. So a consumer acks only after Receive returned accepted or
// duplicate, and never acks a message it could not apply.
//
// A permanent answer (unsupported_delta, invalid_body, id_conflict,
// sequence_conflict) holds its flow in the inbox the way a quarantine holds
// it in the queue: the message is kept in the inbox's held table, retried
// every cap and logged, and the events behind it answer gap and are held
// too, until the cause is fixed (for unsupported_delta, a receiver
// restarted with a larger --max-delta); then the flow's held events apply
// in seq order. Nothing skips it, and nothing else waits for it: held
// messages are acked at the broker, so they do not fill its window of
// unacked messages (RabbitMQ's prefetch, JetStream's MaxAckPending), which,
// full of one flow's redeliveries, held up every other flow (a breaker's
// report against the consumer that redelivered them).
package consume

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/errs"
	"github.com/fairrelay/fairrelay/sink/webhook"
)

// The headers the broker sinks set beside the event id, the same as the
// webhook sink's.
const (
	// HeaderFlow is the flow id, as enqueued (not encoded).
	HeaderFlow = webhook.HeaderFlow
	// HeaderSeq is the event's seq in its flow, a decimal integer >= 1.
	HeaderSeq = webhook.HeaderSeq
	// HeaderGeneration is the claim's generation, decimal: a label only.
	HeaderGeneration = webhook.HeaderGeneration
	// HeaderAttempt is the claim count of the current round, decimal.
	HeaderAttempt = webhook.HeaderAttempt
)

// Message is one broker message carrying a fairrelay event.
type Message struct {
	// Delivery is what the inbox receives: event id, flow, seq and body
	// byte for byte.
	Delivery inbox.Delivery
	// Generation is the relay's claim generation (HeaderGeneration), 0 when
	// absent. It labels the copy; the inbox does not need it.
	Generation int64
	// Delivered is how many times the broker has delivered this message,
	// this time included (1-based); 0 when the broker does not count.
	Delivered int
}

// Decode builds a Message from a broker message: its event id (the broker's
// message id), a header lookup and the body. Errors name the missing or
// malformed header; such a message is not a fairrelay event.
func Decode(eventID string, header func(string) string, body []byte, delivered int) (Message, error) {
	if eventID == "" {
		return Message{}, errors.New("consume: no message id (the event id)")
	}
	flow := header(HeaderFlow)
	if flow == "" {
		return Message{}, fmt.Errorf("consume: message %q: no %s header", eventID, HeaderFlow)
	}
	seq, err := strconv.ParseInt(header(HeaderSeq), 10, 64)
	if err != nil || seq < 1 {
		return Message{}, fmt.Errorf("consume: message %q: %s must be an integer >= 1, got %q", eventID, HeaderSeq, header(HeaderSeq))
	}
	gen, _ := strconv.ParseInt(header(HeaderGeneration), 10, 64)
	return Message{Delivery: inbox.Delivery{EventID: eventID, Flow: flow, Seq: seq, Body: body},
		Generation: gen, Delivered: delivered}, nil
}

// Envelope is one message as a broker source holds it: its content and the
// handle to settle it with the broker. Exactly one of Ack, Redeliver and
// Reject is called per Envelope.
type Envelope interface {
	// Message decodes the content (Decode); an error marks a message that
	// is not a fairrelay event.
	Message() (Message, error)
	// Ack tells the broker the message is done with.
	Ack() error
	// Redeliver asks the broker to deliver the message again after delay
	// (at least; the broker may take longer, for example after a
	// restart). Run hands back the messages it has not applied when it
	// stops with delay 0: as soon as another consumer can take them.
	Redeliver(delay time.Duration) error
	// Reject tells the broker never to deliver the message again (it may
	// dead-letter it).
	Reject() error
}

// Source yields broker messages in the order the broker delivers them.
type Source interface {
	// Next blocks until a message arrives or ctx is done. An error ends
	// Run; a source that reconnects by itself returns none for a lost
	// connection.
	Next(ctx context.Context) (Envelope, error)
}

// Action is what the consumer did with a message.
type Action string

const (
	// ActionAck: acknowledged; the broker drops it.
	ActionAck Action = "ack"
	// ActionRedeliver: handed back for a later delivery.
	ActionRedeliver Action = "redeliver"
	// ActionReject: refused for good (not a fairrelay message).
	ActionReject Action = "reject"
	// ActionHold: kept in the inbox (inbox.Inbox.Hold), then acknowledged;
	// the inbox applies it once its predecessor is applied or its cause
	// fixed (ActionApplied).
	ActionHold Action = "hold"
	// ActionApplied: a held message applied by the inbox
	// (inbox.Inbox.ReceiveHeld); the broker's copy was acknowledged when it
	// was held. Only the message's id, flow and seq are reported.
	ActionApplied Action = "applied"
)

// Applied reports one message to Options.OnApplied.
type Applied struct {
	// Message is the message; zero but for Delivered when it could not be
	// decoded.
	Message Message
	// Outcome is the inbox's answer, "" when Receive failed or the
	// message was not decoded.
	Outcome fairrelay.Outcome
	// Action is what was done with it, and Delay the wait asked for with
	// ActionRedeliver.
	Action Action
	Delay  time.Duration
	// Err is the decoding or inbox error, or the broker's refusal of the
	// ack, redelivery or rejection; nil otherwise.
	Err error
}

// Options configure Run.
type Options struct {
	// Inbox applies the messages. Required.
	Inbox *inbox.Inbox
	// Lanes is how many messages are applied at once. Messages of one flow
	// always go to the same lane, in the order the broker delivered them.
	// 0 takes the default, 8; at most MaxLanes.
	Lanes int
	// RedeliverBase is the first wait before a message the inbox did not
	// take (retry, error) comes again; it doubles with every delivery up to
	// RedeliverCap. A flow whose held messages wait is retried likewise,
	// doubling with every retry that applied nothing. 0 takes the default,
	// 500ms.
	RedeliverBase time.Duration
	// RedeliverCap caps that wait, and is how often the held messages
	// (ActionHold) are retried: a flow whose next event answered a
	// permanent outcome goes on once the cause is fixed. 0 takes the
	// default, 30s.
	RedeliverCap time.Duration
	// Logger receives a line per permanent answer, error and rejected
	// message (warn or error level), and per message at debug level.
	// Defaults to slog.Default(), so that no refusal goes unseen; give
	// slog.New(slog.DiscardHandler) to drop them.
	Logger *slog.Logger
	// OnApplied, when set, is called after each message was settled with
	// the broker, from the message's lane. It must not block for long. A
	// panic in it is logged at ERROR with the stack, and the consumer goes
	// on.
	OnApplied func(Applied)
	// Metrics, when set, counts each message settled (see NewMetrics).
	Metrics *Metrics
}

// MaxLanes is the most Options.Lanes: each lane is a goroutine applying
// one message at a time, and far fewer keep an inbox's database busy.
const MaxLanes = 1024

// laneBuffer is how many messages wait for one lane before the source is
// read no further: the broker's own prefetch bounds what is in flight.
const laneBuffer = 64

// receiveTimeout bounds one inbox transaction. It runs on a context that
// shutdown does not cancel, so that a receive under way commits and is
// acked instead of being rolled back and delivered again.
const receiveTimeout = 30 * time.Second

// Run takes messages from src until ctx is done and applies each through
// opts.Inbox (see the package doc), then returns nil; messages still waiting
// in a lane then are handed back for redelivery at once. Errors:
// fairrelay.ErrInvalidInput for bad options (naming inbox, lanes,
// redeliver_base or redeliver_cap); an ErrDatabase error with
// fairrelay.ErrFileReplaced in its chain once a receive finds the inbox's
// SQLite file removed or replaced since it was opened, or an
// ErrNotDatabase error once it finds the inbox's tables gone (a PostgreSQL
// schema dropped), or an ErrDatabase error with fairrelay.ErrClosed in its
// chain once it finds opts.Inbox closed: the message is handed back for redelivery, and Run
// stops as for ctx — no redelivery cures that, and a consumer that went on
// nacked every message for ever; restart the process (after fairrelay
// migrate --inbox, for tables gone); src's error otherwise.
func Run(ctx context.Context, src Source, opts Options) error {
	if opts.Inbox == nil {
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "inbox", Message: "required"}
	}
	// Negative values are refused, not taken as the defaults, as every
	// broker option beside them (a breaker's report).
	switch {
	case opts.Lanes < 0 || opts.Lanes > MaxLanes:
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "lanes", Message: fmt.Sprintf("must be 0 (the default, 8) to %d, got %d", MaxLanes, opts.Lanes)}
	case opts.RedeliverBase < 0:
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "redeliver_base", Message: fmt.Sprintf("must not be negative (0 takes the default, 500ms), got %s", opts.RedeliverBase)}
	case opts.RedeliverCap < 0:
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "redeliver_cap", Message: fmt.Sprintf("must not be negative (0 takes the default, 30s), got %s", opts.RedeliverCap)}
	}
	if opts.Lanes == 0 {
		opts.Lanes = 8
	}
	if opts.RedeliverBase == 0 {
		opts.RedeliverBase = 500 * time.Millisecond
	}
	if opts.RedeliverCap == 0 {
		opts.RedeliverCap = 30 * time.Second
	}
	if opts.RedeliverCap < opts.RedeliverBase {
		opts.RedeliverCap = opts.RedeliverBase
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	r := &runner{opts: opts, stop: ctx.Done(), fail: fail, held: map[string]*heldFlow{}, wake: make(chan struct{}, 1)}
	lanes := make([]chan item, opts.Lanes)
	var wg sync.WaitGroup
	for i := range lanes {
		lanes[i] = make(chan item, laneBuffer)
		wg.Go(func() { r.lane(lanes[i]) })
	}
	heldCtx, stopHeld := context.WithCancel(ctx)
	var held sync.WaitGroup
	held.Go(func() { r.retryHeld(heldCtx) })
	held.Go(func() { r.drainer(heldCtx) })
	defer func() {
		stopHeld()
		held.Wait()
		r.stopTimers()
		for _, l := range lanes {
			close(l)
		}
		wg.Wait()
	}()
	for {
		env, err := src.Next(ctx)
		if ctx.Err() != nil {
			if env != nil {
				env.Redeliver(0)
			}
			return fatal(ctx)
		}
		if err != nil {
			return err
		}
		m, err := env.Message()
		if err != nil {
			r.report(Applied{Message: m, Action: ActionReject, Err: errs.Join(err, env.Reject())})
			continue
		}
		select {
		case lanes[laneOf(m.Delivery.Flow, len(lanes))] <- item{env: env, m: m}:
		case <-ctx.Done():
			env.Redeliver(0)
			return fatal(ctx)
		}
	}
}

// fatal is what Run returns once its ctx is done: the error that stopped it
// (runner.stopOn), or nil when the caller's ctx ended.
func fatal(ctx context.Context) error {
	if err := context.Cause(ctx); gone(err) {
		return err
	}
	return nil
}

type runner struct {
	opts Options
	stop <-chan struct{}
	fail context.CancelCauseFunc // stops Run with its cause (stopOn)

	// held are the flows known to have held messages (this consumer held
	// them, or retryHeld listed them): an accepted message of one of them
	// is followed by a drain, and only then. queue and wake feed the
	// drainer, which applies long runs of held messages off the lanes.
	mu      sync.Mutex
	held    map[string]*heldFlow
	queue   []string
	stopped bool
	wake    chan struct{}
}

// heldFlow is what the consumer knows of a flow with held messages.
type heldFlow struct {
	queued  bool        // in the drainer's queue
	timer   *time.Timer // a retry scheduled (retryLater)
	tries   int         // drains in a row that applied nothing
	refused bool        // its last drain stopped at a permanent answer
	logged  time.Time   // when that was last logged at error level
}

// noteDrain records a drain of f that applied n messages and stopped at
// out: whether to log the refusal at error level (at most once per
// RedeliverCap a flow: each message arriving behind a refused head drains
// it, and logged every line, a busy flow flooded the log), and whether the
// flow goes on after a refusal (logged once, at info level).
func (r *runner) noteDrain(f string, n int, out fairrelay.Outcome, drained bool) (logRefusal, recovered bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.flow(f)
	// Recovered: the refused event applied (n > 0), or a drain that ran
	// stopped at no refusal — the refused event waived, with nothing held
	// after it to apply (a fresh user's report: no line said so then).
	if h.refused && drained && (n > 0 || out.Class() != fairrelay.ClassPermanent) {
		recovered, h.refused = true, false
	}
	if out.Class() == fairrelay.ClassPermanent {
		h.refused = true
		if time.Since(h.logged) >= r.opts.RedeliverCap {
			logRefusal, h.logged = true, time.Now()
		}
	}
	return logRefusal, recovered
}

// Drain sizes: a lane applies at most inlineDrain held messages after the
// message that let them follow on (so a message of another flow in the lane
// waits at most that long), and hands the rest to the drainer, which takes
// drainBatch of a flow at a time, in turn with the other flows.
const (
	inlineDrain = 64
	drainBatch  = 256
)

func (r *runner) flow(f string) *heldFlow {
	h := r.held[f]
	if h == nil {
		h = &heldFlow{}
		r.held[f] = h
	}
	return h
}

func (r *runner) isHeld(f string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held[f] != nil
}

// requestDrain queues f for the drainer.
func (r *runner) requestDrain(f string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	h := r.flow(f)
	if h.queued {
		return
	}
	h.queued = true
	r.queue = append(r.queue, f)
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// settled records what a drain of f found: more to apply now (queued for
// the drainer), held messages that wait (a retry after the backoff of the
// drains in a row that applied nothing, as a redelivery's: their
// predecessor may be applied by another consumer or receiver, or their
// cause fixed), or nothing held (forgotten).
func (r *runner) settled(f string, res inbox.HeldResult, err error, limit int) {
	switch {
	case err == nil && !res.Remaining:
		r.mu.Lock()
		if h := r.held[f]; h != nil && !h.queued {
			if h.timer != nil {
				h.timer.Stop()
			}
			delete(r.held, f)
		}
		r.mu.Unlock()
	case err == nil && res.Stopped == "" && len(res.Applied) >= limit:
		r.requestDrain(f)
	default:
		r.retryLater(f, len(res.Applied) > 0)
	}
}

// retryLater schedules a drain of f after the backoff of its drains in a
// row that applied nothing (reset when this one applied some), unless one
// is scheduled.
func (r *runner) retryLater(f string, progressed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	h := r.flow(f)
	if progressed {
		h.tries = 0
	}
	if h.timer != nil {
		return
	}
	h.tries++
	h.timer = time.AfterFunc(r.backoff(h.tries), func() {
		r.mu.Lock()
		if h := r.held[f]; h != nil {
			h.timer = nil
		}
		r.mu.Unlock()
		r.requestDrain(f)
	})
}

func (r *runner) stopTimers() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	for _, h := range r.held {
		if h.timer != nil {
			h.timer.Stop()
		}
	}
}

// item is a decoded message waiting for its lane.
type item struct {
	env Envelope
	m   Message
}

// laneOf is the lane of flow's messages, of n.
func laneOf(flow string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(flow))
	return int(h.Sum32() % uint32(n))
}

func (r *runner) lane(ch <-chan item) {
	for it := range ch {
		select {
		case <-r.stop:
			// Shutting down: not applied, so back to the broker at once.
			it.env.Redeliver(0)
			continue
		default:
		}
		r.apply(it.env, it.m)
	}
}

// retryHeld queues every flow with held messages for the drainer, at the
// start and then every RedeliverCap, until ctx is done: a consumer that
// restarted, or that shares the inbox with another, finds what it did not
// hold itself.
func (r *runner) retryHeld(ctx context.Context) {
	for {
		after := ""
		for {
			flows, err := r.opts.Inbox.HeldFlows(ctx, after, 100)
			if err != nil {
				if ctx.Err() == nil {
					// An idle consumer meets the inbox gone here first.
					r.stopOn(err)
					r.opts.Logger.Warn("consume: could not list the held messages; retried later", "err", err)
				}
				break
			}
			for _, f := range flows {
				r.requestDrain(f)
			}
			if len(flows) < 100 {
				break
			}
			after = flows[len(flows)-1]
		}
		t := time.NewTimer(r.opts.RedeliverCap)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// drainer applies the queued flows' held messages, drainBatch of a flow at
// a time, the flows in turn, until ctx is done.
func (r *runner) drainer(ctx context.Context) {
	for {
		r.mu.Lock()
		var f string
		if len(r.queue) > 0 {
			f = r.queue[0]
			r.queue = r.queue[1:]
			if h := r.held[f]; h != nil {
				h.queued = false
			}
		}
		r.mu.Unlock()
		if f == "" {
			select {
			case <-ctx.Done():
				return
			case <-r.wake:
				continue
			}
		}
		if ctx.Err() != nil {
			return
		}
		r.drain(f, drainBatch)
	}
}

// drain applies up to limit of flow's held messages that follow on (inbox
// ReceiveHeld), reports each, and settles what is left.
func (r *runner) drain(flow string, limit int) {
	ctx, cancel := context.WithTimeout(context.Background(), receiveTimeout)
	defer cancel()
	res, err := r.opts.Inbox.ReceiveHeld(ctx, flow, limit)
	for _, a := range res.Applied {
		r.report(Applied{Message: Message{Delivery: inbox.Delivery{EventID: a.ID, Flow: a.Flow, Seq: a.Seq}},
			Outcome: fairrelay.OutcomeAccepted, Action: ActionApplied})
	}
	if err != nil {
		r.stopOn(err)
		r.opts.Metrics.drainFailed()
	}
	logRefusal, recovered := r.noteDrain(flow, len(res.Applied), res.Stopped, err == nil)
	r.settled(flow, res, err, limit)
	log := r.opts.Logger.With("flow", flow)
	switch {
	case recovered:
		log.Info("consume: a flow refused before goes on (its refused event applied, or waived)", "applied", len(res.Applied))
	case len(res.Applied) > 0 && limit == drainBatch:
		// The drainer's: a long run, a retry after a wait, or what a
		// restarted consumer found held (the inline drains after an
		// event, the common case, are not worth a line).
		log.Info("consume: held events applied", "applied", len(res.Applied))
	}
	switch {
	case err != nil:
		// "Stopped on an error", not "could not be applied": a commit
		// that failed and could not be read back may have applied its
		// message (fairrelay.ErrCommitUnknown, which err then says).
		log.Warn("consume: applying the flow's held messages stopped on an error; retried later", "applied", len(res.Applied), "err", err)
	case res.Stopped.Class() == fairrelay.ClassPermanent && logRefusal:
		log.Error("consume: the inbox refuses a held event for good; its flow waits in the inbox until the cause is fixed (logged at most once per cap)",
			"id", res.StoppedID, "outcome", res.Stopped, "cap", r.opts.RedeliverCap)
	case res.Stopped.Class() == fairrelay.ClassPermanent:
		log.Debug("consume: the inbox still refuses a held event", "id", res.StoppedID, "outcome", res.Stopped)
	}
}

// apply receives one message in the inbox and settles it with the broker.
func (r *runner) apply(env Envelope, m Message) {
	ctx, cancel := context.WithTimeout(context.Background(), receiveTimeout)
	out, err := r.opts.Inbox.Receive(ctx, m.Delivery)
	cancel()
	a := Applied{Message: m, Outcome: out, Err: err}
	switch {
	case err == nil && out.Class() == fairrelay.ClassAck:
		a.Action = ActionAck
		a.Err = env.Ack()
		if out == fairrelay.OutcomeAccepted && r.isHeld(m.Delivery.Flow) {
			// Before the message's own report: whoever waits for it finds
			// the held messages that followed on applied too (the first
			// inlineDrain; the drainer takes the rest).
			r.drain(m.Delivery.Flow, inlineDrain)
		}
		r.report(a)
		return
	case err == nil && (out == fairrelay.OutcomeGap || out.Class() == fairrelay.ClassPermanent):
		ctx, cancel := context.WithTimeout(context.Background(), receiveTimeout)
		held, herr := r.opts.Inbox.Hold(ctx, m.Delivery, out)
		cancel()
		switch {
		case herr != nil:
			r.stopOn(herr)
			a.Action, a.Delay = ActionRedeliver, r.backoff(m.Delivered)
			a.Err = errs.Join(herr, env.Redeliver(a.Delay))
		case !held:
			// Applied meanwhile (another consumer): done with.
			a.Action = ActionAck
			a.Err = env.Ack()
		default:
			a.Action = ActionHold
			a.Err = env.Ack()
			if out.Class() == fairrelay.ClassPermanent {
				// Logged by report below: the drain that follows need not.
				r.noteDrain(m.Delivery.Flow, 0, out, false)
			}
		}
		if herr == nil && held {
			// Its predecessor may have been applied since Receive read
			// the flow (another consumer, which found nothing held yet);
			// if not, the drain schedules a retry, as a redelivery was.
			// Before the message's own report, as after an accepted one:
			// whoever waits for the report then sees the drain's work
			// done (the broker conformance suite raised the receiver's
			// limit on the report and met the drain applying the held
			// copy beside its own second delivery).
			r.drain(m.Delivery.Flow, inlineDrain)
		}
		r.report(a)
		return
	case errors.Is(err, fairrelay.ErrInvalidInput) && !errors.Is(err, inbox.ErrApply):
		// The message names an id, flow or seq no event can have
		// (fairrelay.CheckID): every copy of it will be refused alike. It
		// is not a fairrelay message; redelivered, each copy took a place
		// in the broker's window of unacked messages for good, and
		// enough of them stopped every other flow (a breaker's report).
		a.Action = ActionReject
		a.Err = errs.Join(err, env.Reject())
	default:
		r.stopOn(err)
		a.Action, a.Delay = ActionRedeliver, r.backoff(m.Delivered)
		a.Err = errs.Join(err, env.Redeliver(a.Delay))
	}
	r.report(a)
}

// stopOn stops Run with err when no redelivery cures it, so that every
// receive would fail alike until the process is restarted: the inbox's
// SQLite file was removed or replaced (fairrelay.ErrFileReplaced; a
// restart opens the new file), or its tables are gone — a PostgreSQL
// schema dropped, a SQLite inbox's tables removed (fairrelay.ErrNotDatabase;
// a restart refuses it until fairrelay migrate --inbox makes it again), or
// the Inbox was closed under Run (fairrelay.ErrClosed: closed by a deferred
// Close before Run returned), as the relay stops on each. Redelivered for ever instead, each message was
// logged "not applied", and nothing exited for a supervisor to see.
func (r *runner) stopOn(err error) {
	if gone(err) {
		r.fail(err)
	}
}

// gone reports whether err says the inbox is no longer there to write
// (stopOn).
func gone(err error) bool {
	return errors.Is(err, fairrelay.ErrFileReplaced) || errors.Is(err, fairrelay.ErrNotDatabase) ||
		errors.Is(err, fairrelay.ErrClosed)
}

// backoff is min(base·2^(n-1), cap) for the n-th delivery.
func (r *runner) backoff(n int) time.Duration {
	d := r.opts.RedeliverBase
	for i := 1; i < n && d < r.opts.RedeliverCap; i++ {
		d *= 2
	}
	return min(d, r.opts.RedeliverCap)
}

func (r *runner) report(a Applied) {
	d := a.Message.Delivery
	log := r.opts.Logger.With("id", d.EventID, "flow", d.Flow, "seq", d.Seq, "delivered", a.Message.Delivered)
	switch {
	case a.Action == ActionReject:
		log.Error("consume: not a fairrelay message, rejected", "err", a.Err)
	case a.Action == ActionAck && a.Err != nil:
		log.Warn("consume: applied, but the ack did not reach the broker: the message comes again and answers duplicate",
			"outcome", a.Outcome, "err", a.Err)
	case a.Action == ActionHold && a.Err != nil:
		log.Warn("consume: held in the inbox, but the ack did not reach the broker: the message comes again and is held once",
			"outcome", a.Outcome, "err", a.Err)
	case a.Err != nil && errors.Is(a.Err, fairrelay.ErrCommitUnknown):
		// Not "not applied": the inbox's commit failed and could not be
		// read back, so it may have applied the message.
		log.Warn("consume: the inbox's commit failed and could not be read back: the message may have been applied; redelivered later (it answers duplicate if it was)",
			"after", a.Delay, "err", a.Err)
	case a.Err != nil:
		log.Warn("consume: not applied, redelivered later", "outcome", a.Outcome, "after", a.Delay, "err", a.Err)
	case a.Outcome == fairrelay.OutcomeSequenceConflict:
		// A copy of a seq its flow applied already (under another id, or
		// a late copy whose receipt was pruned): superseded, it holds
		// nothing up (two breakers read "its flow waits" and found the
		// flow's next event applied at once).
		log.Warn("consume: the inbox refused a copy of a seq its flow applied already (sequence_conflict); it is held as superseded and its flow goes on (fairrelay inspect --inbox I held; prune --inbox I --superseded-held drops it)",
			"id", a.Message.Delivery.EventID, "flow", a.Message.Delivery.Flow, "seq", a.Message.Delivery.Seq)
	case a.Outcome.Class() == fairrelay.ClassPermanent:
		log.Error("consume: the inbox refused the event for good; it is held in the inbox and its flow waits there until the cause is fixed",
			"outcome", a.Outcome, "retried_after", "a backoff from "+r.opts.RedeliverBase.String()+" doubling to "+r.opts.RedeliverCap.String())
	default:
		log.Debug("consume: applied", "outcome", a.Outcome, "action", a.Action, "after", a.Delay)
	}
	r.opts.Metrics.observe(a)
	if r.opts.OnApplied != nil {
		// The application's hook, after the message was settled: a panic
		// in it is logged and the consumer goes on (it ended the
		// consumer's process, as a panic in Apply did).
		func() {
			defer func() {
				if v := recover(); v != nil {
					log.Error("consume: the OnApplied hook panicked; the consumer goes on", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				}
			}()
			r.opts.OnApplied(a)
		}()
	}
}
