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
