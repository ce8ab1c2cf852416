package pgstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fairrelay/fairrelay/internal/store"
)

type scanner interface{ Scan(dest ...any) error }

// conn runs the store's statements on one transaction: the store's own
// pgx.Tx, or a caller's pgx.Tx or *sql.Tx (Wrap). name labels errors.
type conn interface {
	exec(ctx context.Context, name, sql string, args []any) error
	// query runs sql and calls each for every row, in order.
	query(ctx context.Context, name, sql string, args []any, each func(scanner) error) error
}

// Both transactions' runners are conns.
var (
	_ conn = (*pgxConn)(nil)
	_ conn = sqlConn{}
)

// pgxConn runs statements on a pgx.Tx. Statements queued with queue are
// sent in one round trip together with the next query or at flush (commit):
// every read still sees every earlier write, and an error of a queued write
// still fails the transaction before it can commit.
type pgxConn struct {
	tx      pgxQuerier
	pending pgx.Batch
	names   []string
	// reads holds, for each queued statement, the function that takes its
	// rows (queueRead), nil for a statement whose rows are dropped.
	reads []func(scanner) error
}

// pgxQuerier is what pgxConn needs: a *pgx.Conn of the store's pool, or a
// caller's pgx.Tx.
type pgxQuerier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// queue adds a statement whose rows, if any, are dropped to the next round
// trip.
func (c *pgxConn) queue(name, sql string, args ...any) {
	c.queueRead(name, nil, sql, args...)
}

// queueRead adds a query to the next round trip; each is called for every
// row it returns, when the round trip is made.
func (c *pgxConn) queueRead(name string, each func(scanner) error, sql string, args ...any) {
	c.pending.Queue(sql, args...)
	c.names = append(c.names, name)
	c.reads = append(c.reads, each)
}

// roundTrip sends the queued statements and takes their results.
func (c *pgxConn) roundTrip(ctx context.Context) error {
	br, err := c.sendPending(ctx, "", nil)
	if err != nil {
		return err
	}
	return Translate(br.Close())
}

// takePending returns the queued statements and empties the queue.
func (c *pgxConn) takePending() (pgx.Batch, []string, []func(scanner) error) {
	b, names, reads := c.pending, c.names, c.reads
	c.pending, c.names, c.reads = pgx.Batch{}, nil, nil
	return b, names, reads
}

// result takes the result of the queued statement name: its rows go to
// each, or are dropped when each is nil.
func result(br pgx.BatchResults, name string, each func(scanner) error) error {
	if each == nil {
		if _, err := br.Exec(); err != nil {
			return Translate(fmt.Errorf("%s: %w", name, err))
		}
		return nil
	}
	rows, err := br.Query()
	if err != nil {
		return Translate(fmt.Errorf("%s: %w", name, err))
	}
	defer rows.Close()
	return eachRow(name, rows, each)
}

func (c *pgxConn) exec(ctx context.Context, name, sql string, args []any) error {
	if _, err := c.tx.Exec(ctx, sql, args...); err != nil {
		return Translate(fmt.Errorf("%s: %w", name, err))
	}
	return nil
}

// sendPending sends the queued writes, plus sql when it is not empty, in one
// batch, and returns the open batch results positioned at sql's result.
func (c *pgxConn) sendPending(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	b, names, reads := c.takePending()
	if sql != "" {
		b.Queue(sql, args...)
	}
	br := c.tx.SendBatch(ctx, &b)
	for i, n := range names {
		if err := result(br, n, reads[i]); err != nil {
			br.Close()
			return nil, err
		}
	}
	return br, nil
}

// commitGrace is how long a commit's round trip (pgxConn.commit, inTx),
// once sent, may still run after the caller's ctx is done (cancelled, or
// past its deadline): long enough for a slow WAL flush to end, so that the
// caller hears what the commit did, and short enough that a server which
// stopped answering holds the caller at most this long past its ctx (the
// relay's shutdown cuts its calls off that way).
const commitGrace = 10 * time.Second

// commitContext is the ctx a commit's round trip runs on, once sent: ctx's
// values, and ctx's end (cancellation or deadline) only commitGrace later.
// The returned cancel must be called when the round trip is over.
func commitContext(ctx context.Context) (context.Context, context.CancelFunc) {
	end, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var mu sync.Mutex
	var grace *time.Timer
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		grace = time.AfterFunc(commitGrace, cancel)
	})
	return end, func() {
		stop()
		mu.Lock()
		if grace != nil {
			grace.Stop()
		}
		mu.Unlock()
		cancel()
	}
}

