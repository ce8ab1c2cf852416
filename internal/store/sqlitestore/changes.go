package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// A change watch reads PRAGMA data_version every watchEvery for the
// watchHot after it last saw another process's commit, and every
// watchIdle otherwise. Back to back a read costs 2-3 µs of CPU
// (modernc.org/sqlite through database/sql), but after a sleep, with cold
// caches, 60-120 µs, and the wake-up itself 50-90 µs (measured on the
// project's 2-core VM: a bare 1 ms timer took 4-5 % of a core, 1 ms with
// the read 8-10 %, 10 ms with the read 2 %). So an idle watch reads every
// 20 ms (about 1 % of a core; the first commit after a quiet spell is
// seen within 20 ms), and a watch that saw a commit of another process
// within the last second reads every millisecond (a producer committing at
// least once a second keeps it so). This store's own commits (its write
// connection's: Store.commits) are signalled but do not speed the watch
// up: an idle relay's heartbeat claim would otherwise.
const (
	watchEvery = time.Millisecond
	watchIdle  = 20 * time.Millisecond
	watchHot   = time.Second
)

// Changes signals every commit made through another connection to the file
// — another process, or this store's own write connection (see
// store.Store.Changes): it reads PRAGMA data_version, which moves with each
// of them, on a read connection of its own (every watchEvery while the
// store is in use, every watchIdle when it is not). A read takes no lock a
// writer waits for (WAL) and writes nothing. A failed read closes that
// connection and the watch opens another, with backoff. Close ends it.
func (s *Store) Changes(ctx context.Context, status func(error)) <-chan struct{} {
	return s.watches.Start(ctx, status, func(ctx context.Context, changed func()) error {
		// Only the store's file as it is: a watch opening again after
		// the file was removed must fail, not make a new one.
		db, err := sql.Open("sqlite", ExistingOnly(DSN(s.path, time.Second, false)))
		if err != nil {
			return fmt.Errorf("watch: %w", err)
		}
		defer db.Close()
		db.SetMaxOpenConns(1)
		st, err := db.PrepareContext(ctx, "PRAGMA data_version")
		if err != nil {
			return Translate(fmt.Errorf("watch: %w", err))
		}
		defer st.Close()
		// A context that is never done: database/sql would start a
		// goroutine per query to watch a cancellable one.
		qctx := context.WithoutCancel(ctx)
		var last int64
		if err := st.QueryRowContext(qctx).Scan(&last); err != nil {
			return Translate(fmt.Errorf("watch: data_version: %w", err))
		}
		changed() // watching: whatever committed before is unknown
		hot := 0  // fast reads left before the watch slows down
		own := s.commits.Load()
		t := time.NewTimer(watchIdle)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
			}
			var v int64
			if err := st.QueryRowContext(qctx).Scan(&v); err != nil {
				return Translate(fmt.Errorf("watch: data_version: %w", err))
			}
			// Read after the version: a commit of this store that the
			// version shows has been counted (or is being, for the few
			// instructions after it returned, which the watch then takes
			// for another process's).
			n := s.commits.Load()
			if v != last {
				if n == own {
					hot = int(watchHot / watchEvery) // someone else's
				}
				last = v
				changed()
			}
			own = n
			if hot > 0 {
				hot--
				t.Reset(watchEvery)
			} else {
				t.Reset(watchIdle)
			}
		}
	})
}
