package inbox

import (
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/loopback"
	"github.com/fairrelay/fairrelay/sink"
	"github.com/fairrelay/fairrelay/sink/webhook"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// HandlerOptions configure Handler.
type HandlerOptions struct {
	// Verify checks a request's headers and body before anything is
	// written, typically (*webhook.Verifier).Verify. A non-nil error answers
	// 401 and writes nothing. Nil accepts unsigned requests, from anyone
	// who reaches the handler: wrap it in LoopbackOnly when it listens on
	// this machine only (fairrelay receive without --secret does).
	Verify func(h http.Header, body []byte) error
	// MaxBodyBytes is the largest request body read, in bytes; a larger one
	// answers 413. Defaults to 1 MiB (the queue's default body limit).
	MaxBodyBytes int64
	// MaxConcurrent bounds the requests handled at once, counted from their
	// headers until the answer; one more is answered 503 with Retry-After:
	// 1 at once (the relay retries it) instead of waiting, so slow or
	// stalled clients cannot take every goroutine and connection. Defaults
	// to DefaultMaxConcurrent. The server's read timeout is what cuts a
	// client that trickles its body (fairrelay receive --read-timeout).
	MaxConcurrent int
	// Logger receives one debug line per delivery and errors (at error
	// level: the text that a 500's message, "the receiver's log has the
	// error", sends the operator to). Defaults to slog.Default(), so that
	// no error is lost; give slog.New(slog.DiscardHandler) to drop them.
	Logger *slog.Logger
}

// DefaultMaxConcurrent is HandlerOptions.MaxConcurrent's default: far above
// what a relay sends at once (one request per worker), and far below what
// exhausts a process.
const DefaultMaxConcurrent = 64

// Handler returns the inbox as an HTTP service (SPEC §3): it takes
// deliveries as POST, on whatever path it is mounted at, from the webhook sink, checks the signature with
// opts.Verify, runs Receive and answers {"status": "<outcome>"} (the
// webhook sink's receiver contract) with an HTTP status that a
// non-fairrelay client reads the same way: 200 accepted or duplicate, 409
// gap, 422 a permanent outcome, 503 retry. Failures answer
// {"error": code, "message": …}: 400 a malformed delivery (an id or flow
// that breaks fairrelay.CheckID included), 401 a bad or missing signature
// or Fairrelay-* headers that differ from the signed webhook-id (with a
// "cause": webhook.Cause), 405 not POST, 408 a body slower than the
// server's read timeout, 413 too large, 503 busy or over
// opts.MaxConcurrent requests at once, 500 a database error or an error of
// Options.Apply; in every failure nothing is written, but for a commit
// that failed and whose receipt could not be read back
// (fairrelay.ErrCommitUnknown: it may have been applied), which its
// message says. A 500's or a busy
// 503's message says which failure it was, never the error's text (which
// names the store's statements and files): Logger gets that, at error level.
// Its code is the error's (fairrelay.CodeOf: database, not_a_database, …),
// or "apply" for an error of Options.Apply that has none, "internal" for
// any other without one.
func (in *Inbox) Handler(opts HandlerOptions) http.Handler {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 1 << 20
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if opts.MaxConcurrent <= 0 {
		opts.MaxConcurrent = DefaultMaxConcurrent
	}
	slots := make(chan struct{}, opts.MaxConcurrent)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
		default:
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, "overloaded", fmt.Sprintf("%d requests are in progress, the most this receiver takes at once; try again", opts.MaxConcurrent))
			return
		}
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, "method", "deliveries are POST")
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, opts.MaxBodyBytes))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				writeError(w, http.StatusRequestEntityTooLarge, "body", fmt.Sprintf("over %d bytes", opts.MaxBodyBytes))
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// The server's read timeout cut a body that came too
				// slowly; the connection closes after this answer.
				log.Info("inbox: the request's body did not arrive within the read timeout", "remote", r.RemoteAddr)
				writeError(w, http.StatusRequestTimeout, "body", "did not arrive within the server's read timeout")
				return
			}
			writeError(w, http.StatusBadRequest, "body", err.Error())
			return
		}
		if opts.Verify != nil {
			if err := opts.Verify(r.Header, body); err != nil {
				log.Warn("inbox: rejected an unverified request", "remote", r.RemoteAddr, "err", err)
				writeUnauthorized(w, err)
				return
			}
		}
		d, err := DeliveryFromHeader(r.Header, body)
		if err != nil {
			if opts.Verify != nil && errors.Is(err, webhook.ErrMetadata) {
				// Signed, but the headers say another flow or seq than the
				// signature: a replay with changed metadata.
				log.Warn("inbox: rejected a request whose headers differ from its signed webhook-id", "remote", r.RemoteAddr, "err", err)
				writeUnauthorized(w, err)
				return
			}
			writeError(w, http.StatusBadRequest, string(fairrelay.CodeInvalidInput), err.Error())
			return
		}
		out, err := in.Receive(r.Context(), d)
		if err != nil {
			if errors.Is(err, fairrelay.ErrInvalidInput) && !errors.Is(err, ErrApply) {
				writeError(w, http.StatusBadRequest, string(fairrelay.CodeInvalidInput), err.Error())
				return
			}
			if clientLeft(r, err) {
				// The client went away before the commit: nothing was
				// written, and nobody is left to answer. Not an error of
				// this receiver; the relay delivers again.
				log.Info("inbox: the client went away before the delivery was applied", "id", d.EventID, "remote", r.RemoteAddr, "err", err)
				// Nobody reads it, but a handler that writes nothing is
				// counted 200 by the metrics around it (an SRE's drill: a
				// locked inbox read as 9 requests answered 200 for 4
				// applied).
				w.WriteHeader(StatusClientClosedRequest)
				return
			}
			log.Error("inbox: receive failed", "id", d.EventID, "err", err)
			// The answer names the kind of failure, not the error's text:
			// that names the store's statements, tables and files, which
			// are the receiver's business, not its clients'. Its log has it.
			if errors.Is(err, fairrelay.ErrBusy) {
				w.Header().Set("Retry-After", "1")
				writeError(w, http.StatusServiceUnavailable, string(fairrelay.CodeBusy), "the receiver's store is busy; try again (the receiver's log has the error)")
				return
			}
			code, msg := fairrelay.CodeOf(err), "the receiver could not record the delivery; nothing was written (the receiver's log has the error)"
			if errors.Is(err, fairrelay.ErrCommitUnknown) {
				// Not "nothing was written": the commit may have applied it.
				msg = "the receiver's commit failed and could not be read back: the delivery may have been applied; sent again, it answers duplicate if it was (the receiver's log has the error)"
			}
			if errors.Is(err, ErrApply) {
				msg = "the receiver's Apply failed; nothing was written (the receiver's log has the error)"
				if code == "" {
					code = "apply"
				}
			} else if code == "" {
				code = "internal"
			}
			writeError(w, http.StatusInternalServerError, string(code), msg)
			return
		}
		log.Debug("inbox: delivery", "id", d.EventID, "flow", d.Flow, "seq", d.Seq, "outcome", out)
		WriteOutcome(w, out)
	})
}

