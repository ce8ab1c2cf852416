package fairrelay_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

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
		// A Go caller is told the Go way to create it, not the command's
		// alone (a library user's trial).
		if !strings.Contains(err.Error(), "without them Open creates one") {
			t.Errorf("queue %s: err %v, want the Go hint", filepath.Base(path), err)
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

// A SQLite store whose file is removed or replaced under a running
// process refuses every write with a database error rather than writing to
// a file no other process sees (a breaker's report, on the inbox; the same
// kind here: a relay's settles would be lost at its next start).
func TestWritesRefuseARemovedOrReplacedStoreFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, how := range []string{"removed", "replaced"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, "q.db")
			q, err := fairrelay.Open(ctx, path, fairrelay.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "A1", Flow: "A", Body: []byte(`{"delta":1}`)}); err != nil {
				t.Fatal(err)
			}
			for _, suffix := range []string{"", "-wal", "-shm"} {
				if err := os.Rename(path+suffix, filepath.Join(dir, "moved.db"+suffix)); err != nil && !errors.Is(err, os.ErrNotExist) {
					t.Fatal(err)
				}
			}
			if how == "replaced" {
				other, err := fairrelay.Open(ctx, path, fairrelay.Config{})
				if err != nil {
					t.Fatal(err)
				}
				other.Close()
			}
			for name, write := range map[string]func() error{
				"enqueue": func() error {
					_, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "A2", Flow: "A", Body: []byte(`{"delta":1}`)})
					return err
				},
				"claim": func() error {
					_, err := q.Claim(ctx, fairrelay.ClaimParams{At: fairrelay.AtStored, Limit: 1})
					return err
				},
				"prune": func() error {
					_, err := q.Prune(ctx, fairrelay.PruneParams{At: fairrelay.AtStored, AckedBefore: 1, IDsBefore: 0})
					return err
				},
				// An application's transaction on the path (a breaker: it
				// wrote its event into the file now at the path, or into a
				// new empty one, and answered created).
				"enqueueTx": func() error {
					db, err := sql.Open("sqlite", fairrelay.SQLiteDSN(path))
					if err != nil {
						return err
					}
					defer db.Close()
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						return err
					}
					defer tx.Rollback()
					_, err = q.EnqueueTx(ctx, tx, fairrelay.EnqueueParams{ID: "A3", Flow: "A", Body: []byte(`{"delta":1}`), At: fairrelay.AtStored})
					return err
				},
			} {
				err := write()
				var fe *fairrelay.Error
				if !errors.As(err, &fe) || fe.Code != fairrelay.CodeDatabase || !strings.Contains(err.Error(), "removed or replaced") {
					t.Errorf("%s on a %s file: %v, want a database error saying the file was removed or replaced", name, how, err)
				}
			}
		})
	}
}

