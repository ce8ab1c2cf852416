// Package ident holds the one rule for identifiers — event ids, flow ids,
// group names and operator names — that every path into the store
// enforces: the root package's writes, the SQLite backend's enqueue, the
// inbox. (The PostgreSQL outbox function enforces the same rule in SQL;
// the conformance suite holds the two to the same answers.) It is
// machinery below the root package and imports nothing of fairrelay.
package ident

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// MaxBytes is the longest identifier accepted, in bytes.
const MaxBytes = 200

// Check returns why v is not an identifier, or nil. An identifier is 1 to
// MaxBytes bytes of valid UTF-8 with no Unicode control (Cc, C0 and C1),
// format (Cf) or line/paragraph separator (Zl, Zp) character anywhere and
// no white space (Unicode White_Space) at either end: identifiers travel in
// HTTP headers and broker metadata, which trim white space and cannot carry
// control characters, so an identifier that a transport would change could
// never be delivered as itself.
func Check(v string) error {
	switch {
	case v == "":
		return fmt.Errorf("empty")
	case len(v) > MaxBytes:
		return fmt.Errorf("%d bytes, more than the limit of %d", len(v), MaxBytes)
	case !utf8.ValidString(v):
		return fmt.Errorf("not valid UTF-8")
	}
	for i, r := range v {
		if Forbidden(r) {
			return fmt.Errorf("character %U at byte %d (a control, format or separator character)", r, i)
		}
	}
	first, _ := utf8.DecodeRuneInString(v)
	last, _ := utf8.DecodeLastRuneInString(v)
	if unicode.Is(unicode.White_Space, first) || unicode.Is(unicode.White_Space, last) {
		return fmt.Errorf("white space at the start or the end (transports trim it)")
	}
	return nil
}

// Forbidden reports whether r may appear nowhere in an identifier: a
// control (Cc), format (Cf), line separator (Zl) or paragraph separator
// (Zp) character.
func Forbidden(r rune) bool {
	return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp)
}
