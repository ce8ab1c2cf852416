package store

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"
)

// Store.Changes is the store's change signal: how a dispatcher hears of an
// event committed by another process without polling for it (issue 14).
// The contract every backend keeps:
//
//   - A value on the channel means "the store may have changed: look
//     again". Values coalesce (the channel holds one), and a value may
//     come when nothing claimable changed; a reader must treat it as a
//     hint and read the store.
//   - Every commit elsewhere that makes a head claimable at once (an
//     enqueue onto a flow with no head, or a new flow) is followed by a
//     value, sent after the commit is visible to a new transaction,
//     while the watch holds. PostgreSQL: enqueue_many's pg_notify on the
//     channel pgstore.Channel(schema), delivered at commit; SQLite: any commit
//     of any other connection moves PRAGMA data_version.
//   - A watch that is lost (a dropped connection) is re-established by
//     the backend with backoff (WatchRetry, doubling to MaxWatchRetry);
//     once it holds again a value is sent, since what was committed
//     meanwhile is unknown. status hears each failure and then nil.
//   - It never writes, and an idle watch costs next to nothing (a
//     blocked read on PostgreSQL; a PRAGMA every millisecond on SQLite).
//
// Changes not in that list (a redrive, another relay's settle, a backoff
// or lease running out) send nothing: a dispatcher still polls for them.

// WatchRetry is the first pause after a watch failed; it doubles with each
// failure in a row up to MaxWatchRetry, drawn between half and all of it.
const (
	WatchRetry    = 10 * time.Millisecond
	MaxWatchRetry = 5 * time.Second
)

// Watch runs a backend's change watch for Store.Changes until ctx is done,
// and returns the channel it signals. watch establishes the watch, calls
// changed once it holds, then calls changed for every change it sees, and
// returns the error that ended it; Watch then reports the error to status
// (when not nil), pauses (WatchRetry, doubling) and calls watch again.
// status hears nil at the first changed after a failure. The channel is
// closed when Watch's goroutine ends; status is never called after that.
func Watch(ctx context.Context, status func(error), watch func(ctx context.Context, changed func()) error) <-chan struct{} {
	return runWatch(ctx, status, watch, func() {})
}

// runWatch is Watch, calling ended after the channel is closed.
func runWatch(ctx context.Context, status func(error), watch func(ctx context.Context, changed func()) error, ended func()) <-chan struct{} {
	c := make(chan struct{}, 1)
	go func() {
		defer ended()
		defer close(c)
		failed := false
		retry := WatchRetry
		changed := func() {
			if failed {
				failed, retry = false, WatchRetry
				if status != nil {
					status(nil)
				}
			}
			select {
			case c <- struct{}{}:
			default: // one is waiting already: they coalesce
			}
		}
		for ctx.Err() == nil {
			err := watch(ctx, changed)
			if ctx.Err() != nil {
				return
			}
			if err == nil {
				err = errors.New("the watch ended")
			}
			failed = true
			if status != nil {
				status(err)
			}
			t := time.NewTimer(retry/2 + rand.N(retry/2+1))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			retry = min(2*retry, MaxWatchRetry)
		}
	}()
	return c
}

// Watches ties a store's change watches to its life: the store's Close
// calls Close, which ends every watch Start began and waits for them. The
// zero value is ready to use.
type Watches struct {
	mu     sync.Mutex
	closed bool
	stop   context.Context // done at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Start runs Watch (same arguments) until ctx is done or Close is called.
// After Close it returns a closed channel.
func (w *Watches) Start(ctx context.Context, status func(error), watch func(ctx context.Context, changed func()) error) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		c := make(chan struct{})
		close(c)
		return c
	}
	if w.stop == nil {
		w.stop, w.cancel = context.WithCancel(context.Background())
	}
	ctx, cancel := context.WithCancel(ctx)
	unhook := context.AfterFunc(w.stop, cancel)
	w.wg.Add(1)
	return runWatch(ctx, status, watch, func() {
		unhook()
		cancel()
		w.wg.Done()
	})
}

// Close ends every watch and waits until their goroutines have returned.
func (w *Watches) Close() {
	w.mu.Lock()
	w.closed = true
	if w.cancel != nil {
		w.cancel()
	}
	w.mu.Unlock()
	w.wg.Wait()
}
