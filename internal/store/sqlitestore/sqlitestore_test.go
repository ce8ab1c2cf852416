package sqlitestore_test

import (
	"path/filepath"
	"testing"

	"github.com/fairrelay/fairrelay/internal/store"
	"github.com/fairrelay/fairrelay/internal/store/sqlitestore"
	"github.com/fairrelay/fairrelay/internal/store/storetest"
)

// The seam's conformance suite on real SQLite files.
func TestStoreSeam(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, entry string) (store.Store, func(string, bool) (store.Store, error)) {
		path := filepath.Join(t.TempDir(), "queue.db")
		s, err := sqlitestore.Open(t.Context(), path, sqlitestore.Options{Entry: entry})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s, func(entry string, adopt bool) (store.Store, error) {
			return sqlitestore.Open(t.Context(), path, sqlitestore.Options{Entry: entry, AdoptEntry: adopt})
		}
	})
}
