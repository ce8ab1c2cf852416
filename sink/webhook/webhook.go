// Package webhook is the HTTP sink of fairrelay: each delivery is a POST of
// the event body, signed per Standard Webhooks (webhook-id,
// webhook-timestamp, webhook-signature: HMAC-SHA256 with a shared secret),
// with the event's flow, seq and generation in Fairrelay-* headers. It also
// holds the Verifier a receiver uses to check those signatures.
//
// The signature covers the event id, the flow and the seq: the webhook-id
// binds all three (MessageID), so a receiver that verifies with any
// Standard Webhooks library and reads them back with ParseMessageID acts on
// signed values only. The Fairrelay-* headers repeat them unsigned, for
// reading; a receiver must not trust them over the webhook-id.
//
// The receiver contract: a JSON answer {"status": "<outcome>"} naming a
// fairrelay outcome (SPEC §2–§3) is taken as that outcome when the HTTP
// status agrees with it (an ack with a 2xx, a permanent outcome with a
// non-transient 4xx, a transient one with any status; inbox.WriteOutcome
// answers that way); a 2xx naming a permanent outcome says two things and
// is retried. A 2xx whose body starts as a JSON object and does not parse
// (cut off at Options.MaxResponseBytes, or two values) names a status
// nobody can read, and is retried. Otherwise the HTTP status decides: 2xx →
// accepted; 408, 425, 429
// and 5xx → retry; any other status → retry, unless the operator listed it
// in Options.Permanent, which makes it rejected (permanent). A Retry-After
// header sets a floor on the next attempt. An unknown answer is never
// silently permanent.
package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/jsontext"
	"github.com/fairrelay/fairrelay/sink"
)

// Options configure a Sink.
type Options struct {
	// URL is the receiver's endpoint, http:// or https://. Required.
	URL string
	// Key is the HMAC key from ParseSecret: every request is signed with it
	// (Standard Webhooks: webhook-id, webhook-timestamp, webhook-signature).
	// Required unless Unsigned is set.
	Key []byte
	// Unsigned sends requests without a signature, for a receiver that
	// checks none (a test server, a receiver reached only through a
	// trusted network). It must be asked for: a forgotten Key would
	// otherwise send deliveries a receiver cannot tell from forged ones,
	// and a receiver that checks signatures refuses with 401, which is
	// retried until the head's budget is spent. Set with a Key it is an
	// error.
	Unsigned bool
	// Timeout bounds one request, connection included. Defaults to 10s.
	// The relay's own per-delivery deadline applies as well.
	Timeout time.Duration
	// MaxResponseBytes is how much of an answer is read, in bytes; the rest
	// is discarded, and a 2xx JSON answer cut off there is retried (its
	// status unread). Defaults to 64 KiB.
	MaxResponseBytes int64
	// Permanent lists HTTP statuses (300–499, except 408, 425 and 429) the
	// operator declares permanent: they settle as rejected and quarantine
	// the head. Defaults to none.
	Permanent []int
	// MaxRetryAfter caps a receiver's Retry-After. Defaults to 1h.
	MaxRetryAfter time.Duration
	// MaxConnsPerHost bounds the open connections to the receiver (kept
	// alive and reused). Defaults to 64.
	MaxConnsPerHost int
	// Now reads the wall clock for webhook-timestamp and HTTP-date
	// Retry-After values. Defaults to time.Now.
	Now func() time.Time
}

// Sink posts deliveries to one HTTP receiver. Safe for concurrent use.
type Sink struct {
	url       string
	key       []byte
	timeout   time.Duration
	maxRead   int64
	permanent map[int]bool
	maxAfter  time.Duration
	now       func() time.Time
	client    *http.Client
}

var _ sink.Sink = (*Sink)(nil)

func invalid(field, format string, args ...any) error {
	return fairrelay.InvalidInput(field, format, args...)
}

