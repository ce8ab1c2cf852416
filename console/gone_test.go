package console_test

import (
	"database/sql"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	_ "modernc.org/sqlite" // the driver of the store's own files

	"github.com/fairrelay/fairrelay"
)

// A console whose store's tables were dropped (a PostgreSQL schema dropped,
// a file replaced) answers every page with what happened and what to do,
// where it answered "internal error: the store failed" and logged only
// "relation flow does not exist" (a fresh user's report; the relay and
// receive stop with the same words).
func TestPagesSayTheStoreIsGone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "queue.db")
	q, err := fairrelay.Open(bg, path, fairrelay.Config{Policy: fairrelay.DaemonPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	if _, err := q.Enqueue(bg, fairrelay.EnqueueParams{ID: "A1", Flow: "A", Body: []byte(`{"delta":1}`), At: fairrelay.AtStored}); err != nil {
		t.Fatal(err)
	}
	cl := reader(t, q)
	db, err := sql.Open("sqlite", fairrelay.SQLiteDSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, table := range []string{"event", "flow"} {
		if _, err := db.Exec("DROP TABLE " + table); err != nil {
			t.Fatal(err)
		}
	}
	const want = "the queue store is gone (its schema or tables dropped?): restart the console once it is restored from a backup"
	for _, page := range []string{"/", "/flows", "/flow/A", eventPathOf("A1"), "/quarantine"} {
		st, body := cl.do("GET", page, nil)
		if st != http.StatusInternalServerError || !strings.Contains(body, want) {
			t.Errorf("GET %s with the store's tables dropped: %d %.300q, want 500 saying %q", page, st, body, want)
		}
	}
}
