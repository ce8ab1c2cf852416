package main

import (
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/sqlitetest"
	"github.com/fairrelay/fairrelay/internal/store/sqlitestore"
)

// creatingIn reads a SQLite file's tables before a store is made in it, to
// refuse another application's database. A read that failed was taken for
// an empty database: "was an empty database; a store was created in it",
// and the open went on to write the store's tables into it once the lock
// it had waited for was released (an audit of the defaults chosen on a
// failed read; here the other application holds its file under an
// exclusive lock, as a rollback-journal writer does while it commits, past
// the read's 5 s busy timeout). A read that fails is the command's error
// now — busy, which a daemon starting waits out — and nothing is created.
// Each caller passes through it: enqueue and relay (queue), receive
// (inbox), script (either).
func TestCreatingInDoesNotTakeAFailedReadForAnEmptyDatabase(t *testing.T) {
	t.Parallel()
	for _, field := range []string{"queue", "inbox"} {
		t.Run(field, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "app.db")
			sqlitetest.Exec(t, path, `CREATE TABLE orders (id INTEGER PRIMARY KEY)`)
			db, err := sql.Open("sqlite", "file:"+path+"?_txlock=exclusive")
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			tx, err := db.Begin() // BEGIN EXCLUSIVE: readers wait, in the default journal mode
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			created, err := creatingIn(t.Context(), path, field, "fairrelay migrate --"+field)
			if created != "" || !errors.Is(err, fairrelay.ErrBusy) {
				t.Fatalf("creatingIn(%s) on another application's database under an exclusive lock: %q, %v; want busy and nothing created", field, created, err)
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			// The lock released, the same file is refused as another
			// application's database, as before.
			if _, err := creatingIn(t.Context(), path, field, "fairrelay migrate --"+field); !errors.Is(err, fairrelay.ErrInvalidInput) {
				t.Fatalf("creatingIn(%s) on another application's database: %v, want invalid_input", field, err)
			}
			if tables, marked, err := sqlitestore.HasTables(t.Context(), path, 0, migrationTable[field]); err != nil || !tables || marked {
				t.Fatalf("the application's database afterwards: tables=%v marked=%v %v", tables, marked, err)
			}
		})
	}
}
