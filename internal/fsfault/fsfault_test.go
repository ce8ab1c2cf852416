package fsfault

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	_ "modernc.org/sqlite"
)

// driverError returns the error modernc.org/sqlite really gives when it
// cannot open a database file: here one under a regular file, a place no
// one can create a file in, root included.
func driverError(t *testing.T) (path string, err error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(dir, "file", "q.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err = db.PingContext(context.Background()); err == nil {
		_, err = db.Exec("CREATE TABLE t (x)")
	}
	if err == nil {
		t.Fatal("SQLite opened a database under a regular file")
	}
	return path, err
}

// Explain names the file system's answer — a read-only file system, a
// permission — for the driver's real "unable to open database file", and
// leaves every other error as it is. access(2) cannot be made to fail for
// root here without a read-only mount (cmd/fairrelay's test makes one), so
// this test gives Explain the errno access would answer.
func TestExplain(t *testing.T) {
	path, derr := driverError(t)
	if !strings.Contains(derr.Error(), "unable to open database file") {
		t.Fatalf("driver error %q, want SQLite's unable to open", derr)
	}
	defer func(saved func(string) error) { access = saved }(access)
	for _, tc := range []struct {
		errno error
		want  string
	}{
		{syscall.EROFS, "the directory " + filepath.Dir(path) + " is on a read-only file system"},
		{syscall.EACCES, "is not writable by this process (permission denied)"},
	} {
		access = func(string) error { return tc.errno }
		err := Explain(path, derr)
		if !errors.Is(err, ErrNotWritable) || !errors.Is(err, tc.errno) || !errors.Is(err, derr) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want it to say %q and wrap the errno and the driver's error", tc.errno, err, tc.want)
		}
	}
	// A writable place: the driver's error stands.
	access = func(string) error { return nil }
	if err := Explain(path, derr); err != derr {
		t.Errorf("writable place: %v, want the driver's error unchanged", err)
	}
	// Not a SQLite open failure: untouched, even on a read-only place.
	access = func(string) error { return syscall.EROFS }
	other := errors.New("something else")
	if err := Explain(path, other); err != other {
		t.Errorf("another error: %v", err)
	}
}