// inTx runs fn in a transaction of pool begun with opts and commits it as
// pgxConn.commit does: a ctx already done commits nothing, and once the
// COMMIT is sent it runs to its end whatever happens to ctx, up to
// commitGrace past ctx's end (pgx.BeginTxFunc commits on ctx: a ctx that
// ended in the COMMIT answered an error for a write that committed). An
// error of fn rolls back.
func inTx(ctx context.Context, pool *pgxpool.Pool, opts pgx.TxOptions, fn func(tx pgx.Tx) error) error {
	tx, err := pool.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	end, cancel := commitContext(ctx)
	defer cancel()
	if err := fn(tx); err != nil {
		tx.Rollback(end)
		return err
	}
	if err := ctx.Err(); err != nil {
		tx.Rollback(end)
		return fmt.Errorf("commit: not sent: %w", err)
	}
	if err := tx.Commit(end); err != nil {
		return mayHaveCommitted(tx.Conn(), err)
	}
	return nil
}

// mayHaveCommitted is err, said to leave the commit's outcome unknown when
// conn closed after the commit was sent (no answer came); err as it is
// when the server answered (the connection stays open).
func mayHaveCommitted(conn interface{ IsClosed() bool }, err error) error {
	if conn.IsClosed() {
		return fmt.Errorf("the connection failed after the commit was sent, so it may have committed: %w", commitUnknownError{err})
	}
	return err
}

// commitUnknownError marks an error as store.ErrCommitUnknown without
// changing its text.
type commitUnknownError struct{ error }

func (e commitUnknownError) Is(target error) bool { return target == store.ErrCommitUnknown }
func (e commitUnknownError) Unwrap() error        { return e.error }

// commit sends the queued writes and COMMIT in one round trip, so that the
// clock lock is released one round trip sooner than with a separate COMMIT.
//
// Once sent, the round trip runs to its end whatever happens to ctx, up to
// commitGrace past ctx's end (commitContext): a ctx that ended while the
// server ran the COMMIT (a slow WAL flush) closed the connection, and the
// caller was told the write failed although it had committed (a breaker's
// report: an enqueue stored, a claim leased, a settle acked, a redrive
// done, each answered with an error). A ctx already done sends nothing.
//
// The writes queued before the COMMIT may still wait, though — an enqueue
// for its flow's row, which an open outbox transaction holds. When ctx
// ends during the round trip, commit asks the server to cancel what it is
// running (a cancel request, cancelOnEnd): a write still waiting fails,
// nothing commits, and the caller hears ctx's error at once rather than
// after lock_timeout or commitGrace (then "may have committed", though
// nothing had been; a breaker's report). A COMMIT under way is not cut
// short: the server holds a cancel off while it commits. A connection a
// cancel request was sent on is closed afterwards, so that a late cancel
// cannot reach a later statement.
//
// An error the server answered for a statement before the COMMIT means
// the COMMIT was not run (the server skips the rest of a failed round
// trip), so nothing committed, even when the connection then closed (a
// FATAL answer to BEGIN from a connection an administrator ended). Only a
// round trip that got no answer at all, or none for the COMMIT, leaves the
// outcome unknown, which the error says.
func (c *pgxConn) commit(ctx context.Context) error {
	b, names, reads := c.takePending()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("commit: not sent: %w", err)
	}
	end, cancel := commitContext(ctx)
	defer cancel()
	cancelled, stopCancel := cancelOnEnd(ctx, c.tx)
	defer func() {
		if stopCancel() {
			// A cancel request went out: the connection is not used
			// again (the pool drops a closed one on release).
			if pc, ok := c.tx.(*pgx.Conn); ok {
				pc.Close(context.WithoutCancel(ctx))
			}
		}
	}()
	b.Queue("COMMIT")
	br := c.tx.SendBatch(end, &b)
	defer br.Close()
	// An answer of the server's (a PgError) fails the transaction, which
	// then answers COMMIT with ROLLBACK; no answer at all (the connection
	// lost, commitGrace) leaves the COMMIT sent and its outcome unknown.
	unknown := func(err error) error {
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			if cancelled() && pe.Code == "57014" { // query_canceled: ours
				return fmt.Errorf("%w (the call's context ended before the commit; nothing was written): %w", ctx.Err(), err)
			}
			return err
		}
		if cc, ok := c.tx.(interface{ IsClosed() bool }); ok {
			return mayHaveCommitted(cc, err)
		}
		return err
	}
	for i, n := range names {
		if err := result(br, n, reads[i]); err != nil {
			var pe *pgconn.PgError
			if cc, ok := c.tx.(interface{ IsClosed() bool }); ok && cc.IsClosed() && !errors.As(err, &pe) {
				// The statements and the COMMIT went in one round trip:
				// when the connection failed before any answer, the first
				// one's name alone ("Begin: unexpected EOF") misled (a
				// breaker's report).
				err = fmt.Errorf("no answer from statement %d of %d and the COMMIT, sent in one round trip: %w", i+1, len(names), err)
			}
			return unknown(err)
		}
	}
	tag, err := br.Exec()
	if err != nil {
		return unknown(Translate(fmt.Errorf("Commit: %w", err)))
	}
	// A transaction that failed earlier answers COMMIT with ROLLBACK.
	if tag.String() != "COMMIT" {
		return fmt.Errorf("commit: the server answered %s", tag)
	}
	if err := br.Close(); err != nil {
		var pe *pgconn.PgError
		if cancelled() && errors.As(err, &pe) && pe.Code == "57014" {
			// Our cancel, come after the COMMIT had run: committed.
			return nil
		}
		return Translate(err)
	}
	return nil
}

