package main

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
)

// TestTenancyAndOperatorCommands drives SPEC §8 and §9 through the command
// line: limits refuse with full (exit 1), inspect shows groups and
// settings, pause holds a flow, expedite and resume put it back, prune
// deletes acked events and keeps their ids idempotent.
func TestTenancyAndOperatorCommands(t *testing.T) {
	t.Parallel()
	q := filepath.Join(t.TempDir(), "q.db")
	run := func(want int, args ...string) string {
		t.Helper()
		return cliExit(t, want, args...)
	}
	run(0, "enqueue", "--queue", q, "--id", "A1", "--flow", "A", "--group", "acme", "--delta", "1", "--at", "0")
	if got := run(0, "configure", "--queue", q, "--group", "acme", "--weight", "3", "--max-backlog", "1", "--at", "0"); got != `{"status":"ok"}` {
		t.Fatalf("configure: %s", got)
	}
	if got := run(1, "enqueue", "--queue", q, "--id", "A2", "--flow", "A", "--delta", "1", "--at", "0"); got != `{"limit":"group","status":"full"}` {
		t.Fatalf("enqueue over the group's limit: %s", got)
	}
	if got := run(2, "enqueue", "--queue", q, "--id", "A3", "--flow", "A", "--group", "other", "--delta", "1", "--at", "0"); got != "" {
		t.Fatalf("another group for flow A: %s", got)
	}
	if got := run(0, "inspect", "--queue", q, "groups", "--json"); got != `{"group":"acme","weight":3,"served":0,"max_backlog":1,"flows":1,"backlog":1,"max_slots":0,"quarantined":0}` {
		t.Fatalf("inspect groups: %s", got)
	}
	run(0, "configure", "--queue", q, "--max-flow-backlog", "5", "--at", "0")
	// With the entry rule the store records, which a --policy given must
	// match (a fresh user could not see it).
	if got := run(0, "inspect", "--queue", q, "settings", "--json"); got != `{"max_backlog":0,"max_flow_backlog":5,"backlog":1,"entry":"fair"}` {
		t.Fatalf("inspect settings: %s", got)
	}
	seed := filepath.Join(t.TempDir(), "seed.db")
	run(0, "enqueue", "--queue", seed, "--id", "A1", "--flow", "A", "--delta", "1", "--policy", "seed")
	if got := run(0, "inspect", "--queue", seed, "settings", "--json"); got != `{"max_backlog":0,"max_flow_backlog":0,"backlog":1,"entry":"seed"}` {
		t.Fatalf("inspect settings of a seed store: %s", got)
	}
	run(2, "configure", "--queue", q, "--weight", "2", "--at", "0") // a weight is a group's

	run(0, "enqueue", "--queue", q, "--id", "B1", "--flow", "B", "--delta", "1", "--at", "0")
	if got := run(0, "pause", "--queue", q, "--flow", "B", "--reason", "migration", "--operator", "ana", "--at", "1"); got != `{"status":"paused"}` {
		t.Fatalf("pause: %s", got)
	}
	run(1, "pause", "--queue", q, "--flow", "B", "--reason", "again", "--at", "1")
	c := run(0, "claim", "--queue", q, "--at", "1")
	if !strings.Contains(c, `"id":"A1"`) {
		t.Fatalf("claim while B is paused: %s", c)
	}
	if got := run(0, "settle", "--queue", q, "--id", "A1", "--generation", "1", "--outcome", "retry", "--at", "1"); !strings.Contains(got, `"ready"`) {
		t.Fatalf("settle A1 retry: %s", got)
	}
	if got := run(0, "expedite", "--queue", q, "--id", "A1", "--expected-generation", "1", "--reason", "receiver back", "--at", "2"); got != `{"next_at":2,"status":"ready"}` {
		t.Fatalf("expedite: %s", got)
	}
	run(0, "resume", "--queue", q, "--flow", "B", "--reason", "done", "--at", "2")
	if got := run(0, "inspect", "--queue", q, "audit", "--json"); strings.Count(got, "\n") != 2 || !strings.Contains(got, `"action":"pause"`) || !strings.Contains(got, `"action":"expedite"`) {
		t.Fatalf("audit:\n%s", got)
	}
	for range 2 {
		var cl struct {
			ID         string `json:"id"`
			Generation int64  `json:"generation"`
		}
		if err := json.Unmarshal([]byte(run(0, "claim", "--queue", q, "--at", "3")), &cl); err != nil {
			t.Fatal(err)
		}
		if got := run(0, "settle", "--queue", q, "--id", cl.ID, "--generation", strconv.FormatInt(cl.Generation, 10), "--outcome", "accepted", "--at", "3"); got != `{"status":"acked"}` {
			t.Fatalf("settle %s: %s", cl.ID, got)
		}
	}
	if got := run(0, "prune", "--queue", q, "--acked-before", "10", "--ids-before", "0", "--at", "10"); got != `{"events":2,"ids_forgotten":0,"ids_kept":2,"status":"pruned","tombstones":0}` {
		t.Fatalf("prune: %s", got)
	}
	if got := run(0, "enqueue", "--queue", q, "--id", "A1", "--flow", "A", "--delta", "1", "--at", "10"); got != `{"seq":1,"status":"existing"}` {
		t.Fatalf("enqueue of a pruned id: %s", got)
	}
}

