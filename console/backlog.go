package console

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/fairrelay/fairrelay"
)

// backlogCount keeps the last count of the events not acked
// (fairrelay.Queue.Backlog) for the overview. On PostgreSQL that count
// reads every flow (O(flows): PostgreSQL keeps no store-wide counter, SPEC
// §10), so no page waits long for a count: when the last count is older
// than its refresh interval, a page starts a new one and waits for it up
// to wait (pageWait, 50 ms) — a small store's count (SQLite's counter, a
// few flows) ends within that, so its overview is never stale — and
// otherwise shows the last count, with its age, while the new one goes on
// in the background. The interval is 100 times what the last count took,
// at least minRefresh: SQLite's counter is read at most every second,
// 100 000 flows on PostgreSQL (44 ms) every ~4 s, and a store where a count
// takes 600 ms or more (or waited for a lock that long) every minute,
// maxRefresh — so the counting takes at most 1 % of one connection's time
// unless a count takes longer than 600 ms. (River UI does the same with
// its counts by state.)
// Safe for concurrent use.
type backlogCount struct {
	// count counts; it is fairrelay.Queue.Backlog but for tests.
	count func(context.Context) (int64, error)
	// now is the console's wall clock.
	now func() time.Time
	// timeout bounds one count.
	timeout time.Duration
	// wait is how long a page waits for a count under way before it shows
	// the last one (pageWait; 0: it never waits).
	wait time.Duration
	// log receives a failed count's error.
	log *slog.Logger
	// done, when set, is told of every count's end (tests).
	done func()

	mu      sync.Mutex
	n       int64
	at      time.Time     // when the last successful count started
	took    time.Duration // how long it took
	counted bool          // n, at and took hold a count
	running bool          // a count is under way
	ended   chan struct{} // closed when the count under way ends
	err     error         // the last count's error, nil once one succeeds
}

// minRefresh and maxRefresh bound the refresh interval of the backlog
// count: a count slowed by a lock (PostgreSQL waits up to its lock
// timeout) must not leave the number stale for 100 times that.
const (
	minRefresh = time.Second
	maxRefresh = time.Minute
)

// pageWait is how long a page waits for a count it started (or found
// under way) before it shows the last one: long enough for a counter's read
// or a few flows on a loaded machine, short beside a page's own time.
const pageWait = 50 * time.Millisecond

// backlogView is what a page shows of the backlog.
type backlogView struct {
	// N is the last count; Counted says there is one.
	N       int64
	Counted bool
	// Age is how old the count is, rounded to the second; "" when fresh
	// (younger than minRefresh).
	Age string
	// Failed is the last count's error code (fairrelay.Code) when it
	// failed and nothing newer succeeded; the store's own text goes to the
	// log, not to the page.
	Failed string
}

// view returns what a page shows now. When the last count is stale (or
// there is none) and none is under way, it starts one in the background;
// then, while a count is under way, it waits for it up to b.wait.
func (b *backlogCount) view() backlogView {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if !b.running && (!b.counted || now.Sub(b.at) >= min(maxRefresh, max(minRefresh, 100*b.took))) {
		b.running, b.ended = true, make(chan struct{})
		go b.run(now, b.ended)
	}
	if b.running && b.wait > 0 {
		ended := b.ended
		b.mu.Unlock()
		t := time.NewTimer(b.wait)
		select {
		case <-ended:
		case <-t.C:
		}
		t.Stop()
		b.mu.Lock()
		now = b.now()
	}
	v := backlogView{N: b.n, Counted: b.counted}
	if b.err != nil {
		v.Failed = string(fairrelay.CodeOf(b.err))
	}
	if age := now.Sub(b.at); b.counted && age >= minRefresh {
		v.Age = age.Round(time.Second).String()
	}
	return v
}

// run counts once, started at start, and closes ended when done.
func (b *backlogCount) run(start time.Time, ended chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	n, err := b.count(ctx)
	cancel()
	took := b.now().Sub(start)
	b.mu.Lock()
	b.running = false
	if err == nil {
		b.n, b.at, b.took, b.counted, b.err = n, start, took, true, nil
	} else {
		b.err = err
	}
	close(ended)
	b.mu.Unlock()
	if err != nil {
		b.log.Error("console: counting the backlog failed", "err", err)
	}
	if b.done != nil {
		b.done()
	}
}
