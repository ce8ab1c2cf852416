package fairrelay_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/internal/sqlitetest"
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
			sqlitetest.Exec(t, path, `INSERT INTO fairrelay_migration (version, applied_at) VALUES (999, 'later')`)
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
		latest := func() (v int) {
			sqlitetest.QueryRow(t, path, `SELECT max(version) FROM fairrelay_migration`, &v)
			return v
		}
		check(t, path, func() int {
			// Migration 007: a column.
			sqlitetest.Exec(t, path, `DROP TRIGGER tombstone_dated; DROP TABLE tombstone_epoch; ALTER TABLE tombstone DROP COLUMN claimed_wall; DELETE FROM fairrelay_migration WHERE version = 7`)
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
			// The latest migration runs again as it is (036: a column added
			// if missing): undone by forgetting it.
			pgtest.Exec(t, dsn, `DELETE FROM fairrelay_migration WHERE version = (SELECT max(version) FROM fairrelay_migration)`)
			return latest()
		}, latest)
	})
}

// TestReadOnlyOpenWritesNothing: Config.ReadOnly (inspect) reads a current
// store, and refuses — invalid_input naming queue, with the migrations it
// lacks and what to run — a store an older fairrelay made, or one that
// records no entry rule yet, without migrating or recording anything: a
// newer binary's inspect migrated the store under older relays, which then
// refused it at their next start. A missing store is not created.
func TestReadOnlyOpenWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type state struct {
		latest int
		entry  sql.NullString
	}
	check := func(t *testing.T, dsn, missing string, undoLast, forgetEntry func(), read func() state) {
		q, err := fairrelay.Open(ctx, dsn, fairrelay.Config{Policy: fairrelay.ReferencePolicy()}) // seed
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "A1", Flow: "A", Body: []byte(`{"delta":1}`), At: 1}); err != nil {
			t.Fatal(err)
		}
		q.Close()
		ro := fairrelay.Config{ReadOnly: true, AdoptStoredEntry: true}
		q, err = fairrelay.Open(ctx, dsn, ro)
		if err != nil {
			t.Fatalf("read-only open of a current store: %v", err)
		}
		heads, err := q.Heads(ctx, "", 10)
		q.Close()
		if err != nil || len(heads) != 1 || heads[0].Head == nil || heads[0].Head.ID != "A1" {
			t.Fatalf("read-only open read heads %v, %v; want A1", heads, err)
		}
		if q.Policy().Entry != fairrelay.EntrySeed {
			t.Errorf("read-only open took entry rule %q, want the stored seed", q.Policy().Entry)
		}
		refused := func(what string, want ...string) {
			t.Helper()
			before := read()
			_, err := fairrelay.Open(ctx, dsn, ro)
			var fe *fairrelay.Error
			if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != "queue" {
				t.Fatalf("read-only open of %s: %v, want invalid_input naming queue", what, err)
			}
			for _, w := range want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("read-only open of %s: %q does not say %q", what, err, w)
				}
			}
			if after := read(); after != before {
				t.Errorf("read-only open of %s changed the store: %+v → %+v", what, before, after)
			}
		}
		undoLast()
		refused("a store one migration behind", "lacks migration", "run fairrelay migrate")
		// A read-write open migrates it again; then one without a rule.
		q, err = fairrelay.Open(ctx, dsn, fairrelay.Config{AdoptStoredEntry: true})
		if err != nil {
			t.Fatal(err)
		}
		q.Close()
		forgetEntry()
		refused("a store without an entry rule", "no entry rule", "run fairrelay migrate")
		_, err = fairrelay.Open(ctx, missing, ro)
		var fe *fairrelay.Error
		if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != "queue" {
			t.Fatalf("read-only open of a missing store: %v, want invalid_input naming queue", err)
		}
	}
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		path := filepath.Join(dir, "q.db")
		exec := func(stmt string) { sqlitetest.Exec(t, path, stmt) }
		read := func() (s state) {
			sqlitetest.QueryRow(t, path, `SELECT (SELECT max(version) FROM fairrelay_migration), (SELECT entry FROM settings WHERE id = 1)`, &s.latest, &s.entry)
			return s
		}
		check(t, path, filepath.Join(dir, "missing.db"),
			// Migration 007: a column.
			func() {
				exec(`DROP TRIGGER tombstone_dated; DROP TABLE tombstone_epoch; ALTER TABLE tombstone DROP COLUMN claimed_wall; DELETE FROM fairrelay_migration WHERE version = 7`)
			},
			func() { exec(`UPDATE settings SET entry = NULL WHERE id = 1`) }, read)
		if _, err := os.Stat(filepath.Join(dir, "missing.db")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a read-only open created the missing store: %v", err)
		}
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		dsn := pgtest.Schema(t, "frreadonly")
		missing := pgtest.Schema(t, "frreadonlymissing")
		read := func() (s state) {
			var entry *string
			pgtest.QueryRow(t, dsn, `SELECT (SELECT max(version) FROM fairrelay_migration), (SELECT entry FROM settings WHERE id = 1)`, &s.latest, &entry)
			s.entry = sql.NullString{String: derefOr(entry), Valid: entry != nil}
			return s
		}
		check(t, dsn, missing,
			// The latest migration runs again as it is: undone by forgetting it.
			func() {
				pgtest.Exec(t, dsn, `DELETE FROM fairrelay_migration WHERE version = (SELECT max(version) FROM fairrelay_migration)`)
			},
			func() { pgtest.Exec(t, dsn, `UPDATE settings SET entry = NULL WHERE id = 1`) }, read)
		var tables int
		pgtest.QueryRow(t, missing, `SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()`, &tables)
		if tables != 0 {
			t.Errorf("a read-only open created %d tables in the missing store's schema", tables)
		}
	})
}

func derefOr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
