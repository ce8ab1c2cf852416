package main

import (
	"path/filepath"
	"syscall"
	"testing"

	"github.com/fairrelay/fairrelay/internal/disktest"
)

// A relay whose SQLite store's disk is full at start waits for space, as
// it does for a store that does not answer, instead of exiting 2 into a
// supervisor's crash loop (an SRE's drill: it exited "invalid_input:
// queue: cannot open: read schema: disk I/O error"); once space is freed
// it starts.
func TestRelayWaitsForAFullDiskAtStart(t *testing.T) {
	t.Parallel()
	disk := disktest.SmallDisk(t, 4<<20)
	queue := filepath.Join(disk, "q.db")
	if out, errOut, code := cli(t, "", "migrate", "--queue", queue); code != 0 {
		t.Fatalf("migrate: exit %d: %s%s", code, out, errOut)
	}
	free := disktest.FillDisk(t, disk, queue)
	cmd, stderr, exited := startDaemon(t, "relay", "--queue", queue, "--sink", "http://127.0.0.1:1/")
	waitStderr(t, stderr, "relay: the store does not answer yet; trying again until it does")
	free()
	waitStderr(t, stderr, "relay: started")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := <-exited; code != 0 {
		t.Errorf("SIGTERM: exit %d:\n%s", code, stderr.String())
	}
}
