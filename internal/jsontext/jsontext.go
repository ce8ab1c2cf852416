// Package jsontext reads JSON strictly where encoding/json is lenient: it
// rejects invalid UTF-8 and lone UTF-16 surrogate escapes (which
// encoding/json silently turns into U+FFFD, merging distinct ids), rejects
// duplicate object keys (where encoding/json keeps the last), and writes the
// canonical form the scripts compare bodies by (SPEC §6: compact, keys
// sorted, numbers as written).
package jsontext

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"unicode/utf8"
)

// ErrNotText is returned for input that is not valid UTF-8, or that escapes
// a lone UTF-16 surrogate.
var ErrNotText = errors.New("not valid UTF-8 (or a lone \\u surrogate escape)")

// ValidText reports whether raw JSON text is valid UTF-8 and every \u escape
// of a surrogate is part of a well-formed pair.
func ValidText(raw []byte) bool {
	if !utf8.Valid(raw) {
		return false
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' || i+1 >= len(raw) {
			continue
		}
		if raw[i+1] != 'u' {
			i++ // skip the escaped character, which may be a backslash
			continue
		}
		r, ok := hex4(raw, i+2)
		if !ok {
			return false
		}
		switch {
		case r >= 0xD800 && r <= 0xDBFF:
			lo, ok := hex4(raw, i+8)
			if !ok || raw[i+6] != '\\' || raw[i+7] != 'u' || lo < 0xDC00 || lo > 0xDFFF {
				return false
			}
			i += 11
		case r >= 0xDC00 && r <= 0xDFFF:
			return false
		default:
			i += 5
		}
	}
	return true
}

func hex4(b []byte, at int) (rune, bool) {
	if at < 0 || at+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[at : at+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= rune(c-'A') + 10
		default:
			return 0, false
		}
	}
	return r, true
}

// Member is one key and its raw value of a JSON object.
type Member struct {
	Key   string
	Value json.RawMessage
}

// DuplicateKeyError is Object's error for a key that appears twice.
type DuplicateKeyError struct{ Key string }

func (e *DuplicateKeyError) Error() string { return fmt.Sprintf("duplicate key %q", e.Key) }

// Object splits raw into the members of one JSON object, in order. Errors:
// not an object, trailing data, a duplicate key (*DuplicateKeyError), or
// text that is not valid (ErrNotText, wrapped with the key it was found
// under).
func Object(raw []byte) ([]Member, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	var out []Member
	seen := map[string]bool{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k := kt.(string)
		v, err := skipValue(dec, raw)
		if err != nil {
			return nil, err
		}
		if seen[k] {
			return nil, &DuplicateKeyError{Key: k}
		}
		seen[k] = true
		out = append(out, Member{Key: k, Value: v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("more than one JSON value")
	}
	return out, nil
}

// skipValue reads the next value of dec, which reads raw, token by token,
// and returns its text as written. Decoding it (Decoder.Decode) would
// refuse a value nested deeper than encoding/json's limit of 10 000
// levels, which Canonical, and so an enqueue, takes: a ledger body whose
// ignored key held such a value was enqueued and then refused by the
// receiver as invalid_body (a breaker's report). Tokens carry no such
// limit, and this loop no recursion.
func skipValue(dec *json.Decoder, raw []byte) (json.RawMessage, error) {
	start := dec.InputOffset()
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		if d, ok := tok.(json.Delim); ok {
			if d == '[' || d == '{' {
				depth++
			} else {
				depth--
			}
		}
		if depth == 0 {
			break
		}
	}
	// The text from the end of the key holds the colon and any space
	// before the value.
	v := bytes.TrimLeft(raw[start:dec.InputOffset()], " \t\r\n:")
	return json.RawMessage(v), nil
}

// Canonical re-encodes one JSON value compactly with object keys sorted
// bytewise, numbers kept as written and strings re-escaped the same way every
// time. Errors: invalid JSON, invalid text (ErrNotText), duplicate keys at any
// depth, trailing data.
func Canonical(raw []byte) ([]byte, error) {
	if !ValidText(raw) {
		return nil, ErrNotText
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var buf bytes.Buffer
	if err := canon(dec, &buf); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("more than one JSON value")
	}
	return buf.Bytes(), nil
}

func canon(dec *json.Decoder, buf *bytes.Buffer) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch v := tok.(type) {
	case json.Delim:
		if v == '[' {
			buf.WriteByte('[')
			for i := 0; dec.More(); i++ {
				if i > 0 {
					buf.WriteByte(',')
				}
				if err := canon(dec, buf); err != nil {
					return err
				}
			}
			buf.WriteByte(']')
			_, err := dec.Token()
			return err
		}
		members := map[string][]byte{}
		var keys []string
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return err
			}
			k := kt.(string)
			if _, dup := members[k]; dup {
				return fmt.Errorf("duplicate key %q", k)
			}
			var sub bytes.Buffer
			if err := canon(dec, &sub); err != nil {
				return err
			}
			members[k] = sub.Bytes()
			keys = append(keys, k)
		}
		if _, err := dec.Token(); err != nil {
			return err
		}
		sort.Strings(keys)
		buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeString(buf, k)
			buf.WriteByte(':')
			buf.Write(members[k])
		}
		buf.WriteByte('}')
		return nil
	case string:
		writeString(buf, v)
	case json.Number:
		buf.WriteString(string(v))
	case bool:
		if v {
			buf.WriteString("true")
		} else {
			buf.WriteString("false")
		}
	case nil:
		buf.WriteString("null")
	}
	return nil
}

func writeString(buf *bytes.Buffer, s string) {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	enc.Encode(s)
	buf.Truncate(buf.Len() - 1) // Encode's newline
}

// PositiveInt reads a JSON number literal that must be a positive integer
// written without fraction or exponent. ok is false for anything else;
// tooLarge is true for a positive integer literal beyond int64.
func PositiveInt(raw []byte) (n int64, ok, tooLarge bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] < '1' || raw[0] > '9' {
		return 0, false, false
	}
	for _, c := range raw {
		if c < '0' || c > '9' {
			return 0, false, false
		}
	}
	for _, c := range raw {
		d := int64(c - '0')
		if n > (1<<63-1-d)/10 {
			return 0, false, true
		}
		n = n*10 + d
	}
	return n, true, false
}
