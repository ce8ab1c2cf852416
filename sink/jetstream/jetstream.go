// Package jetstream is the NATS JetStream sink of fairrelay, on the NATS
// project's own client (github.com/nats-io/nats.go and its jetstream
// package), and the consumer that applies what it published to an inbox
// (Consume).
//
// Each delivery is a JetStream publish to the subject Options.Subject makes
// from the flow (default "fairrelay.{flow}"; the flow's token is
// topic.EncodeFlow of the flow id, so "orders/eu.7" goes to
// "fairrelay.orders%2Feu%2E7"). The message's body is the event's body byte
// for byte, with the headers
//
//	Nats-Msg-Id           the event id: the stream drops a second copy within its
//	                      duplicate window (2 minutes by default)
//	Fairrelay-Flow        the flow id as enqueued (not encoded)
//	Fairrelay-Seq         the event's seq in its flow, decimal
//	Fairrelay-Generation  the claim's generation, decimal (a label)
//	Fairrelay-Attempt     the claim count of the current round, decimal
//
// The stream's publish ack is the answer: an ack is accepted, an ack marked
// duplicate is duplicate. Permanent (rejected, with the broker's words in the
// detail, so the head is quarantined at once): no stream captures the subject
// (after the client's own retries, and only when the JetStream API then
// confirms there is none), a body over the server's max_payload or the
// stream's max_msg_size, a subject that lands in another stream than
// Options.Stream, and a publish the server's permissions refuse. Every other
// failure — a timeout, a lost connection, no connection yet (Connect with
// ConnectOptions.Retry), a stream that is full or temporarily unavailable,
// an API error nobody classified — is an error or retry: transient.
//
// The broker acks that it stored the message, not that anyone applied it.
// Consumers get at least once; for an effect exactly once beyond the
// stream's duplicate window, apply each message through an inbox keyed by
// event id and ack it only after the inbox committed, as Consume does (see
// package consume).
package jetstream

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/consume"
	"github.com/fairrelay/fairrelay/sink"
	"github.com/fairrelay/fairrelay/sink/topic"
)

// DefaultSubject is the subject template when Options.Subject is empty.
const DefaultSubject = "fairrelay." + topic.Placeholder

// Options configure a Sink.
type Options struct {
	// Conn is an open connection, or one still making its first
	// connection (see Connect and ConnectOptions.Retry). Required. The sink does
	// not close it; New chains its asynchronous error handler (the server
	// reports refused publishes there).
	Conn *nats.Conn
	// Subject is the subject template (package topic). Defaults to
	// DefaultSubject. A stream must capture the subjects it makes, for
	// example with the subject "fairrelay.*" or "fairrelay.>".
	Subject string
	// Stream, when set, is the stream the subject must land in
	// (Nats-Expected-Stream): a publish captured by another stream is
	// rejected instead of stored there.
	Stream string
	// Timeout bounds one publish, its retries on no responders included.
	// Defaults to 10s. The relay's own per-delivery deadline applies as
	// well.
	Timeout time.Duration
}

// Sink publishes deliveries to JetStream. Safe for concurrent use.
type Sink struct {
	js      js.JetStream
	conn    *nats.Conn
	subject topic.Template
	stream  string
	timeout time.Duration
	refused *refusals
}

var _ sink.Sink = (*Sink)(nil)

func invalid(field, format string, args ...any) error {
	return fairrelay.InvalidInput(field, format, args...)
}

// New checks opts and returns a Sink. Errors: fairrelay.ErrInvalidInput
// naming "conn", "subject", "stream" or "timeout".
func New(opts Options) (*Sink, error) {
	if opts.Conn == nil {
		return nil, invalid("conn", "required: an open *nats.Conn")
	}
	if opts.Subject == "" {
		opts.Subject = DefaultSubject
	}
	tpl, err := ParseSubject(opts.Subject)
	if err != nil {
		return nil, err
	}
	if opts.Stream != "" && !validStreamName(opts.Stream) {
		return nil, invalid("stream", "%q is not a stream name (no spaces, '.', '*', '>', '/' or '\\')", opts.Stream)
	}
	if opts.Timeout < 0 {
		return nil, invalid("timeout", "must not be negative, got %s", opts.Timeout)
	}
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Second
	}
	j, err := js.New(opts.Conn)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	s := &Sink{js: j, conn: opts.Conn, subject: tpl, stream: opts.Stream, timeout: opts.Timeout,
		refused: &refusals{waiting: map[string]map[*refusalWaiter]struct{}{}}}
	prev := opts.Conn.ErrorHandler()
	opts.Conn.SetErrorHandler(func(c *nats.Conn, sub *nats.Subscription, err error) {
		s.refused.report(err)
		if prev != nil {
			prev(c, sub, err)
		}
	})
	return s, nil
}