// CheckURL checks raw as New checks Options.URL: an http:// or https://
// URL with a host, no raw space and a TCP port (1 to 65535) if it gives
// one. A caller that joins credentials to the URL afterwards (the CLI, from
// the environment) checks it first, so that no message about the URL can
// hold them. Errors: ErrInvalidInput naming field "sink", quoting raw with
// its password redacted (sink.RedactURL).
func CheckURL(raw string) error {
	_, err := parseURL(raw)
	return err
}

func parseURL(raw string) (*url.URL, error) {
	if bad := sink.BadSpace(raw); bad != "" {
		return nil, invalid("sink", "%s", bad)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, invalid("sink", "must be an http:// or https:// URL, got %q", sink.RedactURL(raw))
	}
	// A port no connection can reach (a fresh user's typo, :80800) would
	// fail every delivery as retry until the budget quarantined it, in
	// every flow: refuse it here, as the broker sinks do.
	if bad := sink.BadPort(u); bad != "" {
		return nil, invalid("sink", "%s in %q", bad, sink.RedactURL(raw))
	}
	return u, nil
}

// New checks opts and returns a Sink with its own connection pool. Zero
// values take the defaults Options gives. Errors: ErrInvalidInput naming
// field "sink" (bad URL), "timeout", "max_response_bytes",
// "max_retry_after" or "max_conns_per_host" (negative),
// "permanent_status", or "key" (no Key and Unsigned not set, or both set).
func New(opts Options) (*Sink, error) {
	u, err := parseURL(opts.URL)
	if err != nil {
		return nil, err
	}
	// Zero takes a default; a negative value is a mistake, not "default"
	// (a library user's report: these were taken in silence).
	switch {
	case opts.Timeout < 0:
		return nil, invalid("timeout", "must not be negative, got %s", opts.Timeout)
	case opts.MaxResponseBytes < 0:
		return nil, invalid("max_response_bytes", "must not be negative, got %d", opts.MaxResponseBytes)
	case opts.MaxRetryAfter < 0:
		return nil, invalid("max_retry_after", "must not be negative, got %s", opts.MaxRetryAfter)
	case opts.MaxConnsPerHost < 0:
		return nil, invalid("max_conns_per_host", "must not be negative, got %d", opts.MaxConnsPerHost)
	}
	s := &Sink{
		url: u.String(), key: opts.Key, timeout: opts.Timeout, maxRead: opts.MaxResponseBytes,
		permanent: map[int]bool{}, maxAfter: opts.MaxRetryAfter, now: opts.Now,
	}
	if s.timeout == 0 {
		s.timeout = 10 * time.Second
	}
	if s.maxRead <= 0 {
		s.maxRead = 64 << 10
	}
	if s.maxAfter <= 0 {
		s.maxAfter = time.Hour
	}
	if s.now == nil {
		s.now = time.Now
	}
	for _, code := range opts.Permanent {
		if code < 300 || code > 499 || transientStatus(code) {
			return nil, invalid("permanent_status", "%d cannot be permanent: only 300–499 except 408, 425, 429", code)
		}
		s.permanent[code] = true
	}
	switch {
	case len(opts.Key) == 0 && !opts.Unsigned:
		return nil, invalid("key", "no signing key: set Options.Key (from ParseSecret, the receiver's whsec_… secret), or Unsigned to send unsigned requests")
	case len(opts.Key) > 0 && opts.Unsigned:
		return nil, invalid("key", "a Key and Unsigned both set: leave Unsigned false to sign with the Key")
	}
	conns := opts.MaxConnsPerHost
	if conns <= 0 {
		conns = 64
	}
	tr := &http.Transport{
		Proxy:                 nil, // deliveries go straight to the receiver
		DialContext:           (&net.Dialer{Timeout: s.timeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          conns,
		MaxIdleConnsPerHost:   conns, // keep one warm connection per worker
		MaxConnsPerHost:       conns,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   s.timeout,
		ResponseHeaderTimeout: s.timeout,
		ForceAttemptHTTP2:     true,
	}
	s.client = &http.Client{
		Transport: tr,
		// A redirect is an answer, not a hop to follow: it is classified
		// like any other status (retry unless configured permanent).
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return s, nil
}

// Close closes idle connections.
func (s *Sink) Close() { s.client.CloseIdleConnections() }

// Deliver posts d.Body to the URL with the Standard Webhooks and Fairrelay-*
// headers and classifies the answer (see the package doc). The error is
// non-nil when no answer came back (connection refused, timeout, ctx done);
// the relay then settles retry.
func (s *Sink) Deliver(ctx context.Context, d sink.Delivery) (sink.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(d.Body))
	if err != nil {
		return sink.Result{}, fmt.Errorf("webhook: build request: %w", err)
	}
	h := req.Header
	if json.Valid(d.Body) {
		h.Set("Content-Type", "application/json")
	} else {
		h.Set("Content-Type", "application/octet-stream")
	}
	h.Set("User-Agent", "fairrelay")
	ts := s.now()
	// The signed webhook-id binds the id, the flow and the seq (MessageID).
	msgID := MessageID(d.EventID, d.Flow, d.Seq)
	h.Set(HeaderID, msgID)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	if s.key != nil {
		h.Set(HeaderSignature, Sign(s.key, msgID, ts, d.Body))
	}
	h.Set(HeaderEventID, d.EventID)
	h.Set(HeaderFlow, d.Flow)
	h.Set(HeaderSeq, strconv.FormatInt(d.Seq, 10))
	h.Set(HeaderGeneration, strconv.FormatInt(d.Generation, 10))
	h.Set(HeaderAttempt, strconv.FormatInt(d.Attempt, 10))
	resp, err := s.client.Do(req)
	if err != nil {
		return sink.Result{}, fmt.Errorf("webhook: post %s: %w", d.EventID, err)
	}
	// One byte past the limit tells an answer cut off from one that fits.
	body, err := io.ReadAll(io.LimitReader(resp.Body, s.maxRead+1))
	cut := int64(len(body)) > s.maxRead
	if cut {
		body = body[:s.maxRead]
	}
	// Drain a little more so the connection can be reused, then close.
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	if err != nil {
		return sink.Result{}, fmt.Errorf("webhook: read answer to %s: %w", d.EventID, err)
	}
	res := s.classify(resp.StatusCode, resp.Header, body, cut, ts)
	if cut {
		res.Detail += fmt.Sprintf("; the answer was cut off after %d bytes (MaxResponseBytes)", s.maxRead)
	}
	return res, nil
}

// unreadable reports whether body, a 2xx answer's, is meant as a JSON
// object — its first byte after white space and a UTF-8 byte order mark is
// '{' — that does not parse: cut off at MaxResponseBytes or by a connection
// that closed mid-answer, two values, a byte order mark. Its status is
// unknown, and an unknown answer is transient (SPEC §2): taken as the 2xx
// alone, {"status":"retry", …} cut off at 64 KiB acked an event the
// receiver had not applied (a breaker's report).
//
// An answer cut off after nothing but white space is unreadable too: what
// followed it is unknown (64 KiB of spaces, then {"status":"retry"}).
func unreadable(body []byte, cut bool) bool {
	t := bytes.TrimLeft(bytes.TrimPrefix(bytes.TrimLeft(body, " \t\r\n"), []byte("\ufeff")), " \t\r\n")
	if len(t) == 0 {
		return cut
	}
	return t[0] == '{' && !json.Valid(t)
}

// skewWorthNaming is the smallest distance between the receiver's clock
// (its Date header) and the relay's that a refusal blames on clock skew.
// Standard Webhooks receivers refuse a timestamp 5 minutes away by default;
// a minute already points at a clock that is not synchronised.
const skewWorthNaming = time.Minute

// classify maps one HTTP answer to a result (package doc). sent is the
// request's webhook-timestamp.
func (s *Sink) classify(status int, h http.Header, body []byte, cut bool, sent time.Time) sink.Result {
	res := sink.Result{Detail: strconv.Itoa(status) + " " + http.StatusText(status)}
	// The answer's keys are matched exactly: encoding/json matches a
	// struct's keys without regard to case (and folds ſ to s), so
	// {"status":"retry","Status":"id_conflict"} read as id_conflict, past
	// the repeated-key rule below, which compares keys exactly (a breaker's
	// report). A value that is not a string is no answer.
	var answer struct{ Status, Cause string }
	// A UTF-8 byte order mark before the answer is not part of it (RFC
	// 8259 lets a parser ignore one): {"status":"retry"} after one was
	// taken as no answer, and its 200 acked the event.
	body = bytes.TrimPrefix(body, []byte("\ufeff"))
	isJSON := json.Valid(body)
	members, objErr := jsontext.Object(body)
	if isJSON && objErr == nil {
		for _, m := range members {
			switch m.Key {
			case "status":
				_ = json.Unmarshal(m.Value, &answer.Status)
			case "cause":
				_ = json.Unmarshal(m.Value, &answer.Cause)
			}
		}
	}
	if status == http.StatusUnauthorized || status == http.StatusForbidden {
		// Say what to fix: otherwise every head ends in budget_exhausted
		// while the operator looks at the wrong thing.
		res.Detail += ": the receiver refused the request: " + refusal(len(s.key) == 0, answer.Cause, h.Get("Date"), sent)
	}
	var dup *jsontext.DuplicateKeyError
	if isJSON && errors.As(objErr, &dup) {
		// {"status":"retry","status":"accepted"}: Go's decoder takes the
		// last, another reader the first; an answer that says two things
		// is taken as neither (a breaker's receiver), and retried.
		res.Outcome = fairrelay.OutcomeRetry
		res.Detail += fmt.Sprintf("; the answer repeats the key %q: ambiguous, retried", dup.Key)
	} else if isJSON && answer.Status != "" {
		if o, err := fairrelay.ParseOutcome(answer.Status); err == nil && consistent(o, status) {
			res.Outcome = o
		} else if err == nil && o.Class() == fairrelay.ClassPermanent && status >= 200 && status <= 299 {
			// {"status":"id_conflict"} with a 200: the receiver refused the
			// event in its words and accepted it in HTTP's. Acked, it was
			// gone for good with no effect applied (a breaker's receiver);
			// quarantined on a 2xx, a generic endpoint's words would decide.
			// An answer that says two things is retried, as a repeated key.
			res.Outcome = fairrelay.OutcomeRetry
			res.Detail += fmt.Sprintf("; the answer names the refusal %q with a 2xx status: contradictory, retried (a permanent refusal needs a 4xx)", o)
		}
	}
	if res.Outcome == "" {
		switch {
		case status >= 200 && status <= 299 && unreadable(body, cut):
			res.Outcome = fairrelay.OutcomeRetry
			res.Detail += "; the answer starts as a JSON object and does not parse (cut off, or more than one value): its status is unknown, retried"
		case status >= 200 && status <= 299:
			res.Outcome = fairrelay.OutcomeAccepted
		case s.permanent[status]:
			res.Outcome = fairrelay.OutcomeRejected
		default:
			// 408, 425, 429, 5xx and every status nobody declared
			// permanent: an unknown answer is never silently permanent.
			res.Outcome = fairrelay.OutcomeRetry
		}
	}
	if res.Outcome.Class() == fairrelay.ClassTransient {
		res.RetryAfter = s.retryAfter(h.Get("Retry-After"))
	}
	if status < 200 || status > 299 {
		if b := bodyStart(body); b != "" {
			res.Detail += "; body: " + b
		}
	}
	return res
}

// DetailBodyBytes is how much of a refusing answer's body (non-2xx) the
// detail of its result quotes, in bytes, for the attempt history.
const DetailBodyBytes = 256

// bodyStart is the start of an answer's body as a detail quotes it: at
// most DetailBodyBytes bytes (sink.Excerpt), white space at the ends
// trimmed.
func bodyStart(body []byte) string {
	return strings.TrimSpace(sink.Excerpt(string(body[:min(len(body), DetailBodyBytes+utf8.UTFMax)]), DetailBodyBytes))
}

// refusal explains a 401 or 403: to a sink that sends unsigned requests,
// by that; else by the cause a fairrelay receiver names (inbox.Handler),
// else by the receiver's Date header when its clock is far from ours, else
// as the usual suspect, the secret.
func refusal(unsigned bool, cause, date string, sent time.Time) string {
	if unsigned {
		// A relay with no key was told to check that its key matches (a
		// fresh user's report).
		return "this relay sends unsigned requests (no --secret; in Go, Options.Unsigned) and the receiver wants them signed: give the relay the receiver's secret (--secret or $FAIRRELAY_SECRET; in Go, Options.Key from ParseSecret)"
	}
	skew := time.Duration(0)
	if t, err := http.ParseTime(date); err == nil {
		skew = t.Sub(sent.Truncate(time.Second))
	}
	clocks := func() string {
		if skew == 0 {
			return "clock skew: the receiver's clock and the relay's differ by more than its tolerance; synchronise them (NTP), or widen the receiver's tolerance (receive --tolerance)"
		}
		dir := "ahead of"
		if skew < 0 {
			dir, skew = "behind", -skew
		}
		return fmt.Sprintf("clock skew: the receiver's clock is %s %s the relay's (its Date header), beyond its tolerance for webhook-timestamp; synchronise the clocks (NTP)", skew, dir)
	}
	switch cause {
	case CauseTimestamp:
		return clocks()
	case CauseSignature, CauseUnsigned:
		return "check that the sender's signing key (the relay's --secret; in Go, webhook.Options.Key) matches the receiver's"
	case CauseMetadata:
		return "its Fairrelay-* headers differ from the signed webhook-id; something between the relay and the receiver rewrote them"
	}
	if skew >= skewWorthNaming || skew <= -skewWorthNaming {
		return clocks()
	}
	return "check that the sender's signing key (the relay's --secret; in Go, webhook.Options.Key) matches the receiver's (and that their clocks agree)"
}

// consistent reports whether a JSON outcome may be taken at this HTTP status:
// an ack only with a 2xx, a permanent outcome only with a 4xx that is not
// transient (408, 425, 429), a transient outcome with any status. A generic
// endpoint that happens to answer {"status":"accepted"} with a 503, or
// {"status":"rejected"} with a 429, is judged by its HTTP status instead, so
// a JSON body can never ack a failure or quarantine a transient refusal.
func consistent(o fairrelay.Outcome, status int) bool {
	switch o.Class() {
	case fairrelay.ClassAck:
		return status >= 200 && status <= 299
	case fairrelay.ClassPermanent:
		return status >= 400 && status <= 499 && !transientStatus(status)
	}
	return true
}

func transientStatus(code int) bool {
	return code == http.StatusRequestTimeout || code == http.StatusTooEarly || code == http.StatusTooManyRequests || code >= 500
}

// retryAfter parses Retry-After (delay-seconds or HTTP-date), capped at
// maxAfter; 0 when absent or malformed. Delay-seconds is any number of
// digits (RFC 9110 §10.2.3): one past int64 is capped too, not dropped (a
// breaker's receiver answered 99999999999999999999 and was retried at once).
func (s *Sink) retryAfter(v string) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	n, err := strconv.ParseInt(v, 10, 64)
	if errors.Is(err, strconv.ErrRange) && v[0] != '-' {
		return s.maxAfter
	}
	if err == nil {
		if n <= 0 {
			return 0
		}
		if n > int64(s.maxAfter/time.Second) {
			return s.maxAfter
		}
		d = time.Duration(n) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(s.now())
	}
	return min(max(d, 0), s.maxAfter)
}
