package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// readOnlyEnv names the directory the child CLI makes read-only, in a
// mount namespace of its own, before it runs.
const readOnlyEnv = "FAIRRELAY_TEST_READONLY_DIR"

func init() {
	beforeCLI = func() {
		dir := os.Getenv(readOnlyEnv)
		if dir == "" {
			return
		}
		// The child was started in a new mount namespace (with / made
		// private by Go), so this mount is its own: a read-only bind of
		// the directory onto itself.
		if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
			os.Stderr.WriteString("bind mount: " + err.Error() + "\n")
			os.Exit(99)
		}
		if err := syscall.Mount("", dir, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
			os.Stderr.WriteString("remount read-only: " + err.Error() + "\n")
			os.Exit(99)
		}
	}
}

// cliReadOnly runs the CLI in a child that sees dir read-only, as on a
// read-only file system (a mount, which works for root too: root passes
// every permission check, but not a read-only mount). It skips the test
// where the child may not have a mount namespace of its own.
func cliReadOnly(t *testing.T, dir string, args ...string) (stderr string, code int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "FAIRRELAY_TEST_AS_CLI=1", readOnlyEnv+"="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	var e bytes.Buffer
	cmd.Stderr = &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee) && ee.ExitCode() == 99, errors.Is(err, syscall.EPERM):
		if os.Getenv("CI") == "true" {
			t.Fatalf("cannot make a read-only mount under CI=true: %v %s", err, e.String())
		}
		t.Skipf("no read-only mount for this test (needs root or CAP_SYS_ADMIN): %v %s", err, e.String())
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return e.String(), code
}

// A store on a read-only file system is refused with the cause named —
// not "unable to open database file", which sent operators looking at the
// path or the file's format (issue 15). Reading an existing store fails
// the same way: SQLite writes its -wal and -shm files even to read.
func TestReadOnlyStoreNamesTheCause(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	existing := filepath.Join(dir, "q.db")
	if _, e, code := cli(t, "", "enqueue", "--queue", existing, "--id", "A1", "--flow", "A", "--delta", "1"); code != 0 {
		t.Fatal(e)
	}
	for _, args := range [][]string{
		{"enqueue", "--queue", filepath.Join(dir, "new.db"), "--id", "A1", "--flow", "A", "--delta", "1"},
		{"inspect", "--queue", existing},
		{"migrate", "--inbox", filepath.Join(dir, "inbox.db")},
	} {
		errOut, code := cliReadOnly(t, dir, args...)
		field := "queue: "
		if args[0] == "migrate" {
			field = "inbox: "
		}
		if code == 0 || !strings.Contains(errOut, field) || !strings.Contains(errOut, "the directory "+dir+" is on a read-only file system") {
			t.Errorf("%v on a read-only file system: exit %d, %q; want the field and the cause", args, code, errOut)
		}
	}
}
