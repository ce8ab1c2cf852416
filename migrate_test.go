package fairrelay_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/pgtest"
)

// TestOpenRefusesANewerStore: a store that records a migration this build
// does not have was migrated by a newer fairrelay, whose rows this one would
// misread (migration 004 of the PostgreSQL store moves a head's state onto
// its flow row); Open refuses it, names the migration, and answers
// invalid_input on field "queue" whatever the backend.
func TestOpenRefusesANewerStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	check := func(t *testing.T, dsn string, bump func()) {
		q, err := fairrelay.Open(ctx, dsn, fairrelay.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "A1", Flow: "A", Body: []byte(`{"delta":1}`)}); err != nil {
			t.Fatal(err)
		}
		q.Close()
		bump()
		_, err = fairrelay.Open(ctx, dsn, fairrelay.Config{})
		if err == nil || !strings.Contains(err.Error(), "migrated by a newer fairrelay") || !strings.Contains(err.Error(), "migration 999") {
			t.Fatalf("open of a store at migration 999: %v", err)
		}
		// The same answer on every backend: the store named by "queue" is
		// one this build cannot use.
		var fe *fairrelay.Error
		if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != "queue" {
			t.Fatalf("open of a store at migration 999: %#v, want invalid_input on field queue", err)
		}
	}
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "q.db")
		check(t, path, func() {
			db, err := sql.Open("sqlite", path)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Exec(`INSERT INTO fairrelay_migration (version, applied_at) VALUES (999, 'later')`); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		dsn := pgtest.Schema(t, "frnewer")
		check(t, dsn, func() {
			pgtest.Exec(t, dsn, `INSERT INTO fairrelay_migration (version, applied_at) VALUES (999, 'later')`)
		})
	})
}

// TestOpenUnderTheOtherEntryRuleMigratesNothing: a store of an older
// version opened under the entry rule it was not created with is refused
// (SPEC §7: invalid_input naming policy) before anything is written. It was
// migrated first and refused after, so a mistyped --policy on a new binary
// upgraded a store that older relays still used, and they then refused it
// (a breaker's report, both backends). The older store is this version's
// with its last migration undone.
func TestOpenUnderTheOtherEntryRuleMigratesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	check := func(t *testing.T, dsn string, undoLast func() int, latest func() int) {
		q, err := fairrelay.Open(ctx, dsn, fairrelay.Config{Policy: fairrelay.ReferencePolicy()}) // seed
		if err != nil {
			t.Fatal(err)
		}
		q.Close()
		before := undoLast()
		_, err = fairrelay.Open(ctx, dsn, fairrelay.Config{Policy: fairrelay.DaemonPolicy()}) // fair
		var fe *fairrelay.Error
		if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != "policy" {
			t.Fatalf("open under fair of a seed store: %v, want invalid_input naming policy", err)
		}
		if got := latest(); got != before {
			t.Errorf("the refused open migrated the store from %d to %d", before, got)
		}
		q, err = fairrelay.Open(ctx, dsn, fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
		if err != nil {
			t.Fatalf("open under its own rule: %v", err)
		}
		q.Close()
		if got := latest(); got <= before {
			t.Errorf("open under its own rule left the store at migration %d", got)
		}
	}
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "q.db")
		db := func() *sql.DB {
			db, err := sql.Open("sqlite", path)
			if err != nil {
				t.Fatal(err)
			}
			return db
		}
		latest := func() int {
			d := db()
			defer d.Close()
			var v int
			if err := d.QueryRow(`SELECT max(version) FROM fairrelay_migration`).Scan(&v); err != nil {
				t.Fatal(err)
			}
			return v
		}
		check(t, path, func() int {
			d := db()
			defer d.Close()
			// Migration 005: three indexes.
			if _, err := d.Exec(`DROP INDEX event_inflight; DROP INDEX event_waiting; DROP INDEX flow_paused; DELETE FROM fairrelay_migration WHERE version = 5`); err != nil {
				t.Fatal(err)
			}
			return latest()
		}, latest)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		dsn := pgtest.Schema(t, "frentry")
		latest := func() int {
			var v int
			pgtest.QueryRow(t, dsn, `SELECT max(version) FROM fairrelay_migration`, &v)
			return v
		}
		check(t, dsn, func() int {
			// Migration 015 restates a function: undone by forgetting it.
			pgtest.Exec(t, dsn, `DELETE FROM fairrelay_migration WHERE version = (SELECT max(version) FROM fairrelay_migration)`)
			return latest()
		}, latest)
	})
}
