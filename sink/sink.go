// Package sink is the seam between the relay and a receiver: a Sink delivers
// one claimed event and reports what the receiver answered, as a
// fairrelay.Outcome. Users implement it for their own transport; the HTTP
// implementation is sink/webhook, and sink/sinktest is the conformance suite
// every Sink must pass.
package sink

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fairrelay/fairrelay"
)

// Delivery is one claimed event as the relay hands it to a Sink.
type Delivery struct {
	// EventID is the event id: the receiver deduplicates by it.
	EventID string
	// Flow and Seq place the event in its flow (SPEC §1); a receiver checks
	// that Seq follows the last seq it applied for Flow (SPEC §3).
	Flow string
	Seq  int64
	// Generation is the claim's fencing token (SPEC §2). It labels the
	// delivery; receivers do not need it for correctness.
	Generation int64
	// Attempt is the claim count of the current round, this one included
	// (1-based).
	Attempt int64
	// Body is the event's payload, byte for byte as enqueued.
	Body []byte
}

// Result is a receiver's answer to one delivery.
type Result struct {
	// Outcome is what the receiver answered (SPEC §2 settle table). An
	// answer the sink cannot map to a known outcome must be
	// fairrelay.OutcomeRetry: an unknown answer is never silently permanent.
	Outcome fairrelay.Outcome
	// RetryAfter, when positive, is the least delay before the next attempt
	// the receiver asked for (HTTP Retry-After). The relay raises the
	// backoff's next_at to at least now + RetryAfter for a transient outcome.
	RetryAfter time.Duration
	// Detail is a short human-readable note for logs (for example the HTTP
	// status line). It never changes the outcome.
	Detail string
}

// Sink delivers events to one receiver. Deliver must be safe for concurrent
// use: the relay calls it from many workers, never for two events of the
// same flow at once.
type Sink interface {
	// Deliver sends d and returns the receiver's answer. It must return
	// when ctx is done (the relay's per-delivery timeout or shutdown
	// deadline). An error means no answer was obtained (connection refused,
	// timeout, cancelled): the relay settles it as fairrelay.OutcomeRetry,
	// since the receiver may or may not have applied the event.
	Deliver(ctx context.Context, d Delivery) (Result, error)
}

// Func adapts a function to a Sink, for receivers that run in the same
// process (for example an inbox.Inbox) and for tests.
type Func func(ctx context.Context, d Delivery) (Result, error)

// Deliver calls f.
func (f Func) Deliver(ctx context.Context, d Delivery) (Result, error) { return f(ctx, d) }

var _ Sink = Func(nil)

// Excerpt is s as a detail quotes it (Result.Detail, the attempt history):
// invalid UTF-8 and NUL bytes replaced by U+FFFD (a settle refuses both in
// a detail: PostgreSQL's text holds neither), then cut to at most max
// bytes at a rune boundary.
func Excerpt(s string, max int) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// QuoteExcerpt quotes s for an error message about a request: whole when it
// is at most max bytes, else Excerpt(s, max) quoted and s's length, so that
// a refusal does not copy a megabyte of a header into its answer and the
// log.
func QuoteExcerpt(s string, max int) string {
	if len(s) <= max {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(Excerpt(s, max)), len(s))
}

// RedactURL returns raw, a URL as the user gave it (it may not parse), with
// the password of its user information replaced by "xxxxx", as
// url.URL.Redacted writes it, for an error message or a log line: an error
// that quoted the URL whole put a password given in it, or in the
// environment and joined to it, into the logs. The user name stays; the
// rest of raw is unchanged, so a message's byte offsets and its quoting
// still match what the user wrote up to the password. A password holding
// '/', '?' or '#' unencoded is hidden too, and with a ':' in the host part
// and an '@' in the path, the port and the path up to the '@' are.
func RedactURL(raw string) string {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	start := len(raw) - len(rest)
	authority := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority = rest[:i]
	}
	at := strings.LastIndex(authority, "@")
	if at < 0 {
		// A password holding '/', '?' or '#' ends the authority early
		// (http://u:hunter#2@host/ is user "u", "port" hunter, a
		// fragment), so an '@' after it may still end user information:
		// with a ':' in what looks like the authority and an '@' later,
		// everything between the two goes, a port and a path with it when
		// the '@' was a path's (http://host:80/a@b), which hides too much
		// rather than a password.
		colon := strings.Index(authority, ":")
		last := strings.LastIndex(rest, "@")
		if colon < 0 || last < len(authority) {
			return raw
		}
		return raw[:start+colon+1] + "xxxxx" + raw[start+last:]
	}
	colon := strings.Index(authority[:at], ":")
	if colon < 0 {
		return raw
	}
	return raw[:start+colon+1] + "xxxxx" + raw[start+at:]
}

// BadSpace reports a raw space in a sink URL, or "" when it has none: a
// trailing one (a shell quoting slip) was sent as %20, so every delivery
// went to another path than the one meant, and a URL holds no raw space
// (RFC 3986); one that belongs in the path is written %20.
func BadSpace(raw string) string {
	// Any Unicode space: a no-break space pasted from a page went to
	// /hook%C2%A0 (a breaker's report).
	if i := strings.IndexFunc(raw, unicode.IsSpace); i >= 0 {
		return fmt.Sprintf("%q holds a space at byte %d: a URL has none (write %%20 where the path has one)", RedactURL(raw), i)
	}
	return ""
}

// BadPort reports why u's port is not a TCP port (1 to 65535), or "" when
// it is one or u has none: a broker URL with port 99999 would otherwise be
// retried for ever as an outage.
func BadPort(u *url.URL) string {
	p := u.Port()
	if p == "" {
		return ""
	}
	if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
		return fmt.Sprintf("port %q is not a TCP port (1 to 65535)", p)
	}
	return ""
}
