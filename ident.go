package fairrelay

import (
	"unicode"
	"unicode/utf8"
)

// CheckID applies the one rule for every name fairrelay stores and sends —
// event ids, flow ids, operator names, and group names — and returns nil
// when v follows it, else an *Error with CodeInvalidInput whose Field is
// field. The rule exists because these names travel in HTTP headers and
// logs (the webhook sink, the receiver, an operator's terminal), which
// trim, fold or interpret what this rule refuses: HTTP trims the header
// value " S1 " to "S1", so two distinct events would meet at the receiver
// as one. A name is refused when it
//
//   - is empty, or longer than MaxIDBytes (200) bytes;
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
// In PostgreSQL, for example: octet_length(v) BETWEEN 1 AND 200, and v
// matching no character class built from these ranges (the database
// encoding being UTF8, invalid UTF-8 cannot be stored). The tests check this
// list against Go's unicode tables.
func CheckID(field, v string) error {
	switch {
	case v == "":
		return invalid(field, "empty")
	case len(v) > MaxIDBytes:
		return invalid(field, "%d bytes, more than the limit of %d", len(v), MaxIDBytes)
	}
	if err := checkChars(field, v); err != nil {
		return err
	}
	if r, _ := utf8.DecodeRuneInString(v); unicode.Is(unicode.White_Space, r) {
		return invalid(field, "starts with white space (%U): HTTP headers and many tools trim it, so the name would not arrive as stored", r)
	}
	if r, _ := utf8.DecodeLastRuneInString(v); unicode.Is(unicode.White_Space, r) {
		return invalid(field, "ends with white space (%U): HTTP headers and many tools trim it, so the name would not arrive as stored", r)
	}
	return nil
}

// CheckReason applies the rule for the free text an operator writes into
// the audit log (a redrive's reason, and the reason of every other audited
// action): at most MaxReasonBytes bytes of valid UTF-8 without a control
// (Cc, which includes the line feed and the tab), format (Cf), line (Zl)
// or paragraph (Zp) separator character — the ranges CheckID lists — so that
// one audit row prints as one line and cannot move or recolour an
// operator's terminal. White space at the ends is allowed; an empty or
// blank reason is not an input error but a rejection (SPEC §2:
// empty_reason). It returns nil or an *Error with CodeInvalidInput naming
// field.
func CheckReason(field, v string) error {
	if len(v) > MaxReasonBytes {
		return invalid(field, "%d bytes, more than the limit of %d", len(v), MaxReasonBytes)
	}
	return checkChars(field, v)
}

// checkAudited checks the operator text of an audited action: the operator
// name (optional; CheckID's rule) and the reason (CheckReason's).
func checkAudited(operator, reason string) error {
	if operator != "" {
		if err := CheckID("operator", operator); err != nil {
			return err
		}
	}
	return CheckReason("reason", reason)
}

// checkChars refuses invalid UTF-8 and every character that no transport
// or terminal carries intact: Cc, Cf, Zl and Zp.
func checkChars(field, v string) error {
	for i, r := range v {
		switch {
		case r == utf8.RuneError && !validRuneAt(v, i):
			return invalid(field, "not valid UTF-8 (byte %d)", i)
		case unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp):
			return invalid(field, "%s character %U at byte %d: it would not survive HTTP headers, logs or terminals", charKind(r), r, i)
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

// checkGeneration refuses a negative generation: generations start at 0 (an
// event never claimed) and only grow, so a negative one is a typo, never a
// token that is merely stale.
func checkGeneration(field string, g int64) error {
	if g < 0 {
		return invalid(field, "must not be negative, got %d", g)
	}
	return nil
}
