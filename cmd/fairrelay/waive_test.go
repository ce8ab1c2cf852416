package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
)

// refusedA1 opens a SQLite inbox (max delta 5), closed when the test
// ends, where event A1, seq 1 of flow A, was refused for good
// (unsupported_delta) and is not held: an HTTP receiver's.
func refusedA1(t *testing.T) (*inbox.Inbox, string) {
	t.Helper()
	dsn := filepath.Join(t.TempDir(), "inbox.db")
	in, err := inbox.Open(t.Context(), dsn, inbox.Options{MaxDelta: 5})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	if out, err := in.Receive(t.Context(), inbox.Delivery{EventID: "A1", Flow: "A", Seq: 1, Body: []byte(`{"delta":100}`)}); err != nil || out != fairrelay.OutcomeUnsupportedDelta {
		t.Fatalf("A1: %q %v", out, err)
	}
	return in, dsn
}

// waive records a waiver of the flow's next seq (exit 0,
// {"status":"waived"}), refuses another seq or a missing reason (exit 2,
// nothing written) and an inbox that does not exist (creating nothing);
// inspect --inbox I waivers lists it with who and why; the waived event
// then answers duplicate.
func TestWaiveCommand(t *testing.T) {
	t.Parallel()
	in, dsn := refusedA1(t)
	run := func(want int, args ...string) (string, string) {
		t.Helper()
		out, errOut, code := cli(t, "", args...)
		if code != want {
			t.Fatalf("%v: exit %d, want %d: %s%s", args, code, want, out, errOut)
		}
		return strings.TrimSpace(out), errOut
	}
	_, errOut := run(2, "waive", "--inbox", dsn, "--flow", "A", "--seq", "2", "--id", "A1", "--reason", "x", "--unchecked")
	if !strings.Contains(errOut, "only seq 1") {
		t.Errorf("waive of seq 2: stderr %q, want it to name seq 1", errOut)
	}
	run(2, "waive", "--inbox", dsn, "--flow", "A", "--seq", "1", "--id", "A1")
	missing := filepath.Join(t.TempDir(), "nope.db")
	run(2, "waive", "--inbox", missing, "--flow", "A", "--seq", "1", "--id", "A1", "--reason", "x")
	if m, _ := filepath.Glob(missing + "*"); len(m) != 0 {
		t.Errorf("waive on a missing inbox created %v", m)
	}
	// With --queue the flow and seq come from the queue, and the event
	// must be quarantined there: a mistyped id naming another event (A2,
	// ready), an event in delivery (A1 before its answer), an unknown id,
	// a --flow or --seq the queue contradicts and an acked event are
	// refused (fresh users' reports: waive --id A2 for A1 was accepted and
	// could not be undone; an event never delivered was waived).
	q := filepath.Join(t.TempDir(), "q.db")
	for _, e := range []string{"A1", "A2"} {
		run(0, "enqueue", "--queue", q, "--id", e, "--flow", "A", "--delta", "1")
	}
	run(0, "enqueue", "--queue", q, "--id", "B1", "--flow", "B", "--delta", "1")
	run(0, "claim", "--queue", q, "--at", "0")
	c, _ := run(0, "claim", "--queue", q, "--at", "0")
	if !strings.Contains(c, `"id":"B1"`) {
		t.Fatalf("second claim: %s", c)
	}
	run(0, "settle", "--queue", q, "--id", "B1", "--generation", "1", "--outcome", "accepted", "--at", "0")
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--id", "A2"}, "not quarantined"},
		{[]string{"--id", "A1"}, "not quarantined"}, // claimed, not refused yet
		{[]string{"--id", "nope"}, "not_found"},
		{[]string{"--id", "A1", "--flow", "B"}, `in flow "A" in the queue`},
		{[]string{"--id", "A1", "--seq", "2"}, "seq 1 of its flow in the queue"},
		{[]string{"--id", "B1"}, "acked in the queue"},
	} {
		_, errOut := run(2, append([]string{"waive", "--inbox", dsn, "--queue", q, "--reason", "x"}, bad.args...)...)
		if !strings.Contains(errOut, bad.want) {
			t.Errorf("waive %v: stderr %q, want %q", bad.args, errOut, bad.want)
		}
	}
	if got, _ := run(0, "inspect", "--inbox", dsn, "waivers", "--json"); got != "" {
		t.Fatalf("waivers after refused waives: %s", got)
	}
	// The receiver refuses A1 for good: quarantined, it can be waived.
	run(0, "settle", "--queue", q, "--id", "A1", "--generation", "1", "--outcome", "unsupported_delta", "--at", "0")
	if got, _ := run(0, "waive", "--inbox", dsn, "--queue", q, "--id", "A1", "--reason", "credited by hand", "--operator", "ana"); got != `{"status":"waived"}` {
		t.Fatalf("waive: %s", got)
	}
	// The same waive again (a retried script) is already so: exit 0, and
	// the first waiver's reason and operator stay.
	if got, _ := run(0, "waive", "--inbox", dsn, "--queue", q, "--id", "A1", "--reason", "retried", "--operator", "bo"); got != `{"status":"waived"}` {
		t.Fatalf("waive again: %s", got)
	}
	got, _ := run(0, "inspect", "--inbox", dsn, "waivers", "--json")
	if !strings.Contains(got, `"flow":"A","seq":1,"id":"A1","reason":"credited by hand","operator":"ana"`) {
		t.Fatalf("inspect waivers: %s", got)
	}
	if table, _ := run(0, "inspect", "--inbox", dsn, "waivers"); !strings.Contains(table, "credited by hand") || !strings.Contains(table, "ana") {
		t.Fatalf("inspect waivers table:\n%s", table)
	} else if !regexp.MustCompile(`T\d\d:\d\d:\d\d\.\d{3}Z`).MatchString(table) {
		// To the millisecond, as the console and inspect's other wall
		// times show it (a fresh user's report: whole seconds here).
		t.Errorf("inspect waivers table's wall time is not to the millisecond:\n%s", table)
	}
	if out, err := in.Receive(t.Context(), inbox.Delivery{EventID: "A1", Flow: "A", Seq: 1, Body: []byte(`{"delta":100}`)}); err != nil || out != fairrelay.OutcomeDuplicate {
		t.Fatalf("A1 after the waiver: %q %v, want duplicate", out, err)
	}
}

