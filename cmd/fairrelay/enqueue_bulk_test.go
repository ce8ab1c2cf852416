package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/sqlitetest"
)

// flowOrder returns the ids of a flow's events in seq order.
func flowOrder(t *testing.T, queue, flow string) []string {
	t.Helper()
	q, err := fairrelay.Open(t.Context(), queue, fairrelay.Config{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	s, err := q.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range s.Events {
		if e.Flow == flow {
			ids = append(ids, e.ID)
		}
	}
	return ids
}

// The case: lines O1, O2 (malformed), O3 of one flow. O2 fails, so
// O3 is refused rather than stored as seq 2; the fixed file, run again,
// stores O2 and then O3: the flow is O1, O2, O3 as written. The other
// flow's line goes in the first time (issue 15).
func TestBulkEnqueueRerunKeepsTheFlowsOrder(t *testing.T) {
	t.Parallel()
	queue := filepath.Join(t.TempDir(), "queue.db")
	file := `{"id":"O1","flow":"O","delta":1}
{"id":"O2","flow":"O","delta":0}
{"id":"P1","flow":"P","delta":1}
{"id":"O3","flow":"O","delta":3}
`
	out, _, code := cli(t, file, "enqueue", "--queue", queue)
	if code != exitNotApplied || !strings.Contains(out, `{"error":"refused","field":"flow","id":"O3","line":4`) {
		t.Fatalf("first run: exit %d:\n%s", code, out)
	}
	if got := flowOrder(t, queue, "O"); strings.Join(got, ",") != "O1" {
		t.Fatalf("flow O after the first run: %v, want O1 only", got)
	}
	fixed := strings.Replace(file, `"delta":0`, `"delta":2`, 1)
	out, errOut, code := cli(t, fixed, "enqueue", "--queue", queue)
	if code != exitApplied {
		t.Fatalf("rerun: exit %d: %s\n%s", code, errOut, out)
	}
	if got := flowOrder(t, queue, "O"); strings.Join(got, ",") != "O1,O2,O3" {
		t.Fatalf("flow O after the rerun: %v, want O1,O2,O3", got)
	}
}

// A line that answers conflict fails its flow too: the later line of that
// flow in the same input — in the same transaction, where it would have
// been stored — is refused, and nothing of the flow changes.
func TestBulkEnqueueConflictRefusesTheFlowsLaterLines(t *testing.T) {
	t.Parallel()
	queue := filepath.Join(t.TempDir(), "queue.db")
	if _, e, code := cli(t, "", "enqueue", "--queue", queue, "--id", "C1", "--flow", "C", "--delta", "1"); code != 0 {
		t.Fatal(e)
	}
	out, _, code := cli(t, `{"id":"C1","flow":"C","delta":2}`+"\n"+`{"id":"C2","flow":"C","delta":1}`+"\n"+`{"id":"Q1","flow":"Q","delta":1}`+"\n", "enqueue", "--queue", queue)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != exitNotApplied || len(lines) != 3 || !strings.Contains(lines[0], `"status":"conflict"`) ||
		!strings.Contains(lines[1], `"error":"refused"`) || !strings.Contains(lines[2], `"status":"created"`) {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if got := flowOrder(t, queue, "C"); strings.Join(got, ",") != "C1" {
		t.Fatalf("flow C: %v, want C1 only", got)
	}
}

// A line that answers full (SPEC §8) fails its flow as a conflict does:
// the flow's later lines in the same transaction are refused (not answered
// full again), a later line whose id an earlier line stored answers
// existing without a warning (nothing was written, nothing overtaken), and
// the summary counts the full line and the refused one.
func TestBulkEnqueueFullRefusesTheFlowsLaterLines(t *testing.T) {
	t.Parallel()
	queue := filepath.Join(t.TempDir(), "queue.db")
	if _, e, code := cli(t, "", "enqueue", "--queue", queue, "--id", "X1", "--flow", "X", "--delta", "1"); code != 0 {
		t.Fatal(e)
	}
	if _, e, code := cli(t, "", "configure", "--queue", queue, "--max-flow-backlog", "2"); code != 0 {
		t.Fatal(e)
	}
	in := `{"id":"a1","flow":"A","delta":1}
{"id":"a2","flow":"A","delta":1}
{"id":"a3","flow":"A","delta":1}
{"id":"a2","flow":"A","delta":1}
{"id":"a4","flow":"A","delta":1}
`
	out, errOut, code := cli(t, in, "enqueue", "--queue", queue)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != exitNotApplied || len(lines) != 5 {
		t.Fatalf("exit %d, %d answers:\n%s", code, len(lines), out)
	}
	for i, want := range []string{`"status":"created"`, `"status":"created"`, `"limit":"flow","line":3,"status":"full"`, `"seq":2,"status":"existing"`, `{"error":"refused","field":"flow","id":"a4","line":5`} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("line %d: %s, want %s", i+1, lines[i], want)
		}
	}
	if strings.Contains(out, "warning") {
		t.Errorf("a warning about a conflict no line had:\n%s", out)
	}
	if !strings.Contains(errOut, "2 of 5 lines") {
		t.Errorf("summary %q, want 2 of 5 lines not applied", errOut)
	}
	if got := flowOrder(t, queue, "A"); strings.Join(got, ",") != "a1,a2" {
		t.Fatalf("flow A: %v, want a1,a2", got)
	}
}

// `tail -f events | fairrelay enqueue`: with the input paused after a line,
// that line is committed and answered at once, not when 500 lines have
// come or the input ends. A real child process reads a pipe this test
// writes one line at a time, waiting for each answer (issue 15: three lines
// over 6 s stayed uncommitted until the end of input).
func TestBulkEnqueueCommitsWhenInputPauses(t *testing.T) {
	t.Parallel()
	queue := filepath.Join(t.TempDir(), "queue.db")
	cmd, stdin, stdout, stderr := startBulkEnqueue(t, queue)
	answers := make(chan string)
	go func() {
		r := bufio.NewReader(stdout)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				close(answers)
				return
			}
			answers <- line
		}
	}()
	// The child creates the store with its first commit: the queue is
	// opened once the first answer says it has committed.
	var q *fairrelay.Queue
	defer func() {
		if q != nil {
			q.Close()
		}
	}()
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("T%d", i)
		sent := time.Now()
		fmt.Fprintf(stdin, `{"id":%q,"flow":"T","delta":1}`+"\n", id)
		select {
		case a := <-answers:
			if !strings.Contains(a, `"status":"created"`) || !strings.Contains(a, `"id":"`+id+`"`) {
				t.Fatalf("answer to %s: %s", id, a)
			}
		case <-time.After(time.Minute):
			// Never, if the command waits for the end of its input; the
			// minute is for a loaded machine's process start.
			t.Fatalf("no answer to %s a minute after it was written, the input still open; stderr: %s", id, stderr.String())
		}
		if q == nil {
			var err error
			if q, err = fairrelay.Open(t.Context(), queue, fairrelay.Config{MustExist: true}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := q.Event(t.Context(), id); err != nil {
			t.Fatalf("%s answered but not committed: %v", id, err)
		}
		t.Logf("%s committed and answered %s after it was written", id, time.Since(sent).Round(time.Microsecond))
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v; stderr: %s", err, stderr.String())
	}
}

