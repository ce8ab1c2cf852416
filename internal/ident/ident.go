// Package ident holds the one rule for every name fairrelay stores and
// sends — event ids, flow ids, group names and operator names — and for the
// operator's free text in the audit log, which every path into a store
// enforces: the root package's writes, the SQLite backend's enqueue, the
// inbox. The PostgreSQL outbox function enforces the same rule in SQL
// (ident_problem, migration 005), built from the lists below; the seam's
// conformance suite holds the two to the same answers. It is machinery
// below the root package and imports nothing of fairrelay.
package ident

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// MaxBytes is the longest name accepted, in bytes.
const MaxBytes = 200

// Check returns why v is not a name, or nil. The rule exists because names
// travel in HTTP headers, broker metadata and logs (the webhook sink, the
// receiver, an operator's terminal), which trim, fold or interpret what it
// refuses: HTTP trims the header value " S1 " to "S1", so two distinct
// events would meet at the receiver as one. A name is refused when it
//
//   - is empty, or longer than MaxBytes (200) bytes;
//   - is not valid UTF-8;
//   - starts or ends with a Unicode White_Space character;
//   - contains anywhere a control (Cc), format (Cf), line separator (Zl)
//     or paragraph separator (Zp) character.
//
// Other characters, spaces inside the name included, are fine. The code
// points refused anywhere, as of Unicode 15.0 (a store-side copy of this
// rule, such as the SQL outbox function's, must refuse exactly these):
//
//	Cc: U+0000–U+001F, U+007F–U+009F
//	Cf: U+00AD, U+0600–U+0605, U+061C, U+06DD, U+070F, U+0890–U+0891,
//	    U+08E2, U+180E, U+200B–U+200F, U+202A–U+202E, U+2060–U+2064,
//	    U+2066–U+206F, U+FEFF, U+FFF9–U+FFFB, U+110BD, U+110CD,
//	    U+13430–U+1343F, U+1BCA0–U+1BCA3, U+1D173–U+1D17A, U+E0001,
//	    U+E0020–U+E007F
//	Zl, Zp: U+2028, U+2029
//
// and refused at either end, beyond those (White_Space that is not Cc, Zl
// or Zp):
//
//	U+0020, U+00A0, U+1680, U+2000–U+200A, U+202F, U+205F, U+3000
//
// The tests check these lists against Go's unicode tables.
func Check(v string) error {
	switch {
	case v == "":
		return fmt.Errorf("empty")
	case len(v) > MaxBytes:
		return fmt.Errorf("%d bytes, more than the limit of %d", len(v), MaxBytes)
	}
	if err := checkChars(v); err != nil {
		return err
	}
	if r, _ := utf8.DecodeRuneInString(v); unicode.Is(unicode.White_Space, r) {
		return fmt.Errorf("starts with white space (%U): HTTP headers and many tools trim it, so the name would not arrive as stored", r)
	}
	if r, _ := utf8.DecodeLastRuneInString(v); unicode.Is(unicode.White_Space, r) {
		return fmt.Errorf("ends with white space (%U): HTTP headers and many tools trim it, so the name would not arrive as stored", r)
	}
	return nil
}

// CheckText returns why v is not one line of operator text of at most max
// bytes (an audited action's reason), or nil: valid UTF-8 without a
// control (Cc, which includes the line feed and the tab), format (Cf), line
// (Zl) or paragraph (Zp) separator character — the ranges Check lists — so
// that one audit row prints as one line and cannot move or recolour an
// operator's terminal. White space at the ends is allowed.
func CheckText(v string, max int) error {
	if len(v) > max {
		return fmt.Errorf("%d bytes, more than the limit of %d", len(v), max)
	}
	return checkChars(v)
}

// Forbidden reports whether r may appear nowhere in a name: a control
// (Cc), format (Cf), line separator (Zl) or paragraph separator (Zp)
// character.
func Forbidden(r rune) bool {
	return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp)
}

// checkChars refuses invalid UTF-8 and every Forbidden character.
func checkChars(v string) error {
	for i, r := range v {
		switch {
		case r == utf8.RuneError && !validRuneAt(v, i):
			return fmt.Errorf("not valid UTF-8 (byte %d)", i)
		case Forbidden(r):
			return fmt.Errorf("%s character %U at byte %d: it would not survive HTTP headers, logs or terminals", charKind(r), r, i)
		}
	}
	return nil
}

// validRuneAt reports whether the U+FFFD decoded at byte i of v was written
// as such (valid) rather than produced by an invalid byte.
func validRuneAt(v string, i int) bool {
	_, size := utf8.DecodeRuneInString(v[i:])
	return size == 3
}

func charKind(r rune) string {
	switch {
	case unicode.Is(unicode.Cc, r):
		return "control"
	case unicode.Is(unicode.Cf, r):
		return "format"
	case r == '\u2028':
		return "line separator"
	}
	return "paragraph separator"
}
