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
// ident_problem is the same rule), with Item set to the event's 1-based
// position and, in a call of more than one event, the message led by
// "event <Item> of <n>: "; or nil.
func CheckEvents(p EnqueueParams) error {
	for i, e := range p.Events {
		bad := func(field, msg string) error {
			if len(p.Events) > 1 {
				msg = fmt.Sprintf("event %d of %d: %s", i+1, len(p.Events), msg)
			}
			return &InvalidError{Field: field, Message: msg, Item: i + 1}
		}
		if err := ident.Check(e.ID); err != nil {
			return bad("id", err.Error())
		}
		if err := ident.Check(e.Flow); err != nil {
			return bad("flow", err.Error())
		}
		if e.Group != "" {
			if err := ident.Check(e.Group); err != nil {
				return bad("group", err.Error())
			}
		}
		switch {
		case len(e.Body) == 0:
			return bad("body", "empty")
		case len(e.Body) > p.MaxBodyBytes:
			return bad("body", fmt.Sprintf("%d bytes, more than the limit of %d", len(e.Body), p.MaxBodyBytes))
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