// ParseSubject parses a subject template and checks that it makes valid
// subjects to publish to: no whitespace, no wildcards ('*', '>'), no empty
// token. Errors: fairrelay.ErrInvalidInput naming "subject".
func ParseSubject(s string) (topic.Template, error) {
	tpl, err := topic.Parse("subject", s)
	if err != nil {
		return tpl, err
	}
	sample := tpl.Literal("x")
	if strings.ContainsAny(sample, " \t\r\n*>") {
		return tpl, invalid("subject", "%q: a subject to publish to has no whitespace and no wildcard ('*', '>')", s)
	}
	for _, tok := range strings.Split(sample, ".") {
		if tok == "" {
			return tpl, invalid("subject", "%q has an empty token (a leading, trailing or doubled '.')", s)
		}
	}
	return tpl, nil
}

func validStreamName(s string) bool {
	return s != "" && !strings.ContainsAny(s, " \t\r\n.*>/\\")
}

// Subject returns the subject d's flow is published to.
func (s *Sink) Subject(flow string) string { return s.subject.Expand(flow) }

// headerBytes is the size of the NATS header block of a message with the
// headers hs together, as the client sends it: "NATS/1.0\r\n", then
// "Key: value\r\n" per value, then "\r\n".
func headerBytes(hs ...nats.Header) int {
	n := len("NATS/1.0\r\n") + len("\r\n")
	for _, h := range hs {
		for k, vs := range h {
			for _, v := range vs {
				n += len(k) + len(": ") + len(v) + len("\r\n")
			}
		}
	}
	return n
}

