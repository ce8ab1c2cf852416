package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/fairrelay/fairrelay"
)

// storeRetry tries a call of the store again while it fails for a while:
// busy (a lock held past the busy timeout, by a migration, a long
// transaction or a relay stopped mid-transaction, which PostgreSQL cuts off
// after 10 s) or a database error (a restart, a connection lost, a disk
// full), for at most within from the first failure of a streak, pausing
// 250 ms doubling to 5 s between tries, and says so on out (once when a
// streak starts, once when it ends). Each try can itself wait the busy
// timeout (5 s) for a lock, so a streak can last that much longer than
// within. Nothing else is tried again: input the
// store refuses, a store that is not there. A retried enqueue is safe: an
// id already stored answers existing (a batch whose commit was cut off
// answers existing for the lines it stored). within 0 tries once: the
// caller stops on the first error. A helper-170 report: a streaming
// enqueue (tail -f | fairrelay enqueue) stopped for good on one busy
// answer while a relay was stopped mid-transaction, and took the producers
// upstream with it.
type storeRetry struct {
	within time.Duration
	out    io.Writer
	what   string // the command, for its lines: "enqueue"
}

// transientStoreError reports whether err is one storeRetry tries again:
// busy, or a database error but a store file replaced under the process
// (which no wait cures) and a call stopped by its context (a signal: the
// run is ending, not the store failing; helper-172 saw SIGTERM reported as
// "the store failed").
func transientStoreError(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	return errors.Is(err, fairrelay.ErrBusy) ||
		errors.Is(err, fairrelay.ErrDatabase) && !errors.Is(err, fairrelay.ErrFileReplaced)
}

// do calls fn until it succeeds, fails for good, or has failed for within;
// it returns fn's last error (nil on success), or it when ctx ends first.
func (r *storeRetry) do(ctx context.Context, fn func() error) error {
	var start time.Time
	wait := 250 * time.Millisecond
	for {
		err := fn()
		if ctx.Err() != nil {
			return err
		}
		if !start.IsZero() && (err == nil || !transientStoreError(err)) {
			// Answered, if not with success: a read of an id not stored
			// answers not_found (helper-172: no such line after a read's
			// streak ended so).
			fmt.Fprintf(r.out, "fairrelay: %s: the store answers again, after %s\n", r.what, time.Since(start).Round(time.Millisecond))
		}
		if err == nil || r == nil || r.within <= 0 || !transientStoreError(err) {
			return err
		}
		if start.IsZero() {
			start = time.Now()
			fmt.Fprintf(r.out, "fairrelay: %s: the store failed (%v); trying again for up to %s (--retry-for)\n", r.what, err, r.within)
		}
		if time.Since(start)+wait > r.within {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, 5*time.Second)
	}
}
