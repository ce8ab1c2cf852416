package pgstore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

type scanner interface{ Scan(dest ...any) error }

// conn runs the store's statements on one transaction: the store's own
// pgx.Tx, or a caller's pgx.Tx or *sql.Tx (Wrap). name labels errors.
type conn interface {
	exec(ctx context.Context, name, sql string, args []any) error
	// query runs sql and calls each for every row, in order.
	query(ctx context.Context, name, sql string, args []any, each func(scanner) error) error
}

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

// commit sends the queued writes and COMMIT in one round trip, so that the
// clock lock is released one round trip sooner than with a separate COMMIT.
func (c *pgxConn) commit(ctx context.Context) error {
	b, names, reads := c.takePending()
	b.Queue("COMMIT")
	br := c.tx.SendBatch(ctx, &b)
	defer br.Close()
	for i, n := range names {
		if err := result(br, n, reads[i]); err != nil {
			return err
		}
	}
	tag, err := br.Exec()
	if err != nil {
		return Translate(fmt.Errorf("Commit: %w", err))
	}
	// A transaction that failed earlier answers COMMIT with ROLLBACK.
	if tag.String() != "COMMIT" {
		return fmt.Errorf("commit: the server answered %s", tag)
	}
	return Translate(br.Close())
}

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