// Deliver publishes d and waits for the stream's ack (see the package doc
// for the answers). The error is non-nil when no answer came: ctx done,
// timeout, connection lost; the relay then settles retry.
func (s *Sink) Deliver(ctx context.Context, d sink.Delivery) (sink.Result, error) {
	if err := ctx.Err(); err != nil {
		return sink.Result{}, err
	}
	subj := s.subject.Expand(d.Flow)
	if s.conn.Status() != nats.CONNECTED && !s.conn.HeadersSupported() {
		// Not connected yet (ConnectOptions.Retry): the client knows
		// nothing of the server, and would refuse the headers.
		return sink.Result{}, fmt.Errorf("jetstream: publish %s: no connection to the server yet (the client keeps trying)", d.EventID)
	}
	m := nats.NewMsg(subj)
	m.Data = d.Body
	m.Header.Set(consume.HeaderFlow, d.Flow)
	m.Header.Set(consume.HeaderSeq, strconv.FormatInt(d.Seq, 10))
	m.Header.Set(consume.HeaderGeneration, strconv.FormatInt(d.Generation, 10))
	m.Header.Set(consume.HeaderAttempt, strconv.FormatInt(d.Attempt, 10))
	opts := []js.PublishOpt{js.WithMsgID(d.EventID)}
	extra := nats.Header{js.MsgIDHeader: {d.EventID}}
	if s.stream != "" {
		opts = append(opts, js.WithExpectStream(s.stream))
		extra[js.ExpectedStreamHeader] = []string{s.stream}
	}
	if max := s.conn.MaxPayload(); max > 0 {
		// NATS counts the headers into max_payload: a body under it by
		// less than its headers was refused with the client's bare
		// "maximum payload exceeded" (a breaker's report). The client
		// would refuse it too (nats.ErrMaxPayload); say how big.
		if h := headerBytes(m.Header, extra); int64(len(d.Body)+h) > max {
			return rejected("nats: maximum payload exceeded: the body has %d bytes and its headers %d, more than the server's max_payload of %d (NATS counts headers; raise max_payload or keep bodies under %d bytes)",
				len(d.Body), h, max, max-int64(h)), nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	// A publish the server's permissions refuse gets no answer, only an
	// asynchronous -ERR naming the subject: end the wait when it comes.
	pctx, refuse := context.WithCancelCause(ctx)
	defer refuse(nil)
	unwatch := s.refused.watch(subj, refuse)
	ack, err := s.js.PublishMsg(pctx, m, opts...)
	unwatch()
	if cause := context.Cause(pctx); errors.Is(cause, nats.ErrPermissionViolation) {
		return rejected("%v", cause), nil
	}
	if err == nil {
		res := sink.Result{Outcome: fairrelay.OutcomeAccepted, Detail: fmt.Sprintf("stream %s seq %d", ack.Stream, ack.Sequence)}
		if ack.Duplicate {
			res.Outcome = fairrelay.OutcomeDuplicate
			res.Detail += " (duplicate: the stream already had this Nats-Msg-Id)"
		}
		return res, nil
	}
	var apiErr *js.APIError
	switch {
	case errors.Is(err, nats.ErrMaxPayload):
		return rejected("%v", err), nil
	case errors.As(err, &apiErr):
		switch apiErr.ErrorCode {
		case js.JSErrCodeStreamMessageExceedsMaximum, errCodeStreamNotMatch:
			return rejected("nats: %s (error %d)", apiErr.Description, apiErr.ErrorCode), nil
		}
		// A full stream, a stream without a leader, anything else: an
		// unknown answer is never silently permanent.
		return sink.Result{Outcome: fairrelay.OutcomeRetry, Detail: fmt.Sprintf("nats: %s (error %d)", apiErr.Description, apiErr.ErrorCode)}, nil
	case errors.Is(err, js.ErrNoStreamResponse):
		// No responders: no stream listens on the subject — or JetStream
		// is not up yet (a server starting, a leader election). Only the
		// JetStream API's own answer that no stream captures the subject
		// makes it permanent.
		if _, lerr := s.js.StreamNameBySubject(ctx, subj); errors.Is(lerr, js.ErrStreamNotFound) {
			return rejected("nats: no stream for subject %q (the JetStream API lists none that captures it)", subj), nil
		}
		return sink.Result{}, fmt.Errorf("jetstream: publish %s to %s: %w", d.EventID, subj, err)
	}
	return sink.Result{}, fmt.Errorf("jetstream: publish %s to %s: %w", d.EventID, subj, err)
}

// CheckFlow is the sample flow whose subject Check asks for when the
// subject's template names the flow.
const CheckFlow = "fairrelay-check"

// Check asks the JetStream API which stream captures the subject deliveries
// go to: the one subject, or, for a template that names the flow, the
// subject of the flow CheckFlow (a sample: a stream that captures only some
// flows' subjects may still answer no for it). No stream would reject every
// delivery and quarantine each head, so a relay checks before it starts
// (fairrelay relay refuses a subject without the flow that no stream
// captures, and warns of one with it; it refuses a stream error either
// way). Errors: fairrelay.ErrInvalidInput naming "stream" when
// Options.Stream is set and the server has no such stream, or another
// stream captures the subject (streams' subjects never overlap, so the
// named one can capture no subject of the template's prefix), or naming
// "subject" when no stream captures it; any other failure
// (not connected yet, no answer within Timeout) is returned as it is, and
// says nothing of the streams.
func (s *Sink) Check(ctx context.Context) error {
	subj := s.subject.Expand(CheckFlow)
	if st := s.conn.Status(); st != nats.CONNECTED {
		return fmt.Errorf("jetstream: check subject %q: not connected to the server (%s)", subj, st)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if s.stream != "" {
		// The named stream first: a misspelt stream= fails every
		// delivery, whatever the subject (a fresh user's report: with a
		// template naming the flow it was only a warning).
		if _, err := s.js.Stream(ctx, s.stream); errors.Is(err, js.ErrStreamNotFound) {
			return invalid("stream", "the server has no stream %q: create it, or name the stream that captures %q; every delivery would be rejected and its head quarantined", s.stream, s.subject.Literal("*"))
		} else if err != nil {
			return fmt.Errorf("jetstream: check stream %q: %w", s.stream, err)
		}
	}
	name, err := s.js.StreamNameBySubject(ctx, subj)
	switch {
	case errors.Is(err, js.ErrStreamNotFound) && s.subject.HasFlow():
		return invalid("subject", "no JetStream stream captures subject %q (sample flow %q's): add one that captures %q (nats stream add NAME --subjects '%s'; fairrelay receive --from creates it), or name another subject; every delivery to a subject no stream captures is rejected and its head quarantined",
			subj, CheckFlow, s.subject.Literal("*"), s.subject.Literal("*"))
	case errors.Is(err, js.ErrStreamNotFound):
		return invalid("subject", "no JetStream stream captures subject %q: add one (nats stream add NAME --subjects '%s'), or name another subject; every delivery to it would be rejected and its head quarantined", subj, subj)
	case err != nil:
		return fmt.Errorf("jetstream: check subject %q: %w", subj, err)
	case s.stream != "" && name != s.stream:
		return invalid("stream", "subject %q is captured by stream %q, not %q: every delivery would be rejected and its head quarantined", subj, name, s.stream)
	}
	return nil
}

// errCodeStreamNotMatch is JetStream's "expected stream does not match"
// (Nats-Expected-Stream names another stream than the one that captured the
// subject); the client names no constant for it.
const errCodeStreamNotMatch js.ErrorCode = 10060

func rejected(format string, args ...any) sink.Result {
	return sink.Result{Outcome: fairrelay.OutcomeRejected, Detail: fmt.Sprintf(format, args...)}
}

// refusals routes the server's asynchronous permission errors to the
// publishes waiting on the subject they name.
type refusals struct {
	mu      sync.Mutex
	waiting map[string]map[*refusalWaiter]struct{}
}

type refusalWaiter struct{ cancel context.CancelCauseFunc }

// publishRefused matches the server's -ERR for a refused publish, as the
// client reports it: ... Permissions Violation for Publish to "subject".
var publishRefused = regexp.MustCompile(`(?i)permissions violation for publish to "([^"]+)"`)

func (r *refusals) watch(subject string, cancel context.CancelCauseFunc) (unwatch func()) {
	w := &refusalWaiter{cancel: cancel}
	r.mu.Lock()
	if r.waiting[subject] == nil {
		r.waiting[subject] = map[*refusalWaiter]struct{}{}
	}
	r.waiting[subject][w] = struct{}{}
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		delete(r.waiting[subject], w)
		if len(r.waiting[subject]) == 0 {
			delete(r.waiting, subject)
		}
		r.mu.Unlock()
	}
}

func (r *refusals) report(err error) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	m := publishRefused.FindStringSubmatch(err.Error())
	if m == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for w := range r.waiting[m[1]] {
		w.cancel(err)
	}
}