// cancelOnEnd sends a cancel request for what the server runs on conn's
// connection as soon as ctx ends (when conn is a *pgx.Conn; a caller's
// transaction is left alone), and again every cancelAgain until stop: a
// request that reaches the server between two statements of a round trip
// is ignored there, and the next statement would run on. cancelled reports
// whether one was sent; stop ends the watch and reports the same, once no
// request can still be in flight from here.
func cancelOnEnd(ctx context.Context, conn pgxQuerier) (cancelled func() bool, stop func() bool) {
	pc, ok := conn.(*pgx.Conn)
	if !ok || ctx.Done() == nil {
		return func() bool { return false }, func() bool { return false }
	}
	var sent atomic.Bool
	finished, done := make(chan struct{}), make(chan struct{})
	stopWatch := context.AfterFunc(ctx, func() {
		defer close(done)
		sent.Store(true)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitGrace)
		defer cancel()
		for {
			pc.PgConn().CancelRequest(rctx)
			select {
			case <-finished:
				return
			case <-rctx.Done():
				return
			case <-time.After(cancelAgain):
			}
		}
	})
	return sent.Load, func() bool {
		close(finished)
		if !stopWatch() {
			<-done // the requests were started: let them end
		}
		return sent.Load()
	}
}

// cancelAgain is how often cancelOnEnd repeats its cancel request while the
// round trip has not ended.
const cancelAgain = 50 * time.Millisecond

func (c *pgxConn) query(ctx context.Context, name, sql string, args []any, each func(scanner) error) error {
	var rows pgx.Rows
	var br pgx.BatchResults
	if len(c.names) > 0 {
		var err error
		if br, err = c.sendPending(ctx, sql, args); err != nil {
			return err
		}
		defer br.Close()
		if rows, err = br.Query(); err != nil {
			return Translate(fmt.Errorf("%s: %w", name, err))
		}
	} else {
		var err error
		if rows, err = c.tx.Query(ctx, sql, args...); err != nil {
			return Translate(fmt.Errorf("%s: %w", name, err))
		}
	}
	defer rows.Close()
	return eachRow(name, rows, each)
}

// sqlConn runs statements on a caller's *sql.Tx (pgx's stdlib driver).
type sqlConn struct{ tx *sql.Tx }

func (c sqlConn) exec(ctx context.Context, name, sql string, args []any) error {
	if _, err := c.tx.ExecContext(ctx, sql, args...); err != nil {
		return Translate(fmt.Errorf("%s: %w", name, err))
	}
	return nil
}

func (c sqlConn) query(ctx context.Context, name, sql string, args []any, each func(scanner) error) error {
	rows, err := c.tx.QueryContext(ctx, sql, args...)
	if err != nil {
		return Translate(fmt.Errorf("%s: %w", name, err))
	}
	defer rows.Close()
	return eachRow(name, rows, each)
}

// eachRow calls each for every row of rows (pgx.Rows or *sql.Rows), and
// returns the first error, labelled with name.
func eachRow(name string, rows interface {
	scanner
	Next() bool
	Err() error
}, each func(scanner) error) error {
	for rows.Next() {
		if err := each(rows); err != nil {
			return Translate(fmt.Errorf("%s: %w", name, err))
		}
	}
	if err := rows.Err(); err != nil {
		return Translate(fmt.Errorf("%s: %w", name, err))
	}
	return nil
}
