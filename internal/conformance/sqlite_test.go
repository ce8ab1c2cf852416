package conformance

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite"
)

func sqliteBackend() Backend {
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

func TestSQLite(t *testing.T) {
	t.Parallel()
	Run(t, sqliteBackend())
}