// Input that is all there at once still goes in large transactions: the
// batch takes every line already read (up to 500) before it commits.
func TestBulkEnqueueBatchesAStream(t *testing.T) {
	t.Parallel()
	q, err := fairrelay.Open(t.Context(), filepath.Join(t.TempDir(), "queue.db"), fairrelay.Config{Policy: fairrelay.DaemonPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	const lines = 5000
	var in strings.Builder
	for i := range lines {
		fmt.Fprintf(&in, `{"id":"E%d","flow":"F%d","delta":1}`+"\n", i, i%50)
	}
	rep, err := bulkEnqueue(t.Context(), q, strings.NewReader(in.String()), io.Discard, fairrelay.AtStored, nil)
	if err != nil || rep.total != lines || rep.failed != 0 {
		t.Fatalf("%+v %v", rep, err)
	}
	if rep.transactions > lines/50 {
		t.Fatalf("%d lines in %d transactions: want batches of 50 lines or more on average", lines, rep.transactions)
	}
	t.Logf("%d lines in %d transactions", lines, rep.transactions)
}

// A one-event flag with events on standard input is refused before
// anything is read or written: --group ignored would have put every new
// flow in its own group for good (a flow's group is fixed at creation).
func TestBulkEnqueueRefusesOneEventFlags(t *testing.T) {
	t.Parallel()
	queue := filepath.Join(t.TempDir(), "queue.db")
	for _, flag := range [][]string{{"--group", "acme"}, {"--flow", "Z"}, {"--delta", "1"}, {"--body", `{"a":1}`}} {
		_, errOut, code := cli(t, `{"id":"Z1","flow":"Z","delta":1}`+"\n", append([]string{"enqueue", "--queue", queue}, flag...)...)
		if name := strings.TrimPrefix(flag[0], "--"); code != 2 || !strings.Contains(errOut, "invalid_input: id: missing: --"+name+" is for one event, which needs --id too") {
			t.Errorf("%v with stdin: exit %d, %q; want exit 2 naming id, the flag missing, and %s", flag, code, errOut, name)
		}
	}
	if _, err := os.Stat(queue); !os.IsNotExist(err) {
		t.Errorf("the refused enqueues touched %s: %v", queue, err)
	}
}

// A stored line after a failed line of its flow answers existing, whether
// the failed line was in the same transaction or an earlier one: the input
// paused after the failed line (a pipe, written a line at a time) gives
// the same answers as the input all at once (TestBulkEnqueueFullRefusesTheFlowsLaterLines).
// Before, a line in a later batch was refused at once, and CI, whose
// loaded machine split the same input into two batches, saw refused where
// the test wanted existing.
func TestBulkEnqueueAnswersExistingAfterAFailedLineOfAnEarlierBatch(t *testing.T) {
	t.Parallel()
	queue := filepath.Join(t.TempDir(), "queue.db")
	if _, e, code := cli(t, "", "enqueue", "--queue", queue, "--id", "X1", "--flow", "X", "--delta", "1"); code != 0 {
		t.Fatal(e)
	}
	if _, e, code := cli(t, "", "configure", "--queue", queue, "--max-flow-backlog", "2"); code != 0 {
		t.Fatal(e)
	}
	cmd, stdin, stdout, stderr := startBulkEnqueue(t, queue)
	answers := bufio.NewReader(stdout)
	for _, step := range []struct{ line, want string }{
		{`{"id":"a1","flow":"A","delta":1}`, `"status":"created"`},
		{`{"id":"a2","flow":"A","delta":1}`, `"status":"created"`},
		{`{"id":"a3","flow":"A","delta":1}`, `"status":"full"`},
		{`{"id":"a2","flow":"A","delta":1}`, `"seq":2,"status":"existing"`},
		{`{"id":"a4","flow":"A","delta":1}`, `"error":"refused","field":"flow"`},
	} {
		fmt.Fprintln(stdin, step.line)
		got, err := answers.ReadString('\n') // each answered before the next is written
		if err != nil {
			t.Fatalf("no answer to %s: %v; stderr: %s", step.line, err, stderr.String())
		}
		if !strings.Contains(got, step.want) {
			t.Errorf("%s answered %s, want %s", step.line, got, step.want)
		}
	}
	stdin.Close()
	cmd.Wait()
}

// startBulkEnqueue runs `fairrelay enqueue --queue queue` (bulk, from
// stdin) as a child process with pipes to its input and output; it is
// killed when the test ends if it has not exited.
func startBulkEnqueue(t *testing.T, queue string) (*exec.Cmd, io.WriteCloser, io.Reader, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "enqueue", "--queue", queue)
	cmd.Env = append(os.Environ(), "FAIRRELAY_TEST_AS_CLI=1")
	stderr := new(bytes.Buffer)
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, stdin, stdout, stderr
}

// A bulk enqueue at an --at behind the store's tick answers
// clock_regressed before any line, bad or good (exit 2, as a single
// enqueue): the clock comes before the fields of the input (SPEC §2
// order). Lines once answered invalid_input before the clock was read, so
// the answer of a line depended on whether another line reached the store;
// then each line answered clock_regressed, exit 1. Without --at (the
// stored tick) the field's error stands.
func TestBulkEnqueueBadLineAtARegressedTickAnswersTheClock(t *testing.T) {
	t.Parallel()
	queue := filepath.Join(t.TempDir(), "queue.db")
	if _, errOut, code := cli(t, "", "enqueue", "--queue", queue, "--id", "a", "--flow", "f", "--delta", "1", "--at", "10"); code != exitApplied {
		t.Fatalf("enqueue at 10: exit %d: %s", code, errOut)
	}
	bad := `{"id":5,"flow":"f","delta":1}
{"id":"b","flow":"g","delta":1,"zz":1}
`
	out, errOut, code := cli(t, bad, "enqueue", "--queue", queue, "--at", "3")
	if code != exitFailed || out != "" || !strings.HasPrefix(errOut, "fairrelay: clock_regressed: enqueue at tick 3: the store is at tick 10") {
		t.Errorf("bad lines at tick 3 (store at 10): exit %d, %q %q: want exit 2 and clock_regressed, no line answered", code, out, errOut)
	}
	out, _, code = cli(t, bad, "enqueue", "--queue", queue)
	if code != exitNotApplied || !strings.Contains(out, `"field":"id","line":1`) || !strings.Contains(out, `"field":"zz","id":"b","line":2`) {
		t.Errorf("bad lines at the stored tick: exit %d:\n%s\nwant invalid_input naming id and zz", code, out)
	}
}

// An enqueue that creates the queue store says so on stderr (a misspelt
// --queue would otherwise fill a store no relay reads, in silence), one
// event or a bulk input alike; an enqueue into an existing store says
// nothing there.
func TestEnqueueSaysWhenItCreatesTheStore(t *testing.T) {
	t.Parallel()
	const note = "did not exist and was created"
	one := filepath.Join(t.TempDir(), "one.db")
	_, errOut, code := cli(t, "", "enqueue", "--queue", one, "--id", "a", "--flow", "f", "--delta", "1")
	if code != exitApplied || !strings.Contains(errOut, note) {
		t.Errorf("first enqueue: exit %d, stderr %q: want a note that the store was created", code, errOut)
	}
	_, errOut, code = cli(t, "", "enqueue", "--queue", one, "--id", "b", "--flow", "f", "--delta", "1")
	if code != exitApplied || errOut != "" {
		t.Errorf("second enqueue: exit %d, stderr %q: want none", code, errOut)
	}
	bulk := filepath.Join(t.TempDir(), "bulk.db")
	_, errOut, code = cli(t, `{"id":"a","flow":"f","delta":1}`+"\n", "enqueue", "--queue", bulk)
	if code != exitApplied || !strings.Contains(errOut, note) {
		t.Errorf("first bulk enqueue: exit %d, stderr %q: want a note that the store was created", code, errOut)
	}
	// An empty file becomes a store, and the note says what it was.
	empty := filepath.Join(t.TempDir(), "empty.db")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code = cli(t, "", "enqueue", "--queue", empty, "--id", "a", "--flow", "f", "--delta", "1")
	if code != exitApplied || !strings.Contains(errOut, "was an empty database; a store was created in it") || strings.Contains(errOut, note) {
		t.Errorf("enqueue into an empty file: exit %d, stderr %q: want a note that the empty file was made a store", code, errOut)
	}
	// So does a SQLite database with no table — what a store another
	// process is making looks like until its first migration commits (a
	// relay and an enqueue started together: the enqueue refused it).
	noTables := filepath.Join(t.TempDir(), "no-tables.db")
	sqlitetest.Exec(t, noTables, `PRAGMA user_version = 7`)
	_, errOut, code = cli(t, "", "enqueue", "--queue", noTables, "--id", "a", "--flow", "f", "--delta", "1")
	if code != exitApplied || !strings.Contains(errOut, "was an empty database; a store was created in it") {
		t.Errorf("enqueue into a database with no table: exit %d, stderr %q: want it made a store", code, errOut)
	}
}

// An enqueue the store would refuse creates no store: its tick, id, flow,
// or group is checked first on a scratch store (bad input changes
// nothing; a new, empty store was left behind). An empty file stays empty.
func TestRefusedEnqueueCreatesNoStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"a tick past max-tick-jump", []string{"--id", "a", "--flow", "f", "--delta", "1", "--at", "99999999999"}, "invalid_input: at: tick 99999999999 is 99999999999 ticks ahead"},
		{"an id with a space at its start", []string{"--id", " a", "--flow", "f", "--delta", "1"}, "invalid_input: id: starts with white space"},
		{"a flow too long", []string{"--id", "a", "--flow", strings.Repeat("f", 201), "--delta", "1"}, "invalid_input: flow:"},
		{"a group with a control character", []string{"--id", "a", "--flow", "f", "--group", "g\x01", "--delta", "1"}, "invalid_input: group:"},
	} {
		for _, queue := range []string{filepath.Join(dir, "new.db"), empty} {
			_, errOut, code := cli(t, "", append([]string{"enqueue", "--queue", queue}, c.args...)...)
			if code != exitFailed || !strings.Contains(errOut, c.want) {
				t.Errorf("%s into %s: exit %d, stderr %q: want exit %d and %q", c.name, filepath.Base(queue), code, errOut, exitFailed, c.want)
			}
			if strings.Contains(errOut, "was created") {
				t.Errorf("%s into %s: stderr %q says a store was created", c.name, filepath.Base(queue), errOut)
			}
		}
		if left, _ := filepath.Glob(filepath.Join(dir, "new.db*")); len(left) != 0 {
			t.Errorf("%s: left %v behind", c.name, left)
		}
		if st, err := os.Stat(empty); err != nil || st.Size() != 0 {
			t.Errorf("%s: the empty file is now %v (%v): want it left empty", c.name, st, err)
		}
	}
	// Lines on stdin at a tick past max-tick-jump: refused once, exit 2,
	// before any line and with no store made, as one event is (a
	// breaker's report: each line was refused, exit 1, and the new store
	// stayed).
	line := `{"id":"a","flow":"f","body":{"delta":1}}` + "\n"
	for _, queue := range []string{filepath.Join(dir, "new.db"), empty} {
		out, errOut, code := cli(t, line, "enqueue", "--queue", queue, "--at", "99999999999")
		if code != exitFailed || out != "" || !strings.Contains(errOut, "invalid_input: at: tick 99999999999 is 99999999999 ticks ahead") || strings.Contains(errOut, "was created") {
			t.Errorf("bulk at a tick past max-tick-jump into %s: exit %d, %q %q: want exit 2, no line answered, no store made", filepath.Base(queue), code, out, errOut)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "new.db*")); len(left) != 0 {
		t.Errorf("bulk at a tick past max-tick-jump: left %v behind", left)
	}
	if st, err := os.Stat(empty); err != nil || st.Size() != 0 {
		t.Errorf("bulk at a tick past max-tick-jump: the empty file is now %v (%v): want it left empty", st, err)
	}
	// With no temporary directory to check in (a read-only container), a
	// good enqueue still makes its store; a bad one is refused by the store.
	noTmp := []string{"TMPDIR=" + filepath.Join(dir, "no-such-dir")}
	ok := filepath.Join(dir, "ok.db")
	if out, errOut, code := cliEnv(t, noTmp, "", "enqueue", "--queue", ok, "--id", "a", "--flow", "f", "--delta", "1"); code != exitApplied || out != `{"seq":1,"status":"created"}`+"\n" {
		t.Errorf("enqueue into a new store without a temporary directory: exit %d, %q %q", code, out, errOut)
	}
	if _, errOut, code := cliEnv(t, noTmp, "", "enqueue", "--queue", filepath.Join(dir, "bad.db"), "--id", " a", "--flow", "f", "--delta", "1"); code != exitFailed || !strings.Contains(errOut, "invalid_input: id:") {
		t.Errorf("a bad enqueue without a temporary directory: exit %d, %q", code, errOut)
	}
}

