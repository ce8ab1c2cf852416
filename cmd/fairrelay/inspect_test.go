package main

import (
	"crypto/sha256"
	"database/sql"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/sqlitetest"
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

// inspect attempts --id prints an event's attempt history (issue 17): one
// row per claim, with its generation, wall-clock claim and settle times
// (RFC 3339, UTC), outcome and answer; the audit view shows each row's wall
// time beside its tick. The view needs --id and is the only one that takes
// it; an unknown id is not_found.
func TestInspectAttemptsAndAuditWallTime(t *testing.T) {
	t.Parallel()
	q := filepath.Join(t.TempDir(), "q.db")
	steps := [][]string{
		{"enqueue", "--queue", q, "--id", "E1", "--flow", "A", "--delta", "1"},
		{"claim", "--queue", q, "--at", "1"},
		{"settle", "--queue", q, "--id", "E1", "--generation", "1", "--outcome", "retry", "--at", "2"},
		{"claim", "--queue", q, "--at", "100000"},
		{"settle", "--queue", q, "--id", "E1", "--generation", "2", "--outcome", "rejected", "--at", "100001"},
		{"redrive", "--queue", q, "--id", "E1", "--expected-generation", "2", "--reason", "fixed", "--operator", "ann"},
	}
	for _, s := range steps {
		if _, e, code := cli(t, "", s...); code != 0 {
			t.Fatalf("%v: exit %d: %s", s, code, e)
		}
	}
	out, e, code := cli(t, "", "inspect", "--queue", q, "attempts", "--id", "E1", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, e)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d attempts, want 2:\n%s", len(lines), out)
	}
	for i, want := range []string{`"generation":1,`, `"generation":2,`} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("attempt %d: %s, want %s", i, lines[i], want)
		}
	}
	if !strings.Contains(lines[0], `"outcome":"retry","status":"ready"`) || !strings.Contains(lines[1], `"outcome":"rejected","status":"quarantined"`) {
		t.Errorf("outcomes and answers:\n%s", out)
	}
	wall := regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)
	table, _, _ := cli(t, "", "inspect", "--queue", q, "attempts", "--id", "E1")
	if n := len(wall.FindAllString(table, -1)); n != 4 {
		t.Errorf("attempts table shows %d wall-clock times, want 4 (claimed and settled, twice):\n%s", n, table)
	}
	audit, _, _ := cli(t, "", "inspect", "--queue", q, "audit")
	if !strings.Contains(audit, "WALL") || len(wall.FindAllString(audit, -1)) != 1 {
		t.Errorf("audit table without its wall-clock time:\n%s", audit)
	}
	auditJSON, _, _ := cli(t, "", "inspect", "--queue", q, "audit", "--json")
	if !regexp.MustCompile(`"wall":"` + wall.String() + `"`).MatchString(auditJSON) {
		t.Errorf("audit JSON without its wall-clock time: %s", auditJSON)
	}
	// The number --after-no pages by, as the table's NO column shows it.
	if !strings.Contains(auditJSON, `"no":1,`) {
		t.Errorf("audit JSON without its number: %s", auditJSON)
	}
	for _, args := range [][]string{
		{"inspect", "--queue", q, "attempts"},
		{"inspect", "--queue", q, "audit", "--id", "E1"},
	} {
		if _, e, code := cli(t, "", args...); code != 2 || !strings.Contains(e, "invalid_input: id:") {
			t.Errorf("%v: exit %d, %s; want 2 and an input error naming id", args, code, e)
		}
	}
	if _, e, code := cli(t, "", "inspect", "--queue", q, "attempts", "--id", "nope"); code == 0 || !strings.Contains(e, "not_found") {
		t.Errorf("unknown id: exit %d, %s; want not_found", code, e)
	}
}

