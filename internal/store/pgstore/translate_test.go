package pgstore_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/internal/store"
	"github.com/fairrelay/fairrelay/internal/store/pgstore"
)

// The server's lock timeout and deadlock answers are busy, and say what
// happened and what the caller does next (a fresh user's report: only the
// server's own words reached the CLI).
func TestTranslateBusySaysWhatToDo(t *testing.T) {
	for code, want := range map[string]string{
		"55P03": "another transaction held a row or table this call needs",
		"40P01": "try again (in a transaction of your own, roll it back and run it again)",
	} {
		err := pgstore.Translate(fmt.Errorf("enqueue_many: %w", &pgconn.PgError{Code: code, Message: "server words"}))
		if !errors.Is(err, store.ErrBusy) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "server words") {
			t.Errorf("%s: %v, want busy saying %q and keeping the server's words", code, err, want)
		}
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != code {
			t.Errorf("%s: the server's error is not in the chain: %v", code, err)
		}
	}
}

// A schema, table or column of the store missing (dropped, or made again
// under a running process and seen half done) is not a store: waiting
// cannot cure it (the relay and receive stop on it).
func TestTranslateMissingPartsAreNotADatabase(t *testing.T) {
	for _, code := range []string{"3F000", "42P01", "42703"} {
		err := pgstore.Translate(fmt.Errorf("claim: %w", &pgconn.PgError{Code: code, Message: "server words"}))
		if !errors.Is(err, store.ErrNotDatabase) || !strings.Contains(err.Error(), "server words") {
			t.Errorf("%s: %v, want not a database keeping the server's words", code, err)
		}
	}
}

// TestParseDSN: the schema parameter comes out, every other pair goes to
// pgx as it was written (a space stays %20: pgx, as libpq, keeps a "+"),
// and what would open another store than the one meant is refused: a
// parameter given twice, a pair with a semicolon (url.Values.Query drops
// it silently, schema= with it), and a URL that does not parse, whose
// error does not repeat the URL (it may hold a password).
func TestParseDSN(t *testing.T) {
	conn, schema, err := pgstore.ParseDSN("postgres://u@h:5432/db?sslmode=disable&schema=relay&options=-c%20statement_timeout%3D5s&application_name=my%20app")
	if err != nil || schema != "relay" || conn != "postgres://u@h:5432/db?sslmode=disable&options=-c%20statement_timeout%3D5s&application_name=my%20app" {
		t.Fatalf("ParseDSN: %q %q %v", conn, schema, err)
	}
	if conn, schema, err := pgstore.ParseDSN("postgres://h/db"); err != nil || schema != "" || conn != "postgres://h/db" {
		t.Fatalf("no query: %q %q %v", conn, schema, err)
	}
	for _, tc := range []struct{ dsn, want string }{
		{"postgres://h/db?schema=a&schema=b", `parameter "schema" given 2 times`},
		{"postgres://h/db?sslmode=disable&sslmode=require", `parameter "sslmode" given 2 times`},
		{"postgres://h/db?schema=relay;x", "semicolon"},
		{"postgres://u:s3cret@h:54x2/db", "not a URL: what follows a ':' after the host is not a port number"},
		// url.Parse's own words quote a piece of the URL: a password
		// holding '#' or '/' was most of it in the message.
		{"postgres://u:s3cret#x@h/db", "percent-encoded"},
		{"postgres://u:s3cret/x@h/db", "percent-encoded"},
		{"postgres://u:s3cret%zz@h/db", "not a URL: a '%' is not followed by two hex digits"},
		{"postgres://u:s3cret\x01@h/db", "not a URL"},
		{"postgres://u:123#s3cret@h/db", "not a URL: it holds a '#'"}, // parsed as host u, port 123
		{"postgres://h/db?schema=a-b", "letters, digits and underscores"},
		// PostgreSQL's own schemas: a store in information_schema was made
		// and left out of pg_dump's backups (a breaker's report).
		{"postgres://h/db?schema=information_schema", "one of PostgreSQL's own"},
		{"postgres://h/db?schema=pg_catalog", "one of PostgreSQL's own"},
		{"postgres://h/db?schema=pg_mine", "one of PostgreSQL's own"},
	} {
		_, _, err := pgstore.ParseDSN(tc.dsn)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("ParseDSN(%q): %v, want an error saying %q (and no password)", tc.dsn, err, tc.want)
		}
	}
}

// A URL may not set what the store sets itself: lock_timeout (from the
// busy timeout), or search_path beside schema=. Before, each was replaced
// without a word. search_path without schema= is the URL's own.
func TestPoolConfigRefusesSettingsTheStoreMakes(t *testing.T) {
	for _, tc := range []struct{ dsn, want string }{
		{"postgres://h/db?lock_timeout=2s", "lock_timeout: the store sets it"},
		{"postgres://h/db?schema=relay&search_path=other", "search_path: the store sets it from schema="},
		// Another case, and options' -c settings (a breaker's report:
		// SEARCH_PATH= raced the store's search_path per connection).
		{"postgres://h/db?LOCK_TIMEOUT=2s", "lock_timeout: the store sets it"},
		{"postgres://h/db?schema=relay&Search_Path=other", "search_path: the store sets it from schema="},
		{"postgres://h/db?options=-c%20lock_timeout%3D2s", "lock_timeout: the store sets it"},
		{"postgres://h/db?options=--lock-timeout%3D2s", "lock_timeout: the store sets it"},
		{"postgres://h/db?schema=relay&options=-c%20search_path%3Dpublic", "search_path: the store sets it from schema="},
	} {
		for _, timeout := range []time.Duration{0, 5 * time.Second} {
			if _, _, err := pgstore.PoolConfig(tc.dsn, timeout); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("PoolConfig(%q, %v): %v, want an error saying %q", tc.dsn, timeout, err, tc.want)
			}
		}
	}
	if _, _, err := pgstore.PoolConfig("postgres://h/db?options=-c%20statement_timeout%3D5s", 5*time.Second); err != nil {
		t.Errorf("options without the store's settings: %v", err)
	}
	cfg, _, err := pgstore.PoolConfig(pgtest.URL(t)+"&search_path=other", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := pgtest.Settings(t, cfg.ConnConfig, "search_path", "lock_timeout"); got["search_path"] != "other" || got["lock_timeout"] != "5000" {
		t.Errorf("search_path without schema=: %v", got)
	}
}
