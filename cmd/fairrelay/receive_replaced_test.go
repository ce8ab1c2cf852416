package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay/internal/harness/brokertest"
)

// moveAway renames a SQLite file and its -wal and -shm beside it, as an
// operator who restores a backup over a running receiver's inbox does.
func moveAway(t *testing.T, path string) {
	t.Helper()
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Rename(path+suffix, filepath.Join(filepath.Dir(path), "old-"+filepath.Base(path)+suffix)); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
}

// waitExit waits up to a minute for d to exit and returns its code.
func waitExit(t *testing.T, d *daemon, what string) int {
	t.Helper()
	select {
	case <-d.exited:
		return d.code
	case <-time.After(time.Minute):
		t.Fatalf("%s still ran a minute after its inbox's file was moved away; stderr:\n%s", what, d.stderr())
		return 0
	}
}

// A receiver whose SQLite inbox's file is moved away under it stops, idle
// or not, and exits 2 naming the file: every write of the old file fails
// and no wait cures it. Before, it answered 500 (and its /readyz 503) for
// ever, so no supervisor restarted it onto the new file (an SRE's drill).
// The relay stops the same way (relay.Run, ErrFileReplaced).
func TestReceiveStopsWhenItsInboxFileIsReplaced(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, d *daemon, inboxPath string) {
		t.Helper()
		moveAway(t, inboxPath)
		if code := waitExit(t, d, "receive"); code != exitFailed {
			t.Errorf("receive exited %d after its inbox's file was moved away, want %d; stderr:\n%s", code, exitFailed, d.stderr())
		}
		if l := d.line("fairrelay: database:"); !strings.Contains(l, inboxPath) || !strings.Contains(l, "no longer exists") {
			t.Errorf("its last error line %q; want a database error naming %s; stderr:\n%s", l, inboxPath, d.stderr())
		}
	}
	t.Run("http", func(t *testing.T) {
		t.Parallel()
		inboxPath := filepath.Join(t.TempDir(), "inbox.db")
		d, _ := startReceiver(t, inboxPath)
		check(t, d, inboxPath)
	})
	t.Run("nats", func(t *testing.T) {
		t.Parallel()
		server := brokertest.NATS(t)
		stream := brokertest.Name("FRREPL_")
		t.Cleanup(func() { deleteStream(t, server, stream) })
		inboxPath := filepath.Join(t.TempDir(), "inbox.db")
		d := startConsumerCLI(t, inboxPath, server+"?subject="+brokertest.Name("frrepl")+".{flow}&stream="+stream+"&durable=ledger")
		check(t, d, inboxPath)
	})
}