// inspect --help explains every column the groups table prints, and what
// SERVED means for a weighted group, whose SERVED stays behind its claims
// (deficit round robin, SPEC §8).
func TestInspectHelpExplainsTheGroupsColumns(t *testing.T) {
	t.Parallel()
	q := filepath.Join(t.TempDir(), "q.db")
	for _, args := range [][]string{
		{"migrate", "--queue", q},
		{"configure", "--queue", q, "--group", "big", "--weight", "3"},
		{"enqueue", "--queue", q, "--id", "b1-1", "--flow", "b1", "--group", "big", "--delta", "1"},
		{"enqueue", "--queue", q, "--id", "b2-1", "--flow", "b2", "--group", "big", "--delta", "1"},
		{"claim", "--queue", q},
	} {
		if out, errOut, code := cli(t, "", args...); code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", args, code, out, errOut)
		}
	}
	out, errOut, code := cli(t, "", "inspect", "--queue", q, "groups")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 {
		t.Fatalf("inspect groups: exit %d\n%s%s", code, out, errOut)
	}
	// One claim of a group of weight 3 leaves its SERVED where it was.
	if cells := regexp.MustCompile(`\s{2,}`).Split(lines[1], -1); len(cells) != 8 || cells[4] != "0" {
		t.Fatalf("after one claim, big's row is %q; want SERVED 0", lines[1])
	}
	help, _, _ := cli(t, "", "inspect", "--help")
	start, end := strings.Index(help, "  groups "), strings.Index(help, "  settings ")
	if start < 0 || end < start {
		t.Fatalf("inspect --help has no groups view:\n%s", help)
	}
	groups := help[start:end]
	for _, col := range regexp.MustCompile(`\s{2,}`).Split(lines[0], -1)[1:] {
		if !strings.Contains(groups, "  "+col+" ") {
			t.Errorf("inspect --help does not explain the groups column %s:\n%s", col, groups)
		}
	}
	for _, want := range []string{"deficit round", "With weight w"} {
		if !strings.Contains(groups, want) {
			t.Errorf("inspect --help does not say what SERVED is for a weighted group (%q):\n%s", want, groups)
		}
	}
}

// inspect heads shows whether each flow is paused: a paused flow's head is
// never claimed whatever its state (SPEC §9), and the heads view is the
// default an operator looks at when a flow does not move.
func TestInspectHeadsShowsPaused(t *testing.T) {
	t.Parallel()
	q := filepath.Join(t.TempDir(), "q.db")
	for _, f := range []string{"A", "B"} {
		if _, e, code := cli(t, "", "enqueue", "--queue", q, "--id", f+"1", "--flow", f, "--delta", "1"); code != 0 {
			t.Fatal(e)
		}
	}
	if _, e, code := cli(t, "", "pause", "--queue", q, "--flow", "A", "--reason", "hold", "--operator", "ana"); code != 0 {
		t.Fatal(e)
	}
	out, e, code := cli(t, "", "inspect", "--queue", q, "heads")
	if code != 0 {
		t.Fatal(e)
	}
	paused := map[string]string{}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	header := strings.Fields(lines[0])
	col := -1
	for i, h := range header {
		if h == "PAUSED" {
			col = i
		}
	}
	if col < 0 {
		t.Fatalf("no PAUSED column:\n%s", out)
	}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		paused[f[0]] = f[col]
	}
	if paused["A"] != "true" || paused["B"] != "false" {
		t.Errorf("PAUSED: A %q, B %q, want true and false:\n%s", paused["A"], paused["B"], out)
	}
}

