package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A store argument whose file cannot be read is refused with the read's
// own error (database, the path and the cause), not "not a SQLite
// database", and nothing is created: the header check of migrate and
// script (checkStorePaths) called every failed read that. The file is a
// real one that fails to read: sysfs's speed of the loopback interface, a
// regular file of 4096 bytes whose read answers EINVAL.
func TestAStoreFileThatCannotBeReadSaysWhy(t *testing.T) {
	t.Parallel()
	const unreadable = "/sys/class/net/lo/speed"
	st, err := os.Stat(unreadable)
	if err != nil || !st.Mode().IsRegular() || st.Size() == 0 {
		t.Skipf("%s is not a regular file with a size here (%v)", unreadable, err)
	}
	if _, err := os.ReadFile(unreadable); !errors.Is(err, syscall.EINVAL) {
		t.Skipf("reading %s does not fail with EINVAL here: %v", unreadable, err)
	}
	dir := t.TempDir()
	other := filepath.Join(dir, "other.db")
	for _, args := range [][]string{
		{"migrate", "--queue", unreadable, "--inbox", other},
		{"migrate", "--queue", other, "--inbox", unreadable},
		{"script", "--queue", unreadable, "--inbox", other},
	} {
		out, errOut, code := cli(t, "", args...)
		want := "fairrelay: database: read " + unreadable + " (nothing was created): read " + unreadable + ": invalid argument\n"
		if code != exitFailed || out != "" || errOut != want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d and %q", args, code, out, errOut, exitFailed, want)
		}
		if strings.Contains(errOut, "not_a_database") {
			t.Errorf("%v: a failed read called not_a_database: %q", args, errOut)
		}
		if m, _ := filepath.Glob(other + "*"); len(m) != 0 {
			t.Fatalf("%v created %v", args, m)
		}
	}
}
