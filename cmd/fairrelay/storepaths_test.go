package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// checkStorePaths reads a SQLite store argument's first 16 bytes: a file
// shorter than that which holds data (10 bytes) is not a database (SQLite
// refuses it too), refused with nothing created; an empty file is an empty
// database, which migrate makes a store in.
func TestStorePathsShortAndEmptyFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	short, empty, inboxPath := filepath.Join(dir, "short.db"), filepath.Join(dir, "empty.db"), filepath.Join(dir, "i.db")
	if err := os.WriteFile(short, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := cli(t, "", "migrate", "--queue", short, "--inbox", inboxPath)
	if want := "fairrelay: not_a_database: queue: " + short + " is not a SQLite database\n"; code != exitFailed || errOut != want {
		t.Errorf("migrate of a 10-byte file: exit %d, %q; want %q", code, errOut, want)
	}
	if m, _ := filepath.Glob(inboxPath + "*"); len(m) != 0 {
		t.Fatalf("the refused migrate created %v", m)
	}
	out, errOut, code := cli(t, "", "migrate", "--queue", empty, "--inbox", inboxPath)
	if code != exitApplied || !strings.Contains(out, "queue "+empty+": created") {
		t.Errorf("migrate of an empty file: exit %d, %q %q; want the store created in it", code, out, errOut)
	}
}