// inspect heads --flow F (and flows --flow F) shows that one flow, what an
// operator asks first of a flow that does not move: --flow was refused
// for every view but events, and heads had to be paged to it (an
// operator's report). An unknown flow is not_found; --flow takes no
// --after.
func TestInspectHeadsOfOneFlow(t *testing.T) {
	t.Parallel()
	q := filepath.Join(t.TempDir(), "q.db")
	for _, f := range []string{"A", "B", "C"} {
		if _, e, code := cli(t, "", "enqueue", "--queue", q, "--id", f+"1", "--flow", f, "--delta", "1"); code != 0 {
			t.Fatal(e)
		}
	}
	for _, view := range []string{"heads", "flows"} {
		out, e, code := cli(t, "", "inspect", "--queue", q, view, "--flow", "B", "--json")
		if code != 0 {
			t.Fatalf("%s --flow B: exit %d, %s", view, code, e)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 1 || !strings.Contains(lines[0], `"flow":"B"`) {
			t.Errorf("%s --flow B: %q, want B's row alone", view, out)
		}
	}
	if _, e, code := cli(t, "", "inspect", "--queue", q, "heads", "--flow", "Z"); code != 2 || !strings.Contains(e, "not_found") {
		t.Errorf("heads --flow Z (no such flow): exit %d, %s; want 2, not_found", code, e)
	}
	if _, e, code := cli(t, "", "inspect", "--queue", q, "heads", "--flow", "B", "--after", "A"); code != 2 || !strings.Contains(e, "invalid_input: after") {
		t.Errorf("heads --flow B --after A: exit %d, %s; want invalid_input naming after", code, e)
	}
}

// inspect groups shows each group's cap on relay slots (configure
// --max-slots, SPEC §11) in its table, not only in --json.
func TestInspectGroupsShowsMaxSlots(t *testing.T) {
	t.Parallel()
	q := filepath.Join(t.TempDir(), "q.db")
	for _, args := range [][]string{
		{"migrate", "--queue", q},
		{"configure", "--queue", q, "--group", "capped", "--max-slots", "3"},
		{"configure", "--queue", q, "--group", "free", "--weight", "2"},
	} {
		if _, e, code := cli(t, "", args...); code != 0 {
			t.Fatal(e)
		}
	}
	out, e, code := cli(t, "", "inspect", "--queue", q, "groups")
	if code != 0 {
		t.Fatal(e)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	col := strings.Index(lines[0], "MAX SLOTS")
	if col < 0 {
		t.Fatalf("no MAX SLOTS column: %q", lines[0])
	}
	got := map[string]string{}
	for _, l := range lines[1:] {
		got[strings.Fields(l)[0]] = strings.Fields(l[col:])[0]
	}
	if got["capped"] != "3" || got["free"] != "none" {
		t.Errorf("MAX SLOTS: capped %q, free %q; want 3 and none:\n%s", got["capped"], got["free"], out)
	}
}

// inspect events lists the events with their bodies, by flow and seq, or
// one flow's (--flow), a page at a time with the paging flags it prints;
// JSON gives a body as text, or in base64 when it is not UTF-8. It is how
// a producer sees what it wrote (a fresh user's pass found no view for it).
func TestInspectEvents(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	q := filepath.Join(dir, "q.db")
	qu, err := fairrelay.Open(t.Context(), q, fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		t.Fatal(err)
	}
	evs := []fairrelay.NewEvent{
		{ID: "A1", Flow: "A", Body: []byte(`{"delta":1}`)},
		{ID: "A2", Flow: "A", Body: []byte{0xff, 'b'}},
		{ID: "A3", Flow: "A", Body: []byte(`{"delta":3}`)},
		{ID: "B1", Flow: "B", Body: []byte(`{"delta":4}`)},
	}
	if _, err := qu.EnqueueMany(t.Context(), fairrelay.EnqueueManyParams{At: 1, Events: evs}); err != nil {
		t.Fatal(err)
	}
	qu.Close()
	ids := func(out string) []string {
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
			got = append(got, strings.Fields(l)[0])
		}
		return got
	}
	out, e, code := cli(t, "", "inspect", "--queue", q, "events")
	if code != 0 || !slices.Equal(ids(out), []string{"A1", "A2", "A3", "B1"}) || !strings.Contains(out, `{"delta":4}`) || !strings.Contains(out, "(2 bytes, not text)") {
		t.Fatalf("inspect events: %d %s\n%s", code, e, out)
	}
	// One flow's, two at a time: the first page says how to ask for the next.
	out, e, code = cli(t, "", "inspect", "--queue", q, "events", "--flow", "A", "--limit", "2")
	if code != 0 || !slices.Equal(ids(out), []string{"A1", "A2"}) || !strings.Contains(e, "--flow A --after-seq 2") {
		t.Fatalf("inspect events --flow A --limit 2: %d %q\n%s", code, e, out)
	}
	out, e, code = cli(t, "", "inspect", "--queue", q, "events", "--flow", "A", "--limit", "2", "--after-seq", "2", "--json")
	if code != 0 {
		t.Fatal(e)
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 1 || !strings.Contains(lines[0], `"id":"A3"`) || !strings.Contains(lines[0], `"body":"{\"delta\":3}"`) {
		t.Fatalf("the second page of A, as JSON: %s", out)
	}
	out, e, code = cli(t, "", "inspect", "--queue", q, "events", "--after", "A", "--after-seq", "1", "--json", "--limit", "1")
	if code != 0 || !strings.Contains(out, `"id":"A2"`) || !strings.Contains(out, `"body_base64":"/2I="`) || !strings.Contains(e, "--after A --after-seq 2") {
		t.Fatalf("inspect events --after A --after-seq 1 --json: %d %q\n%s", code, e, out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"audit", "--flow", "A"}, "invalid_input: flow: selects one flow of the events, heads and flows views only, not audit"},
		{[]string{"events", "--flow", "A", "--after", "A"}, "invalid_input: after: with --flow, page with --after-seq alone"},
		{[]string{"events", "--after-seq", "-1"}, "invalid_input: after-seq: must not be negative"},
		{[]string{"events", "--after-seq", "1"}, "invalid_input: after-seq: a seq of which flow: give --after FLOW or --flow FLOW with it"},
		{[]string{"heads", "--after-seq", "1"}, "invalid_input: after-seq: pages the events view and the inbox's receipts, held and waivers views only"},
		// A misspelt flow is not an empty table with exit 0 (a fresh
		// user's report).
		{[]string{"events", "--flow", "nosuch"}, `not_found: no flow with id "nosuch"`},
	} {
		if _, e, code := cli(t, "", append([]string{"inspect", "--queue", q}, c.args...)...); code != 2 || !strings.Contains(e, c.want) {
			t.Errorf("inspect %v: exit %d, %q; want 2 and %q", c.args, code, e, c.want)
		}
	}
}

// inspect writes nothing: on a store or an inbox an older fairrelay made it
// (and the console, on an inbox) exits 2 saying to run fairrelay migrate, and the store stays as it was
// (it migrated it, and older relays refused the store at their next start);
// after fairrelay migrate it reads both.
func TestInspectDoesNotMigrate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	queue, in := filepath.Join(dir, "q.db"), filepath.Join(dir, "inbox.db")
	if _, e, code := cli(t, "", "enqueue", "--queue", queue, "--id", "A1", "--flow", "A", "--delta", "1"); code != 0 {
		t.Fatal(e)
	}
	if _, e, code := cli(t, "", "migrate", "--inbox", in); code != 0 {
		t.Fatal(e)
	}
	count := func(path, query string) (n int) {
		sqlitetest.QueryRow(t, path, query, &n)
		return n
	}
	// Each store's last migration undone: the queue's 005 (three indexes),
	// the inbox's 002 (the held table).
	sqlitetest.Exec(t, queue, `DROP INDEX event_inflight; DROP INDEX event_waiting; DROP INDEX flow_paused; DELETE FROM fairrelay_migration WHERE version = 5`)
	sqlitetest.Exec(t, in, `DROP TABLE held; DELETE FROM fairrelay_inbox_migration WHERE version = 2`)
	for _, args := range [][]string{{"inspect", "--queue", queue}, {"inspect", "--inbox", in, "receipts"}} {
		out, errOut, code := cli(t, "", args...)
		if code != 2 || out != "" || !strings.Contains(errOut, "lacks migration") || !strings.Contains(errOut, "run fairrelay migrate") {
			t.Errorf("%v on an older store: exit %d, stdout %q, stderr %q; want exit 2 saying to run fairrelay migrate", args, code, out, errOut)
		}
	}
	if n := count(queue, `SELECT count(*) FROM fairrelay_migration WHERE version = 5`); n != 0 {
		t.Error("inspect --queue migrated the older store")
	}
	if n := count(in, `SELECT count(*) FROM sqlite_master WHERE name = 'held'`); n != 0 {
		t.Error("inspect --inbox migrated the older inbox")
	}
	if _, errOut, code := cli(t, "", "migrate", "--queue", queue); code != 0 {
		t.Fatal(errOut)
	}
	// The console only reads the inbox: it does not migrate it either.
	if out, errOut, code := cli(t, "", "console", "--queue", queue, "--inbox", in, "--addr", "127.0.0.1:0"); code != 2 || !strings.Contains(errOut, "lacks migration") {
		t.Errorf("console on an older inbox: exit %d, stdout %q, stderr %q; want exit 2 saying it lacks a migration", code, out, errOut)
	}
	if n := count(in, `SELECT count(*) FROM sqlite_master WHERE name = 'held'`); n != 0 {
		t.Error("console migrated the older inbox")
	}
	for _, args := range [][]string{{"migrate", "--inbox", in}, {"inspect", "--queue", queue}, {"inspect", "--inbox", in, "held"}} {
		if _, errOut, code := cli(t, "", args...); code != 0 {
			t.Errorf("%v: exit %d: %s", args, code, errOut)
		}
	}
}

