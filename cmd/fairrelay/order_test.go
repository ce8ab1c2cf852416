package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// A write command given --at whose flags it refuses (missing, or given
// empty) answers clock_regressed first when the tick is behind the store's
// (SPEC §2: the clock, then the fields), as the library and the script do;
// at a tick that is not behind, the flag's own error. A store that does not
// exist keeps the flag's error and is not created. (A breaker's report on
// the script; the command line refused such flags before it read the
// clock, in cobra's PreRunE or before opening the store.)
func TestCommandFieldErrorsComeAfterTheClock(t *testing.T) {
	t.Parallel()
	queue := filepath.Join(t.TempDir(), "q.db")
	if out, errOut, code := cli(t, "", "enqueue", "--queue", queue, "--id", "A1", "--flow", "A", "--delta", "1", "--at", "10"); code != exitApplied {
		t.Fatalf("enqueue at 10: exit %d, %s %s", code, out, errOut)
	}
	for _, c := range []struct {
		args  []string
		field string
	}{
		{[]string{"enqueue", "--id", "A2", "--flow", "", "--delta", "1"}, "flow"},
		{[]string{"enqueue", "--id", "A2", "--flow", "A"}, "body"},
		{[]string{"enqueue", "--id", "A2", "--flow", "A", "--group", "", "--delta", "1"}, "group"},
		{[]string{"settle", "--id", "A1"}, "generation"},
		{[]string{"redrive", "--id", "A1", "--reason", "x"}, "expected-generation"},
		{[]string{"expedite", "--reason", "x", "--expected-generation", "0"}, "id"},
		{[]string{"pause", "--reason", "x"}, "flow"},
		{[]string{"resume", "--flow", "", "--reason", "x"}, "flow"},
		{[]string{"prune"}, "acked-before"},
		{[]string{"configure", "--group", "", "--weight", "2"}, "group"},
	} {
		behind := append(append([]string{}, c.args...), "--queue", queue, "--at", "3")
		_, errOut, code := cli(t, "", behind...)
		if code != exitFailed || !strings.Contains(errOut, "clock_regressed") {
			t.Errorf("%v: exit %d, %q: want clock_regressed", behind, code, errOut)
		}
		ahead := append(append([]string{}, c.args...), "--queue", queue, "--at", "11")
		_, errOut, code = cli(t, "", ahead...)
		if code != exitFailed || !strings.Contains(errOut, "invalid_input: "+c.field+":") {
			t.Errorf("%v: exit %d, %q: want invalid_input naming %s", ahead, code, errOut, c.field)
		}
	}
	// redrive --all whose filter matches nothing: the clock's answer first,
	// not "no quarantined head matched".
	_, errOut, code := cli(t, "", "redrive", "--all", "--flow", "NOPE", "--reason", "x", "--queue", queue, "--at", "3")
	if code != exitFailed || !strings.Contains(errOut, "clock_regressed") {
		t.Errorf("redrive --all at a regressed tick, nothing matching: exit %d, %q: want clock_regressed", code, errOut)
	}
	// A blank --reason with --all is rejected once, empty_reason, whether
	// or not a head matches (SPEC §2, §9: empty_reason is checked first; it
	// said "no quarantined head matched" — a breaker's report).
	for i, args := range [][]string{
		{"redrive", "--all", "--reason", ""},
		{"redrive", "--all", "--reason", "  "},
		{"expedite", "--all", "--reason", " "},
	} {
		out, errOut, code := cli(t, "", append(args, "--queue", queue)...)
		if code != exitNotApplied || out != `{"reason":"empty_reason","status":"rejected"}`+"\n" || !strings.Contains(errOut, "rejected (empty_reason)") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q: want one empty_reason rejection, exit %d", args, code, out, errOut, exitNotApplied)
		}
		if i == 0 {
			// A quarantined head for the next ones to match.
			if _, errOut, code := cli(t, "", "claim", "--queue", queue, "--at", "11"); code != exitApplied {
				t.Fatalf("claim: exit %d, %s", code, errOut)
			}
			if _, errOut, code := cli(t, "", "settle", "--queue", queue, "--id", "A1", "--generation", "1", "--outcome", "id_conflict", "--at", "11"); code != exitApplied {
				t.Fatalf("settle: exit %d, %s", code, errOut)
			}
		}
	}
	// A tick further ahead than --max-tick-jump (an hour by default) is the
	// clock's answer too: invalid_input naming at, before the flag's.
	for _, args := range [][]string{
		{"pause", "--flow", "", "--reason", "x"},
		{"configure", "--group", "", "--weight", "2"},
		{"enqueue", "--id", "A2", "--flow", "A", "--group", "", "--delta", "1"},
	} {
		far := append(append([]string{}, args...), "--queue", queue, "--at", "99999999")
		_, errOut, code := cli(t, "", far...)
		if code != exitFailed || !strings.Contains(errOut, "invalid_input: at: ") || !strings.Contains(errOut, "max-tick-jump") {
			t.Errorf("%v: exit %d, %q: want invalid_input naming at (max-tick-jump)", far, code, errOut)
		}
		within := append(far, "--max-tick-jump", "0")
		_, errOut, code = cli(t, "", within...)
		if code != exitFailed || strings.Contains(errOut, "invalid_input: at: ") {
			t.Errorf("%v: exit %d, %q: want the flag's own error", within, code, errOut)
		}
	}
	missing := filepath.Join(t.TempDir(), "missing.db")
	_, errOut, code = cli(t, "", "pause", "--reason", "x", "--queue", missing, "--at", "3")
	if code != exitFailed || !strings.Contains(errOut, "invalid_input: flow:") {
		t.Errorf("pause without --flow on a missing store: exit %d, %q: want invalid_input naming flow", code, errOut)
	}
	if m, _ := filepath.Glob(missing + "*"); len(m) != 0 {
		t.Errorf("the missing store was created: %v", m)
	}
}

