package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/sink"
)

// The Standard Webhooks headers (https://www.standardwebhooks.com/).
const (
	// HeaderID is the message id, covered by the signature: MessageID of the
	// event's id, flow and seq, the same on every retry (receivers may
	// deduplicate by it). ParseMessageID reads the three back.
	HeaderID = "webhook-id"
	// HeaderTimestamp is the send time in Unix seconds, covered by the
	// signature; receivers reject it outside their tolerance (replay guard).
	HeaderTimestamp = "webhook-timestamp"
	// HeaderSignature is a space-separated list of "v1,<base64 HMAC-SHA256>".
	HeaderSignature = "webhook-signature"
)

// The fairrelay headers, for reading. The Standard Webhooks signature does
// not cover them (it signs webhook-id, webhook-timestamp and the body): the
// event id, flow and seq are repeated here in plain text, and their signed
// copy is the webhook-id (MessageID). A receiver acts on the signed copy —
// ParseMessageID, or inbox.DeliveryFromHeader, which also refuses a request
// whose headers differ from it. Generation and attempt are not signed:
// they label a delivery for logs and must not decide anything.
const (
	// HeaderEventID is the event id (signed within webhook-id).
	HeaderEventID = "Fairrelay-Event-Id"
	// HeaderFlow is the flow id (signed within webhook-id).
	HeaderFlow = "Fairrelay-Flow"
	// HeaderSeq is the event's seq in its flow, a decimal integer >= 1
	// (signed within webhook-id).
	HeaderSeq = "Fairrelay-Seq"
	// HeaderGeneration is the claim's generation (fencing token), decimal.
	// Not signed.
	HeaderGeneration = "Fairrelay-Generation"
	// HeaderAttempt is the claim count of the current round, decimal,
	// 1-based. Not signed.
	HeaderAttempt = "Fairrelay-Attempt"
)

// secretPrefix marks a base64 secret in the Standard Webhooks format.
const secretPrefix = "whsec_"

// ParseSecret turns a shared secret as an operator writes it into the HMAC
// key: "whsec_<base64>" (the Standard Webhooks format) is decoded; any other
// non-empty string is used byte for byte (verify it with the standard
// libraries' NewWebhookRaw). Errors: ErrInvalidInput naming field "secret"
// for an empty secret or bad base64.
func ParseSecret(s string) ([]byte, error) {
	if s == "" {
		return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "secret", Message: "empty"}
	}
	if rest, ok := strings.CutPrefix(s, secretPrefix); ok {
		key, err := base64.StdEncoding.DecodeString(rest)
		if err != nil || len(key) == 0 {
			return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "secret", Message: "after whsec_ must come standard base64"}
		}
		return key, nil
	}
	return []byte(s), nil
}

// Sign returns the Standard Webhooks signature header value "v1,<base64>"
// of HMAC-SHA256(key, id + "." + unix seconds + "." + body).
func Sign(key []byte, id string, ts time.Time, body []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(mac(key, id, ts.Unix(), body))
}

func mac(key []byte, id string, unix int64, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(id))
	h.Write([]byte{'.'})
	h.Write(strconv.AppendInt(nil, unix, 10))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// Errors of Verifier.Verify.
var (
	// ErrUnsigned: a Standard Webhooks header is missing.
	ErrUnsigned = errors.New("webhook: missing webhook-id, webhook-timestamp or webhook-signature")
	// ErrTimestamp: the timestamp is malformed or outside the tolerance;
	// the error's text says which, and by how many seconds.
	ErrTimestamp = errors.New("webhook: webhook-timestamp refused")
	// ErrSignature: no v1 signature matches.
	ErrSignature = errors.New("webhook: no matching signature")
	// ErrMetadata: a Fairrelay-Event-Id, Fairrelay-Flow or Fairrelay-Seq
	// header differs from what the signed webhook-id binds (a replay with
	// changed metadata, or a proxy that rewrote headers). Returned by
	// inbox.DeliveryFromHeader, not by Verify.
	ErrMetadata = errors.New("webhook: a Fairrelay-* header differs from the signed webhook-id")
)

// The causes a receiver names in the "cause" member of its 401 answer
// ({"error": "unauthorized", "cause": …, "message": …}), so that the sink
// reports what to fix: a clock, a secret, or something that rewrites
// headers (inbox.Handler answers so).
const (
	CauseUnsigned  = "unsigned"  // a Standard Webhooks header is missing
	CauseTimestamp = "timestamp" // webhook-timestamp outside the tolerance: clock skew
	CauseSignature = "signature" // no signature matches: another secret
	CauseMetadata  = "metadata"  // ErrMetadata
)