// The same waiver again answers waived (already so) and keeps the first
// one's operator and reason; when the second names another operator or
// reason, stderr says who waived it and that this one was not recorded: a
// second operator's decision left no trace and looked recorded (an SRE's
// report). The same operator and reason again say nothing more.
func TestWaiveAgainSaysWhoWaivedFirst(t *testing.T) {
	t.Parallel()
	in, dsn := refusedA1(t)
	waive := func(operator, reason string, more ...string) string {
		t.Helper()
		out, errOut, code := cli(t, "", append([]string{"waive", "--inbox", dsn, "--flow", "A", "--seq", "1", "--id", "A1", "--operator", operator, "--reason", reason}, more...)...)
		if code != 0 || strings.TrimSpace(out) != `{"status":"waived"}` {
			t.Fatalf("waive by %s: exit %d, %s%s", operator, code, out, errOut)
		}
		return errOut
	}
	if errOut := waive("ana", "credited by hand", "--unchecked"); errOut != "" {
		t.Errorf("the first waiver: stderr %q, want nothing", errOut)
	}
	if errOut := waive("ana", "credited by hand"); errOut != "" {
		t.Errorf("the same waiver again: stderr %q, want nothing", errOut)
	}
	errOut := waive("bob", "refund instead")
	if !strings.Contains(errOut, `waived already for A1, by ana at `) || !strings.Contains(errOut, `(reason "credited by hand"); this --operator and --reason are not recorded`) {
		t.Errorf("another operator's waiver again: stderr %q, want who waived it first and that this one is not recorded", errOut)
	}
	ws, err := in.Waivers(t.Context(), "", 0, 10)
	if err != nil || len(ws) != 1 || ws[0].Operator != "ana" || ws[0].Reason != "credited by hand" {
		t.Errorf("waivers %+v (%v), want ana's alone", ws, err)
	}
}

