package fairrelay

import (
	"context"
	"errors"

	"github.com/fairrelay/fairrelay/internal/sqlfile"
	"github.com/fairrelay/fairrelay/internal/store"
	"github.com/fairrelay/fairrelay/internal/store/pgstore"
)

// The PostgreSQL backend (SPEC §4): Open takes a postgres:// or
// postgresql:// URL, e.g.
//
//	postgres://user@127.0.0.1:5432/app?sslmode=disable&schema=relay
//
// The schema query parameter selects the schema the queue store lives in and
// is created on first use; without it the connection's current schema is
// used. Config.MustExist refuses a schema that holds no queue store yet.
// Config.BusyTimeout bounds the wait for another transaction's lock
// (PostgreSQL's lock_timeout); a wait over it fails with ErrBusy.
func init() {
	open := func(ctx context.Context, dsn string, cfg Config) (store.Store, error) {
		// A URL or schema name that does not parse is the caller's input;
		// anything after that (server unreachable, no such database) is a
		// database error, never invalid input.
		if _, _, err := pgstore.PoolConfig(dsn, 0); err != nil {
			return nil, &Error{Code: CodeInvalidInput, Field: "queue", Message: err.Error()}
		}
		s, err := pgstore.Open(ctx, dsn, pgstore.Options{LockTimeout: cfg.BusyTimeout, MustExist: cfg.MustExist})
		if errors.Is(err, pgstore.ErrMissing) || errors.Is(err, sqlfile.ErrNewerSchema) {
			return nil, &Error{Code: CodeInvalidInput, Field: "queue", Message: err.Error()}
		}
		if err != nil {
			return nil, dbError("open", err)
		}
		return s, nil
	}
	openStoreFuncs["postgres://"] = open
	openStoreFuncs["postgresql://"] = open
}
