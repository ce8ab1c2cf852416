package fairrelay

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/fairrelay/fairrelay/internal/ident"
)

// CheckID applies the one rule for every name fairrelay stores and sends —
// event ids, flow ids, operator names and group names — and returns nil
// when v follows it, else an *Error with CodeInvalidInput whose Field is
// field. A name is 1 to MaxIDBytes (200) bytes of valid UTF-8, with no
// Unicode white space at either end and no control (Cc), format (Cf), line
// separator (Zl) or paragraph separator (Zp) character anywhere: names
// travel in HTTP headers, broker metadata and logs, which trim or mangle
// those, so a name that breaks the rule could not arrive as stored. The
// exact code points are listed in package internal/ident; the PostgreSQL
// outbox function (SPEC §10) enforces the same rule.
func CheckID(field, v string) error {
	if err := ident.Check(v); err != nil {
		return invalid(field, "%s", err.Error())
	}
	return nil
}

// CheckReason applies the rule for the free text an operator writes into
// the audit log (a redrive's reason, and the reason of every other audited
// action): at most MaxReasonBytes bytes of valid UTF-8 without a control
// (Cc, which includes the line feed and the tab), format (Cf), line (Zl)
// or paragraph (Zp) separator character, so that one audit row prints as
// one line and cannot move or recolour an operator's terminal. White space
// at the ends is allowed; an empty or blank reason (only white space, tabs
// and line breaks included, as strings.TrimSpace reads it) is not an input
// error but a rejection (SPEC §2: "non-empty after trimming", else
// empty_reason), and a rejection writes nothing. It returns nil or an
// *Error with CodeInvalidInput naming field.
func CheckReason(field, v string) error {
	if strings.TrimSpace(v) == "" {
		return nil // the action answers empty_reason
	}
	if err := ident.CheckText(v, MaxReasonBytes); err != nil {
		return invalid(field, "%s", err.Error())
	}
	return nil
}

// CheckSearch applies the rule for a paging key or a search text — the
// "after" of a list, a flow id prefix — which may be empty or any part of
// a name, but not a text that no stored name could hold: invalid UTF-8 or a
// control character (Cc), both of which CheckID refuses in every name. It
// returns nil or an *Error with CodeInvalidInput whose Field is field, so
// that a list answers a mistyped key with an error naming it before any
// read, the same on both backends (PostgreSQL refused invalid UTF-8 with a
// database error of its own; SQLite answered an empty page).
func CheckSearch(field, v string) error {
	if !utf8.ValidString(v) {
		return invalid(field, "is not valid UTF-8")
	}
	if i := strings.IndexFunc(v, unicode.IsControl); i >= 0 {
		return invalid(field, "holds a control character at byte %d (no name does)", i)
	}
	return nil
}

// checkID is CheckID for the package's own fields.
func checkID(field, v string) error { return CheckID(field, v) }

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

// checkGeneration refuses a negative generation: generations start at 0 (an
// event never claimed) and only grow, so a negative one is a typo, never a
// token that is merely stale.
func checkGeneration(field string, g int64) error {
	if g < 0 {
		return invalid(field, "must not be negative, got %d", g)
	}
	return nil
}
