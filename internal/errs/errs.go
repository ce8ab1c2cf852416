// Package errs joins errors on one line.
//
// errors.Join puts a newline between its errors, which a log line (slog's
// text and JSON handlers quote it as "\n") and a CLI's one-line message
// should not hold: a library user found "receive: begin transaction:
// context canceled\ncontext canceled" in a receiver's log. Join here keeps
// errors.Is and errors.As reaching every error joined, as errors.Join does,
// and writes them "first; second".
package errs

import "strings"

// Join returns an error that wraps the non-nil errors of errs, or nil when
// there are none; one non-nil error is returned as it is. Its message is
// theirs, in order, separated by "; ". errors.Is and errors.As reach each
// (Unwrap() []error).
func Join(errs ...error) error {
	var kept []error
	for _, err := range errs {
		if err != nil {
			kept = append(kept, err)
		}
	}
	switch len(kept) {
	case 0:
		return nil
	case 1:
		return kept[0]
	}
	return &joined{errs: kept}
}

type joined struct{ errs []error }

func (j *joined) Error() string {
	parts := make([]string, len(j.errs))
	for i, err := range j.errs {
		parts[i] = err.Error()
	}
	return strings.Join(parts, "; ")
}

func (j *joined) Unwrap() []error { return j.errs }

// Stutter returns the first word msg says twice in a row as a prefix, as in
// "enqueue: enqueue: closed pool" (a layer's prefix on a cause that has it
// already), or "". Tests check errors' messages with it.
func Stutter(msg string) string {
	parts := strings.Split(msg, ": ")
	for i := 1; i < len(parts); i++ {
		if parts[i] == parts[i-1] {
			return parts[i] + ": " + parts[i] + ": "
		}
	}
	return ""
}