// A command that must not create a store changes nothing in a file that is
// not one, and inspect changes nothing in one that is: the refusal came
// after a connection had switched the file to WAL mode (an empty file got
// its first page), and inspect converted a store's VACUUM INTO snapshot
// (a fresh user's and a breaker's reports).
func TestCommandsThatMustNotCreateChangeNoFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sum := func(path string) [sha256.Size]byte {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return sha256.Sum256(b)
	}
	empty, other := filepath.Join(dir, "empty.db"), filepath.Join(dir, "other.db")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sqlitetest.Exec(t, other, `CREATE TABLE t (x); INSERT INTO t VALUES (1)`) // rollback journal, as most applications'
	for _, path := range []string{empty, other} {
		before := sum(path)
		for _, args := range [][]string{
			{"inspect", "--queue", path}, {"inspect", "--inbox", path, "receipts"}, {"configure", "--queue", path, "--max-backlog", "5"},
			{"claim", "--queue", path, "--at", "1"}, {"prune", "--queue", path, "--acked-before", "1", "--ids-before", "0"},
		} {
			if _, errOut, code := cli(t, "", args...); code != 2 || !strings.Contains(errOut, "invalid_input") {
				t.Errorf("%v: exit %d, %s; want 2, invalid_input", args, code, errOut)
			}
			if sum(path) != before {
				t.Fatalf("%v changed the file", args)
			}
		}
	}
	queue, snap := filepath.Join(dir, "q.db"), filepath.Join(dir, "snap.db")
	if _, e, code := cli(t, "", "enqueue", "--queue", queue, "--id", "A1", "--flow", "A", "--delta", "1"); code != 0 {
		t.Fatal(e)
	}
	sqlitetest.Exec(t, queue, `VACUUM INTO '`+snap+`'`)
	before := sum(snap)
	for _, view := range []string{"heads", "events", "clock", "settings"} {
		out, errOut, code := cli(t, "", "inspect", "--queue", snap, view)
		if code != 0 || (view == "events" && !strings.Contains(out, "A1")) {
			t.Errorf("inspect %s of a snapshot: exit %d\n%s%s", view, code, out, errOut)
		}
	}
	if sum(snap) != before {
		t.Error("inspect changed the snapshot's bytes")
	}
}