// The commands check --delta, --body and --outcome themselves, but answer
// in SPEC §2's order all the same: at a tick behind the store's,
// clock_regressed comes before a bad field; at a good tick the field is
// named. A bad body against a store that does not exist creates nothing.
// Redrive and QuarantinedWhere refuse a negative generation and a flow no
// flow id could be (invalid_input), rather than answering rejected or
// nothing.
func TestCommandsAnswerTheClockBeforeTheirFields(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	q := filepath.Join(dir, "q.db")
	if _, e, code := cli(t, "", "enqueue", "--queue", filepath.Join(dir, "none.db"), "--id", "a", "--flow", "f", "--delta", "0"); code != 2 || !strings.Contains(e, "invalid_input: delta:") {
		t.Errorf("bad delta, no store: exit %d, %s", code, e)
	}
	if _, err := os.Stat(filepath.Join(dir, "none.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused enqueue created the store: %v", err)
	}
	if _, e, code := cli(t, "", "enqueue", "--queue", q, "--id", "a", "--flow", "f", "--delta", "1", "--at", "10"); code != 0 {
		t.Fatal(e)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"enqueue", "--queue", q, "--id", "b", "--flow", "f", "--delta", "0", "--at", "5"}, "clock_regressed"},
		{[]string{"enqueue", "--queue", q, "--id", "b", "--flow", "f", "--body", `{"a":1,"a":2}`, "--at", "5"}, "clock_regressed"},
		{[]string{"enqueue", "--queue", q, "--id", "b", "--flow", "f", "--delta", "0", "--at", "10"}, "invalid_input: delta:"},
		{[]string{"settle", "--queue", q, "--id", "a", "--generation", "1", "--outcome", "bogus", "--at", "5"}, "clock_regressed"},
		{[]string{"settle", "--queue", q, "--id", "a", "--generation", "1", "--outcome", "bogus", "--at", "10"}, "invalid_input: outcome:"},
		{[]string{"redrive", "--queue", q, "--id", "a", "--expected-generation", "-1", "--reason", "r"}, "invalid_input: expected-generation:"},
		{[]string{"redrive", "--queue", q, "--all", "--flow", "f\xff", "--reason", "r"}, "invalid_input: flow:"},
	} {
		if _, e, code := cli(t, "", tc.args...); code != 2 || !strings.Contains(e, tc.want) {
			t.Errorf("%q: exit %d, %s; want exit 2 and %s", tc.args, code, e, tc.want)
		}
	}
}

