package outboxbench

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// StatementCount is what one EnqueueTx sends to PostgreSQL through the
// caller's pgx transaction (issue 14's target: at most 2 statements, one
// round trip where the driver allows it), found as the difference between
// the same business transactions with EnqueueTx and with the plain outbox
// insert (one statement, one round trip), counted by a pgx tracer on the
// application's connection after a warm-up.
type StatementCount struct {
	Transactions int `json:"transactions"`
	// Statements and RoundTrips are per EnqueueTx: every Query, QueryRow
	// and Exec is a statement and a round trip; a batch is one round trip
	// of as many statements as it queues; a prepare is a round trip.
	Statements float64 `json:"statements_per_enqueue_tx"`
	RoundTrips float64 `json:"round_trips_per_enqueue_tx"`
	// SearchPathSets is how many of the statements set search_path
	// (set_config).
	SearchPathSets float64 `json:"search_path_sets_per_enqueue_tx"`
}

// statementTracer counts what a pgx connection sends.
type statementTracer struct {
	statements, roundTrips, searchPath atomic.Int64
}

func (t *statementTracer) count(sql string) {
	t.statements.Add(1)
	if strings.Contains(sql, "set_config") && strings.Contains(sql, "search_path") {
		t.searchPath.Add(1)
	}
}

func (t *statementTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	t.count(d.SQL)
	t.roundTrips.Add(1)
	return ctx
}

func (t *statementTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (t *statementTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	t.roundTrips.Add(1)
	return ctx
}

func (t *statementTracer) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	t.count(d.SQL)
}

func (t *statementTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (t *statementTracer) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	t.roundTrips.Add(1)
	return ctx
}

func (t *statementTracer) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

func (t *statementTracer) reset() {
	t.statements.Store(0)
	t.roundTrips.Store(0)
	t.searchPath.Store(0)
}

// CountStatements runs n business transactions one after the other (after
// 20 of warm-up) with the plain outbox insert and with EnqueueTx, on the
// PostgreSQL server at pg, and returns what one EnqueueTx sent.
func CountStatements(ctx context.Context, pg string, n int) (StatementCount, error) {
	type perTxn struct{ statements, roundTrips, searchPath float64 }
	var got [2]perTxn
	for k, enqueue := range []bool{false, true} {
		tr := &statementTracer{}
		a, cleanup, err := pgTxn{base: pg, tracer: tr}.open(ctx, enqueue, 1)
		if err != nil {
			return StatementCount{}, err
		}
		err = func() error {
			for i := range 20 + n {
				if i == 20 {
					tr.reset()
				}
				id := fmt.Sprintf("s%d", i)
				if err := a.order(ctx, id, "customer-0", func() []byte { return orderBody(id, "customer-0", time.Time{}) }, 0); err != nil {
					return err
				}
			}
			return nil
		}()
		cleanup()
		if err != nil {
			return StatementCount{}, err
		}
		got[k] = perTxn{float64(tr.statements.Load()) / float64(n), float64(tr.roundTrips.Load()) / float64(n), float64(tr.searchPath.Load()) / float64(n)}
	}
	// The plain transaction's outbox insert is one statement and one round
	// trip; everything else is the same in both.
	return StatementCount{
		Transactions:   n,
		Statements:     got[1].statements - got[0].statements + 1,
		RoundTrips:     got[1].roundTrips - got[0].roundTrips + 1,
		SearchPathSets: got[1].searchPath - got[0].searchPath,
	}, nil
}
