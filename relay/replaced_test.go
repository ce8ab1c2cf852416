package relay_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/relay"
)

// A relay whose SQLite store's file is moved away and made again under it
// stops with ErrFileReplaced at its next write: waiting cannot cure it, and
// a relay that retried for ever (writing nothing, /healthz 200) was never
// restarted by its supervisor, so the events in the new file waited for a
// person (an SRE's drill). The delivery under way when the file was
// replaced is answered, and its settle is refused rather than written to
// the old file.
func TestRelayStopsWhenItsSQLiteFileIsReplaced(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	queue := filepath.Join(dir, "queue.db")
	h := newHarnessOn(t, patientPolicy(), queue, filepath.Join(dir, "inbox.db"))
	var once sync.Once
	h.mu.Lock()
	h.intercept = func(http.ResponseWriter, *http.Request, delivery) bool {
		once.Do(func() {
			for _, suffix := range []string{"", "-wal", "-shm"} {
				if err := os.Rename(queue+suffix, filepath.Join(dir, "old.db"+suffix)); err != nil && !errors.Is(err, os.ErrNotExist) {
					t.Error(err)
				}
			}
			q, err := fairrelay.Open(context.Background(), queue, fairrelay.Config{Policy: patientPolicy()})
			if err != nil {
				t.Error(err)
				return
			}
			q.Close()
		})
		return false // the inbox answers
	}
	h.mu.Unlock()
	h.enqueue(t, "A", 1)
	r, err := relay.New(t.Context(), h.patient(t))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { done <- r.Run(ctx) }()
	select {
	case err := <-done:
		if !errors.Is(err, fairrelay.ErrFileReplaced) {
			t.Errorf("Run after its store's file was replaced: %v, want ErrFileReplaced", err)
		}
	case <-time.After(time.Minute):
		cancel()
		t.Fatalf("the relay still ran a minute after its store's file was replaced (Run after cancel: %v)", <-done)
	}
}