// A redrive rejected for generation_mismatch says the event's generation
// now and where the quarantined heads are listed with theirs (a fresh
// user's report: the answer named neither), with --queue, so that the
// command runs as printed (it said "fairrelay inspect quarantined", which
// answers "queue: missing"; a fresh user's report).
func TestRedriveMismatchNamesTheGeneration(t *testing.T) {
	t.Parallel()
	queue := filepath.Join(t.TempDir(), "q w.db")
	for _, args := range [][]string{
		{"enqueue", "--id", "A1", "--flow", "A", "--delta", "1"},
		{"claim"},
		{"settle", "--id", "A1", "--generation", "1", "--outcome", "invalid_body"},
	} {
		if out, errOut, code := cli(t, "", append(args, "--queue", queue)...); code != exitApplied {
			t.Fatalf("%v: exit %d, %s %s", args, code, out, errOut)
		}
	}
	out, errOut, code := cli(t, "", "redrive", "--queue", queue, "--id", "A1", "--expected-generation", "5", "--reason", "x")
	printed := "fairrelay inspect --queue " + shellQuote(queue) + " quarantined"
	if code != exitNotApplied || !strings.Contains(out, "generation_mismatch") ||
		!strings.Contains(errOut, "the event is at generation 1 ("+printed+" lists") {
		t.Fatalf("redrive at a stale generation: exit %d, %q, stderr %q: want generation_mismatch naming generation 1 and %q", code, out, errOut, printed)
	}
	if out, errOut, code := cli(t, "", "inspect", "--queue", queue, "quarantined"); code != 0 || !strings.Contains(out, "A1") {
		t.Errorf("the hint's command: exit %d, %q %s; want A1 listed", code, out, errOut)
	}
}

