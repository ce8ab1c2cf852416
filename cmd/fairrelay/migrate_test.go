package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/sqlitetest"
)

// migrate says what it did to each store: created with every migration,
// migrated with the ones an older store lacked, or up to date. The older
// inbox is a current one with its last migration undone (inbox migration
// 005, the waiver's index by event id).
func TestMigrateSaysWhatItApplied(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	q, in := filepath.Join(dir, "q.db"), filepath.Join(dir, "i.db")
	run := func(args ...string) string {
		t.Helper()
		out, errOut, code := cli(t, "", args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s%s", args, code, out, errOut)
		}
		return strings.TrimSpace(out)
	}
	if got, want := run("migrate", "--queue", q, "--inbox", in), "queue "+q+": created (migrations 1–6)\ninbox "+in+": created (migrations 1–5)"; got != want {
		t.Fatalf("first migrate:\n%s\nwant\n%s", got, want)
	}
	sqlitetest.Exec(t, in, `DROP INDEX waiver_event`)
	sqlitetest.Exec(t, in, `DELETE FROM `+inbox.MigrationTable+` WHERE version = 5`)
	if got, want := run("migrate", "--queue", q, "--inbox", in), "queue "+q+": up to date (nothing to apply)\ninbox "+in+": migrated (applied 5)"; got != want {
		t.Fatalf("migrate of an older inbox:\n%s\nwant\n%s", got, want)
	}
	if got, want := run("migrate", "--inbox", in), "inbox "+in+": up to date (nothing to apply)"; got != want {
		t.Fatalf("migrate again: %s, want %s", got, want)
	}
}

func TestVersionList(t *testing.T) {
	for _, c := range []struct {
		in   []int
		want string
	}{
		{[]int{1, 2, 3, 4, 5}, "1–5"},
		{[]int{22, 23}, "22, 23"},
		{[]int{4}, "4"},
		{[]int{3, 5, 6, 7, 8, 9}, "3, 5–9"},
		{[]int{1, 2, 4, 5, 6}, "1, 2, 4–6"},
	} {
		if got := versionList(c.in); got != c.want {
			t.Errorf("versionList(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}