// The library's clock_regressed says how a Go caller avoids it
// (fairrelay.AtStored); the command line, whose --at is the same thing
// left out, and the script format, whose output is fixed, say only what
// happened.
func TestClockRegressedOnTheCommandLineNamesNoGo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	q := filepath.Join(dir, "q.db")
	if _, e, code := cli(t, "", "enqueue", "--queue", q, "--id", "a", "--flow", "f", "--delta", "1", "--at", "10"); code != 0 {
		t.Fatal(e)
	}
	if _, e, code := cli(t, "", "claim", "--queue", q, "--at", "5"); code != 2 || e != "fairrelay: clock_regressed: claim at tick 5: the store is at tick 10\n" {
		t.Errorf("claim --at 5: exit %d, %q", code, e)
	}
	in := `{"op":"enqueue","id":"a","flow":"f","delta":1,"at":10}` + "\n" + `{"op":"claim","at":5}` + "\n"
	out, e, code := cli(t, in, "script", "--queue", filepath.Join(dir, "s.db"), "--inbox", filepath.Join(dir, "si.db"))
	if want := `{"error":"clock_regressed","message":"claim at tick 5: the store is at tick 10"}`; code != 0 || !strings.HasSuffix(strings.TrimSpace(out), want) {
		t.Errorf("script: exit %d, %q (%s); want its last line %s", code, out, e, want)
	}
}

