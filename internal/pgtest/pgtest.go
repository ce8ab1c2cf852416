// Package pgtest gives tests a real PostgreSQL: the server's URL, and fresh
// schemas that are dropped when the test ends. The server is
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable unless the
// environment variable FAIRRELAY_PG_URL names another. When it is
// unreachable, tests fail under CI=true and skip, saying why, otherwise.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fairrelay/fairrelay/internal/store/pgstore"
)

// DefaultURL is the server the tests use when FAIRRELAY_PG_URL is not set.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// EnvVar names the environment variable that overrides DefaultURL.
const EnvVar = "FAIRRELAY_PG_URL"

// URL returns the server's URL after checking that it answers within 5s;
// otherwise it fails the test under CI=true and skips it elsewhere.
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(EnvVar)
	if u == "" {
		u = DefaultURL
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err == nil {
		err = conn.Ping(ctx)
		conn.Close(ctx)
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL at %s is unreachable under CI=true: %v", u, err)
		}
		t.Skipf("PostgreSQL at %s is unreachable (set %s to point at one): %v", u, EnvVar, err)
	}
	return u
}

// Schema returns URL(t) with a schema=NAME parameter naming a fresh, random
// schema (prefix, then random hex); the schema is dropped with everything in
// it when the test ends. Nothing creates it here: the first Open does.
func Schema(t testing.TB, prefix string) string {
	t.Helper()
	base := URL(t)
	name := randomName(t, prefix)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop schema %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	})
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	return base + sep + "schema=" + name
}

// EachBackend runs fn in two parallel subtests, "sqlite" and "postgres",
// with the DSN of a fresh store of each: the path of file in a temporary
// directory (nothing created there), and Schema(t, prefix). The one loop of
// the packages' tests that run on both backends.
func EachBackend(t *testing.T, file, prefix string, fn func(t *testing.T, dsn string)) {
	t.Helper()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			dsn := filepath.Join(t.TempDir(), file)
			if backend == "postgres" {
				dsn = Schema(t, prefix)
			}
			fn(t, dsn)
		})
	}
}

// Database creates a fresh, random database on URL(t)'s server (prefix,
// then random hex) and returns URL(t) pointing at it instead; the database
// is dropped (WITH (FORCE): connections still open to it are ended) when
// the test ends.
func Database(t testing.TB, prefix string) string {
	t.Helper()
	base := URL(t)
	name := randomName(t, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		// Two minutes: a DROP DATABASE removes its files and waits for the
		// server's other work; on a loaded machine (CI beside other
		// suites) it took more than 30 s once.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// randomName is prefix, an underscore and 12 random hex digits.
func randomName(t testing.TB, prefix string) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return prefix + "_" + hex.EncodeToString(b[:])
}

// Exclusive makes the test the only holder of the named lock on the server
// until it ends, waiting for any other holder — another test binary, or
// another developer's run of the same test. Heavy tests take it so that two
// of them never exhaust the server's connections together.
func Exclusive(t testing.TB, name string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, URL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	// A session-level advisory lock: released when the connection closes,
	// also when the test binary dies.
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(hashtext($1))", "fairrelay-pgtest:"+name); err != nil {
		t.Fatalf("lock %s: %v", name, err)
	}
}

// Exec runs sql (one or more statements, no parameters) on the database and
// schema of dsn, failing the test on error.
func Exec(t testing.TB, dsn, sql string) {
	t.Helper()
	conn := Connect(t, dsn)
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// QueryRow runs query (no parameters) on the database and schema of dsn and
// scans its first row into dest, failing the test on error or when there is
// no row.
func QueryRow(t testing.TB, dsn, query string, dest ...any) {
	t.Helper()
	conn := Connect(t, dsn)
	defer conn.Close(context.Background())
	if err := conn.QueryRow(context.Background(), query).Scan(dest...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// Connect opens a connection to the database and schema of dsn (a
// schema=NAME parameter puts NAME on search_path), failing the test on
// error. The caller closes it.
func Connect(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	cfg, _, err := pgstore.PoolConfig(dsn, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.ConnectConfig(context.Background(), cfg.ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// WaitForWriters waits until no transaction holds a lock that writes, or
// locks rows, on a table of dsn's schema: in one transaction it locks every
// table of the schema IN EXCLUSIVE MODE, which waits for each such holder
// to end, and rolls back. A test whose child process died inside a
// transaction calls it before it claims again: the server aborts a dead
// client's transaction only once it notices the closed socket, and until
// then claims skip the rows that transaction locked (FOR UPDATE SKIP
// LOCKED) and answer idle. It fails the test after a minute.
func WaitForWriters(t testing.TB, dsn string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := Connect(t, dsn)
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	var tables *string
	if err := tx.QueryRow(ctx, "SELECT string_agg(format('%I.%I', schemaname, tablename), ', ') FROM pg_tables WHERE schemaname = current_schema()").Scan(&tables); err != nil {
		t.Fatalf("wait for writers: %v", err)
	}
	if tables == nil {
		return
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE "+*tables+" IN EXCLUSIVE MODE"); err != nil {
		t.Fatalf("wait for writers: %v", err)
	}
}

// LockTable locks table of dsn's schema IN ACCESS EXCLUSIVE MODE (as a
// migration or a VACUUM FULL does: every other read and write of it waits)
// in a transaction of its own connection, and returns release, which rolls
// it back; the test's cleanup releases it too.
func LockTable(t testing.TB, dsn, table string) (release func()) {
	t.Helper()
	conn := Connect(t, dsn) // dsn's schema is on search_path
	tx, err := conn.Begin(context.Background())
	if err != nil {
		conn.Close(context.Background())
		t.Fatal(err)
	}
	released := false
	release = func() {
		if !released {
			released = true
			tx.Rollback(context.Background())
			conn.Close(context.Background())
		}
	}
	t.Cleanup(release)
	if _, err := tx.Exec(context.Background(), "LOCK TABLE "+pgx.Identifier{table}.Sanitize()+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatalf("lock %s: %v", table, err)
	}
	return release
}

// Settings connects with cfg's connection settings (its AfterConnect
// included, as the store's pool would) and returns the server's value of
// each name (pg_settings.setting: lock_timeout in milliseconds), failing
// the test on error.
func Settings(t testing.TB, cfg *pgx.ConnConfig, names ...string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	got := map[string]string{}
	for _, n := range names {
		var v string
		if err := conn.QueryRow(ctx, "SELECT setting FROM pg_settings WHERE name = $1", n).Scan(&v); err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		got[n] = v
	}
	return got
}
