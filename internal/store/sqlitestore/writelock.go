package sqlitestore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/fairrelay/fairrelay/internal/errs"
	"github.com/fairrelay/fairrelay/internal/store"
)

// How this process waits for another process's writer when it begins a
// write transaction (beginImmediate): a first try, then tries after
// lockFirstWait, doubling up to lockMaxWait, each wait jittered by up to a
// half, until the store's busy timeout has passed.
//
// Why not SQLite's busy handler: it retries after 1, 2, 5, 10, 15, 20, 25 …
// ms, so a relay whose BEGIN IMMEDIATE loses a few races against an
// application that commits often (another process writing the outbox,
// each commit holding the writer for its fsync) falls tens of
// milliseconds behind: at 500 events a second from another process, the
// relay's BEGIN waited 4 ms at p90 and hundreds at p99, and events waited
// for it (BENCHMARKS.md, "The outbox under concurrency"). Tries every 50–500
// µs take the writer soon after the other process lets it go.
const (
	lockFirstWait = 50 * time.Microsecond
	lockMaxWait   = 500 * time.Microsecond
)

// WriteTx is a write transaction begun by BeginImmediate on a pool's
// connection. Commit and Rollback end it and give the connection back to
// the pool; Rollback after Commit is a no-op, as for *sql.Tx. Its other
// methods are *sql.Tx's.
type WriteTx struct {
	*sql.Tx
	conn *sql.Conn
	life context.Context // the transaction's: database/sql rolls it back when it ends
}

// Commit commits the transaction and gives the connection back. Errors:
// *sql.Tx's; sql.ErrTxDone for a transaction database/sql rolled back
// when its context ended carries that context's error too (errors.Is
// context.Canceled or context.DeadlineExceeded), so that the caller can
// tell its own deadline from a fault (a breaker's report: 1 in 600
// timed-out claims answered only "transaction has already been committed
// or rolled back").
func (w *WriteTx) Commit() error {
	err := w.Tx.Commit()
	w.release()
	if errors.Is(err, sql.ErrTxDone) && w.life != nil && w.life.Err() != nil {
		return fmt.Errorf("%w (rolled back as the call's context ended: nothing was written): %w", err, w.life.Err())
	}
	return err
}

// Rollback rolls the transaction back unless it ended, and gives the
// connection back. Errors: *sql.Tx's (sql.ErrTxDone after Commit).
func (w *WriteTx) Rollback() error {
	err := w.Tx.Rollback()
	w.release()
	return err
}

func (w *WriteTx) release() {
	if w.conn != nil {
		w.conn.Close()
		w.conn = nil
	}
}

// beginWrite starts an IMMEDIATE transaction on the write connection
// (beginImmediate), once the store's file is checked to be the one it
// opened (CheckFile: a stat, a microsecond beside a write transaction's
// milliseconds). Errors: CheckFile's, the database's (untranslated), and
// the busy error once the busy timeout has passed.
func (s *Store) beginWrite(ctx context.Context) (*WriteTx, error) {
	if err := CheckFile(s.path, s.file); err != nil {
		return nil, err
	}
	return beginImmediate(ctx, ctx, s.write, s.busy, s.lockBusy)
}

// BeginImmediate begins a write transaction on db, a pool opened with
// DSN(path, busy, true) (its transactions begin IMMEDIATE), waiting for
// another connection's writer on this package's schedule (lockFirstWait)
// rather than in SQLite's busy handler; busy is how long it waits, as
// the DSN's busy timeout. For writers of fairrelay's own that share a
// file with other processes' (the inbox). Errors: the database's
// (untranslated: Translate maps SQLITE_BUSY to store.ErrBusy), ctx's.
func BeginImmediate(ctx context.Context, db *sql.DB, busy time.Duration) (*WriteTx, error) {
	return beginImmediate(ctx, ctx, db, busy, nil)
}

