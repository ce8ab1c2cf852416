package conformance

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/fairrelay/fairrelay/internal/pgtest"
)

// SQLite is the embedded backend: real SQLite files in a fresh directory
// per test.
func SQLite() Backend {
	return Backend{
		Name: "sqlite",
		New: func(t *testing.T) (string, string) {
			dir := t.TempDir()
			return filepath.Join(dir, "queue.db"), filepath.Join(dir, "inbox.db")
		},
		RejectInserts: func(t *testing.T, path, table string) {
			t.Helper()
			db, err := sql.Open("sqlite", path)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			_, err = db.ExecContext(context.Background(),
				`CREATE TRIGGER reject_`+table+` BEFORE INSERT ON `+table+` BEGIN SELECT RAISE(ABORT, 'rejected by test trigger'); END`)
			if err != nil {
				t.Fatal(err)
			}
		},
	}
}

// Postgres gives every test two fresh schemas on the test server (see
// package pgtest), dropped when the test ends. Its New fails the test under
// CI=true when the server is unreachable, and skips it otherwise.
func Postgres() Backend {
	return Backend{
		Name: "postgres",
		New: func(t *testing.T) (string, string) {
			return pgtest.Schema(t, "frc_q"), pgtest.Schema(t, "frc_i")
		},
		RejectInserts: func(t *testing.T, dsn, table string) {
			t.Helper()
			// table is one of the suite's own table names, never user input.
			pgtest.Exec(t, dsn, `
CREATE OR REPLACE FUNCTION reject_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'rejected by test trigger'; END $$;
CREATE TRIGGER reject_`+table+` BEFORE INSERT ON `+table+` FOR EACH ROW EXECUTE FUNCTION reject_insert();`)
		},
	}
}

// Backends lists every backend: the suites and the property test run
// against each.
func Backends() []Backend { return []Backend{SQLite(), Postgres()} }
