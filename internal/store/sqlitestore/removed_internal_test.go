package sqlitestore

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// removeStore removes a store's file, its log and its shared memory, as an
// operator's rm (or a cleanup gone wrong) does under a running process.
func removeStore(t *testing.T, path string) {
	t.Helper()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
	}
}

func assertGone(t *testing.T, path, what string) {
	t.Helper()
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s made the removed store's file again (stat: %v)", what, err)
	}
}

// A connection the store opens after its file was removed — one more of
// the read pool, or the watch of Changes opening (again) — fails, and makes
// no new file where the store was (a breaker's report: the watch re-created
// a removed store as an empty database and reported itself healthy; a
// restarted process would then have made a fresh, empty store there).
func TestConnectionsOpenedLaterDoNotMakeARemovedStoreAgain(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "q.db")
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	removeStore(t, path)

	// The read pool holds at most 4: taking 4 at once opens new ones,
	// which SQLite opens at their first statement.
	for range 4 {
		if c, err := s.read.Conn(ctx); err == nil {
			defer c.Close()
			var n int
			c.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master").Scan(&n) // fails once the file is gone
		}
	}
	assertGone(t, path, "the read pool")

	statuses := make(chan error, 8)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	held := s.Changes(wctx, func(err error) {
		select {
		case statuses <- err:
		default:
		}
	})
	// The watch either fails (its status) or holds (its first signal).
	select {
	case err := <-statuses:
		if err == nil {
			t.Errorf("the watch of a removed store: status nil, want its error")
		}
	case <-held:
		t.Errorf("the watch of a removed store holds, want its error")
	}
	assertGone(t, path, "the watch")
}
