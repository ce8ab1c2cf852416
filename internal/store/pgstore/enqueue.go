package pgstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fairrelay/fairrelay/internal/store"
)

// Enqueue carries out SPEC §2 enqueue with the schema's SQL function
// enqueue_many (migration 005), the one implementation of enqueue on
// PostgreSQL: one statement, in a transaction of its own (sent with BEGIN
// and COMMIT in one round trip) or in the caller's pgx.Tx or *sql.Tx.
func (s *Store) Enqueue(ctx context.Context, caller any, p store.EnqueueParams) (store.EnqueueResult, error) {
	n := len(p.Events)
	ids, flows, bodies := make([]string, n), make([]string, n), make([][]byte, n)
	var groups []*string // nil unless an event names a group: the SQL function's fast path
	// PostgreSQL text cannot hold a name of invalid UTF-8 or with a NUL (the
	// server fails the whole call with an encoding error that names no
	// field). Such a name goes to the function as uncarried, which it
	// refuses as bad input in the same field, after its clock check: the
	// call fails either way, with SPEC §2's first error (clock_regressed,
	// the tick's checks, then the fields, which CheckEvents names with the
	// real values).
	carry := func(v string) string {
		if store.Storable(v) {
			return v
		}
		return uncarried
	}
	for i, e := range p.Events {
		ids[i], flows[i], bodies[i] = carry(e.ID), carry(e.Flow), e.Body
		if e.Group != "" {
			if groups == nil {
				groups = make([]*string, n)
			}
			g := carry(e.Group)
			groups[i] = &g
		}
	}
	var at *int64
	if p.At != store.AtStored {
		at = &p.At
	}
	args := []any{ids, flows, bodies, at, p.Floor, p.MaxTickJump, p.MaxBodyBytes, groups}
	out := store.EnqueueResult{Answers: make([]store.EnqueueAnswer, 0, n)}
	scan := func(r scanner) error {
		var a store.EnqueueAnswer
		var seq *int64
		var limit *string
		if err := r.Scan(&a.Status, &seq, &out.Tick, &limit); err != nil {
			return err
		}
		a.Seq, a.Limit = deref64(seq), deref(limit)
		out.Answers = append(out.Answers, a)
		return nil
	}
	var err error
	switch tx := caller.(type) {
	case nil:
		err = s.enqueueOwn(ctx, args, scan)
	case pgx.Tx:
		err = eachQuery(ctx, (&pgxConn{tx: tx}).query, s.enqueueTxSQL, append(args, s.database, s.schemaOID), scan)
	case *sql.Tx:
		err = eachQuery(ctx, sqlConn{tx: tx}.query, s.enqueueTxSQL, append(args, s.database, s.schemaOID), scan)
	default:
		return store.EnqueueResult{}, &store.InvalidError{Field: "tx", Message: fmt.Sprintf("the PostgreSQL backend takes a pgx.Tx or a *sql.Tx, not %T", caller)}
	}
	if err != nil {
		var ie *store.InvalidError
		if errors.As(err, &ie) && (ie.Field == "id" || ie.Field == "flow" || ie.Field == "group" || ie.Field == "body") {
			// The function names the field; CheckEvents, the same rule
			// in the same order, also names the event (its position, as
			// on SQLite) and the real value of a name that went as
			// uncarried.
			if ferr := store.CheckEvents(p); ferr != nil {
				return store.EnqueueResult{}, ferr
			}
		}
		var pe *pgconn.PgError
		if _, ok := caller.(*sql.Tx); ok && !errors.As(err, &pe) && strings.Contains(err.Error(), "sql: converting argument") {
			// database/sql could not hand the arrays to the driver: the
			// transaction is not pgx's (stdlib), so not on PostgreSQL
			// through it (a SQLite one, say; a breaker's report).
			return store.EnqueueResult{}, &store.InvalidError{Field: "tx", Message: fmt.Sprintf(
				"the transaction is not on PostgreSQL through pgx's database/sql driver (github.com/jackc/pgx/v5/stdlib), which the store needs to pass its arrays: %v", err)}
		}
		if caller != nil && errors.As(err, &pe) && (pe.Code == "42883" || pe.Code == "3F000") {
			// undefined_function, invalid_schema_name: a transaction on
			// another database.
			return store.EnqueueResult{}, &store.InvalidError{Field: "tx", Message: fmt.Sprintf(
				"the transaction's database holds no fairrelay queue store in schema %s (is it a transaction on the store's database?): %s", s.schema, pe.Message)}
		}
		return store.EnqueueResult{}, err
	}
	if len(out.Answers) == 0 && n > 0 && caller != nil {
		// enqueueTxSQL's filter: the function did not run.
		return store.EnqueueResult{}, &store.InvalidError{Field: "tx", Message: fmt.Sprintf(
			"the transaction is not on the store's database %q (schema %s): its database holds another schema of that name, or the schema was made again since Open; nothing was written (is it a transaction on the store's database?)",
			s.database, s.schema)}
	}
	if len(out.Answers) != n {
		return store.EnqueueResult{}, fmt.Errorf("enqueue_many answered %d rows for %d events", len(out.Answers), n)
	}
	return out, nil
}

// uncarried stands in for a name text cannot hold: a control character,
// which the SQL function's ident_problem refuses in every name field.
const uncarried = "\x01"

// enqueueOwn runs enqueue_many in a transaction of its own: BEGIN, the call
// and COMMIT in one round trip.
func (s *Store) enqueueOwn(ctx context.Context, args []any, scan func(scanner) error) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return Translate(fmt.Errorf("acquire a connection: %w", err))
	}
	defer conn.Release()
	pc := &pgxConn{tx: conn.Conn()}
	pc.queue("Begin", "BEGIN ISOLATION LEVEL READ COMMITTED")
	pc.queueRead("enqueue_many", scan, s.enqueueSQL, args...)
	if err := pc.commit(ctx); err != nil {
		// A failed statement leaves the transaction aborted; end it.
		if _, rerr := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK"); rerr != nil {
			conn.Conn().Close(context.WithoutCancel(ctx))
		}
		return err
	}
	return nil
}

// eachQuery runs sql with args through query and calls scan for every row.
func eachQuery(ctx context.Context, query func(ctx context.Context, name, sql string, args []any, each func(scanner) error) error, sql string, args []any, scan func(scanner) error) error {
	return query(ctx, "enqueue_many", sql, args, scan)
}
