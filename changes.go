package fairrelay

import "context"

// Changes watches the store for events committed by other processes and
// connections, so that a dispatcher claims them at once instead of at its
// next poll (package relay uses it). A value on the returned channel means
// "the store may have changed: claim (or ask NextDue) again"; values
// coalesce (the channel holds one), and some come when nothing claimable
// changed.
//
// What is signalled: on PostgreSQL, every committed enqueue that made a
// flow's head claimable (a new flow, or an event onto a flow without a
// head) — from EnqueueTx, Enqueue or the SQL function enqueue in any
// language — through LISTEN on a connection of the watch's own, outside
// the pool (the channel is "fairrelay_" + the schema name); on SQLite,
// every commit by any other connection to the file, this Queue's own
// included, seen by reading PRAGMA data_version every millisecond on a
// read connection of its own (it never writes). Redrives, settles and
// backoffs or leases running out are not signalled: keep polling for them
// (Relay polls at most Config.MaxPollInterval apart).
//
// The watch runs until ctx is done or the Queue is closed, then the
// channel is closed. A watch that fails (the listening connection dropped,
// the server restarting) is re-established with backoff, from 10 ms
// doubling to 5 s, and a value is sent once it holds again (what was
// committed meanwhile is unknown). status, when not nil, is called with
// each failure (an *Error of code busy, database or not_database) and
// with nil once the watch holds
// again after one; calls are sequential, from the watch's goroutine, and
// must return quickly.
func (q *Queue) Changes(ctx context.Context, status func(err error)) <-chan struct{} {
	var report func(error)
	if status != nil {
		report = func(err error) { status(dbError("watch changes", err)) }
	}
	return q.store.Changes(ctx, report)
}