// A redrive rejected for not_quarantined says what the event is instead (a
// fresh user's report: the answer did not say whether it had been
// redriven already or had never failed).
func TestRedriveNotQuarantinedNamesTheState(t *testing.T) {
	t.Parallel()
	queue := filepath.Join(t.TempDir(), "q.db")
	if out, errOut, code := cli(t, "", "enqueue", "--queue", queue, "--id", "A1", "--flow", "A", "--delta", "1"); code != exitApplied {
		t.Fatalf("enqueue: exit %d, %s %s", code, out, errOut)
	}
	out, errOut, code := cli(t, "", "redrive", "--queue", queue, "--id", "A1", "--expected-generation", "0", "--reason", "x")
	if code != exitNotApplied || !strings.Contains(out, "not_quarantined") ||
		!strings.Contains(errOut, "the event is ready (seq 1 of flow \"A\", generation 0)") || !strings.Contains(errOut, "inspect events --queue "+shellQuote(queue)+" --flow A") {
		t.Errorf("redrive of a ready event: exit %d, %q, stderr %q: want not_quarantined naming its state and where to look", code, out, errOut)
	}
}

// A negative --at is below every stored tick, and SPEC §2 answers a write's
// tick below the stored one clock_regressed before it reads any field: every
// command with --at answers so, in the words of the library and of script
// for the same op, exit 2, and changes nothing (the command line answered
// invalid_input naming at, where script answered clock_regressed). On a
// missing store enqueue creates none. -9223372036854775808, the library's
// AtStored, is no exception (it ran the write at the store's tick to the
// library). A negative --ids-before at a good tick is still the field's
// error.
func TestNegativeAtIsClockRegressed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	queue := filepath.Join(dir, "q.db")
	if out, errOut, code := cli(t, "", "enqueue", "--queue", queue, "--id", "A1", "--flow", "A", "--delta", "1", "--at", "5"); code != exitApplied {
		t.Fatalf("enqueue at 5: exit %d, %s %s", code, out, errOut)
	}
	before, _, _ := cli(t, "", "inspect", "--queue", queue, "events", "--json")
	for _, c := range []struct {
		args  []string
		op    string
		stdin string
	}{
		{[]string{"enqueue", "--id", "A2", "--flow", "A", "--delta", "1"}, "enqueue", ""},
		{[]string{"enqueue"}, "enqueue", `{"id":"A2","flow":"A","delta":1}` + "\n"},
		{[]string{"claim"}, "claim", ""},
		{[]string{"settle", "--id", "A1", "--generation", "1", "--outcome", "accepted"}, "settle", ""},
		{[]string{"redrive", "--id", "A1", "--expected-generation", "0", "--reason", "r"}, "redrive", ""},
		{[]string{"expedite", "--id", "A1", "--expected-generation", "0", "--reason", "r"}, "expedite", ""},
		{[]string{"pause", "--flow", "A", "--reason", "r"}, "pause", ""},
		{[]string{"resume", "--flow", "A", "--reason", "r"}, "resume", ""},
		{[]string{"configure", "--max-backlog", "5"}, "configure", ""},
		{[]string{"prune", "--acked-before", "1", "--ids-before", "0"}, "prune", ""},
	} {
		args := append(append([]string{}, c.args...), "--queue", queue, "--at", "-1")
		out, errOut, code := cli(t, c.stdin, args...)
		want := "fairrelay: clock_regressed: " + c.op + " at tick -1: the store is at tick 5\n"
		if code != exitFailed || out != "" || errOut != want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and %q", args, code, out, errOut, want)
		}
	}
	if after, _, _ := cli(t, "", "inspect", "--queue", queue, "events", "--json"); after != before {
		t.Errorf("the refused writes changed the store:\n%s\nwas\n%s", after, before)
	}
	// The library's answer, through script, is the same.
	out, errOut, code := cli(t, `{"op":"enqueue","id":"A1","flow":"A","delta":1,"at":5}`+"\n"+`{"op":"claim","at":-1}`+"\n",
		"script", "--queue", filepath.Join(dir, "s.db"), "--inbox", filepath.Join(dir, "si.db"))
	if want := `{"error":"clock_regressed","message":"claim at tick -1: the store is at tick 5"}`; code != 0 || !strings.HasSuffix(strings.TrimSpace(out), want) {
		t.Errorf("script claim at -1: exit %d, %q %s; want %s", code, out, errOut, want)
	}
	_, errOut, code = cli(t, "", "claim", "--queue", queue, "--at", "-9223372036854775808")
	if code != exitFailed || !strings.HasPrefix(errOut, "fairrelay: clock_regressed: claim at tick -9223372036854775808: ") {
		t.Errorf("claim at the AtStored sentinel: exit %d, %q; want clock_regressed", code, errOut)
	}
	missing := filepath.Join(dir, "missing.db")
	_, errOut, code = cli(t, "", "enqueue", "--queue", missing, "--id", "A1", "--flow", "A", "--delta", "1", "--at", "-1")
	if code != exitFailed || !strings.Contains(errOut, "clock_regressed: enqueue at tick -1") {
		t.Errorf("enqueue at -1 on a missing store: exit %d, %q; want clock_regressed", code, errOut)
	}
	if m, _ := filepath.Glob(missing + "*"); len(m) != 0 {
		t.Errorf("the refused enqueue created the store: %v", m)
	}
	_, errOut, code = cli(t, "", "prune", "--queue", queue, "--acked-before", "1", "--ids-before", "-7", "--at", "6")
	if code != exitFailed || !strings.Contains(errOut, "invalid_input: ids-before: must be a tick in") {
		t.Errorf("prune --ids-before -7 at a good tick: exit %d, %q; want invalid_input naming ids-before", code, errOut)
	}
}