// Without --queue, waive needs the inbox to vouch for --id at --seq: a
// delivery held there (behind a broker), or this waiver already. With
// nothing held (an HTTP receiver) a mistyped --id was waived unchecked, and
// the flow was stuck for good: the right event then answered id_conflict
// and the next sequence_conflict, and no command undoes a waiver (an SRE's
// report). That is refused naming queue, nothing written, unless
// --unchecked says the queue cannot be reached; --unchecked with --queue is
// refused.
func TestWaiveWithoutTheQueueNeedsTheInboxToVouch(t *testing.T) {
	t.Parallel()
	in, dsn := refusedA1(t)
	body := []byte(`{"delta":100}`)
	// Behind a broker: B1 refused and held in the inbox.
	if held, err := in.Hold(t.Context(), inbox.Delivery{EventID: "B1", Flow: "B", Seq: 1, Body: body}, fairrelay.OutcomeUnsupportedDelta); err != nil || !held {
		t.Fatalf("hold B1: %v %v", held, err)
	}
	q := filepath.Join(t.TempDir(), "q.db")
	if _, errOut, code := cli(t, "", "migrate", "--queue", q); code != 0 {
		t.Fatal(errOut)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--flow", "A", "--seq", "1", "--id", "A1-typo"}, `invalid_input: queue: missing: the inbox holds no delivery at seq 1 of flow "A", so nothing checks that "A1-typo" is the event there`},
		{[]string{"--flow", "B", "--seq", "1", "--id", "B1-typo"}, `invalid_input: id:`}, // the held B1 contradicts it
		{[]string{"--queue", q, "--id", "A1", "--unchecked"}, "invalid_input: unchecked: with --queue the event is checked there"},
		// Bad input is named before the inbox is read for a vouch (which
		// answered --seq 0 naming after_seq, -1, and the lowest int64 with
		// nothing held there: a breaker's report).
		{[]string{"--flow", "A", "--seq", "0", "--id", "A1"}, "invalid_input: seq: must be at least 1, got 0"},
		{[]string{"--flow", "A", "--seq", "-1", "--id", "A1"}, "invalid_input: seq: must be at least 1, got -1"},
		{[]string{"--flow", "A", "--seq", "-9223372036854775808", "--id", "A1"}, "invalid_input: seq: must be at least 1, got -9223372036854775808"},
		{[]string{"--flow", "A\t", "--seq", "1", "--id", "A1"}, "invalid_input: flow:"},
		{[]string{"--flow", "A", "--seq", "1", "--id", "A1", "--operator", "a\tb"}, "invalid_input: operator:"},
	} {
		_, errOut, code := cli(t, "", append([]string{"waive", "--inbox", dsn, "--reason", "x"}, c.args...)...)
		if code != exitFailed || !strings.Contains(errOut, c.want) {
			t.Errorf("waive %v: exit %d, %q; want exit %d and %q", c.args, code, errOut, exitFailed, c.want)
		}
	}
	// With --queue too, --reason and --operator are named before the queue
	// is read (a blank reason was answered by the read of the event:
	// helper-171).
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--queue", q, "--id", "ZZ", "--reason", "   "}, "invalid_input: reason: is empty"},
		{[]string{"--queue", q, "--id", "ZZ", "--reason", "x", "--operator", "a\tb"}, "invalid_input: operator:"},
	} {
		_, errOut, code := cli(t, "", append([]string{"waive", "--inbox", dsn}, c.args...)...)
		if code != exitFailed || !strings.Contains(errOut, c.want) {
			t.Errorf("waive %v: exit %d, %q; want exit %d and %q", c.args, code, errOut, exitFailed, c.want)
		}
	}
	if ws, err := in.Waivers(t.Context(), "", 0, 10); err != nil || len(ws) != 0 {
		t.Fatalf("waivers after the refusals: %+v %v, want none", ws, err)
	}
	for _, args := range [][]string{
		{"--flow", "B", "--seq", "1", "--id", "B1"},                    // vouched for by the held delivery
		{"--flow", "A", "--seq", "1", "--id", "A1", "--unchecked"},     // the operator's word
		{"--flow", "A", "--seq", "1", "--id", "A1", "--operator", "x"}, // the same waiver again
	} {
		if out, errOut, code := cli(t, "", append([]string{"waive", "--inbox", dsn, "--reason", "x"}, args...)...); code != 0 || strings.TrimSpace(out) != `{"status":"waived"}` {
			t.Errorf("waive %v: exit %d, %s%s", args, code, out, errOut)
		}
	}
}

