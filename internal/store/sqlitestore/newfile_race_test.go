package sqlitestore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay/internal/store/sqlitestore"
)

// Several openers of one new file at once all open it: the switch to WAL
// mode that each connection asks for did not wait for the busy timeout on
// a new file, so some failed at once with "database is locked" (a breaker:
// 8 of 40 opens of a new inbox by four processes started together).
// EnsureWAL, which Open calls, tries the switch again until the busy
// timeout. Goroutines of one process, each with its own connection, race
// the same way.
func TestOpenersOfOneNewFileAllOpenIt(t *testing.T) {
	t.Parallel()
	const rounds, openers = 30, 6
	failed := 0
	for round := range rounds {
		path := filepath.Join(t.TempDir(), fmt.Sprintf("new%d.db", round))
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, openers)
		for range openers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				s, err := sqlitestore.Open(context.Background(), path, sqlitestore.Options{BusyTimeout: 5 * time.Second})
				if err != nil {
					errs <- err
					return
				}
				s.Close()
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			failed++
			if failed <= 3 {
				t.Errorf("round %d: %v", round, err)
			}
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d opens of a new file failed", failed, rounds*openers)
	}
}