// An expedite rejected for generation_mismatch says the event's generation
// and where generations are listed, and one rejected for not_backing_off
// (or not_ready) says the event's state, each with a command that runs as
// printed: it said only "rejected (generation_mismatch); nothing changed",
// where redrive said both (a fresh user's report).
func TestExpediteRejectionNamesTheGenerationAndState(t *testing.T) {
	t.Parallel()
	queue := filepath.Join(t.TempDir(), "q w.db")
	for _, args := range [][]string{
		{"enqueue", "--id", "A1", "--flow", "A", "--delta", "1", "--at", "0"},
		{"enqueue", "--id", "B1", "--flow", "B", "--delta", "1", "--at", "0"},
		{"claim", "--at", "0"},
		{"claim", "--at", "0"},
		{"settle", "--id", "A1", "--generation", "1", "--outcome", "retry", "--at", "0"},
	} {
		if out, errOut, code := cli(t, "", append(args, "--queue", queue)...); code != exitApplied {
			t.Fatalf("%v: exit %d, %s %s", args, code, out, errOut)
		}
	}
	q := shellQuote(queue)
	for _, c := range []struct {
		id, gen, reason, hint string
		then                  []string
		lists                 string
	}{
		{"A1", "5", "generation_mismatch", "the event is at generation 1 (fairrelay inspect --queue " + q + " heads lists",
			[]string{"inspect", "--queue", queue, "heads"}, "A1"},
		// The way that does not need the generation, for a head whose
		// retries move it on before the operator's next command.
		{"A1", "5", "generation_mismatch", "; or fairrelay expedite --all --queue " + q + " --flow A --reason R, which",
			[]string{"expedite", "--all", "--queue", queue, "--flow", "A", "--reason", "R"}, `"status":"ready"`},
		{"B1", "1", "not_ready", `the event is inflight (seq 1 of flow "B", generation 1); only a head backing off`,
			[]string{"inspect", "events", "--queue", queue, "--flow", "B"}, "B1"},
	} {
		out, errOut, code := cli(t, "", "expedite", "--queue", queue, "--id", c.id, "--expected-generation", c.gen, "--reason", "x", "--at", "1")
		if code != exitNotApplied || !strings.Contains(out, c.reason) || !strings.Contains(errOut, c.hint) {
			t.Errorf("expedite %s: exit %d, %q, stderr %q; want %s and %q", c.id, code, out, errOut, c.reason, c.hint)
			continue
		}
		if out, errOut, code := cli(t, "", c.then...); code != 0 || !strings.Contains(out, c.lists) {
			t.Errorf("the hint's command %v: exit %d, %q %s; want %s listed", c.then, code, out, errOut, c.lists)
		}
	}
}
