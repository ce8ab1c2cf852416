package inbox

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/fairrelay/fairrelay"

	"github.com/fairrelay/fairrelay/internal/sqlfile"
	"github.com/fairrelay/fairrelay/internal/store"
	"github.com/fairrelay/fairrelay/internal/store/pgstore"
)

//go:embed migrations/postgres/*.sql
var postgresMigrations embed.FS

// receiveLock serialises the receives of one flow ($1) and of one event id
// ($2) on transaction-scoped advisory locks of the inbox's schema, flow
// first: READ COMMITTED alone let two deliveries of one event both miss the
// receipt, and one then failed on the receipt's key or read the other's
// projection as a sequence_conflict. Flows and ids lock in two key spaces
// (the first key), so a transaction waits for an id lock only while it
// holds nothing another waits for in that space: no deadlock, even when a
// flow's hash equals an id's. (A hash collision between two flows, or two
// ids, only makes them wait for each other.)
const receiveLock = `SELECT pg_advisory_xact_lock(hashtext(current_schema() || ':flow'), hashtext($1)),
       pg_advisory_xact_lock(hashtext(current_schema() || ':event'), hashtext($2))`

// openPostgres opens the PostgreSQL inbox (SPEC §4: the same tables and
// answers as SQLite) at a postgres:// or postgresql:// URL; its schema=NAME
// query parameter selects the schema (created on first use). Give the
// inbox a schema of its own, apart from any queue store: it fails when the
// schema already holds another fairrelay store. Options.BusyTimeout bounds
// lock waits (lock_timeout).
func openPostgres(ctx context.Context, dsn string, opts Options, applied *[]int) (*sql.DB, error) {
	cfg, schema, err := pgstore.PoolConfig(dsn, opts.BusyTimeout)
	if err != nil {
		// A URL or schema name that does not parse is the caller's input,
		// as for a queue store (a breaker: ?schema=a-b was a database
		// error here and invalid_input there).
		return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "inbox", Message: err.Error()}
	}
	db := stdlib.OpenDB(*cfg.ConnConfig)
	// The pool's size (pool_max_conns, or pgxpool's default) bounds the
	// connections, and all of them stay open when idle: database/sql keeps
	// only 2 by default, so a receiver answering many deliveries at once
	// opened a connection (a server process) for most receives and closed
	// it after — up to 10 times slower than on SQLite at 8 deliveries.
	db.SetMaxOpenConns(int(cfg.MaxConns))
	db.SetMaxIdleConns(int(cfg.MaxConns))
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		err = pgstore.Translate(err)
		if errors.Is(err, store.ErrMissing) || errors.Is(err, store.ErrRefusedSettings) {
			return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "inbox", Err: err}
		}
		if errors.Is(err, store.ErrNotDatabase) || errors.Is(err, store.ErrBusy) {
			return nil, err
		}
		// The server (or a pooler in front of it) did not take the
		// connection — as the queue store's open says it (pgstore.Open):
		// a daemon waits for it. PgBouncer's "query_wait_timeout" with
		// its pool full ended receive at start, where relay waited (a
		// fresh user's report).
		return nil, fmt.Errorf("%w: %w", store.ErrServer, err)
	}
	where := "schema " + schema
	if schema == "" {
		// No schema to create the inbox in (pgstore.NoSchemaError).
		var cur *string
		var path string
		if err := db.QueryRowContext(ctx, pgstore.NoSchemaQuery).Scan(&cur, &path); err != nil {
			db.Close()
			return nil, pgstore.Translate(fmt.Errorf("current schema: %w", err))
		}
		if cur == nil {
			db.Close()
			return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "inbox", Err: pgstore.NoSchemaError(path)}
		}
		where = pgstore.CurrentSchemaWhere(*cur)
	}
	if queue, err := pgstore.HoldsQueueStore(ctx, db); err != nil || queue {
		db.Close()
		if err == nil {
			err = store.OtherKind("%s holds a fairrelay queue store, not an inbox", where)
		}
		return nil, err
	}
	if opts.MustExist {
		// Before Migrate, which would create the schema and the tables.
		if found, err := pgstore.HoldsTable(ctx, db, "receipt"); err != nil || !found {
			db.Close()
			if err == nil {
				err = &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "inbox", Err: missingInbox(schema, where)}
			}
			return nil, err
		}
	}
	if opts.ReadOnly {
		migs, err := sqlfile.Migrations(postgresMigrations, "migrations/postgres")
		if err == nil {
			// pgstore.Migrate's record, in the inbox's own schema.
			err = pgstore.Translate(sqlfile.Check(ctx, db, "fairrelay_migration", migs))
		}
		if err != nil {
			db.Close()
			return nil, err
		}
		return db, nil
	}
	if *applied, err = pgstore.Migrate(ctx, db, schema, postgresMigrations, "migrations/postgres", "receipt"); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// missingInbox is the refusal, under Options.MustExist, of a PostgreSQL
// schema that holds no inbox (where names it: "schema x", or the
// connection's current schema when the URL names none), in the words of a queue store's (pgstore):
// on PostgreSQL only fairrelay migrate makes an inbox (receive refuses
// one missing, so that a misspelt schema= cannot start an inbox that no
// relay delivers to), and a new schema's name is lower case.
func missingInbox(schema, where string) error {
	how := "create it with fairrelay migrate --inbox URL"
	if lower := strings.ToLower(schema); lower != schema {
		// migrate creates no upper-case schema (pgstore.CreateSchema):
		// name the one it would create.
		how = fmt.Sprintf("a new store's schema is lower case: use schema=%s, and create it with fairrelay migrate --inbox URL", lower)
	}
	return store.Missing("%s holds no inbox store (%s)", where, how)
}
