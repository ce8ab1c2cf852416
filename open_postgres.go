package fairrelay

import (
	"context"

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
// used. Config.BusyTimeout bounds the wait for another transaction's lock
// (PostgreSQL's lock_timeout); a wait over it fails with ErrBusy.
func init() {
	open := func(ctx context.Context, dsn string, cfg Config) (store.Store, error) {
		return pgstore.Open(ctx, dsn, pgstore.Options{LockTimeout: cfg.BusyTimeout})
	}
	openStoreFuncs["postgres://"] = open
	openStoreFuncs["postgresql://"] = open
}