// StatusClientClosedRequest (499, nginx's) is the status Handler writes,
// for metrics and logs around it, when the client went away before its
// delivery was applied: no answer reaches anybody, nothing was written, and
// the relay delivers again. Without it a handler that wrote nothing was
// recorded as 200.
const StatusClientClosedRequest = 499

// DeliveryFromHeader builds a Delivery from a webhook request: the event
// id, the flow and the seq from webhook-id (webhook.ParseMessageID), which
// the signature covers — never from the unsigned Fairrelay-* headers. Those
// may be present, but each must then equal its signed value. Errors:
// ErrInvalidInput naming webhook-id when it is missing or not
// webhook.MessageID's format, naming id or flow when the signed value breaks
// fairrelay.CheckID's rule (a receiver stores only what a queue could have
// sent), or naming the Fairrelay-* header that differs from the signed value
// (then the error also wraps webhook.ErrMetadata; Handler answers 401 to it
// when it checks signatures). Call it after verifying the signature.
func DeliveryFromHeader(h http.Header, body []byte) (Delivery, error) {
	bad := func(field, msg string, err error) error {
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: field, Message: msg, Err: err}
	}
	msgID := h.Get(webhook.HeaderID)
	if msgID == "" {
		return Delivery{}, bad(webhook.HeaderID, "missing", nil)
	}
	id, flow, seq, err := webhook.ParseMessageID(msgID)
	if err != nil {
		return Delivery{}, bad(webhook.HeaderID, "malformed", err)
	}
	d := Delivery{EventID: id, Flow: flow, Seq: seq, Body: body}
	if err := d.check(); err != nil {
		return Delivery{}, err
	}
	for _, m := range []struct{ header, signed string }{
		{webhook.HeaderEventID, id}, {webhook.HeaderFlow, flow}, {webhook.HeaderSeq, strconv.FormatInt(seq, 10)},
	} {
		vs := h.Values(m.header)
		if len(vs) == 0 {
			continue
		}
		if len(vs) > 1 || vs[0] != m.signed {
			return Delivery{}, bad(m.header, fmt.Sprintf("%s differs from the signed %s, which says %q", sink.QuoteExcerpt(strings.Join(vs, ", "), 40), webhook.HeaderID, m.signed), webhook.ErrMetadata)
		}
	}
	return d, nil
}

