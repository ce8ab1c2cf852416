package inbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/fairrelay/fairrelay/internal/pgtest"
)

// On PostgreSQL the inbox's connection pool has pool_max_conns connections,
// all kept open when idle: receives from many deliveries at once reuse
// them instead of opening a server process for each (database/sql keeps 2
// idle connections unless told otherwise).
func TestPostgresPoolKeepsItsConnections(t *testing.T) {
	t.Parallel()
	const conns = 6
	in, err := Open(t.Context(), pgtest.Schema(t, "frinpool")+fmt.Sprintf("&pool_max_conns=%d", conns), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for g := range conns {
		wg.Go(func() {
			for i := range 30 {
				d := Delivery{EventID: fmt.Sprintf("g%d-%d", g, i), Flow: fmt.Sprintf("G%d", g), Seq: int64(i + 1), Body: []byte(`{"delta":1}`)}
				if _, err := in.Receive(t.Context(), d); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := in.db.Stats()
	if st.MaxOpenConnections != conns {
		t.Errorf("MaxOpenConnections %d, want pool_max_conns %d", st.MaxOpenConnections, conns)
	}
	if st.MaxIdleClosed != 0 {
		t.Errorf("%d connections closed for want of idle room after %d concurrent receivers (open at most %d)", st.MaxIdleClosed, conns, st.MaxOpenConnections)
	}
}

// A connection the SQLite inbox opens after its file was removed fails and
// makes no new file where the inbox was (a breaker's report on the queue
// store's watch; the inbox's pool opens connections again the same way).
func TestSQLiteInboxDoesNotMakeARemovedFileAgain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "in.db")
	in, err := Open(t.Context(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
	}
	in.db.SetMaxIdleConns(0) // its connection closes; the next is new
	var n int
	in.db.QueryRowContext(t.Context(), "SELECT count(*) FROM sqlite_master").Scan(&n) // fails once the file is gone
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a new connection made the removed inbox's file again (stat: %v)", err)
	}
}
