package main

import (
	"context"
	"errors"

	"github.com/fairrelay/fairrelay/internal/errs"
)

// serverError is the error a daemon exits with when one of its HTTP
// servers (its console, its metrics and probes, the demo's receiver)
// stopped on an error while the daemon ran: what names the server.
type serverError struct {
	what string
	err  error
}

func (e *serverError) Error() string { return e.what + " stopped serving: " + e.err.Error() }
func (e *serverError) Unwrap() error { return e.err }

// serving returns a daemon's ctx, which ends with parent (a stop signal)
// or once fail is called: fail(what, err) says that the server what
// stopped on err. The daemon then stops as on a signal, and exits with
// that error (serverFailed): a console, relay or receiver whose server
// had stopped ran on, answering nothing there (its /healthz gone, its
// console unreachable) while it looked healthy, or exited 0 (console,
// when its TLS pair could not be loaded as it began to serve).
func serving(parent context.Context) (ctx context.Context, fail func(what string, err error)) {
	ctx, cancel := context.WithCancelCause(parent)
	return ctx, func(what string, err error) { cancel(&serverError{what: what, err: err}) }
}

// serverFailed returns err, or instead the server failure that ended ctx
// (serving) when err is nil or only says that ctx ended (a daemon stopped
// by it stops as on a signal); both when err is another error.
func serverFailed(ctx context.Context, err error) error {
	var se *serverError
	switch {
	case !errors.As(context.Cause(ctx), &se):
		return err
	case err == nil || errors.Is(err, context.Canceled):
		return se
	}
	return errs.Join(se, err)
}