// WriteOutcome answers a delivery with {"status": "<outcome>"} and the HTTP
// status Handler documents for it, for receivers that run Receive in their
// own handler.
func WriteOutcome(w http.ResponseWriter, o fairrelay.Outcome) {
	code := http.StatusOK
	switch {
	case o == fairrelay.OutcomeGap:
		code = http.StatusConflict
	case o.Class() == fairrelay.ClassPermanent:
		code = http.StatusUnprocessableEntity
	case o.Class() == fairrelay.ClassTransient:
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, map[string]string{"status": string(o)})
}

// writeUnauthorized answers 401 naming the cause (webhook.Cause), which the
// webhook sink reports to the operator: a clock to fix, or a secret.
func writeUnauthorized(w http.ResponseWriter, err error) {
	writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "unauthorized", "cause": webhook.Cause(err), "message": err.Error()})
}

func writeError(w http.ResponseWriter, code int, errCode, msg string) {
	writeJSON(w, code, map[string]string{"error": errCode, "message": msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	// Not HTML: <, > and & as they are (an error names fr1:<id>:<gen>),
	// not as \u003c…, which a person reading the answer has to decode.
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// clientLeft reports whether err, Receive's error for request r, is the
// client's going away: r's context is done and err is that context's
// (Receive's waits and statements end with it). A database error that came
// while the client was gone — a commit, which outlives the request, that
// failed — is the receiver's failure all the same: the client's leaving did
// not cause it, and taken for it, it was logged at info level only.
func clientLeft(r *http.Request, err error) bool {
	ctxErr := r.Context().Err()
	// A connection the cancel cut while it was being made (its SET on
	// connect, pgstore.PoolConfig) reaches database/sql as a bad
	// connection, not as ctx's error (CI's race run, 1 in 5).
	return ctxErr != nil && (errors.Is(err, ctxErr) || errors.Is(err, driver.ErrBadConn))
}

// LoopbackOnly serves h only to requests addressed to this machine by
// name (a Host of localhost, 127.0.0.1 or [::1], with or without a port),
// and not cross-origin (an Origin header whose host is not the request's).
// Others are answered 421 (cause "host") or 403 (cause "origin") with a
// JSON body, and h never sees them. An unsigned receiver (Verify nil)
// trusts whoever reaches it, and a web page that points its own host name
// at 127.0.0.1 (DNS rebinding) reaches a receiver listening there, its
// requests same-origin to the browser but with the page's host name in
// Host (a breaker's report: such a request wrote to the inbox). The relay
// sends no Origin. fairrelay receive without --secret serves its handler
// through it.
func LoopbackOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopback.Host(r.Host) {
			http.Error(w, `{"status":"refused","cause":"host","error":"this receiver has no secret and answers only to a loopback host name (localhost, 127.0.0.1, [::1])"}`, http.StatusMisdirectedRequest)
			return
		}
		if o := r.Header.Get("Origin"); o != "" {
			if u, err := url.Parse(o); err != nil || u.Host != r.Host {
				http.Error(w, `{"status":"refused","cause":"origin","error":"cross-origin request refused"}`, http.StatusForbidden)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// Instrument registers on reg the receiver's request metrics and
// wraps h to count them: fairrelay_receive_requests_total{code} (requests
// answered, by HTTP status: 200 accepted or duplicate, 401 refused
// signature, 409 gap, 422 permanent, 503 retry or busy; 400 a request
// that is not a delivery, 500 the inbox's database failed) and
// fairrelay_receive_request_seconds{code} (from the request's headers to
// its answer, the inbox transaction included). The series of those codes
// start at zero, so that an alert's increase() sees the first 500 or 422.
// h is typically Handler's (fairrelay receive --metrics-addr serves these).
// Errors: reg's, when the metrics are registered on it already.
func Instrument(reg prometheus.Registerer, h http.Handler) (http.Handler, error) {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fairrelay_receive_requests_total",
		Help: "Requests the receiver answered, by HTTP status (200 accepted or duplicate, 400 not a delivery, 401 bad signature, 409 gap, 422 permanent, 500 the inbox's database failed, 503 retry or busy)."}, []string{"code"})
	seconds := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "fairrelay_receive_request_seconds",
		Help: "Time from a request's headers to its answer, the inbox transaction included, by HTTP status.", Buckets: prometheus.DefBuckets}, []string{"code"})
	for _, code := range []string{"200", "400", "401", "409", "422", "500", "503"} {
		requests.WithLabelValues(code)
		seconds.WithLabelValues(code)
	}
	for _, c := range []prometheus.Collector{requests, seconds} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return promhttp.InstrumentHandlerCounter(requests, promhttp.InstrumentHandlerDuration(seconds, h)), nil
}
