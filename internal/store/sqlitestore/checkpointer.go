package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// Checkpoints. In WAL mode SQLite copies the log back into the database
// file (a checkpoint: writes and an fsync of the file) once the log passes
// wal_autocheckpoint pages, and by default the commit that passes it does
// the work, holding the write lock meanwhile: every thousandth page written
// costs some write transaction milliseconds, and a writer waiting behind it
// waits that long. The store's write connection therefore checkpoints only
// far later (checkpointSafety pages, a safety net), and a checkpointer does
// it beside the writers instead: once this process's store has committed
// checkpointCommits times since the last checkpoint (checked every
// checkpointEvery), or has committed at all and checkpointIdle has passed,
// it runs a PASSIVE checkpoint on a read connection, which copies the
// frames no reader still needs without taking the write lock. As
// Litestream runs its checkpoints. By commits, not by time: a checkpoint
// ends with an fsync of the database file, which delays a commit's own
// fsync on the same disk when they meet, so a store that commits a few
// times a second checkpoints rarely (measured: every 50 ms after each
// commit cost a 2-events-a-second relay about 9 ms at p90), and a busy one
// often and small.
const (
	checkpointEvery   = 50 * time.Millisecond
	checkpointCommits = 64
	checkpointIdle    = 30 * time.Second
	checkpointSafety  = 16384 // pages (64 MiB of 4 KiB pages)
)

// writeDSN is DSN for the store's own write connection: BEGIN IMMEDIATE,
// checkpoints left to the checkpointer up to checkpointSafety pages, and
// the log file cut back to 64 MiB when it starts over.
func writeDSN(path string, busy time.Duration) string {
	u, _ := url.Parse(DSN(path, busy, true))
	v := u.Query()
	v.Add("_pragma", "wal_autocheckpoint(16384)")
	// The log file keeps its largest size unless limited: after a
	// checkpoint lets SQLite start the log over, it is cut back to this.
	v.Add("_pragma", "journal_size_limit(67108864)")
	u.RawQuery = v.Encode()
	return u.String()
}

// startCheckpointer runs PASSIVE checkpoints on db as the comment above
// says (commits nil: at every tick), at the ticks of ticks (nil: every
// checkpointEvery), until the returned stop is called (which waits for
// it). A checkpoint runs only with apart held, and a tick at which a
// prune transaction holds it is skipped (Store.apart): the checkpoint's
// fsync of the database file, beside a prune's commit writing the log,
// made that commit's writes wait for the disk with the writer held (10-24
// ms on the disk of BENCHMARKS.md, "Retention"), and a dispatch step
// behind it waited as long.
// A failed checkpoint is tried again at the next tick: the commit path's
// own checkpoint at checkpointSafety pages still bounds the log.
func startCheckpointer(db *sql.DB, commits *atomic.Int64, apart *sync.Mutex, ticks <-chan time.Time) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if ticks == nil {
			t := time.NewTicker(checkpointEvery)
			defer t.Stop()
			ticks = t.C
		}
		var seen int64
		last := time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticks:
			}
			n := int64(0)
			if commits != nil {
				n = commits.Load()
				if n-seen < checkpointCommits && (n == seen || time.Since(last) < checkpointIdle) {
					continue
				}
			}
			if !apart.TryLock() {
				continue // a prune is writing: checkpoint at a later tick
			}
			seen = n
			last = time.Now()
			db.ExecContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)")
			apart.Unlock()
		}
	}()
	return func() { cancel(); <-done }
}

// TruncateLog copies the whole write-ahead log of the SQLite file at path
// into the file and empties the log (PRAGMA wal_checkpoint(TRUNCATE)), for
// callers that measure the file's size or need the log empty. A TRUNCATE
// checkpoint answers busy, without an error, when it could not finish: a
// store's checkpointer holds the checkpoint lock, or a reader still needs
// the log. TruncateLog then tries again (waits of 1-50 ms, jittered,
// doubling) until the checkpoint finishes or ctx ends. Errors: the
// database's (opening — a path with no file is one, none is created —
// and the checkpoint); a file not in WAL mode; ctx's error, wrapped with
// how many tries were busy, when it ended before a checkpoint finished.
func TruncateLog(ctx context.Context, path string) error {
	// No pragma but a busy timeout of 0: a busy checkpoint answers at once
	// and the loop below waits; the file's journal mode is left as found.
	// mode=rw: a file that does not exist is an error, not a new one.
	db, err := sql.Open("sqlite", fileURI(path, "_pragma=busy_timeout(0)&mode=rw"))
	if err != nil {
		return err
	}
	defer db.Close()
	wait := time.Millisecond
	for tries := 1; ; tries++ {
		var busy, logged, copied int
		if err := db.QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &logged, &copied); err != nil {
			return fmt.Errorf("checkpoint %s: %w", path, err)
		}
		if done, err := truncated(busy, logged); err != nil {
			return fmt.Errorf("checkpoint %s: %w", path, err)
		} else if done {
			return nil
		}
		if truncateBusy != nil {
			truncateBusy()
		}
		d := wait/2 + rand.N(wait/2+1)
		wait = min(2*wait, 50*time.Millisecond)
		select {
		case <-ctx.Done():
			return fmt.Errorf("checkpoint %s: busy %d times: %w", path, tries, ctx.Err())
		case <-time.After(d):
		}
	}
}

// truncated reads the answer of PRAGMA wal_checkpoint(TRUNCATE): done when
// the log was emptied; neither done nor an error when it was busy (tried
// again). SQLite answers -1 for the log of a database not in WAL mode
// (busy 0): there is no log to empty, and a size read after this would not
// be what the caller means. A checkpoint that could not take the
// checkpoint lock — the store's checkpointer held it — answers busy with
// -1 too: busy, not "not in WAL mode" (the prune benchmark's tests failed
// so under load).
func truncated(busy, logged int) (done bool, err error) {
	switch {
	case busy != 0:
		return false, nil
	case logged < 0:
		return false, errors.New("the file is not in WAL mode")
	}
	return true, nil
}

// truncateBusy, when set (by tests), is called each time TruncateLog's
// checkpoint answers busy.
var truncateBusy func()
