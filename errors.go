package fairrelay

import (
	"errors"
	"fmt"
	"strings"

	"github.com/fairrelay/fairrelay/internal/store"
	"github.com/fairrelay/fairrelay/internal/store/sqlitestore"
)

// Code is the stable, machine-readable name of an error; the script command
// prints it as {"error": code}.
type Code string

// Error codes.
const (
	// CodeClockRegressed: a write's tick is below the stored tick (SPEC §2).
	CodeClockRegressed Code = "clock_regressed"
	// CodeNotFound: no event has the given id (SPEC §6).
	CodeNotFound Code = "not_found"
	// CodeInvalidInput: an argument is out of its domain; Error.Field names it.
	CodeInvalidInput Code = "invalid_input"
	// CodeBusy: the database was busy or locked; nothing changed and the
	// caller may retry (SPEC §7).
	CodeBusy Code = "busy"
	// CodeNotDatabase: the file or server does not hold a usable database.
	CodeNotDatabase Code = "not_a_database"
	// CodeDatabase: any other database error; the wrapped error says more.
	// A ctx that ends during a call (after Open) is answered with this
	// code too, ctx's error in the chain: test errors.Is(err,
	// context.Canceled) or context.DeadlineExceeded first to tell the
	// caller's own cancellation from a fault of the database.
	CodeDatabase Code = "database"
)

// Error is the error type of every fairrelay operation. Match it with
// errors.Is against the sentinels below, or errors.As to read Field.
type Error struct {
	Code  Code
	Field string // for CodeInvalidInput: the field at fault (id, flow, body, at, …)
	// Item, for CodeInvalidInput from a call that takes many items
	// (EnqueueMany's Events, SettleMany's Settles), is the 1-based
	// position of the item whose Field is at fault: Events[Item-1]. With
	// more than one item the Message also leads with it ("event 3 of 5:
	// …", "settlement 2 of 8: …"). 0 when the error is not about one item
	// (the call's own fields, every single-item call). Nothing of the call
	// was written either way.
	Item    int
	Message string
	// Hint, when set, says how a Go caller avoids the error, in this
	// module's names (AtStored, DaemonPolicy); Error appends it in
	// parentheses. A command line, whose names are its flags, leaves it
	// out.
	Hint string
	Err  error // the underlying cause, if any
}

// Error returns "field: message: cause (hint)", each part only when set:
// the line the CLI prints after its code (fairrelay: invalid_input: …).
func (e *Error) Error() string {
	msg := e.Message
	if e.Err != nil {
		if msg == "" {
			msg = e.Err.Error()
		} else {
			msg += ": " + e.Err.Error()
		}
	}
	if e.Field != "" {
		msg = e.Field + ": " + msg
	}
	if e.Hint != "" {
		msg += " (" + e.Hint + ")"
	}
	return msg
}

// Unwrap returns Err, the underlying cause (nil when there is none), so
// errors.Is and errors.As reach a driver's or a store's error through it.
func (e *Error) Unwrap() error { return e.Err }

// Is matches two *Error values by Code, so errors.Is(err, ErrNotFound) works
// whatever the message.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && t.Field == "" && t.Message == "" && t.Hint == ""
}

// ErrCommitUnknown is in the chain of an ErrDatabase error (errors.Is) when
// the connection to PostgreSQL failed after the write's COMMIT was sent and
// before its answer: the write may have committed or not. A claim that
// did leaves its heads leased until their leases end; a settle that did
// answers stale when sent again. An error the server answered — a
// statement's, or BEGIN's on a connection an administrator ended — is
// never ErrCommitUnknown: the COMMIT did not run. An inbox's Receive and
// ReceiveHeld (package inbox) answer it too, on either backend, for a
// commit that reported an error and whose receipt could not be read back:
// the delivery may have been applied, and answers duplicate sent again.
var ErrCommitUnknown = store.ErrCommitUnknown

// ErrFileReplaced is in the chain of an ErrDatabase error (errors.Is) from
// a write to a SQLite store or inbox whose file was removed or replaced
// since it was opened (moved away, restored from a backup, deleted and
// made again by another process): the write would go to a file no other
// process sees, and be lost at the next start, so nothing is written.
// Waiting does not cure it; restart the process. A relay stops on it
// (relay.Run returns it).
var ErrFileReplaced = sqlitestore.ErrFileReplaced

// ErrClosed is in the chain of an ErrDatabase error (errors.Is) from a call
// on a Queue (or an inbox) after its Close: nothing was done, and waiting
// does not cure it. A relay stops on it (relay.Run returns it), as does a
// broker consumer (consume.Run) whose inbox was closed: close the Queue
// after the relay's Run has returned, not before.
var ErrClosed = store.ErrClosed

// Sentinels for errors.Is.
var (
	ErrClockRegressed = &Error{Code: CodeClockRegressed}
	ErrNotFound       = &Error{Code: CodeNotFound}
	ErrInvalidInput   = &Error{Code: CodeInvalidInput}
	ErrBusy           = &Error{Code: CodeBusy}
	ErrNotDatabase    = &Error{Code: CodeNotDatabase}
	ErrDatabase       = &Error{Code: CodeDatabase}
)

// CodeOf returns the code of err, or "" when err is not a fairrelay error.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// InvalidInput returns an *Error with CodeInvalidInput naming field, its
// message formatted from format and args: the one constructor of the
// input errors every package of fairrelay returns (the relay's config, the
// sinks' options), so that errors.Is(err, ErrInvalidInput) and Error.Field
// work the same everywhere.
func InvalidInput(field, format string, args ...any) error {
	return &Error{Code: CodeInvalidInput, Field: field, Message: fmt.Sprintf(format, args...)}
}

func invalid(field, format string, args ...any) error { return InvalidInput(field, format, args...) }

// clockRegressed is the ErrClockRegressed of a write op at tick at, below
// the stored tick (SPEC §2), built here alone so that every write that
// takes AtStored (enqueue, claim, settle, redrive, expedite, pause,
// resume, configure, prune) says the same, hint included: a Go caller
// that left At at 0 most likely meant AtStored.
func clockRegressed(op string, at, stored int64) *Error {
	return &Error{Code: CodeClockRegressed, Message: fmt.Sprintf("%s at tick %d: the store is at tick %d", op, at, stored),
		Hint: "give At: fairrelay.AtStored to write at the store's current tick"}
}

// dbError classifies a backend error under its code, keeping the chain.
func dbError(op string, err error) error {
	if err == nil {
		return nil
	}
	var fe *Error
	if errors.As(err, &fe) {
		return err
	}
	code := CodeDatabase
	switch {
	case errors.Is(err, store.ErrBusy):
		code = CodeBusy
	case errors.Is(err, store.ErrNotDatabase):
		code = CodeNotDatabase
	}
	if strings.HasPrefix(err.Error(), op+": ") {
		op = "" // the cause names the operation already: no "enqueue: enqueue:"
	}
	return &Error{Code: code, Message: op, Err: err}
}