// enqueue, relay and receive create a store only in a new (or empty) SQLite
// file: another application's database — a misspelt path, or the
// application's own file before its outbox is made — is refused, naming
// the flag, and left as it was (they wrote the store's tables into it and
// said the file "did not exist": a breaker's report). migrate makes a
// store in it on purpose.
func TestCommandsThatCreateAStoreRefuseAnotherDatabase(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	other := filepath.Join(dir, "app.db")
	sqlitetest.Exec(t, other, `CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO users (name) VALUES ('ann')`)
	tables := func() string {
		t.Helper()
		var names string
		sqlitetest.QueryRow(t, other, `SELECT group_concat(name, ',') FROM (SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name)`, &names)
		return names
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"enqueue", "--queue", other, "--id", "a", "--flow", "f", "--delta", "1"}, "invalid_input: queue: " + other + " is a database that holds no queue store"},
		{[]string{"relay", "--queue", other, "--sink", "http://127.0.0.1:1/"}, "invalid_input: queue: " + other + " is a database that holds no queue store"},
		{[]string{"receive", "--inbox", other, "--addr", "127.0.0.1:0"}, "invalid_input: inbox: " + other + " is a database that holds no inbox store"},
	} {
		out, errOut, code := cli(t, "", c.args...)
		if code != exitFailed || out != "" || !strings.Contains(errOut, c.want) || !strings.Contains(errOut, "fairrelay migrate") {
			t.Errorf("%v: exit %d stdout %q stderr %q; want exit %d and %q, naming migrate", c.args, code, out, errOut, exitFailed, c.want)
		}
		if got := tables(); got != "users" {
			t.Errorf("%v: the file's tables are %s, want users alone", c.args, got)
		}
	}
	if _, errOut, code := cli(t, "", "migrate", "--queue", other); code != 0 {
		t.Fatalf("migrate --queue of another database: exit %d: %s", code, errOut)
	}
	if _, errOut, code := cli(t, "", "enqueue", "--queue", other, "--id", "a", "--flow", "f", "--delta", "1"); code != exitApplied || errOut != "" {
		t.Errorf("enqueue after migrate: exit %d, stderr %q", code, errOut)
	}
}

