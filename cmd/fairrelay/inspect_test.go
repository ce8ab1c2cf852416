package main

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"unicode"

	"github.com/fairrelay/fairrelay"
)

// A store written before fairrelay.CheckID may hold ids, flows, reasons and
// operators with control, format and separator characters. inspect prints
// them escaped, as tables and as JSON: every row stays one line, and no
// byte reaches the terminal that would act on it (issue 15).
func TestInspectEscapesStoredText(t *testing.T) {
	t.Parallel()
	q := filepath.Join(t.TempDir(), "q.db")
	if _, e, code := cli(t, "", "enqueue", "--queue", q, "--id", "A1", "--flow", "A", "--delta", "1"); code != 0 {
		t.Fatal(e)
	}
	// The rows an older fairrelay could write, put in with SQL.
	db, err := sql.Open("sqlite", fairrelay.SQLiteDSN(q))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, stmt := range []string{
		"INSERT INTO flow (flow_id, ord, seq, served, head_seq, runnable) VALUES ('R\u202eX', 2, 1, 0, 1, 0)",
		"INSERT INTO event (event_id, flow_id, seq, body, state, generation, attempts, lifetime_attempts, reason, next_at, lease_until, enqueued_at)" +
			" VALUES ('E\x1b]0;pwned\x07', 'R\u202eX', 1, '{}', 'quarantined', 1, 1, 1, 'rejected', 0, 0, 0)",
		"INSERT INTO audit (event_id, flow_id, action, reason, operator, previous_reason, generation, at)" +
			" VALUES ('A1\u0085', 'R\u202eX', 'redrive', 'fixed\n2\t0\tA9\tredrive\t1\tforged\x1b[2J', 'me\r', 'x\u2028y', 2, 0)",
	} {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		view  string
		json  bool
		lines int
	}{
		{"heads", false, 3}, {"heads", true, 2},
		{"flows", false, 3}, {"flows", true, 2},
		{"quarantined", false, 2}, {"quarantined", true, 1},
		{"audit", false, 2}, {"audit", true, 1},
	} {
		args := []string{"inspect", "--queue", q, tc.view}
		if tc.json {
			args = append(args, "--json")
		}
		out, errOut, code := cli(t, "", args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		if n := strings.Count(out, "\n"); n != tc.lines {
			t.Errorf("%v: %d lines, want %d:\n%s", args, n, tc.lines, out)
		}
		for i, r := range out {
			if r != '\n' && unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp) {
				t.Errorf("%v: raw %U at byte %d:\n%q", args, r, i, out)
				break
			}
		}
	}
	// Escaped, not dropped: the values stay readable.
	out, _, _ := cli(t, "", "inspect", "--queue", q, "audit")
	if !strings.Contains(out, `"fixed\n2\t0\tA9\tredrive\t1\tforged\x1b[2J"`) || !strings.Contains(out, `"A1\u0085"`) {
		t.Errorf("audit table does not show the escaped values:\n%s", out)
	}
	out, _, _ = cli(t, "", "inspect", "--queue", q, "audit", "--json")
	if !strings.Contains(out, `forged\u001b[2J`) || !strings.Contains(out, `"id":"A1\u0085"`) || !strings.Contains(out, `"previous_reason":"x\u2028y"`) {
		t.Errorf("audit JSON does not show the escaped values:\n%s", out)
	}
}