// An attempt not settled (its lease ran out, and the head was claimed
// again) shows no duration in the attempts table, not a duration of 0s.
func TestInspectAttemptsUnsettledHasNoDuration(t *testing.T) {
	t.Parallel()
	if got := attemptDuration(t, []string{"claim", "--queue", "Q", "--at", "100000"}); got != "-" {
		t.Errorf("the unsettled attempt's DURATION is %q, not -", got)
	}
}

// attemptDuration enqueues E1 on a new store (Q in last), claims it at
// tick 1, runs last, and returns the DURATION cell of its one attempt in
// inspect's attempts table, read at its heading's column (the table's
// columns are aligned).
func attemptDuration(t *testing.T, last []string) string {
	t.Helper()
	q := filepath.Join(t.TempDir(), "q.db")
	for _, s := range [][]string{
		{"enqueue", "--queue", q, "--id", "E1", "--flow", "A", "--delta", "1"},
		{"claim", "--queue", q, "--at", "1"},
		last,
	} {
		s = slices.Clone(s)
		if i := slices.Index(s, "Q"); i >= 0 {
			s[i] = q
		}
		if _, e, code := cli(t, "", s...); code != 0 {
			t.Fatalf("%v: exit %d: %s", s, code, e)
		}
	}
	table, e, code := cli(t, "", "inspect", "--queue", q, "attempts", "--id", "E1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, e)
	}
	lines := strings.Split(strings.TrimSpace(table), "\n")
	col := strings.Index(lines[0], "DURATION")
	if len(lines) != 2 || col < 0 || len(lines[1]) <= col {
		t.Fatalf("table:\n%s\nwant a header and one attempt", table)
	}
	return strings.Fields(lines[1][col:])[0]
}