// A bulk enqueue stopped by a database error after some batches were
// committed says so: the lines answered are kept, the rest were not
// enqueued, and the whole input can run again. The error's own "nothing was
// changed" is true of the stopped batch only (an SRE's report: a run
// stopped busy after hundreds of created answers said nothing changed).
func TestBulkEnqueueStoppedMidwaySaysWhatItKept(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "queue.db")
	q, err := fairrelay.Open(t.Context(), path, fairrelay.Config{Policy: fairrelay.DaemonPolicy(), BusyTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	inW, answers, done := startBulk(t, q, fairrelay.AtStored)
	release := sqlitetest.HoldWriter(t, path)
	fmt.Fprintln(inW, `{"id":"E2","flow":"F","delta":1}`)
	inW.Close()
	for answers.Scan() {
	}
	r := <-done
	release()
	if !errors.Is(r.err, fairrelay.ErrBusy) {
		t.Fatalf("bulk enqueue behind a held writer: %+v %v, want busy", r.rep, r.err)
	}
	msg := errorLine(stoppedAfter(r.err, r.rep))
	if !strings.HasPrefix(msg, "busy: enqueue stopped after 1 lines, answered above and kept as answered; the lines after them were not enqueued: run the whole input again") {
		t.Errorf("the error of a bulk run stopped after line 1: %s", msg)
	}
	if got := flowOrder(t, path, "F"); !slices.Equal(got, []string{"E1"}) {
		t.Errorf("flow F holds %v, want [E1]", got)
	}
}

// A bulk enqueue whose stopped batch's commit was sent before the
// connection failed (ErrCommitUnknown) does not say that batch's lines were
// not enqueued: they may be stored (a breaker's report: they were, and the
// message said they were not).
func TestBulkEnqueueStoppedOnAnUnknownCommitSaysItMayHaveStored(t *testing.T) {
	unknown := &fairrelay.Error{Code: fairrelay.CodeDatabase, Message: "enqueue",
		Err: fmt.Errorf("the connection failed after the commit was sent, so it may have committed: %w", fairrelay.ErrCommitUnknown)}
	msg := errorLine(stoppedAfter(unknown, bulkReport{answered: 3}))
	if !strings.Contains(msg, "enqueue stopped after 3 lines") || !strings.Contains(msg, "may or may not be stored") || strings.Contains(msg, "the lines after them were not enqueued") {
		t.Errorf("the error of a bulk run stopped on an unknown commit: %s", msg)
	}
	if !errors.Is(stoppedAfter(unknown, bulkReport{answered: 3}), fairrelay.ErrCommitUnknown) {
		t.Error("the stopped run's error lost ErrCommitUnknown")
	}
}

// A store another process is making, its first migrations committed and
// the rest not yet, is that process's store, not another application's
// database. Two processes starting on a new file: the loser's first open
// found no store (nothing committed yet), and by the time it looked at the
// file again (creatingIn) the winner's first migration had committed, so
// it was refused "a database that holds no queue store" (a breaker's
// report, 1 run in 20-40). creatingIn is where it looks again.
func TestAStoreBeingMadeIsNotAForeignDatabase(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	begun := func(name, table string) string {
		path := filepath.Join(dir, name)
		sqlitetest.Exec(t, path, `CREATE TABLE `+table+` (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)`)
		return path
	}
	for _, c := range []struct{ field, table string }{{"queue", "fairrelay_migration"}, {"inbox", "fairrelay_inbox_migration"}} {
		path := begun(c.field+".db", c.table)
		if created, err := creatingIn(t.Context(), path, c.field, "fairrelay migrate --"+c.field); err != nil || created != "" {
			t.Errorf("creatingIn(%s being made): %q %v, want an existing store (\"\", nil)", c.field, created, err)
		}
	}
	// The other kind's mark, or another application's table, is no
	// store of this kind.
	for name, table := range map[string]string{"other.db": "fairrelay_inbox_migration", "app.db": "orders"} {
		if _, err := creatingIn(t.Context(), begun(name, table), "queue", "fairrelay migrate --queue"); !errors.Is(err, fairrelay.ErrInvalidInput) {
			t.Errorf("creatingIn(queue) on a database holding only %s: %v, want invalid_input", table, err)
		}
	}
}

// A line refused as full fails its flow, and the flow's later lines are
// refused, also when they name another group (none: the flow's own). In
// one transaction the library weighs each event apart, so the later lines
// were counted in the other group and stored, overtaking the full one, and
// the flow then belonged to that group for good (a breaker's report: F2
// and F3 stored as seq 1 and 2, with a warning of a concurrent writer
// there was none of). A line naming another group for its flow than an
// earlier line of the batch now goes in the next transaction, where it is
// refused; the input rerun once the limit allows stores the flow in the
// input's order.
func TestBulkEnqueueFullLineHoldsItsFlowWhateverGroupLaterLinesName(t *testing.T) {
	t.Parallel()
	queue := filepath.Join(t.TempDir(), "queue.db")
	for _, args := range [][]string{
		{"migrate", "--queue", queue},
		{"configure", "--queue", queue, "--group", "acme", "--max-backlog", "1"},
		{"enqueue", "--queue", queue, "--id", "X1", "--flow", "X", "--group", "acme", "--delta", "1"},
	} {
		if _, e, code := cli(t, "", args...); code != 0 {
			t.Fatalf("%v: %s", args, e)
		}
	}
	file := `{"id":"F1","flow":"F","group":"acme","delta":1}
{"id":"F2","flow":"F","delta":1}
{"id":"G1","flow":"G","delta":1}
{"id":"F3","flow":"F","group":"other","delta":1}
`
	out, e, code := cli(t, file, "enqueue", "--queue", queue)
	if code != exitNotApplied {
		t.Errorf("first run: exit %d, want %d:\n%s%s", code, exitNotApplied, out, e)
	}
	for _, want := range []string{
		`{"id":"F1","limit":"group","line":1,"status":"full"}`,
		`{"error":"refused","field":"flow","id":"F2","line":2`,
		`{"id":"G1","line":3,"seq":1,"status":"created"}`,
		`{"error":"refused","field":"flow","id":"F3","line":4`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("first run: no %s in\n%s", want, out)
		}
	}
	if strings.Contains(out, "warning") {
		t.Errorf("first run warns of a concurrent writer there was none of:\n%s", out)
	}
	if got := flowOrder(t, queue, "F"); len(got) != 0 {
		t.Errorf("flow F after its line 1 answered full: %v stored, want none", got)
	}
	if _, e, code := cli(t, "", "configure", "--queue", queue, "--group", "acme", "--max-backlog", "10"); code != 0 {
		t.Fatal(e)
	}
	// Rerun without F3's other group: F1 makes F a flow of acme, and the
	// lines naming none join it.
	file = strings.Replace(file, `"group":"other",`, "", 1)
	if out, e, code := cli(t, file, "enqueue", "--queue", queue); code != 0 {
		t.Fatalf("rerun: exit %d:\n%s%s", code, out, e)
	}
	if got := flowOrder(t, queue, "F"); strings.Join(got, ",") != "F1,F2,F3" {
		t.Errorf("flow F after the rerun: %v, want F1,F2,F3", got)
	}
}

