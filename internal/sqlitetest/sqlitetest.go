// Package sqlitetest gives tests plain SQL on a SQLite file, beside the
// store that owns it (as package pgtest does for PostgreSQL): to put in the
// rows or undo the migrations an older fairrelay would have left.
package sqlitetest

import (
	"database/sql"
	"testing"

	_ "modernc.org/sqlite" // the "sqlite" driver
)

// Exec runs stmt (one or more statements, no parameters) on the SQLite file
// at path in a connection of its own, failing the test on error.
func Exec(t testing.TB, path, stmt string) {
	t.Helper()
	db := open(t, path)
	defer db.Close()
	if _, err := db.Exec(stmt); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

// QueryRow runs query (no parameters) on the SQLite file at path and scans
// its first row into dest, failing the test on error or when there is no
// row.
func QueryRow(t testing.TB, path, query string, dest ...any) {
	t.Helper()
	db := open(t, path)
	defer db.Close()
	if err := db.QueryRow(query).Scan(dest...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func open(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// HoldWriter begins an IMMEDIATE transaction on the SQLite file at path in
// a connection of its own, as another process's writer would hold it
// (SQLite's locks hold between connections); release rolls it back.
func HoldWriter(t testing.TB, path string) (release func()) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(1000)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := tx.Rollback(); err != nil {
			t.Error(err)
		}
	}
}

// BusyTimeout reads the busy timeout, in milliseconds, of the connection q
// runs its statement on (a pool of one connection, or a transaction).
func BusyTimeout(t testing.TB, q interface {
	QueryRow(string, ...any) *sql.Row
}) int64 {
	t.Helper()
	var ms int64
	if err := q.QueryRow("PRAGMA busy_timeout").Scan(&ms); err != nil {
		t.Fatal(err)
	}
	return ms
}