// inspect's --after is checked as the lists check their paging keys
// (fairrelay.CheckSearch) and named as the flag, on every view that takes
// it: on SQLite a key no flow id could hold printed an empty page and
// exited 0, and on PostgreSQL it was a database error.
func TestInspectRefusesAnAfterNoFlowHolds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	queue, in := filepath.Join(dir, "q.db"), filepath.Join(dir, "inbox.db")
	if _, e, code := cli(t, "", "enqueue", "--queue", queue, "--id", "A1", "--flow", "A", "--delta", "1"); code != 0 {
		t.Fatal(e)
	}
	if _, e, code := cli(t, "", "migrate", "--inbox", in); code != 0 {
		t.Fatal(e)
	}
	var runs [][]string
	for _, view := range []string{"flows", "heads", "events", "quarantined", "groups"} {
		runs = append(runs, []string{"inspect", "--queue", queue, view})
	}
	for _, view := range []string{"receipts", "projection", "held", "waivers"} {
		runs = append(runs, []string{"inspect", "--inbox", in, view})
	}
	for _, args := range runs {
		for _, key := range []string{"A\xff", "A\x01"} {
			out, errOut, code := cli(t, "", append(args, "--after", key)...)
			if code != 2 || out != "" || !strings.Contains(errOut, "invalid_input: after:") {
				t.Errorf("%v --after %q: exit %d, stdout %q, stderr %q; want exit 2, invalid_input naming after", args, key, code, out, errOut)
			}
		}
		if _, errOut, code := cli(t, "", append(args, "--after", "A")...); code != 0 {
			t.Errorf("%v --after A: exit %d: %s", args, code, errOut)
		}
	}
	// events --flow F pages from F: a flow no flow could be is named as
	// --flow (it said after_flow, a breaker's report).
	for _, key := range []string{"A\xff", "A\x01", " A"} {
		out, errOut, code := cli(t, "", "inspect", "--queue", queue, "events", "--flow", key)
		if code != 2 || out != "" || !strings.Contains(errOut, "invalid_input: flow:") {
			t.Errorf("events --flow %q: exit %d, stdout %q, stderr %q; want exit 2, invalid_input naming flow", key, code, out, errOut)
		}
	}
}

// An attempt settled in under a millisecond (durations are recorded to the
// millisecond: 0) shows <1ms, not 0s (a fresh user's report).
func TestInspectAttemptsUnderAMillisecond(t *testing.T) {
	t.Parallel()
	if got := attemptDuration(t, []string{"settle", "--queue", "Q", "--id", "E1", "--generation", "1", "--outcome", "accepted", "--at", "1"}); got != "<1ms" {
		t.Errorf("the attempt's DURATION is %q, not <1ms", got)
	}
}