// configure's setting flags have no default to show: one left out leaves
// its setting as it is, so `--weight int ... (default 1)` misled (a user
// read it as "left out: weight 1"). Each says so instead; and leaving
// --weight out indeed keeps a weight of 3.
func TestConfigureHelpShowsNoDefaults(t *testing.T) {
	t.Parallel()
	out, errOut, code := cli(t, "", "configure", "--help")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, name := range []string{"weight", "max-backlog", "max-flow-backlog", "max-slots"} {
		var line string
		for l := range strings.Lines(out) {
			if strings.HasPrefix(strings.TrimSpace(l), "--"+name+" ") {
				line = l
			}
		}
		if line == "" || strings.Contains(line, "(default") || !strings.Contains(line, "left out: unchanged") {
			t.Errorf("--%s help line %q: want no default and \"left out: unchanged\"", name, line)
		}
	}
	q := filepath.Join(t.TempDir(), "q.db")
	for _, args := range [][]string{
		{"enqueue", "--queue", q, "--id", "a", "--flow", "f", "--group", "g", "--delta", "1", "--at", "0"},
		{"configure", "--queue", q, "--group", "g", "--weight", "3", "--at", "0"},
		{"configure", "--queue", q, "--group", "g", "--max-backlog", "7", "--at", "0"},
	} {
		if _, errOut, code := cli(t, "", args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
	}
	if got, _, _ := cli(t, "", "inspect", "--queue", q, "groups", "--json"); !strings.Contains(got, `"weight":3,`) || !strings.Contains(got, `"max_backlog":7,`) {
		t.Errorf("inspect groups: %s; want weight 3 kept and max_backlog 7", got)
	}
}

// The commands that neither claim nor settle do not list the lease,
// backoff, budget and jitter flags, which change nothing there, but still
// accept them (one set of flags passed to every command keeps working);
// claim, settle and relay, which use them, list them.
func TestAdminHelpOmitsTheDispatchFlags(t *testing.T) {
	t.Parallel()
	dispatch := []string{"lease", "backoff-base", "backoff-cap", "budget", "jitter"}
	lists := func(help, name string) bool {
		for l := range strings.Lines(help) {
			if strings.HasPrefix(strings.TrimSpace(l), "--"+name+" ") {
				return true
			}
		}
		return false
	}
	for _, c := range []string{"enqueue", "redrive", "configure", "prune", "pause", "resume", "expedite", "claim", "settle", "relay"} {
		out, errOut, code := cli(t, "", c, "--help")
		if code != 0 {
			t.Fatalf("%s --help: exit %d: %s", c, code, errOut)
		}
		uses := c == "claim" || c == "settle" || c == "relay"
		for _, name := range dispatch {
			if got := lists(out, name); got != uses {
				t.Errorf("%s --help lists --%s: %v, want %v", c, name, got, uses)
			}
		}
		if !lists(out, "max-tick-jump") || !lists(out, "policy") {
			t.Errorf("%s --help lacks --max-tick-jump or --policy", c)
		}
	}
	q := filepath.Join(t.TempDir(), "q.db")
	if _, errOut, code := cli(t, "", "enqueue", "--queue", q, "--id", "a", "--flow", "f", "--delta", "1", "--at", "0", "--lease", "10s", "--budget", "3"); code != 0 {
		t.Fatalf("enqueue with --lease and --budget: exit %d: %s", code, errOut)
	}
}

// prune --inbox I --superseded-held drops the held copies of applied seqs
// and nothing that may still apply, and prints how many; its flags are
// refused with any of the queue's.
func TestPruneInboxSupersededHeld(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "inbox.db")
	in, err := inbox.Open(t.Context(), path, inbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"delta":1}`)
	if _, err := in.Receive(t.Context(), inbox.Delivery{EventID: "A1", Flow: "A", Seq: 1, Body: body}); err != nil {
		t.Fatal(err)
	}
	for _, h := range []struct {
		d      inbox.Delivery
		reason fairrelay.Outcome
	}{
		{inbox.Delivery{EventID: "X1", Flow: "A", Seq: 1, Body: body}, fairrelay.OutcomeSequenceConflict},
		{inbox.Delivery{EventID: "A3", Flow: "A", Seq: 3, Body: body}, fairrelay.OutcomeGap},
	} {
		if _, err := in.Hold(t.Context(), h.d, h.reason); err != nil {
			t.Fatal(err)
		}
	}
	in.Close()
	for _, args := range [][]string{
		{"prune", "--inbox", path},
		{"prune", "--superseded-held"},
		{"prune", "--inbox", path, "--superseded-held", "--queue", filepath.Join(dir, "q.db")},
		{"prune", "--inbox", path, "--superseded-held", "--acked-before", "5"},
		// The queue's policy flags, refused on an inbox rather than ignored.
		{"prune", "--inbox", path, "--superseded-held", "--policy", "bogus"},
		{"prune", "--inbox", path, "--superseded-held", "--jitter", "5"},
		{"prune", "--inbox", path, "--superseded-held", "--lease", "-1s"},
	} {
		if out, errOut, code := cli(t, "", args...); code != 2 || out != "" || !strings.Contains(errOut, "invalid_input") {
			t.Errorf("%v: exit %d, %q, %q; want exit 2, invalid_input", args, code, out, errOut)
		}
	}
	// --queue with --superseded-held names the flag given, not an --inbox
	// that was not (a fresh user's report).
	if _, errOut, code := cli(t, "", "prune", "--queue", filepath.Join(dir, "q.db"), "--superseded-held"); code != 2 || !strings.Contains(errOut, "invalid_input: superseded-held: prunes an inbox: give --inbox I") {
		t.Errorf("prune --queue Q --superseded-held: exit %d, %q", code, errOut)
	}
	out, errOut, code := cli(t, "", "prune", "--inbox", path, "--superseded-held")
	if code != 0 || strings.TrimSpace(out) != `{"held":1,"status":"pruned"}` {
		t.Fatalf("prune --superseded-held: exit %d, %q, %s", code, out, errOut)
	}
	out, _, _ = cli(t, "", "inspect", "--inbox", path, "held", "--json")
	if strings.Contains(out, "X1") || !strings.Contains(out, "A3") {
		t.Errorf("held after the prune: %s; want A3 alone", out)
	}
}

// expedite --all cuts short every head backing off (of --flow, when given),
// each at the generation listed, one JSON line and one audit row each, and
// leaves heads that are not backing off alone; with none it exits 1,
// changing nothing. --flow without --all, and --all with --id, are refused
// (a fresh user's report: after a receiver's outage, every head waits out
// its backoff and expedite took one id at a time).
func TestExpediteAll(t *testing.T) {
	t.Parallel()
	q := filepath.Join(t.TempDir(), "q.db")
	run := func(want int, args ...string) string {
		t.Helper()
		return cliExit(t, want, args...)
	}
	// A, B and C each get a head that fails once (backing off); D's head
	// is ready and due.
	for _, f := range []string{"A", "B", "C", "D"} {
		run(0, "enqueue", "--queue", q, "--id", f+"1", "--flow", f, "--delta", "1", "--at", "0")
	}
	for range 3 {
		var cl struct {
			ID         string `json:"id"`
			Generation int64  `json:"generation"`
		}
		if err := json.Unmarshal([]byte(run(0, "claim", "--queue", q, "--at", "0")), &cl); err != nil {
			t.Fatal(err)
		}
		if got := run(0, "settle", "--queue", q, "--id", cl.ID, "--generation", strconv.FormatInt(cl.Generation, 10), "--outcome", "retry", "--at", "0"); !strings.Contains(got, `"ready"`) {
			t.Fatalf("settle %s retry: %s", cl.ID, got)
		}
	}
	run(2, "expedite", "--queue", q, "--flow", "A", "--reason", "x")
	run(2, "expedite", "--queue", q, "--all", "--id", "A1", "--expected-generation", "1", "--reason", "x")
	if got := run(0, "expedite", "--queue", q, "--all", "--flow", "B", "--reason", "receiver back", "--at", "5"); got != `{"id":"B1","next_at":5,"status":"ready"}` {
		t.Fatalf("expedite --all --flow B: %s", got)
	}
	got := run(0, "expedite", "--queue", q, "--all", "--reason", "receiver back", "--operator", "ana", "--at", "6")
	if want := `{"id":"A1","next_at":6,"status":"ready"}` + "\n" + `{"id":"C1","next_at":6,"status":"ready"}`; got != want {
		t.Fatalf("expedite --all:\n%s\nwant\n%s", got, want)
	}
	audit := run(0, "inspect", "--queue", q, "audit", "--json")
	if strings.Count(audit, `"action":"expedite"`) != 3 || !strings.Contains(audit, `"operator":"ana"`) {
		t.Fatalf("audit:\n%s", audit)
	}
	run(1, "expedite", "--queue", q, "--all", "--reason", "again", "--at", "7")
	if after := run(0, "inspect", "--queue", q, "audit", "--json"); after != audit {
		t.Fatalf("expedite --all with nothing backing off changed the audit:\n%s", after)
	}
}

// redrive --all and expedite --all narrowed by a --flow that does not exist
// answer not_found (exit 2), as pause does, and change nothing: a misspelt
// flow is not "no head matched" (exit 1), which reads as "nothing to do".
func TestBulkActionsNameAnUnknownFlow(t *testing.T) {
	t.Parallel()
	q := filepath.Join(t.TempDir(), "q.db")
	if _, e, code := cli(t, "", "enqueue", "--queue", q, "--id", "A1", "--flow", "A", "--delta", "1", "--at", "0"); code != 0 {
		t.Fatal(e)
	}
	before, _, _ := cli(t, "", "inspect", "--queue", q, "flows", "--json")
	for _, cmd := range []string{"redrive", "expedite"} {
		_, e, code := cli(t, "", cmd, "--queue", q, "--all", "--flow", "NOPE", "--reason", "x", "--at", "1")
		if code != 2 || !strings.Contains(e, `not_found: no flow with id "NOPE"`) {
			t.Errorf("%s --all --flow NOPE: exit %d, %s; want exit 2, not_found naming the flow", cmd, code, e)
		}
	}
	if after, _, _ := cli(t, "", "inspect", "--queue", q, "flows", "--json"); after != before {
		t.Errorf("refused bulk actions changed the flows:\n%s\nwant\n%s", after, before)
	}
	if audit, _, _ := cli(t, "", "inspect", "--queue", q, "audit", "--json"); strings.Contains(audit, `"action"`) {
		t.Errorf("refused bulk actions wrote audit rows:\n%s", audit)
	}
}

// Unsigned webhook deliveries leave this machine only when asked for: a
// relay with no --secret (a forgotten $FAIRRELAY_SECRET) and a receiver
// elsewhere is refused naming secret, before it creates its store (a fresh
// user's report: it ran, with one WARN line, and signing was off). A
// loopback receiver still gets them unsigned with the warning (the other
// tests' relays); --unsigned with --secret, or with a broker, is refused.
func TestRelayRefusesUnsignedDeliveriesOffThisMachine(t *testing.T) {
	t.Parallel()
	q := filepath.Join(t.TempDir(), "q.db")
	for _, tc := range []struct {
		args  []string
		field string
	}{
		{[]string{"--sink", "http://10.1.2.3:9/hook"}, "secret"},
		{[]string{"--sink", "https://hooks.example.com/in"}, "secret"},
		{[]string{"--sink", "http://10.1.2.3:9/hook", "--unsigned", "--secret", "whsec_c2VjcmV0"}, "unsigned"},
		{[]string{"--sink", "nats://127.0.0.1:1", "--unsigned"}, "unsigned"},
	} {
		args := append([]string{"relay", "--queue", q}, tc.args...)
		out, errOut, code := cli(t, "", args...)
		if code != exitFailed || out != "" || !strings.HasPrefix(errOut, "fairrelay: invalid_input: "+tc.field+": ") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q: want invalid_input naming %s", tc.args, code, out, errOut, tc.field)
		}
		if _, err := os.Stat(q); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%v: refused, yet %s exists (%v)", tc.args, q, err)
		}
	}
}

// A relay refused for its settings says why and nothing else: the
// unsigned-deliveries warning came before the refusal (a fresh user's
// report), as if the run had started.
func TestRefusedRelayWarnsOfNothing(t *testing.T) {
	t.Parallel()
	q := filepath.Join(t.TempDir(), "q.db")
	out, errOut, code := cli(t, "", "relay", "--queue", q, "--sink", "http://127.0.0.1:1/", "--retain-acked", "2s", "--retain-ids", "1s")
	if code != exitFailed || out != "" || strings.Contains(errOut, "unsigned") || !strings.Contains(errOut, "invalid_input: retain-ids:") {
		t.Fatalf("refused relay: exit %d, stdout %q, stderr %q: want the refusal alone", code, out, errOut)
	}
	// A console address in use is refused once the store is open (a
	// breaker's report: the warning still came before this refusal).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	out, errOut, code = cli(t, "", "relay", "--queue", q, "--sink", "http://127.0.0.1:1/", "--console-addr", ln.Addr().String())
	if code != exitFailed || out != "" || strings.Contains(errOut, "unsigned") || !strings.Contains(errOut, "invalid_input: console-addr:") {
		t.Fatalf("relay with its console address in use: exit %d, stdout %q, stderr %q: want the refusal, no warning", code, out, errOut)
	}
}

// A prune horizon further ahead of the store's tick than --max-tick-jump is
// refused, naming the flag, and deletes nothing: wall-clock milliseconds
// given as --acked-before and --ids-before deleted every tombstone, and an
// id sent again became a new event (a fresh user's report). The stored
// tick + 1 still prunes everything acked.
func TestPruneRefusesAHorizonBeyondTheClock(t *testing.T) {
	t.Parallel()
	q := filepath.Join(t.TempDir(), "q.db")
	run := func(want int, args ...string) string {
		t.Helper()
		return cliExit(t, want, args...)
	}
	run(0, "enqueue", "--queue", q, "--id", "E1", "--flow", "E", "--delta", "1", "--at", "0")
	run(0, "claim", "--queue", q, "--at", "0")
	run(0, "settle", "--queue", q, "--id", "E1", "--generation", "1", "--outcome", "accepted", "--at", "0")
	run(0, "prune", "--queue", q, "--acked-before", "1", "--ids-before", "0", "--at", "0")
	wall := strconv.FormatInt(time.Now().UnixMilli(), 10)
	for _, tc := range []struct{ acked, ids, field string }{
		{wall, wall, "acked-before"},
		{"1", wall, "ids-before"},
	} {
		_, got, code := cli(t, "", "prune", "--queue", q, "--acked-before", tc.acked, "--ids-before", tc.ids)
		if code != exitFailed || !strings.Contains(got, "invalid_input: "+tc.field+": ") || !strings.Contains(got, "max-tick-jump") {
			t.Errorf("prune --acked-before %s --ids-before %s: %s; want invalid_input naming %s", tc.acked, tc.ids, got, tc.field)
		}
	}
	// The tombstone is kept: E1 sent again is the event it was.
	if got := run(0, "enqueue", "--queue", q, "--id", "E1", "--flow", "E", "--delta", "1"); got != `{"seq":1,"status":"existing"}` {
		t.Fatalf("E1 again after the refused prunes: %s, want existing seq 1", got)
	}
	if got := run(0, "prune", "--queue", q, "--acked-before", "1", "--ids-before", "1"); got != `{"events":0,"ids_forgotten":1,"ids_kept":0,"status":"pruned","tombstones":1}` {
		t.Fatalf("prune at the stored tick + 1: %s", got)
	}
}

// cliExit runs the command line with args, fails the test unless it exits
// want, and returns its standard output, trimmed.
func cliExit(t *testing.T, want int, args ...string) string {
	t.Helper()
	out, errOut, code := cli(t, "", args...)
	if code != want {
		t.Fatalf("%v: exit %d, want %d: %s%s", args, code, want, out, errOut)
	}
	return strings.TrimSpace(out)
}

// A prune with --ids-before equal to --acked-before that deleted events
// says on stderr that their ids are forgotten (legal, SPEC §8, and easy to
// type by mistake: a fresh user's report); one that keeps tombstones, or
// deleted nothing, says nothing. Its answer counts the ids kept (a
// tombstone each) and forgotten (the events' that left none, and the
// tombstones' deleted): "tombstones":2 alone, the tombstones deleted, read
// as if the ids were kept.
func TestPruneWarnsWhenIDsGoWithTheEvents(t *testing.T) {
	t.Parallel()
	q := filepath.Join(t.TempDir(), "q.db")
	for _, id := range []string{"E1", "E2"} {
		cliExit(t, 0, "enqueue", "--queue", q, "--id", id, "--flow", id, "--delta", "1", "--at", "0")
		cliExit(t, 0, "claim", "--queue", q, "--at", "0")
		cliExit(t, 0, "settle", "--queue", q, "--id", id, "--generation", "1", "--outcome", "accepted", "--at", "0")
	}
	out, errOut, code := cli(t, "", "prune", "--queue", q, "--acked-before", "1", "--ids-before", "0", "--limit", "1")
	if code != 0 || errOut != "" || strings.TrimSpace(out) != `{"events":2,"ids_forgotten":0,"ids_kept":2,"status":"pruned","tombstones":0}` {
		t.Fatalf("prune keeping tombstones: exit %d, stdout %q, stderr %q; want 0, two ids kept and no warning", code, out, errOut)
	}
	cliExit(t, 0, "enqueue", "--queue", q, "--id", "E3", "--flow", "E3", "--delta", "1", "--at", "0")
	cliExit(t, 0, "claim", "--queue", q, "--at", "0")
	cliExit(t, 0, "settle", "--queue", q, "--id", "E3", "--generation", "1", "--outcome", "accepted", "--at", "0")
	out, errOut, code = cli(t, "", "prune", "--queue", q, "--acked-before", "1", "--ids-before", "1")
	if code != 0 || strings.TrimSpace(out) != `{"events":1,"ids_forgotten":3,"ids_kept":0,"status":"pruned","tombstones":2}` || !strings.Contains(errOut, "the events it pruned (1) left no tombstone") || !strings.Contains(errOut, "answers id_conflict, quarantining its flow") {
		t.Fatalf("prune with equal horizons: exit %d, stdout %q, stderr %q; want the warning", code, out, errOut)
	}
	if _, errOut, _ = cli(t, "", "prune", "--queue", q, "--acked-before", "1", "--ids-before", "1"); errOut != "" {
		t.Errorf("prune that deleted no event: stderr %q, want none", errOut)
	}
}

// configure --group G with nothing to set is refused, as configure with
// nothing at all is, and so is a --max-slots above a relay's most workers:
// both were answered ok, the first making an empty group for good (no
// command deletes one) from a misspelt name (an SRE's report). Neither
// changes the store.
func TestConfigureRefusesAGroupWithNothingToSet(t *testing.T) {
	t.Parallel()
	q := filepath.Join(t.TempDir(), "q.db")
	if _, errOut, code := cli(t, "", "migrate", "--queue", q); code != 0 {
		t.Fatalf("migrate: exit %d: %s", code, errOut)
	}
	if _, errOut, code := cli(t, "", "configure", "--queue", q, "--group", "acme", "--max-slots", "2", "--at", "0"); code != 0 {
		t.Fatalf("configure: exit %d: %s", code, errOut)
	}
	before, _, _ := cli(t, "", "inspect", "--queue", q, "groups", "--json")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--group", "acme-typo"}, `invalid_input: settings: missing: nothing to set for group "acme-typo": give --weight`},
		{[]string{"--group", "acme", "--max-slots", "1025"}, "invalid_input: max-slots: must be 0 (no cap) to 1024"},
	} {
		_, errOut, code := cli(t, "", append([]string{"configure", "--queue", q, "--at", "1"}, c.args...)...)
		if code != exitFailed || !strings.Contains(errOut, c.want) {
			t.Errorf("configure %v: exit %d, %q; want exit %d and %q", c.args, code, errOut, exitFailed, c.want)
		}
	}
	if after, _, _ := cli(t, "", "inspect", "--queue", q, "groups", "--json"); after != before {
		t.Errorf("inspect groups after the refusals:\n%s\nbefore:\n%s", after, before)
	}
	if clock, _, _ := cli(t, "", "inspect", "--queue", q, "clock", "--json"); !strings.Contains(clock, `"tick":0`) {
		t.Errorf("the clock after the refusals: %s; want tick 0", clock)
	}
}

// configure's refusals of a group's setting without --group, and of the
// store's with it, name the flags (the library's name its fields: "give
// group"; a fresh user's report), and create nothing.
func TestConfigureRefusalsNameTheFlags(t *testing.T) {
	t.Parallel()
	q := filepath.Join(t.TempDir(), "q.db")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--weight", "2"}, "invalid_input: weight: is a group's: give --group"},
		{[]string{"--max-slots", "2"}, "invalid_input: max-slots: is a group's: give --group"},
		{[]string{"--group", "acme", "--max-flow-backlog", "2"}, "invalid_input: max-flow-backlog: is the store's, for every flow: leave --group out"},
	} {
		_, errOut, code := cli(t, "", append([]string{"configure", "--queue", q, "--at", "0"}, tc.args...)...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("configure %v: exit %d, %s; want exit 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
	if _, err := os.Stat(q); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused configures made the store: %v", err)
	}
}
