package fairrelay_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
)

// With MustExist, a SQLite file that exists but holds no store — an empty
// file, or another application's database — is refused as missing, naming
// the field, and nothing is installed in it: a read-only command (inspect,
// redrive, …) must not create the schema, as on PostgreSQL, where such a
// schema is refused already. Both the queue and the inbox.
func TestMustExistRefusesASQLiteFileWithoutAStore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(dir, "app.db")
	db, err := sql.Open("sqlite", foreign)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE users (id INTEGER PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	for _, path := range []string{empty, foreign} {
		before := tables(t, path)
		_, err := fairrelay.Open(ctx, path, fairrelay.Config{MustExist: true})
		if fairrelay.CodeOf(err) != fairrelay.CodeInvalidInput || !strings.Contains(err.Error(), "queue: ") || !strings.Contains(err.Error(), "holds no fairrelay tables") {
			t.Errorf("queue %s: err %v, want invalid_input naming queue", filepath.Base(path), err)
		}
		_, err = inbox.Open(ctx, path, inbox.Options{MustExist: true})
		if fairrelay.CodeOf(err) != fairrelay.CodeInvalidInput || !strings.Contains(err.Error(), "inbox: ") || !strings.Contains(err.Error(), "holds no inbox") {
			t.Errorf("inbox %s: err %v, want invalid_input naming inbox", filepath.Base(path), err)
		}
		if after := tables(t, path); !slices.Equal(before, after) {
			t.Errorf("%s: tables %v before, %v after a refused open", filepath.Base(path), before, after)
		}
	}
	// Without MustExist the queue is created beside the application's
	// tables (the SQLite outbox: one file, one transaction), and then
	// MustExist opens it.
	q, err := fairrelay.Open(ctx, foreign, fairrelay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	q, err = fairrelay.Open(ctx, foreign, fairrelay.Config{MustExist: true})
	if err != nil {
		t.Fatalf("MustExist on a created store: %v", err)
	}
	q.Close()
}

// tables lists the tables of the SQLite file at path.
func tables(t *testing.T, path string) []string {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}
