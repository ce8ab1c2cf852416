package webhook

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// messageIDPrefix names the version of the webhook-id format.
const messageIDPrefix = "fr1:"

// MessageID returns the webhook-id the sink sends for an event:
//
//	fr1:<event id>:<flow>:<seq>
//
// with the event id and the flow percent-encoded (every byte but the ASCII
// letters, digits, '-', '_' and '~' becomes %XX, upper-case hex) and seq in
// decimal. For example event "A1" of flow "A" at seq 1 is "fr1:A1:A:1", and
// "order.7" of flow "shop/é" at seq 12 is "fr1:order%2E7:shop%2F%C3%A9:12".
//
// Why: the Standard Webhooks signature covers webhook-id, webhook-timestamp
// and the body only, and a receiver acts on the flow and the seq as much as
// on the id. An id that binds all three puts them under the signature, so a
// captured request resent with another Fairrelay-Flow or Fairrelay-Seq no
// longer passes as genuine. The value is the same on every attempt of an
// event and differs between events, which is what Standard Webhooks asks of
// webhook-id (receivers deduplicate by it). It is printable ASCII without
// '.', so the signed content id.timestamp.body splits one way only.
func MessageID(eventID, flow string, seq int64) string {
	var b strings.Builder
	b.Grow(len(messageIDPrefix) + len(eventID) + len(flow) + 24)
	b.WriteString(messageIDPrefix)
	escapeTo(&b, eventID)
	b.WriteByte(':')
	escapeTo(&b, flow)
	b.WriteByte(':')
	b.WriteString(strconv.FormatInt(seq, 10))
	return b.String()
}

// ErrMessageID is wrapped by ParseMessageID's errors: the webhook-id is not
// one MessageID writes.
var ErrMessageID = errors.New("webhook: webhook-id is not fr1:<id>:<flow>:<seq>")

// ParseMessageID reads the event id, the flow and the seq back from a
// webhook-id written by MessageID. It accepts exactly what MessageID
// writes — the canonical encoding, a seq >= 1 without leading zeros — so
// two different webhook-ids never name the same event. Errors wrap
// ErrMessageID and say what is wrong. It does not check the id or the flow
// against fairrelay.CheckID; the receiver does.
func ParseMessageID(s string) (eventID, flow string, seq int64, err error) {
	rest, ok := strings.CutPrefix(s, messageIDPrefix)
	if !ok {
		return "", "", 0, fmt.Errorf("%w: it does not start with %q (a relay older than this receiver?)", ErrMessageID, messageIDPrefix)
	}
	parts := strings.Split(rest, ":")
	if len(parts) != 3 {
		return "", "", 0, fmt.Errorf("%w: %d parts after %q, want 3", ErrMessageID, len(parts), messageIDPrefix)
	}
	if eventID, err = unescape(parts[0]); err != nil {
		return "", "", 0, fmt.Errorf("%w: the event id: %v", ErrMessageID, err)
	}
	if flow, err = unescape(parts[1]); err != nil {
		return "", "", 0, fmt.Errorf("%w: the flow: %v", ErrMessageID, err)
	}
	seq, err = strconv.ParseInt(parts[2], 10, 64)
	if err != nil || seq < 1 || strconv.FormatInt(seq, 10) != parts[2] {
		return "", "", 0, fmt.Errorf("%w: the seq %s is not an integer >= 1 in canonical decimal", ErrMessageID, clipQuote(parts[2]))
	}
	return eventID, flow, seq, nil
}

// plain reports whether MessageID writes byte c as itself.
func plain(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '~'
}

const upperHex = "0123456789ABCDEF"

func escapeTo(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if plain(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(upperHex[c>>4])
		b.WriteByte(upperHex[c&15])
	}
}

// unescape is escapeTo's inverse, refusing anything escapeTo would not
// write: a byte that should have been escaped, an escape of a plain byte,
// lower-case or malformed hex, and the empty string.
func unescape(s string) (string, error) {
	if s == "" {
		return "", errors.New("empty")
	}
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case plain(c):
			out = append(out, c)
		case c == '%':
			if i+2 >= len(s) {
				return "", fmt.Errorf("a %% at byte %d without two hex digits", i)
			}
			hi, lo := strings.IndexByte(upperHex, s[i+1]), strings.IndexByte(upperHex, s[i+2])
			if hi < 0 || lo < 0 {
				return "", fmt.Errorf("%q at byte %d is not upper-case hex", s[i:i+3], i)
			}
			d := byte(hi<<4 | lo)
			if plain(d) {
				return "", fmt.Errorf("%q at byte %d escapes %q, which is written as itself", s[i:i+3], i, d)
			}
			out = append(out, d)
			i += 2
		default:
			return "", fmt.Errorf("byte %q at %d must be percent-encoded", c, i)
		}
	}
	return string(out), nil
}
