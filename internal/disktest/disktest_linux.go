//go:build linux

// Package disktest gives tests a small file system of their own to fill
// and empty: a real full disk, with no hook into the code under test.
package disktest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay/internal/store/sqlitestore"
)

// SmallDisk mounts a tmpfs of size bytes on a fresh temporary directory and
// returns it; it is unmounted when the test ends. Without the right to
// mount (CAP_SYS_ADMIN) the test skips, saying so.
func SmallDisk(t testing.TB, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.Itoa(size)); err != nil {
		t.Skipf("cannot mount a tmpfs for the full-disk test (it needs CAP_SYS_ADMIN): %v", err)
	}
	// Lazily: a file the test failed to close must not keep it mounted.
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// FillDisk fills the file system of dir to its last byte and returns the
// function that frees it again. First it truncates the WAL of the SQLite
// store at dbPath (a checkpoint): a WAL that already spans many pages is
// reused from its start after each checkpoint, so writes could go on for a
// while on a full disk; truncated, the next commit must allocate.
func FillDisk(t testing.TB, dir, dbPath string) (free func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sqlitestore.TruncateLog(ctx, dbPath); err != nil {
		t.Fatalf("could not truncate the WAL within 30 s: %v", err)
	}
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	total := 0
	for chunk := 1 << 20; chunk > 0; chunk /= 2 {
		buf := make([]byte, chunk)
		for {
			n, err := f.Write(buf)
			total += n
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("filled the disk with %d bytes", total)
	return func() {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
}
