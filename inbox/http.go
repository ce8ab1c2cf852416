package inbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/sink/webhook"
)

// HandlerOptions configure Handler.
type HandlerOptions struct {
	// Verify checks a request's headers and body before anything is
	// written, typically (*webhook.Verifier).Verify. A non-nil error answers
	// 401 and writes nothing. Nil accepts unsigned requests.
	Verify func(h http.Header, body []byte) error
	// MaxBodyBytes is the largest request body read, in bytes; a larger one
	// answers 413. Defaults to 1 MiB (the queue's default body limit).
	MaxBodyBytes int64
	// Logger receives one debug line per delivery and errors. Defaults to
	// discarding.
	Logger *slog.Logger
}

// Handler returns the inbox as an HTTP service (SPEC §3): it takes
// deliveries as POST / from the webhook sink, checks the signature with
// opts.Verify, runs Receive and answers {"status": "<outcome>"} (the
// webhook sink's receiver contract) with an HTTP status that a
// non-fairrelay client reads the same way: 200 accepted or duplicate, 409
// gap, 422 a permanent outcome, 503 retry. Failures answer
// {"error": code, "message": …}: 400 a malformed delivery, 401 a bad or
// missing signature, 405 not POST, 413 too large, 503 busy, 500 a database
// error; in every failure nothing is written.
func (in *Inbox) Handler(opts HandlerOptions) http.Handler {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 1 << 20
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
			writeError(w, http.StatusBadRequest, "body", err.Error())
			return
		}
		if opts.Verify != nil {
			if err := opts.Verify(r.Header, body); err != nil {
				log.Warn("inbox: rejected an unverified request", "remote", r.RemoteAddr, "err", err)
				writeError(w, http.StatusUnauthorized, "unauthorized", err.Error())
				return
			}
		}
		d, err := DeliveryFromHeader(r.Header, body)
		if err != nil {
			writeError(w, http.StatusBadRequest, string(fairrelay.CodeInvalidInput), err.Error())
			return
		}
		out, err := in.Receive(r.Context(), d)
		if err != nil {
			log.Error("inbox: receive failed", "id", d.EventID, "err", err)
			if errors.Is(err, fairrelay.ErrBusy) {
				w.Header().Set("Retry-After", "1")
				writeError(w, http.StatusServiceUnavailable, string(fairrelay.CodeBusy), err.Error())
				return
			}
			writeError(w, http.StatusInternalServerError, string(fairrelay.CodeOf(err)), err.Error())
			return
		}
		log.Debug("inbox: delivery", "id", d.EventID, "flow", d.Flow, "seq", d.Seq, "outcome", out)
		WriteOutcome(w, out)
	})
}

// DeliveryFromHeader builds a Delivery from a webhook request: the event id
// from webhook-id (covered by the signature), flow and seq from the
// Fairrelay-Flow and Fairrelay-Seq headers. Errors: ErrInvalidInput naming
// the header that is missing or malformed, or Fairrelay-Event-Id when it
// disagrees with webhook-id.
func DeliveryFromHeader(h http.Header, body []byte) (Delivery, error) {
	bad := func(field, msg string) error {
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: field, Message: msg}
	}
	id := h.Get(webhook.HeaderID)
	if id == "" {
		return Delivery{}, bad(webhook.HeaderID, "missing")
	}
	if alt := h.Get(webhook.HeaderEventID); alt != "" && alt != id {
		return Delivery{}, bad(webhook.HeaderEventID, "differs from "+webhook.HeaderID)
	}
	flow := h.Get(webhook.HeaderFlow)
	if flow == "" {
		return Delivery{}, bad(webhook.HeaderFlow, "missing")
	}
	seq, err := strconv.ParseInt(h.Get(webhook.HeaderSeq), 10, 64)
	if err != nil || seq < 1 {
		return Delivery{}, bad(webhook.HeaderSeq, "must be an integer >= 1")
	}
	return Delivery{EventID: id, Flow: flow, Seq: seq, Body: body}, nil
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

func writeError(w http.ResponseWriter, code int, errCode, msg string) {
	writeJSON(w, code, map[string]string{"error": errCode, "message": msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}