// bulkResult is what a bulk enqueue returned.
type bulkResult struct {
	rep bulkReport
	err error
}

// startBulk runs bulkEnqueue on q at tick at, fed through a pipe, and
// fails t unless its first line, E1 onto flow F, answers created: the
// pipe's writer for the next lines, a scanner of the answers after the
// first, and what the run returns once the writer is closed.
func startBulk(t *testing.T, q *fairrelay.Queue, at int64) (*io.PipeWriter, *bufio.Scanner, <-chan bulkResult) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan bulkResult, 1)
	go func() {
		rep, err := bulkEnqueue(t.Context(), q, inR, outW, at, nil)
		outW.Close()
		done <- bulkResult{rep, err}
	}()
	answers := bufio.NewScanner(outR)
	fmt.Fprintln(inW, `{"id":"E1","flow":"F","delta":1}`)
	if !answers.Scan() || !strings.Contains(answers.Text(), `"created"`) {
		t.Fatalf("line 1's answer: %q", answers.Text())
	}
	return inW, answers, done
}

// A byte order mark before the first line (some editors and Windows tools
// write one) is not part of it: the line is enqueued; one anywhere else is
// the line's own, refused as JSON. A breaker's report: the first line
// failed "invalid character 'ï' looking for beginning of value".
func TestBulkEnqueueSkipsALeadingByteOrderMark(t *testing.T) {
	t.Parallel()
	queue := filepath.Join(t.TempDir(), "queue.db")
	file := "\ufeff" + `{"id":"B1","flow":"B","delta":1}` + "\n" + "\ufeff" + `{"id":"B2","flow":"C","delta":1}` + "\n"
	out, errOut, code := cli(t, file, "enqueue", "--queue", queue)
	if code != exitNotApplied || !strings.Contains(out, `{"id":"B1","line":1,"seq":1,"status":"created"}`) || !strings.Contains(out, `"line":2`) || strings.Contains(out, `"id":"B2","line":2,"seq"`) {
		t.Fatalf("exit %d, want %d: B1 created, line 2 refused:\n%s%s", code, exitNotApplied, out, errOut)
	}
}

