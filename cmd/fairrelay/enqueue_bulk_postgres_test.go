package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/pgtest"
)

// A bulk enqueue at --at reads the store's clock to answer a bad line in
// SPEC §2's order (the clock's answer before the line's field). A read of
// the clock that failed became that line's answer ({"error":"busy"} in
// place of the field at fault), the line's flow was failed, and the run
// went on and ended with exit 1, as for bad input, where a database error
// stops the run and is its error (an audit of the paths that turn a
// database error into something else). Now it stops the run, as a failed
// batch does, and the line is not answered. PostgreSQL: the clock's table
// is locked once line 1 is committed, so that the read of line 2 (a bad
// delta) meets the lock timeout.
func TestBulkEnqueueStopsOnAFailedReadOfTheClock(t *testing.T) {
	t.Parallel()
	dsn := pgtest.Schema(t, "frbulkclock")
	made, err := fairrelay.Open(t.Context(), dsn, fairrelay.Config{Policy: fairrelay.DaemonPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	made.Close()
	q, err := fairrelay.Open(t.Context(), dsn, fairrelay.Config{Policy: fairrelay.DaemonPolicy(), BusyTimeout: 50 * time.Millisecond, MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	inW, answers, done := startBulk(t, q, 5)
	release := pgtest.LockTable(t, dsn, "clock")
	fmt.Fprintln(inW, `{"id":"E2","flow":"G","delta":0}`) // a bad delta: its answer waits for the clock's
	inW.Close()
	var rest []string
	for answers.Scan() {
		rest = append(rest, answers.Text())
	}
	r := <-done
	release()
	if !errors.Is(r.err, fairrelay.ErrBusy) || len(rest) != 0 {
		t.Fatalf("bulk enqueue whose read of the clock failed: %+v %v, then answered %q; want it stopped, busy, line 2 not answered", r.rep, r.err, rest)
	}
	if msg := errorLine(stoppedAfter(r.err, r.rep)); !strings.HasPrefix(msg, "busy: enqueue stopped after 1 lines, answered above and kept as answered; the lines after them were not enqueued") {
		t.Errorf("the error of the stopped run: %s", msg)
	}
}
