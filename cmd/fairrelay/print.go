package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// printJSON writes v as one compact JSON line. Strings from a store are
// data, not terminal input: beyond what encoding/json escapes (C0 controls,
// U+2028, U+2029), every character unsafe() names is written as a \u
// escape, so a line stays one line and cannot drive the terminal it is
// printed on (a store written before fairrelay.CheckID may hold such
// characters).
func printJSON(w io.Writer, v any) error {
	// Not json.Marshal: it writes &, < and > as \u0026…, which is for
	// JSON inside HTML; a URL's query would print as ?a=1\u0026b=2.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	b := bytes.TrimSuffix(buf.Bytes(), []byte("\n")) // Encode ends the line
	_, err := w.Write(append(escapeUnsafe(b), '\n'))
	return err
}

// unsafe reports whether r must not reach a terminal as it is: a control
// (C0, DEL, C1), format (bidirectional overrides, zero-width characters…),
// line or paragraph separator character, or the replacement of an invalid
// byte.
func unsafe(r rune) bool {
	return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp)
}

// escapeUnsafe rewrites the unsafe characters of compact JSON as \u escapes.
// They can only occur inside strings (JSON's syntax is ASCII), where an
// escape means the same character.
func escapeUnsafe(b []byte) []byte {
	clean := true
	for _, r := range string(b) {
		if unsafe(r) || r == utf8.RuneError {
			clean = false
			break
		}
	}
	if clean {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			out = append(out, `\ufffd`...)
		case unsafe(r) && r > 0xFFFF:
			hi, lo := utf16.EncodeRune(r)
			out = fmt.Appendf(out, `\u%04x\u%04x`, hi, lo)
		case unsafe(r):
			out = fmt.Appendf(out, `\u%04x`, r)
		default:
			out = append(out, b[i:i+size]...)
		}
		i += size
	}
	return out
}

// cell renders a stored string for a table: as it is when it is safe on a
// terminal and cannot break the table's columns, else Go-quoted ("a\tb",
// "\x1b[2J", "\u202e"), so an audit reason or an id written before
// fairrelay.CheckID prints as one visible cell.
func cell(s string) string {
	if !utf8.ValidString(s) || strings.IndexFunc(s, unsafe) >= 0 || strings.HasPrefix(s, `"`) {
		return strconv.Quote(s)
	}
	return s
}