// BeginImmediateWaiting is BeginImmediate whose waits (for a connection
// of db, for another writer) end when wait is done, with wait's error,
// while the transaction it begins lives on life: database/sql rolls a
// transaction back when the ctx it began on is done, so a writer whose
// commit must not be undone by its caller's cancellation begins on
// context.WithoutCancel, and its waits would then ignore the caller.
func BeginImmediateWaiting(wait, life context.Context, db *sql.DB, busy time.Duration) (*WriteTx, error) {
	return beginImmediate(wait, life, db, busy, nil)
}

// beginImmediate is BeginImmediateWaiting with the store's test hook.
func beginImmediate(wait, life context.Context, db *sql.DB, busy time.Duration, lockBusy func()) (*WriteTx, error) {
	c, err := db.Conn(wait)
	if err != nil {
		return nil, err
	}
	tx, err := beginOn(wait, life, c, busy, lockBusy)
	if err != nil {
		c.Close()
		return nil, err
	}
	return &WriteTx{Tx: tx, conn: c, life: life}, nil
}

// beginOn begins an IMMEDIATE transaction on c (a write pool's
// connection), waiting for another process's writer on the schedule of
// lockFirstWait instead of SQLite's busy handler: the connection's busy
// timeout is 0 while it tries, and set back to busy inside the
// transaction it begins, so every statement after the BEGIN (and every
// statement outside these transactions) keeps SQLite's handler and the
// store's timeout. It gives up with the last SQLITE_BUSY error once busy
// has passed since the first try, and with ctx's error once ctx is done.
// When the busy timeout cannot be set back, the connection leaves the pool
// (closed) so that no statement runs without it. Writers of this process
// do not race each other here: the write pool has one connection.
func beginOn(ctx, life context.Context, c *sql.Conn, busy time.Duration, lockBusy func()) (*sql.Tx, error) {
	restore := fmt.Sprintf("PRAGMA busy_timeout = %d", store.BusyMillis(busy))
	if _, err := c.ExecContext(ctx, "PRAGMA busy_timeout = 0"); err != nil {
		return nil, restoreBusy(c, restore, err)
	}
	deadline := time.Now().Add(busy)
	wait := lockFirstWait
	var timer *time.Timer
	for {
		tx, err := c.BeginTx(life, nil)
		if err == nil {
			if _, err := tx.ExecContext(life, restore); err != nil {
				tx.Rollback()
				return nil, restoreBusy(c, restore, err)
			}
			return tx, nil
		}
		if !isBusy(err) || !time.Now().Before(deadline) {
			return nil, restoreBusy(c, restore, err)
		}
		if lockBusy != nil {
			lockBusy()
		}
		var d time.Duration
		d, wait = lockWait(wait)
		if timer == nil {
			timer = time.NewTimer(d)
			defer timer.Stop()
		} else {
			timer.Reset(d)
		}
		select {
		case <-ctx.Done():
			return nil, restoreBusy(c, restore, ctx.Err())
		case <-timer.C:
		}
	}
}

// lockWait returns how long beginImmediate waits before its next try,
// wait jittered down by up to a half, and the wait after that: doubled, at
// most lockMaxWait.
func lockWait(wait time.Duration) (d, next time.Duration) {
	return wait/2 + rand.N(wait/2+1), min(2*wait, lockMaxWait)
}

// restoreBusy sets c's busy timeout back after beginImmediate gave up with
// err, and returns err (joined with the failure to set it back, after
// which c leaves the pool).
func restoreBusy(c *sql.Conn, restore string, err error) error {
	if _, rerr := c.ExecContext(context.Background(), restore); rerr != nil {
		// driver.ErrBadConn makes database/sql close the connection.
		c.Raw(func(any) error { return driver.ErrBadConn })
		return errs.Join(err, fmt.Errorf("set the busy timeout back: %w", rerr))
	}
	return err
}

// isBusy reports whether err is SQLite's SQLITE_BUSY (any extended code):
// another connection holds a lock this one needs.
func isBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}