// A streaming bulk enqueue stopped by SIGINT while it waits for the next
// line, every line read answered, says so: it said "the lines after them
// were not enqueued: run the whole input again", which sent the operator of
// a `tail -f | fairrelay enqueue` looking for lines it never read (a fresh
// user's report). A real child process and a real signal.
func TestBulkEnqueueStoppedBySignalWhileWaitingSaysEveryLineWasAnswered(t *testing.T) {
	t.Parallel()
	cmd, stdin, stdout, stderr := startBulkEnqueue(t, filepath.Join(t.TempDir(), "queue.db"))
	defer stdin.Close()
	answers := bufio.NewScanner(stdout)
	fmt.Fprintln(stdin, `{"id":"E1","flow":"F","delta":1}`)
	if !answers.Scan() || !strings.Contains(answers.Text(), `"created"`) {
		t.Fatalf("line 1's answer: %q", answers.Text())
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	for answers.Scan() {
		t.Errorf("an answer after the signal: %s", answers.Text())
	}
	err := cmd.Wait()
	if msg := stderr.String(); !strings.Contains(msg, "enqueue stopped by a signal after 1 lines, each answered above") ||
		strings.Contains(msg, "run the whole input again") || strings.Contains(msg, "context canceled") {
		t.Errorf("stderr after a signal with every line answered (%v):\n%s", err, msg)
	}
}

// A bulk input in UTF-16 (a Windows editor's "Unicode") is refused whole
// with exit 2, naming the encoding and how to convert it, and nothing is
// enqueued: each line was refused invalid_json ("invalid character 'ÿ'"),
// exit 1, with no word of the cause.
func TestBulkEnqueueRefusesUTF16(t *testing.T) {
	t.Parallel()
	queue := filepath.Join(t.TempDir(), "queue.db")
	var in strings.Builder
	in.WriteString("\xff\xfe")
	for _, r := range `{"id":"B1","flow":"B","delta":1}` + "\n" {
		in.WriteByte(byte(r))
		in.WriteByte(0)
	}
	out, errOut, code := cli(t, in.String(), "enqueue", "--queue", queue)
	if code != 2 || out != "" || !strings.Contains(errOut, "invalid_input: input: the input is UTF-16") || !strings.Contains(errOut, "iconv") {
		t.Fatalf("exit %d, want 2 with the encoding named and no answer:\n%s%s", code, out, errOut)
	}
}