// A head quarantined with sequence_conflict (a delivery under another id
// took its seq in the inbox) is freed by waive --queue and a redrive, as
// docs/operations.md shows: the waiver is at the event's own seq, read from
// the queue, and the event then answers duplicate (an SRE's report: only
// hand SQL freed it).
func TestWaiveFreesASequenceConflict(t *testing.T) {
	t.Parallel()
	dsn := filepath.Join(t.TempDir(), "inbox.db")
	in, err := inbox.Open(t.Context(), dsn, inbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	receive := func(id string, want fairrelay.Outcome) {
		t.Helper()
		if out, err := in.Receive(t.Context(), inbox.Delivery{EventID: id, Flow: "sc", Seq: 1, Body: []byte(`{"delta":1}`)}); err != nil || out != want {
			t.Fatalf("receive %s: %q %v, want %q", id, out, err, want)
		}
	}
	receive("forged-1", fairrelay.OutcomeAccepted)
	receive("sc-1", fairrelay.OutcomeSequenceConflict)
	q := filepath.Join(t.TempDir(), "q.db")
	for _, args := range [][]string{
		{"enqueue", "--queue", q, "--id", "sc-1", "--flow", "sc", "--delta", "1", "--at", "0"},
		{"claim", "--queue", q, "--at", "0"},
		{"settle", "--queue", q, "--id", "sc-1", "--generation", "1", "--outcome", "sequence_conflict", "--at", "0"},
		{"waive", "--inbox", dsn, "--queue", q, "--id", "sc-1", "--reason", "seq 1 taken by forged-1"},
	} {
		if out, errOut, code := cli(t, "", args...); code != 0 {
			t.Fatalf("%v: exit %d, %s%s", args, code, out, errOut)
		}
	}
	receive("sc-1", fairrelay.OutcomeDuplicate)
}

// An event quarantined for its retries (budget_exhausted) is not waived
// with --queue: the receiver may never have seen it (down, a wrong
// secret), and a redrive delivers it; waived, its effect was lost for good
// (a fresh user's report: waive --queue took an event no receiver had
// refused). The refusal names the way for one the receiver can truly never
// take: --flow, --seq and --unchecked.
func TestWaiveRefusesAnEventQuarantinedForItsRetries(t *testing.T) {
	t.Parallel()
	inboxDSN := filepath.Join(t.TempDir(), "inbox.db")
	q := filepath.Join(t.TempDir(), "q.db")
	for _, args := range [][]string{
		{"migrate", "--inbox", inboxDSN},
		{"enqueue", "--queue", q, "--id", "D1", "--flow", "D", "--delta", "1"},
		{"claim", "--queue", q, "--at", "0", "--budget", "1"},
		{"settle", "--queue", q, "--id", "D1", "--generation", "1", "--outcome", "retry", "--at", "0", "--budget", "1"},
	} {
		if out, errOut, code := cli(t, "", args...); code > 1 {
			t.Fatalf("%v: exit %d: %s%s", args, code, out, errOut)
		}
	}
	if out, _, _ := cli(t, "", "inspect", "--queue", q, "quarantined", "--json"); !strings.Contains(out, `"reason":"budget_exhausted"`) {
		t.Fatalf("D1 not quarantined for budget_exhausted: %s", out)
	}
	_, errOut, code := cli(t, "", "waive", "--inbox", inboxDSN, "--queue", q, "--id", "D1", "--reason", "x")
	if code != 2 || !strings.Contains(errOut, "invalid_input: id:") || !strings.Contains(errOut, "budget_exhausted") || !strings.Contains(errOut, "--flow D --seq 1 --unchecked") {
		t.Errorf("waive --queue of a head quarantined for budget_exhausted: exit %d, %s", code, errOut)
	}
	// The attempts command it names runs as printed: with the queue, not
	// "--queue Q" (a fresh user's report of another hint).
	if printed := "'fairrelay inspect --queue " + shellQuote(q) + " attempts --id D1'"; !strings.Contains(errOut, printed) {
		t.Errorf("the refusal %q does not name %s", errOut, printed)
	}
	if out, _, _ := cli(t, "", "inspect", "--inbox", inboxDSN, "waivers", "--json"); strings.TrimSpace(out) != "" {
		t.Errorf("the refused waive wrote %s", out)
	}
	// The way the refusal names, for an event the receiver can never take.
	if out, errOut, code := cli(t, "", "waive", "--inbox", inboxDSN, "--flow", "D", "--seq", "1", "--id", "D1", "--reason", "x", "--unchecked"); code != 0 {
		t.Errorf("waive --unchecked: exit %d: %s%s", code, out, errOut)
	}
}