// Cause names the cause of a verification error (Verify's, or ErrMetadata)
// as a receiver reports it: one of the Cause… constants, "" for another
// error.
func Cause(err error) string {
	switch {
	case errors.Is(err, ErrUnsigned):
		return CauseUnsigned
	case errors.Is(err, ErrTimestamp):
		return CauseTimestamp
	case errors.Is(err, ErrSignature):
		return CauseSignature
	case errors.Is(err, ErrMetadata):
		return CauseMetadata
	}
	return ""
}

// DefaultTolerance is how far a timestamp may be from the receiver's clock
// before Verify rejects it, as in the Standard Webhooks libraries.
const DefaultTolerance = 5 * time.Minute

// Verifier checks Standard Webhooks signatures for a receiver.
type Verifier struct {
	keys [][]byte // the current key first, then the previous ones
	// Tolerance is the largest accepted distance between webhook-timestamp
	// and Now. Defaults to DefaultTolerance.
	Tolerance time.Duration
	// Now reads the receiver's wall clock. Defaults to time.Now.
	Now func() time.Time
}

// clipQuote quotes a header's value in a refusal, at most 40 bytes of it
// (a breaker's report: a 1 MB timestamp gave a 1 MB answer and log line).
func clipQuote(s string) string { return sink.QuoteExcerpt(s, 40) }

// NewVerifier returns a Verifier for the HMAC key (see ParseSecret). A
// request signed with one of the previous keys is accepted too: to rotate
// a secret without refused deliveries, a receiver accepts the new key and
// the old one (as previous) until every relay signs with the new, then
// drops the old.
func NewVerifier(key []byte, previous ...[]byte) *Verifier {
	return &Verifier{keys: append([][]byte{key}, previous...)}
}

// Verify checks the headers and body of one request: the three Standard
// Webhooks headers present, the timestamp within the tolerance, and one v1
// signature equal (in constant time) to the expected one. Errors:
// ErrUnsigned, ErrTimestamp, ErrSignature.
func (v *Verifier) Verify(h http.Header, body []byte) error {
	id, ts, sigs := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if id == "" || ts == "" || sigs == "" {
		return ErrUnsigned
	}
	// Canonical decimal only ("+1700000000" and "01700000000" parse to the
	// same second): the signature covers the value, so the header's bytes
	// must be the one spelling of it that a sender signs (Standard Webhooks
	// signs the header as sent).
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || strconv.FormatInt(unix, 10) != ts {
		return fmt.Errorf("%w: %s is not Unix seconds in canonical decimal", ErrTimestamp, clipQuote(ts))
	}
	now, tol := time.Now, v.Tolerance
	if v.Now != nil {
		now = v.Now
	}
	if tol <= 0 {
		tol = DefaultTolerance
	}
	if err := checkSkew(unix, now(), tol); err != nil {
		return err
	}
	for _, key := range v.keys {
		want := mac(key, id, unix, body)
		for _, s := range strings.Fields(sigs) {
			b64, ok := strings.CutPrefix(s, "v1,")
			if !ok {
				continue
			}
			got, err := base64.StdEncoding.DecodeString(b64)
			if err == nil && hmac.Equal(got, want) {
				return nil
			}
		}
	}
	return ErrSignature
}

// checkSkew returns ErrTimestamp, saying by how many seconds and which
// way, when unix (seconds) is further than tol from now. The seconds are
// counted in integers: a time.Duration saturates at about 292 years, and a
// sender's milliseconds (a common mistake, about 55 000 years ahead) read
// as "-2562047h47m16s away" (an SRE's report).
func checkSkew(unix int64, now time.Time, tol time.Duration) error {
	// Saturated or not, a Duration past ±tol compares as past it.
	if d := now.Sub(time.Unix(unix, 0)); d <= tol && d >= -tol {
		return nil
	}
	at := now.Unix()
	switch {
	case unix < 0:
		return fmt.Errorf("%w: %d is before 1970, not a time a relay sends", ErrTimestamp, unix)
	case unix > at:
		hint := ""
		if ms := unix / 1000; ms >= at-int64(tol/time.Second)-1 && ms <= at+int64(tol/time.Second)+1 {
			hint = " (milliseconds? it wants Unix seconds)"
		}
		return fmt.Errorf("%w: %d is %d s ahead of this machine's clock, past the tolerance of %s%s", ErrTimestamp, unix, unix-at, tol, hint)
	default:
		return fmt.Errorf("%w: %d is %d s behind this machine's clock, past the tolerance of %s", ErrTimestamp, unix, at-unix, tol)
	}
}