// EnqueueTx takes a transaction on the Queue's own file only (a breaker:
// one on another fairrelay store's file answered created there, under that
// store's entry rule, which the Queue never checked): another store's file,
// a file with no store, or an in-memory database is invalid_input naming
// tx, and nothing is written to it.
func TestEnqueueTxRefusesATransactionOnAnotherFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	q, err := fairrelay.Open(ctx, filepath.Join(dir, "a.db"), fairrelay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	other := filepath.Join(dir, "b.db")
	ob, err := fairrelay.Open(ctx, other, fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		t.Fatal(err)
	}
	ob.Close()
	for name, dsn := range map[string]string{
		"another store's file":  fairrelay.SQLiteDSN(other),
		"a file with no store":  fairrelay.SQLiteDSN(filepath.Join(dir, "app.db")),
		"an in-memory database": ":memory:",
	} {
		db, err := sql.Open("sqlite", dsn)
		if err != nil {
			t.Fatal(err)
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = q.EnqueueTx(ctx, tx, fairrelay.EnqueueParams{ID: "x1", Flow: "X", Body: []byte(`{"delta":1}`), At: fairrelay.AtStored})
		var fe *fairrelay.Error
		if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != "tx" {
			t.Errorf("%s: %v, want invalid_input naming tx", name, err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		db.Close()
	}
	ob, err = fairrelay.Open(ctx, other, fairrelay.Config{Policy: fairrelay.ReferencePolicy(), MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	if s, err := ob.Snapshot(ctx); err != nil || len(s.Events) != 0 {
		t.Errorf("the other store after the refused call: %+v %v, want no events", s.Events, err)
	}
	if s, err := q.Snapshot(ctx); err != nil || len(s.Events) != 0 {
		t.Errorf("the queue after the refused calls: %+v %v, want no events", s.Events, err)
	}
}

// A queue store name of another scheme, or a SQLite URL form, is
// invalid_input naming queue with what to write instead, and creates
// nothing (a fresh user: postgress://… was read as a relative path); a
// path with a colon later on is a path.
func TestOpenRefusesAForeignScheme(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for _, c := range []struct{ dsn, want string }{
		{"postgress://postgres@127.0.0.1:5432/test", "unknown scheme postgress://"},
		{"mysql://root@127.0.0.1/db", "unknown scheme mysql://"},
		{"POSTGRESQL://postgres@127.0.0.1:5432/test", "lower case: postgresql://"},
		{"sqlite:///x.db", "give the SQLite file's path itself"},
		{"sqlite3:x.db", "give the SQLite file's path itself"},
		// A second fresh user: postgres: without // made a file, and a
		// path ending in a space made one whose name hid it.
		{"postgres:x.db", "postgres: is not a URL: write postgres://"},
		{"q.db ", "begins or ends with white space"},
		{" q.db", "begins or ends with white space"},
		// A breaker: "queue: cannot open", no reason given.
		{"q\x00.db", "holds a NUL byte at byte 1"},
		{"postgres://postgres@127.0.0.1:5432/test?schema=a\x00", "holds a NUL byte"},
	} {
		q, err := fairrelay.Open(t.Context(), c.dsn, fairrelay.Config{})
		if q != nil {
			q.Close()
		}
		var fe *fairrelay.Error
		if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != "queue" || !strings.Contains(fe.Message, c.want) {
			t.Errorf("%s: %v, want invalid_input naming queue saying %q", c.dsn, err, c.want)
		}
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("refused opens left %v", left)
	}
	q, err := fairrelay.Open(t.Context(), "orders:2026.db", fairrelay.Config{})
	if err != nil {
		t.Fatalf("a file named orders:2026.db: %v", err)
	}
	q.Close()
}

// EnqueueTx refuses a transaction whose connection has a temporary table
// named like one of the store's (a breaker: SQLite resolves unqualified
// names in temp first, so a TEMP event table shaped like the store's took
// the event, the store's flow moved to seq 1, and every later claim failed
// on the missing head). invalid_input naming tx; nothing is written, and
// the queue goes on.
func TestEnqueueTxRefusesTemporaryTablesOfTheStoresNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, db := outboxFile(t)
	db.SetMaxOpenConns(1) // the temporary table lives on the one connection
	if _, err := db.Exec("CREATE TEMP TABLE event AS SELECT * FROM main.event WHERE 0"); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = q.EnqueueTx(ctx, tx, fairrelay.EnqueueParams{ID: "o1", Flow: "A", Body: []byte(`{"delta":1}`), At: fairrelay.AtStored})
	var fe *fairrelay.Error
	if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != "tx" || !strings.Contains(fe.Message, "event") {
		t.Errorf("EnqueueTx beside a TEMP event table: %v, want invalid_input naming tx and the table", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRow("SELECT count(*) FROM temp.event").Scan(&n); err != nil || n != 0 {
		t.Errorf("the temporary table holds %d rows (%v), want none", n, err)
	}
	if s, err := q.Snapshot(ctx); err != nil || len(s.Events) != 0 || len(s.Flows) != 0 {
		t.Errorf("the store after the refused call: %+v %v, want nothing", s, err)
	}
	if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "o2", Flow: "B", Body: []byte(`{"delta":1}`), At: fairrelay.AtStored}); err != nil {
		t.Fatal(err)
	}
	if c, err := q.Claim(ctx, fairrelay.ClaimParams{At: fairrelay.AtStored}); err != nil || len(c.Claims) != 1 || c.Claims[0].Token.EventID != "o2" {
		t.Errorf("claim after: %+v %v, want o2", c, err)
	}
}

// EnqueueTx's writes in the caller's transaction are all or nothing: an
// error after its first write (here the clock's update, refused by a
// trigger; a ctx that ended part way is another) left the event and its
// flow in the caller's transaction without the clock's counters, and a
// caller that committed anyway broke the store for good — the flow's seq
// disagreed with its events, and every later new flow failed on flow.ord
// (a breaker's report). The call is undone to a savepoint of its own.
func TestEnqueueTxUndoesAPartOfItself(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	q, db := outboxFile(t)
	if _, err := db.ExecContext(ctx, `CREATE TRIGGER refuse_clock BEFORE UPDATE ON clock BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`); err != nil {
		t.Fatal(err)
	}
	before, err := q.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	if _, err := q.EnqueueTx(ctx, tx, fairrelay.EnqueueParams{ID: "A1", Flow: "A", Body: []byte(`{}`), At: fairrelay.AtStored}); err == nil {
		t.Fatal("EnqueueTx succeeded although the clock's update was refused")
	}
	// The caller commits anyway: its own write stays, the enqueue's do not.
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `DROP TRIGGER refuse_clock`); err != nil {
		t.Fatal(err)
	}
	after, err := q.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Fatalf("the failed EnqueueTx left writes the caller committed (-before +after):\n%s", diff)
	}
	var orders int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE name = 'orders'`).Scan(&orders); err != nil || orders != 1 {
		t.Fatalf("the caller's own write: %d tables named orders (%v), want 1", orders, err)
	}
	for _, f := range []string{"A", "B"} {
		if r, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: f + "1", Flow: f, Body: []byte(`{}`), At: fairrelay.AtStored}); err != nil || r.Seq != 1 {
			t.Fatalf("a new flow %s after it: %+v %v, want created at seq 1", f, r, err)
		}
	}
}

// A transaction SQLite has already rolled back — one of its statements
// failed that way (here INSERT OR ROLLBACK; an interrupted or full-disk
// statement does the same) — leaves its connection in autocommit, where
// EnqueueTx's savepoint opened a transaction of its own and committed
// the event although the caller's transaction was gone (a reviewer's
// report). It is refused, naming tx, and nothing is stored.
func TestEnqueueTxRefusesATransactionSQLiteRolledBack(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	q, db := outboxFile(t)
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	before, err := q.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT OR ROLLBACK INTO orders VALUES (1)`); err == nil {
		t.Fatal("the conflicting insert succeeded")
	}
	_, err = q.EnqueueTx(ctx, tx, fairrelay.EnqueueParams{ID: "A1", Flow: "A", Body: []byte(`{}`), At: fairrelay.AtStored})
	var fe *fairrelay.Error
	if !errors.As(err, &fe) || fe.Field != "tx" {
		t.Fatalf("EnqueueTx on a transaction SQLite rolled back: %v, want invalid_input naming tx", err)
	}
	after, err := q.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Fatalf("the refused EnqueueTx stored something (-before +after):\n%s", diff)
	}
}

// outboxFile opens a queue store (reference policy) on a fresh SQLite file
// and the application's pool on the same file with fairrelay's DSN, as the
// SQLite outbox does; both are closed when the test ends.
func outboxFile(t *testing.T) (*fairrelay.Queue, *sql.DB) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "q.db")
	q, err := fairrelay.Open(t.Context(), path, fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	db, err := sql.Open("sqlite", fairrelay.SQLiteDSN(path))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return q, db
}
