package store

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/fairrelay/fairrelay/internal/ident"
)

// CheckEvents checks the fields of p's events in SPEC §2's order, event by
// event and in each id, flow, group, body: internal/ident's rule for the
// names, a body of 1 to MaxBodyBytes bytes. It returns the first bad
// field's *InvalidError, the answer PostgreSQL's enqueue_many gives (its
// ident_problem is the same rule), or nil.
func CheckEvents(p EnqueueParams) error {
	for _, e := range p.Events {
		if err := ident.Check(e.ID); err != nil {
			return &InvalidError{Field: "id", Message: err.Error()}
		}
		if err := ident.Check(e.Flow); err != nil {
			return &InvalidError{Field: "flow", Message: err.Error()}
		}
		if e.Group != "" {
			if err := ident.Check(e.Group); err != nil {
				return &InvalidError{Field: "group", Message: err.Error()}
			}
		}
		switch {
		case len(e.Body) == 0:
			return &InvalidError{Field: "body", Message: "empty"}
		case len(e.Body) > p.MaxBodyBytes:
			return &InvalidError{Field: "body", Message: fmt.Sprintf("%d bytes, more than the limit of %d", len(e.Body), p.MaxBodyBytes)}
		}
	}
	return nil
}

// Storable says whether every backend's text can hold s: valid UTF-8
// without a NUL byte (PostgreSQL's text takes neither; internal/ident's rule
// refuses both in every name, so no stored name is unstorable).
func Storable(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}
