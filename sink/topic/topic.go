// Package topic builds broker addresses from a flow: the NATS subject of
// sink/jetstream and the AMQP exchange and routing key of sink/amqp come from
// a Template such as "fairrelay.{flow}", where {flow} is replaced by the
// flow's token (EncodeFlow).
//
// A flow id is 1–200 bytes of UTF-8 and may hold characters a broker gives a
// meaning to: '.' separates subject tokens and topic words, '*', '>' and '#'
// are wildcards, a space ends a NATS subject. EncodeFlow therefore keeps the
// bytes A–Z, a–z, 0–9, '-' and '_' as they are and writes every other byte
// as '%' and two upper-case hex digits, as URL percent-encoding does, but
// also for '.', '~' and '%' itself:
//
//	order-42     → order-42
//	orders/eu.7  → orders%2Feu%2E7
//	café         → caf%C3%A9
//
// The token is one subject token (one topic word), never empty, and the
// encoding is reversible (DecodeFlow), so two flows never share a token. A
// token is up to three times as long as its flow (600 bytes for a flow of
// 200 bytes that needs encoding throughout); AMQP limits a routing key to 255
// bytes, and sink/amqp refuses a longer one as a permanent error.
package topic

import (
	"fmt"
	"strings"

	"github.com/fairrelay/fairrelay"
)

// Placeholder is the one placeholder a Template may hold, any number of
// times.
const Placeholder = "{flow}"

// Template is a parsed address template: literal text with Placeholder
// wherever the flow's token goes. The zero Template expands to "".
type Template struct {
	raw   string
	parts []string // literal text; the token goes between consecutive parts
}

// Parse parses s. Every '{' or '}' must belong to a Placeholder. Errors are
// fairrelay.ErrInvalidInput naming field.
func Parse(field, s string) (Template, error) {
	parts := strings.Split(s, Placeholder)
	for _, p := range parts {
		if strings.ContainsAny(p, "{}") {
			return Template{}, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: field,
				Message: fmt.Sprintf("%q: the only placeholder is %s", s, Placeholder)}
		}
	}
	return Template{raw: s, parts: parts}, nil
}

// CheckWildcard checks that every placeholder of t is a whole token of a
// '.'-separated name (a subject token, a topic word): what a consumer's
// subscription puts a wildcard ('*') in (Literal). A placeholder inside a
// token ("orders.p{flow}") expands to good names to publish to, but
// "orders.p*" is no wildcard to a broker: the consumer's stream or binding
// caught none of the relay's messages. Errors: fairrelay.ErrInvalidInput
// naming field.
func (t Template) CheckWildcard(field string) error {
	last := len(t.parts) - 1
	for i := 0; i < last; i++ {
		// The placeholder between parts i and i+1 starts the name or
		// follows a '.', and ends the name or comes before one.
		before, after := t.parts[i], t.parts[i+1]
		if (i > 0 || before != "") && !strings.HasSuffix(before, ".") || (i+1 < last || after != "") && !strings.HasPrefix(after, ".") {
			return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: field,
				Message: fmt.Sprintf("%q: to consume, %s must be a whole '.'-separated token (a broker's wildcard stands for whole tokens only), as in \"fairrelay.%s\"", t.raw, Placeholder, Placeholder)}
		}
	}
	return nil
}

// String returns the template as written.
func (t Template) String() string { return t.raw }

// HasFlow reports whether the template holds the placeholder.
func (t Template) HasFlow() bool { return len(t.parts) > 1 }

// Expand returns the template with every placeholder replaced by
// EncodeFlow(flow).
func (t Template) Expand(flow string) string {
	if !t.HasFlow() {
		return t.raw
	}
	return strings.Join(t.parts, EncodeFlow(flow))
}

// Literal returns the template with every placeholder replaced by s as it
// is, without encoding: a wildcard for a subscription ("*", "#"), or a
// sample token for validating the literal text.
func (t Template) Literal(s string) string { return strings.Join(t.parts, s) }

// keep reports whether EncodeFlow keeps byte c as it is.
func keep(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}

// EncodeFlow returns flow's token: flow itself when every byte is one of
// A–Z a–z 0–9 - _, else flow with every other byte written as %XX
// (upper-case hex).
func EncodeFlow(flow string) string {
	n := 0
	for i := 0; i < len(flow); i++ {
		if !keep(flow[i]) {
			n++
		}
	}
	if n == 0 {
		return flow
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(flow)+2*n)
	for i := 0; i < len(flow); i++ {
		c := flow[i]
		if keep(c) {
			b = append(b, c)
			continue
		}
		b = append(b, '%', hex[c>>4], hex[c&15])
	}
	return string(b)
}

// DecodeFlow reverses EncodeFlow. Errors: a byte EncodeFlow never writes, or
// a '%' not followed by two upper-case hex digits.
func DecodeFlow(token string) (string, error) {
	b := make([]byte, 0, len(token))
	for i := 0; i < len(token); i++ {
		c := token[i]
		switch {
		case keep(c):
			b = append(b, c)
		case c == '%' && i+2 < len(token) && upperHex(token[i+1]) >= 0 && upperHex(token[i+2]) >= 0:
			b = append(b, byte(upperHex(token[i+1])<<4|upperHex(token[i+2])))
			i += 2
		default:
			return "", fmt.Errorf("topic: %q is not a flow token (byte %d)", token, i)
		}
	}
	return string(b), nil
}

func upperHex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
