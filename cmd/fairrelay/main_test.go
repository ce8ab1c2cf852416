package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/fairrelay/fairrelay/internal/harness/outboxbench"
	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/internal/store/pgstore"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/harness/conformance"
)

// TestMain lets the test binary act as the fairrelay CLI in a child process
// (FAIRRELAY_TEST_AS_CLI=1), so the tests run the real command line — flags,
// stdout, stderr and exit codes — without a separate build.
func TestMain(m *testing.M) {
	if os.Getenv("FAIRRELAY_TEST_AS_CLI") == "1" {
		if beforeCLI != nil {
			beforeCLI()
		}
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// beforeCLI, when set (by a platform's test file), runs in the child before
// the CLI: it sets up what the child's environment asks for.
var beforeCLI func()

// cli runs the CLI with args and stdin in a child process.
func cli(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return cliEnv(t, nil, stdin, args...)
}

// cliEnv is cli with env (KEY=VALUE) added to the child's environment.
func cliEnv(t *testing.T, env []string, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), "FAIRRELAY_TEST_AS_CLI=1"), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

// TestScriptCommandRunsVectors feeds every vector to `fairrelay script` and
// compares the output lines as check-vectors does (SPEC §6).
func TestScriptCommandRunsVectors(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob(filepath.Join("..", "..", "testdata", "vectors", "*.jsonl"))
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, ".expected.jsonl") {
			continue
		}
		n++
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ops, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(strings.TrimSuffix(f, ".jsonl") + ".expected.jsonl")
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			args := []string{"script", "--queue", filepath.Join(dir, "q.db"), "--inbox", filepath.Join(dir, "i.db")}
			if strings.HasSuffix(name, ".fair.jsonl") {
				args = append(args, "--policy", "fair")
			}
			out, errOut, code := cli(t, string(ops), args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			got := strings.Split(strings.TrimSpace(out), "\n")
			exp := strings.Split(strings.TrimSpace(string(want)), "\n")
			if len(got) != len(exp) {
				t.Fatalf("%d result lines for %d expected", len(got), len(exp))
			}
			for i := range exp {
				var w, g any
				if err := json.Unmarshal([]byte(exp[i]), &w); err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal([]byte(got[i]), &g); err != nil {
					t.Fatalf("line %d is not JSON: %s", i+1, got[i])
				}
				if why := conformance.Match(w, g, "$"); why != "" {
					t.Fatalf("line %d: %s", i+1, why)
				}
			}
		})
	}
	if n < 10 {
		t.Fatalf("found %d vectors, want at least 10", n)
	}
}

func TestScriptGoesOnAfterBadLines(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in := "{\"op\":\"enqueue\"\nnot json\n{\"op\":\"enqueue\",\"id\":\"A1\",\"flow\":\"A\",\"delta\":1,\"at\":0}\n"
	out, _, code := cli(t, in, "script", "--queue", filepath.Join(dir, "q.db"), "--inbox", filepath.Join(dir, "i.db"))
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], `"error":"invalid_json"`) || !strings.Contains(lines[2], `"status":"created"`) {
		t.Fatalf("output:\n%s", out)
	}
}

// A strictly read script line names the field it rejects: a duplicated
// one, an unknown one, a null.
func TestScriptLineErrorsNameTheField(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in := `{"op":"enqueue","at":0,"at":1,"id":"A1","flow":"A","delta":1}` + "\n" +
		`{"op":"enqueue","at":0,"id":"A1","flow":"A","delta":1,"bogus":1}` + "\n" +
		`{"op":"enqueue","at":0,"id":null,"flow":"A","delta":1}` + "\n" +
		`{"op":"enqueue","at":99999999999999999999,"id":"A1","flow":"A","delta":1}` + "\n"
	out, _, code := cli(t, in, "script", "--queue", filepath.Join(dir, "q.db"), "--inbox", filepath.Join(dir, "i.db"))
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []string{`"error":"invalid_json","field":"at"`, `"error":"invalid_input","field":"bogus"`, `"error":"invalid_input","field":"id"`,
		// Past int64 is still an integer: the message says which range
		// it missed (it said "must be an integer").
		`"error":"invalid_input","field":"at","message":"at: must be an integer of at most 64 bits`}
	if len(lines) != len(want) {
		t.Fatalf("output:\n%s", out)
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d: %s, want %s", i+1, lines[i], w)
		}
	}
}

func TestScriptSkipsAnOverlongLineAndGoesOn(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	long := `{"op":"enqueue","id":"X","flow":"X","body":"` + strings.Repeat("x", 5<<20) + `","at":0}`
	in := long + "\n" + `{"op":"enqueue","id":"A1","flow":"A","delta":1,"at":0}` + "\n"
	out, errOut, code := cli(t, in, "script", "--queue", filepath.Join(dir, "q.db"), "--inbox", filepath.Join(dir, "i.db"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"field":"line"`) || !strings.Contains(lines[1], `"status":"created"`) {
		t.Fatalf("output:\n%.300s", out)
	}
}

func TestOneShotCommands(t *testing.T) {
	t.Parallel()
	q := filepath.Join(t.TempDir(), "q.db")
	steps := []struct {
		args []string
		want string
		code int // docs/cli.md "Exit codes": 0 applied, 1 answered but nothing applied
	}{
		{[]string{"enqueue", "--queue", q, "--id", "A1", "--flow", "A", "--delta", "10", "--at", "0"}, `{"seq":1,"status":"created"}`, 0},
		{[]string{"enqueue", "--queue", q, "--id", "A2", "--flow", "A", "--body", `{"note":"x", "delta":1}`, "--at", "0"}, `{"seq":2,"status":"created"}`, 0},
		{[]string{"enqueue", "--queue", q, "--id", "A2", "--flow", "A", "--body", `{"delta":1,"note":"x"}`, "--at", "0"}, `{"seq":2,"status":"existing"}`, 0},
		{[]string{"enqueue", "--queue", q, "--id", "A2", "--flow", "B", "--delta", "1", "--at", "0"}, `{"status":"conflict"}`, 1},
		{[]string{"claim", "--queue", q, "--at", "0"}, `{"attempts":1,"flow":"A","generation":1,"id":"A1","lease_until":30000,"seq":1,"status":"claimed","ticket":1}`, 0},
		{[]string{"claim", "--queue", q, "--at", "1"}, `{"status":"idle"}`, 1},
		{[]string{"settle", "--queue", q, "--id", "A1", "--generation", "7", "--outcome", "accepted", "--at", "1"}, `{"status":"stale"}`, 1},
		{[]string{"settle", "--queue", q, "--id", "A1", "--generation", "1", "--outcome", "unsupported_delta", "--at", "1"}, `{"status":"quarantined"}`, 0},
		{[]string{"redrive", "--queue", q, "--id", "A1", "--expected-generation", "7", "--reason", "fixed", "--operator", "ops", "--at", "2"}, `{"reason":"generation_mismatch","status":"rejected"}`, 1},
		{[]string{"redrive", "--queue", q, "--id", "A1", "--expected-generation", "1", "--reason", "fixed", "--operator", "ops", "--at", "2"}, `{"generation":2,"status":"ready"}`, 0},
		{[]string{"inspect", "--queue", q, "audit", "--json"}, `{"id":"A1","flow":"A","action":"redrive","reason":"fixed","operator":"ops","previous_reason":"unsupported_delta","generation":2,"at":2,"no":1}`, 0},
		{[]string{"redrive", "--queue", q, "--all", "--reason", "again", "--operator", "ops", "--at", "2"}, ``, 1},
		{[]string{"claim", "--queue", q, "--at", "3"}, `{"attempts":1,"flow":"A","generation":3,"id":"A1","lease_until":30003,"seq":1,"status":"claimed","ticket":2}`, 0},
		{[]string{"settle", "--queue", q, "--id", "A1", "--generation", "3", "--outcome", "accepted", "--at", "30003"}, `{"status":"expired"}`, 1},
	}
	// The audit's wall-clock time is checked in TestInspectAttemptsAndAuditWallTime.
	wall := regexp.MustCompile(`,"wall":"[^"]*"`)
	for _, s := range steps {
		out, errOut, code := cli(t, "", s.args...)
		if code != s.code || wall.ReplaceAllString(strings.TrimSpace(out), "") != s.want {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q; want exit %d and %s", s.args, code, out, errOut, s.code, s.want)
		}
		if code != 0 && strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("%v: stderr %q, want one line saying nothing was applied", s.args, errOut)
		}
	}
	out, _, _ := cli(t, "", "inspect", "--queue", q)
	if !strings.Contains(out, "A1") || !strings.Contains(out, "inflight") {
		t.Fatalf("heads table:\n%s", out)
	}
}

// TestCLIErrorsNameTheField checks that bad input exits 2 (exitFailed) with
// one stderr line naming the field, and changes nothing.
func TestCLIErrorsNameTheField(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	q := filepath.Join(dir, "q.db")
	if _, e, code := cli(t, "", "enqueue", "--queue", q, "--id", "A1", "--flow", "A", "--delta", "1", "--at", "5"); code != 0 {
		t.Fatal(e)
	}
	inboxDB := filepath.Join(dir, "inbox.db")
	if _, e, code := cli(t, "", "migrate", "--inbox", inboxDB); code != 0 {
		t.Fatal(e)
	}
	notDB := filepath.Join(dir, "not.db")
	os.WriteFile(notDB, []byte("this is not a database, just some text that is long enough"), 0o644)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"enqueue", "--queue", q, "--id", "", "--flow", "A", "--delta", "1", "--at", "5"}, "id: empty"},
		{[]string{"enqueue", "--queue", q, "--id", "A2", "--flow", "A", "--delta", "0", "--at", "5"}, "delta: must be a positive integer"},
		{[]string{"enqueue", "--queue", q, "--id", "A2", "--flow", "A", "--delta", "010", "--at", "5"}, "delta: must be a positive integer as JSON writes one (decimal, no leading 0, + or fraction), got 010"},
		{[]string{"enqueue", "--queue", q, "--id", "A2", "--flow", "A", "--at", "5"}, "invalid_input: body: missing: give --body or --delta"},
		// Every required flag left out is named at once, the first as the field.
		{[]string{"redrive", "--queue", q, "--id", "A1", "--at", "5"}, "invalid_input: expected-generation: missing: give --expected-generation and --reason"},
		{[]string{"expedite", "--queue", q, "--at", "5"}, "invalid_input: id: missing: give --id, --expected-generation and --reason"},
		{[]string{"settle", "--queue", q, "--generation", "1", "--outcome", "accepted", "--at", "5"}, "invalid_input: id: missing: give --id"},
		{[]string{"enqueue", "--queue", q, "--id", "A2", "--flow", "A", "--body", "notjson", "--at", "5"}, "invalid_input: body: not JSON (the command takes JSON bodies; the library and the SQL function take any bytes): invalid character 'o' in literal null"},
		{[]string{"enqueue", "--queue", q, "--id", "A2", "--flow", "A", "--body", "{}", "--delta", "1", "--at", "5"}, "invalid_input: delta: give --delta or --body, not both"},
		{[]string{"enqueue", "--queue", q, "--id", "A2", "--flow", "A", "--delta", "1", "--lease", "0s"}, "lease: must be at least 1ms"},
		// The library's DeliveryTimeout, named as the flag that sets it.
		{[]string{"relay", "--queue", q, "--sink", "http://127.0.0.1:1/", "--timeout", "500us"}, "invalid_input: timeout: must be at least 1ms"},
		// A filter of --all given with --id would be ignored: refused.
		{[]string{"redrive", "--queue", q, "--id", "A1", "--expected-generation", "1", "--reason", "r", "--flow", "B"}, "invalid_input: flow: narrows --all only"},
		{[]string{"redrive", "--queue", q, "--id", "A1", "--expected-generation", "1", "--reason", "r", "--reason-is", "rejected"}, "invalid_input: reason-is: narrows --all only"},
		{[]string{"expedite", "--queue", q, "--id", "A1", "--expected-generation", "1", "--reason", "r", "--flow", "B"}, "invalid_input: flow: narrows --all only"},
		// The daemon's policy flags are durations; a bare number (they were
		// milliseconds once) is refused with the way to write it.
		{[]string{"claim", "--queue", q, "--lease", "30000"}, `"30000" has no unit: give a duration such as 30s`},
		{[]string{"settle", "--queue", q, "--id", "A1", "--generation", "1", "--outcome", "retry", "--backoff-base", "1.5ms"}, "backoff-base: must be a whole number of milliseconds"},
		{[]string{"enqueue", "--queue", q, "--id", "A2", "--flow", "A", "--delta", "1", "--at", "4"}, "clock_regressed"},
		// A negative horizon is no tick (SPEC §1); a negative --at is
		// clock_regressed (TestNegativeAtIsClockRegressed).
		{[]string{"prune", "--queue", q, "--acked-before", "1", "--ids-before", "-7", "--at", "5"}, "invalid_input: ids-before: must be a tick in"},
		{[]string{"settle", "--queue", q, "--id", "A1", "--generation", "1", "--outcome", "acepted", "--at", "5"}, `outcome: unknown outcome "acepted" (want one of accepted, duplicate,`},
		{[]string{"settle", "--queue", q, "--id", "NOPE", "--generation", "1", "--outcome", "accepted", "--at", "5"}, "not_found"},
		{[]string{"claim", "--queue", filepath.Join(dir, "missing", "q.db"), "--at", "0"}, "queue: cannot open: directory"},
		// A file where the path needs a directory is not "does not exist".
		{[]string{"claim", "--queue", filepath.Join(notDB, "q.db"), "--at", "0"}, "queue: cannot open: " + notDB + " is a file, not a directory"},
		{[]string{"migrate", "--inbox", filepath.Join(notDB, "i.db")}, "invalid_input: inbox: " + notDB + " is a file, not a directory"},
		// The library's field names, written as the flags the user typed.
		{[]string{"prune", "--queue", q, "--acked-before", "3", "--ids-before", "5", "--at", "5"}, "invalid_input: ids-before: must be at most acked-before (3)"},
		{[]string{"prune", "--queue", q, "--acked-before", "-1", "--ids-before", "0", "--at", "5"}, "invalid_input: acked-before: must be a tick"},
		{[]string{"configure", "--queue", q, "--max-flow-backlog", "-3", "--at", "5"}, "invalid_input: max-flow-backlog: must not be negative"},
		{[]string{"configure", "--queue", q}, "invalid_input: settings: missing: nothing to set: give --max-backlog"},
		{[]string{"demo", "--workers", "0", "--dir", filepath.Join(dir, "demo")}, "invalid_input: workers: must be 1 to"},
		{[]string{"demo", "--timeout", "0s", "--dir", filepath.Join(dir, "demo")}, "invalid_input: timeout: must be positive"},
		{[]string{"demo", "--flaky-every", "-1", "--dir", filepath.Join(dir, "demo")}, "invalid_input: flaky-every: must be 0 (never) or more"},
		// --timeout ends whichever step it meets (here opening the stores).
		{[]string{"demo", "--timeout", "1ms", "--dir", filepath.Join(dir, "late")}, "demo: did not finish in time (--timeout 1ms)"},
		{[]string{"claim", "--queue", notDB, "--at", "0"}, "not_a_database: queue: open: not a fairrelay database"},
		{[]string{"claim", "--queue", q, "--at", "5", "--policy", "lifo"}, "policy: must be seed or fair"},
		{[]string{"inspect", "--inbox", inboxDB, "receipts", "--after-seq", "1"}, "invalid_input: after-seq: needs --after FLOW"},
		// A directory given as a store says so (SQLite's answer was a
		// database error, "disk I/O error").
		{[]string{"claim", "--queue", dir, "--at", "5"}, "invalid_input: queue: cannot open: " + dir + " is a directory"},
		{[]string{"enqueue", "--queue", dir, "--id", "A2", "--flow", "A", "--delta", "1"}, "invalid_input: queue: cannot open: " + dir + " is a directory"},
		{[]string{"migrate", "--inbox", dir}, "invalid_input: inbox: " + dir + " is a directory"},
		{[]string{"prune", "--inbox", dir, "--superseded-held"}, "invalid_input: inbox: " + dir + " is a directory"},
		// A token file that is no such file is named as the flag.
		{[]string{"console", "token", "add", "alice", "--tokens", dir}, "invalid_input: tokens: " + dir},
		// The queue's selectors are refused, not ignored, on an inbox.
		{[]string{"inspect", "--inbox", inboxDB, "--flow", "A"}, "invalid_input: flow: selects a flow of the queue's views only"},
		{[]string{"inspect", "--inbox", inboxDB, "--id", "A1"}, "invalid_input: id: selects the queue's attempts view only"},
		// A zero duration that the library would replace by its default.
		{[]string{"relay", "--queue", q, "--sink", "http://127.0.0.1:1/", "--timeout", "0s"}, "invalid_input: timeout: must be a positive duration"},
		{[]string{"relay", "--queue", q, "--sink", "http://127.0.0.1:1/", "--lease-margin", "0s"}, "invalid_input: lease-margin: must be a positive duration"},
		{[]string{"relay", "--queue", q, "--sink", "http://127.0.0.1:1/", "--lease-margin", "-1s"}, "invalid_input: lease-margin: must be a positive duration"},
		{[]string{"relay", "--queue", q, "--sink", "http://127.0.0.1:1/", "--shutdown-timeout", "0s"}, "invalid_input: shutdown-timeout: must be a positive duration"},
		{[]string{"receive", "--inbox", filepath.Join(dir, "never.db"), "--addr", "127.0.0.1:0", "--secret", "x", "--tolerance", "0s"}, "invalid_input: tolerance: must be a positive duration"},
		// A fairrelay.Policy field (policy.jitter) is named by its flag.
		{[]string{"claim", "--queue", q, "--at", "5", "--jitter", "1"}, "invalid_input: jitter: must be in [0, 1)"},
		{[]string{"relay", "--queue", q, "--sink", "http://127.0.0.1:1/", "--jitter", "-0.5"}, "invalid_input: jitter: must be in [0, 1)"},
		{[]string{"claim", "--queue", q, "--at", "5", "--backoff-base", "10s", "--backoff-cap", "1s"}, "invalid_input: backoff-cap: must be at least --backoff-base (10s), got 1s"},
		// Only the base given, above the default cap: the base is named.
		{[]string{"claim", "--queue", q, "--at", "5", "--backoff-base", "10m"}, "invalid_input: backoff-base: must be at most --backoff-cap (5m0s), got 10m0s"},
		{[]string{"script", "--queue", filepath.Join(dir, "s.db"), "--inbox", filepath.Join(dir, "si.db"), "--backoff-base", "9"}, "invalid_input: backoff-base: must be at most --backoff-cap (8), got 9"},
		{[]string{"inspect", "--queue", q, "everything"}, "view: unknown view"},
		// An inbox's view asked of --queue says where it is (a fresh
		// user's report).
		{[]string{"inspect", "--queue", q, "receipts"}, "receipts is an inbox's view: give the inbox with --inbox I instead of --queue"},
		// A rotation's old secrets given as one comma-separated value were
		// taken as one key matching neither (a fresh user's report).
		{[]string{"receive", "--inbox", filepath.Join(dir, "never.db"), "--addr", "127.0.0.1:0", "--secret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "--previous-secret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw,whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, "invalid_input: previous-secret: holds a comma-separated list of secrets: give --previous-secret once per secret"},
		{[]string{"experiment", "check", "--frozen", filepath.Join(dir, "none.json")}, "invalid_input: frozen: cannot read the frozen results"},
		// The store given as the view: the message says where it goes.
		{[]string{"inspect", q}, "the store is given with --queue Q (or --inbox I, whose views are receipts, projection, held and waivers)"},
		// A waive missing its flow and seq names --queue, the usual way.
		{[]string{"waive", "--inbox", filepath.Join(dir, "never.db"), "--id", "A1", "--reason", "x"}, "invalid_input: flow: missing: give --flow and --seq (or --queue Q, where the event's flow and seq are read)"},
		{[]string{"inspect", "--queue", filepath.Join(dir, "typo.db")}, "typo.db does not exist"},
		{[]string{"settle", "--queue", filepath.Join(dir, "typo.db"), "--id", "A1", "--generation", "1", "--outcome", "accepted", "--at", "5"}, "typo.db does not exist"},
		{[]string{"script", "--queue", q, "--inbox", q}, "inbox: names the same store as --queue"},
		{[]string{"migrate", "--queue", filepath.Join(dir, "both.db"), "--inbox", filepath.Join(dir, ".", "both.db")}, "inbox: names the same store as --queue"},
		{[]string{"inspect", "--queue", inboxDB}, "not_a_database: queue: open: the file holds a fairrelay inbox, not a queue store"},
		{[]string{"enqueue", "--queue", q, "--id", "A1", "--flow", "B", "--delta", "1"}, `id "A1" is stored with another flow or body (conflict)`},
		{[]string{"redrive", "--queue", q, "--all", "--reason-is", "unsuported_delta", "--reason", "x"}, `reason-is: "unsuported_delta" is not a quarantine reason`},
		{[]string{"migrate", "--inbox", q}, "not_a_database: inbox: open inbox: the file holds a fairrelay queue store, not an inbox"},
		{[]string{"console", "--queue", q, "--addr", "127.0.0.1:0", "--tokens", filepath.Join(dir, "missing.txt")}, "invalid_input: tokens: open " + filepath.Join(dir, "missing.txt")},
		// Issue 15: names HTTP would mangle, operator text that would forge
		// audit lines or drive a terminal, a negative token generation.
		{[]string{"enqueue", "--queue", q, "--id", "S1 ", "--flow", "S", "--delta", "1"}, "id: ends with white space"},
		{[]string{"enqueue", "--queue", q, "--id", "S1", "--flow", "S\u0085", "--delta", "1"}, "flow: control character U+0085"},
		{[]string{"settle", "--queue", q, "--id", "A1", "--generation", "-1", "--outcome", "accepted"}, "generation: must not be negative"},
		{[]string{"receive", "--inbox", filepath.Join(dir, "never.db"), "--read-timeout", "0s"}, "read-timeout: must be a positive duration"},
		{[]string{"receive", "--inbox", filepath.Join(dir, "never.db"), "--max-requests", "0"}, "max-requests: must be at least 1"},
		{[]string{"receive", "--inbox", filepath.Join(dir, "never.db"), "--metrics-addr", "nonsense"}, "invalid_input: metrics-addr: want HOST:PORT"},
		{[]string{"receive", "--inbox", filepath.Join(dir, "never.db"), "--secret", "x", "--log-format", "logfmt"}, `invalid_input: log-format: must be text or json, got "logfmt"`},
		{[]string{"console", "--queue", q, "--log-format", "yaml"}, `invalid_input: log-format: must be text or json, got "yaml"`},
		{[]string{"redrive", "--queue", q, "--id", "A1", "--expected-generation", "1", "--reason", "fixed\n2\t0\tA1\tredrive", "--operator", "me"}, "reason: control character U+000A"},
		{[]string{"redrive", "--queue", q, "--id", "A1", "--expected-generation", "1", "--reason", "fixed", "--operator", "me\x1b[2J"}, "operator: control character U+001B"},
	}
	for _, c := range cases {
		out, errOut, code := cli(t, "", c.args...)
		if strings.Contains(out, `"status":"conflict"`) {
			out = "" // a conflict prints its answer, then fails
		}
		want := exitFailed
		if strings.Contains(c.want, "(conflict)") {
			want = exitNotApplied // an answer, not an error
		}
		if code != want || out != "" || !strings.Contains(errOut, c.want) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("%v: exit %d stdout %q stderr %q; want exit %d and one stderr line containing %q", c.args, code, out, errOut, want, c.want)
		}
	}
	out, _, _ := cli(t, "", "inspect", "--queue", q, "heads", "--json")
	if !strings.Contains(out, `"seq":1,`) || strings.Contains(out, "A2") {
		t.Fatalf("bad input changed the store: %s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "typo.db")); err == nil {
		t.Fatal("inspect of a mistyped path created the file")
	}
	if _, err := os.Stat(filepath.Join(dir, "never.db")); err == nil {
		t.Fatal("a refused receive created its inbox")
	}
	if _, err := os.Stat(filepath.Join(dir, "both.db")); err == nil {
		t.Fatal("migrate of one file as queue and inbox created it")
	}
}

// cobra's own flag-parse errors (an unknown flag, a value that does not
// parse, a flag without its value) are input errors like the commands'
// own: one stderr line `fairrelay: invalid_input: FLAG: message`, exit 2,
// nothing created.
func TestFlagParseErrorsNameTheFlag(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	q := filepath.Join(dir, "q.db")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"relay", "--queue", q, "--workers", "abc"}, `workers: "abc" is not an integer`},
		{[]string{"relay", "--queue", q, "--workers", "99999999999999999999"}, `workers: "99999999999999999999" is out of range for an integer`},
		{[]string{"relay", "--queue", q, "--timeout", "soon"}, `timeout: "soon" is not a duration such as 30s`},
		{[]string{"relay", "--queue", q, "--jitter", "x"}, `jitter: "x" is not a number`},
		{[]string{"prune", "--queue", q, "--acked-before", "5m", "--ids-before", "0"}, `acked-before: "5m" is not an integer: a tick of the store's logical clock (1 tick = 1 ms of a running relay`},
		{[]string{"claim", "--queue", q, "--at", "1.5"}, `at: "1.5" is not an integer: a tick of the store's logical clock`},
		{[]string{"relay", "--queue", q, "--lease", "30000"}, `lease: "30000" has no unit: give a duration such as 30s`},
		// The same words for pflag's duration flags, and days explained (a
		// fresh user: --retain-acked 7 and 7d).
		{[]string{"relay", "--queue", q, "--retain-acked", "7"}, `retain-acked: "7" has no unit: give a duration such as 30s`},
		{[]string{"relay", "--queue", q, "--retain-acked", "7d"}, `retain-acked: "7d": durations have no days; give hours: 7d is 168h`},
		{[]string{"relay", "--queue", q, "--lease", "1.5d"}, `lease: "1.5d": durations have no days; give hours: 1.5d is 36h`},
		// Written as a duration, too large: not "not a duration" (a breaker).
		{[]string{"prune", "--inbox", q, "--receipts-older-than", "9999999h"}, `receipts-older-than: "9999999h" is out of range: a duration is at most 2562047h47m16s`},
		{[]string{"prune", "--inbox", q, "--receipts-older-than", "1hh"}, `receipts-older-than: "1hh" is not a duration such as 30s`},
		{[]string{"relay", "--queue", q, "--lease", "s"}, `lease: "s" is not a duration such as 30s`},
		{[]string{"relay", "--queue", q, "--lease", ".s"}, `lease: ".s" is not a duration such as 30s`},
		{[]string{"inspect", "--queue", q, "--json=maybe"}, `json: "maybe" is not true or false`},
		{[]string{"enqueue", "--queue", q, "--id"}, "id: needs a value: give --id VALUE"},
		{[]string{"experiment", "run", "-o"}, "output: needs a value: give --output VALUE"},
		{[]string{"claim", "--queue", q, "--bogus"}, "bogus: unknown flag --bogus for fairrelay claim"},
		{[]string{"--bogus"}, "bogus: unknown flag --bogus for fairrelay"},
		{[]string{"claim", "--queue", q, "-x"}, "x: unknown flag -x for fairrelay claim"},
		{[]string{"claim", "--queue", q, "---at", "5"}, `at: bad flag syntax "---at"`},
		// Refused before the store is opened, created or migrated (a
		// breaker's report: the console's address was tried after).
		{[]string{"relay", "--queue", q, "--sink", "http://127.0.0.1:1/", "--console-addr", "127.0.0.1:99999"}, "console-addr: listen tcp: address 99999: invalid port"},
		{[]string{"console", "--queue", q, "--addr", "127.0.0.1:99999"}, "addr: listen tcp: address 99999: invalid port"},
		{[]string{"relay", "--queue", q, "--sink", "http://127.0.0.1:1/", "--console-addr", "127.0.0.1:0", "--auth-header", "X User"}, `auth-header: "X User" is not an HTTP header name`},
		{[]string{"console", "--queue", q, "--auth-header", "X-User:"}, `auth-header: "X-User:" is not an HTTP header name`},
		{[]string{"relay", "--queue", q, "--sink", "http://127.0.0.1:1/", "--max-tick-jump", "-5s"}, "max-tick-jump: must not be negative, got -5s"},
		// Integers are decimal: pflag read Go's syntax for any base, so
		// --at 0x10 wrote at tick 16 (a breaker's report).
		{[]string{"pause", "--queue", q, "--flow", "A", "--reason", "r", "--at", "0x10"}, `at: "0x10" is not an integer as JSON writes one (decimal, no leading 0 or +): a tick`},
		{[]string{"settle", "--queue", q, "--id", "A1", "--generation", "0b1", "--outcome", "accepted", "--at", "5"}, `generation: "0b1" is not an integer as JSON writes one`},
		{[]string{"settle", "--queue", q, "--id", "A1", "--generation", "1", "--outcome", "accepted", "--at", "1_000"}, `at: "1_000" is not an integer as JSON writes one`},
		{[]string{"configure", "--queue", q, "--group", "g", "--weight", "0o7"}, `weight: "0o7" is not an integer as JSON writes one`},
		{[]string{"pause", "--queue", q, "--flow", "A", "--reason", "r", "--at", "0100"}, `at: "0100" is not an integer as JSON writes one`},
		{[]string{"pause", "--queue", q, "--flow", "A", "--reason", "r", "--at", "+200"}, `at: "+200" is not an integer as JSON writes one`},
		// A flag given twice: pflag kept the last (a breaker's report:
		// the second --queue was paused, the second --outcome settled).
		{[]string{"pause", "--queue", q, "--queue", q + "2", "--flow", "A", "--reason", "r"}, "queue: given twice: give it once"},
		{[]string{"settle", "--queue", q, "--id", "A1", "--generation", "1", "--outcome", "retry", "--outcome", "accepted", "--at", "5"}, "outcome: given twice: give it once"},
		{[]string{"enqueue", "--queue", q, "--id", "A1", "--flow", "A", "--delta", "5", "--delta", "500"}, "delta: given twice: give it once"},
		{[]string{"relay", "--queue", q + "-none", "--sink", "http://127.0.0.1:1/", "--must-exist", "--must-exist"}, "must-exist: given twice: give it once"},
	} {
		out, errOut, code := cli(t, "", c.args...)
		want := "fairrelay: invalid_input: " + c.want
		if code != exitFailed || out != "" || !strings.HasPrefix(errOut, want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d stdout %q stderr %q; want exit %d and one stderr line starting %q", c.args, code, out, errOut, exitFailed, want)
		}
	}
	if m, _ := filepath.Glob(q + "*"); len(m) != 0 {
		t.Errorf("a command refused for its flags created %v", m)
	}
	// A plain decimal is the tick it says.
	if out, errOut, code := cli(t, "", "enqueue", "--queue", q, "--id", "A1", "--flow", "A", "--delta", "1", "--at", "100"); code != 0 {
		t.Fatalf("enqueue --at 100: exit %d %q %q", code, out, errOut)
	}
	if out, _, _ := cli(t, "", "inspect", "--queue", q, "clock", "--json"); !strings.Contains(out, `"tick":100`) {
		t.Errorf("after enqueue --at 100 the store's clock is %s, want tick 100", out)
	}
}

// TestSameStore: the queue and the inbox are separate stores (SPEC §4); a
// PostgreSQL store is a schema of a database of a server.
func TestSameStore(t *testing.T) {
	t.Parallel()
	const pg = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{pg + "&schema=relay", pg + "&schema=relay", true},
		{pg + "&schema=relay", "postgres://postgres@127.0.0.1:5432/test?schema=relay&sslmode=require", true},
		{pg + "&schema=relay", pg + "&schema=relay_inbox", false},
		{pg + "&schema=relay", "postgres://postgres@127.0.0.1:5432/other?schema=relay", false},
		{pg + "&schema=relay", "postgres://postgres@127.0.0.1:5433/test?schema=relay", false},
		// Without schema=, the store is the search_path's first schema (a
		// breaker's report: two such URLs were refused as one store).
		{pg + "&search_path=q1", pg + "&search_path=i1", false},
		{pg + "&search_path=q1", pg + "&SEARCH_PATH=q1", true},
		{pg + "&search_path=q1", pg + "&schema=q1", true},
		{pg + "&search_path=q1,public", pg + "&search_path=%22q1%22", true},
		{pg, pg + "&search_path=q1", false},
		{pg, pg + "&schema=public", true},
		// One store however the URL spells it (a breaker's report: these
		// passed as two, and the inbox was refused only after the queue
		// store had been made); two stores however alike.
		{pg + "&schema=q1", pg + "&search_path=Q1", true},
		{pg + "&schema=q1", pg + "&search_path=%22Q1%22", false},
		{pg + "&search_path=A", pg + "&search_path=%22A%22", false},
		{pg + "&schema=u", pg + "&options=-c%20search_path%3Du", true},
		{pg + "&schema=u", pg + "&options=-csearch_path%3Du%20-c%20work_mem%3D4MB", true},
		{pg, pg + "&search_path=public", true},
		{pg + "&schema=relay", "postgres://postgres@localhost/test?schema=relay", true},
		{pg + "&schema=relay", "postgres://postgres@/?host=127.0.0.1&port=5432&dbname=test&schema=relay", true},
		{pg + "&schema=relay", "postgres://postgres@127.0.0.1:5432/test2?schema=relay", false},
		{"q.db", "./q.db", true},
		{"q.db", "i.db", false},
		{"q.db", "", false},
	} {
		if got := sameStore(c.a, c.b); got != c.same {
			t.Errorf("sameStore(%q, %q) = %v, want %v", c.a, c.b, got, c.same)
		}
	}
}

// TestOperatorCommandsAtTheStoredTick drives a store the way an operator
// does beside a running relay: no --at (the stored tick), inspect clock, and
// redrive --all for every head a bad deploy quarantined.
func TestOperatorCommandsAtTheStoredTick(t *testing.T) {
	t.Parallel()
	q := filepath.Join(t.TempDir(), "q.db")
	run := func(args ...string) string {
		t.Helper()
		out, errOut, code := cli(t, "", args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		return strings.TrimSpace(out)
	}
	for _, f := range []string{"A", "B", "C"} {
		run("enqueue", "--queue", q, "--id", f+"1", "--flow", f, "--delta", "1", "--at", "41000")
	}
	if got := run("inspect", "--queue", q, "clock", "--json"); got != `{"tick":41000,"ticket":0}` {
		t.Fatalf("clock: %s", got)
	}
	for range 3 {
		c := run("claim", "--queue", q)
		var cl struct {
			ID         string `json:"id"`
			LeaseUntil int64  `json:"lease_until"`
		}
		json.Unmarshal([]byte(c), &cl)
		if cl.LeaseUntil != 41000+30000 {
			t.Fatalf("claim without --at: %s, want the stored tick plus the daemon's 30000 lease", c)
		}
		reason := "rejected"
		if cl.ID == "C1" {
			reason = "id_conflict"
		}
		if got := run("settle", "--queue", q, "--id", cl.ID, "--generation", "1", "--outcome", reason); got != `{"status":"quarantined"}` {
			t.Fatalf("settle %s: %s", cl.ID, got)
		}
	}
	// An empty reason is rejected once, before any head (SPEC §2: empty_reason
	// is checked first), and the summary says so, not that the heads changed
	// meanwhile.
	if out, errOut, code := cli(t, "", "redrive", "--queue", q, "--all", "--reason-is", "rejected", "--reason", ""); code != 1 ||
		out != `{"reason":"empty_reason","status":"rejected"}`+"\n" || !strings.Contains(errOut, "rejected (empty_reason)") {
		t.Fatalf("redrive --all --reason '': exit %d, %q %q; want exit 1 and one empty_reason rejection", code, out, errOut)
	}
	got := run("redrive", "--queue", q, "--all", "--reason-is", "rejected", "--reason", "receiver fixed", "--operator", "ops")
	if got != `{"generation":2,"id":"A1","status":"ready"}`+"\n"+`{"generation":2,"id":"B1","status":"ready"}` {
		t.Fatalf("redrive --all:\n%s", got)
	}
	if got := run("inspect", "--queue", q, "quarantined", "--json"); !strings.Contains(got, `"id":"C1"`) || strings.Contains(got, `"A1"`) {
		t.Fatalf("only C1 (another reason) must stay quarantined:\n%s", got)
	}
	if got := run("inspect", "--queue", q, "audit", "--json"); strings.Count(got, `"at":41000`) != 2 {
		t.Fatalf("audit rows at the stored tick:\n%s", got)
	}
}

func TestDemoEndsWithTheArticleProjection(t *testing.T) {
	t.Parallel()
	out, errOut, code := cli(t, "", "demo", "--dir", t.TempDir())
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "A1 was quarantined (unsupported_delta)") {
		t.Fatalf("demo did not quarantine A1:\n%s", out)
	}
	// Not a terminal: no progress bar, and none of its line breaks either.
	if errOut != "" || strings.Contains(out, "\n\n\n") {
		t.Errorf("blank lines or a bar without a terminal; stderr %q, stdout:\n%s", errOut, out)
	}
	// The first table: A quarantined, every other flow done; the final one:
	// every flow done, A with seq 2 and total 11 (SPEC §5 result 3).
	tables := strings.Split(out, "FLOW  EVENTS")
	if len(tables) != 3 {
		t.Fatalf("want two flow tables:\n%s", out)
	}
	for i, table := range tables[1:] {
		for _, line := range strings.Split(table, "\n")[1:] {
			f := strings.Fields(line)
			if len(f) != 8 {
				break
			}
			switch {
			case f[0] == "A" && i == 0:
				if f[3] != "A1" || f[4] != "quarantined" {
					t.Errorf("first table, flow A: %s", line)
				}
			case f[0] == "A" && f[6]+" "+f[7] != "2 11":
				t.Errorf("final table, flow A: %s, want seq 2 total 11", line)
			case f[0] != "A" && f[4] != "done":
				t.Errorf("table %d: flow %s not done: %s", i+1, f[0], line)
			}
		}
	}
	if !strings.Contains(out, "308 receipts for 308 events") {
		t.Fatalf("demo end state:\n%s", out)
	}
}

// A demo whose reader goes away (demo | head -1) still removes its
// temporary folder: the pipe closing must not kill it before the cleanup.
func TestDemoWithAClosedPipeRemovesItsFolder(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	cmd := exec.Command(os.Args[0], "demo")
	cmd.Env = append(os.Environ(), "FAIRRELAY_TEST_AS_CLI=1", "TMPDIR="+tmp)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	first, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	out.Close() // the reader goes away, as head does
	_, rest, ok := strings.Cut(strings.TrimSpace(first), "files in ")
	dir, _, _ := strings.Cut(rest, " ")
	if !ok || !strings.HasPrefix(dir, tmp) || !strings.Contains(rest, "removed at the end") {
		t.Fatalf("first line %q: want the folder under %s", first, tmp)
	}
	cmd.Wait() // its exit status after a broken pipe is not the point
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s is still there after the demo ended (stat: %v)", dir, err)
	}
}

// inspect says when a page is full and how to ask for the next one, and
// refuses a paging flag its view does not take instead of ignoring it. (And
// a redrive without --operator names the OS user in its audit rows.)
func TestInspectPages(t *testing.T) {
	t.Parallel()
	q := filepath.Join(t.TempDir(), "q.db")
	var in strings.Builder
	in.WriteString(`{"op":"inbox","max_delta":5}` + "\n")
	for i := range 5 {
		fmt.Fprintf(&in, `{"op":"enqueue","id":"Q%d","flow":"Q%d","delta":10,"at":0}`+"\n", i, i)
	}
	for range 5 {
		in.WriteString(`{"op":"step","at":0}` + "\n") // each quarantined: delta 10 > max_delta 5
	}
	if _, errOut, code := cli(t, in.String(), "script", "--queue", q, "--inbox", filepath.Join(t.TempDir(), "i.db")); code != 0 {
		t.Fatalf("script: exit %d: %s", code, errOut)
	}
	// The quarantined heads in pages of 2, each page's hint naming the next.
	var quarantined []string
	next := []string{}
	for page := range 3 {
		out, errOut, code := cli(t, "", append([]string{"inspect", "--queue", q, "quarantined", "--limit", "2"}, next...)...)
		if code != 0 {
			t.Fatalf("quarantined page %d: exit %d: %s", page, code, errOut)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")[1:]
		for _, l := range lines {
			quarantined = append(quarantined, strings.Fields(l)[0])
		}
		if _, hint, ok := strings.Cut(strings.TrimSpace(errOut), "ask again with "); ok {
			next = strings.Fields(hint)
		} else if len(lines) == 2 {
			t.Fatalf("quarantined page %d: a full page without a hint: %q", page, errOut)
		}
	}
	if got := strings.Join(quarantined, " "); got != "Q0 Q1 Q2 Q3 Q4" {
		t.Fatalf("quarantined over the pages: %s, want each head once, in flow order", got)
	}
	// No --operator: the audit rows name the account that ran it.
	if _, errOut, code := cli(t, "", "redrive", "--queue", q, "--all", "--reason", "fixed", "--at", "1"); code != 0 {
		t.Fatalf("redrive: exit %d: %s", code, errOut)
	}
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	if out, _, _ := cli(t, "", "inspect", "--queue", q, "audit", "--json"); strings.Count(out, `"operator":"`+me.Username+`"`) != 5 {
		t.Fatalf("audit rows of a redrive without --operator, want operator %q:\n%s", me.Username, out)
	}
	// Audit in pages of 2: 2, 2, 1 rows, each page's hint naming the next.
	var ids []string
	after := "0"
	for page := range 3 {
		out, errOut, code := cli(t, "", "inspect", "--queue", q, "audit", "--limit", "2", "--after-no", after)
		if code != 0 {
			t.Fatalf("audit page %d: exit %d: %s", page, code, errOut)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")[1:] // past the header
		for _, l := range lines {
			ids = append(ids, strings.Fields(l)[3])
		}
		hint := strings.Contains(errOut, "more may follow")
		if (len(lines) == 2) != hint {
			t.Fatalf("audit page %d: %d rows, stderr %q", page, len(lines), errOut)
		}
		if hint {
			_, after, _ = strings.Cut(strings.TrimSpace(errOut), "--after-no ")
		}
	}
	if got := strings.Join(ids, " "); got != "Q0 Q1 Q2 Q3 Q4" {
		t.Fatalf("audit rows over the pages: %s, want each redrive once, in order", got)
	}
	for _, args := range [][]string{
		{"inspect", "--queue", q, "audit", "--after", "Q1"},
		{"inspect", "--queue", q, "clock", "--after", "Q1"},
		{"inspect", "--queue", q, "heads", "--after-no", "3"},
	} {
		_, errOut, code := cli(t, "", args...)
		if code == 0 || !strings.Contains(errOut, "pages the") {
			t.Fatalf("%v: exit %d, stderr %q; want it refused", args, code, errOut)
		}
	}
}

// TestRedriveAllPastOnePage: redrive --all reads every quarantined head,
// however many; it once looked at the first 10 000 only, so a head past
// them was never found.
func TestRedriveAllPastOnePage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "q.db")
	q, err := fairrelay.Open(ctx, path, fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		t.Fatal(err)
	}
	const n = 10_050
	evs := make([]fairrelay.NewEvent, n)
	for i := range evs {
		evs[i] = fairrelay.NewEvent{ID: fmt.Sprintf("E%05d", i), Flow: fmt.Sprintf("F%05d", i), Body: []byte(`{"delta":1}`)}
	}
	if _, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: 0, Events: evs}); err != nil {
		t.Fatal(err)
	}
	r, err := q.Claim(ctx, fairrelay.ClaimParams{At: 0, Limit: n})
	if err != nil || len(r.Claims) != n {
		t.Fatalf("claim: %d, %v", len(r.Claims), err)
	}
	// The last three past the first 10 000 for another reason.
	ss := make([]fairrelay.Settlement, n)
	for i, c := range r.Claims {
		ss[i] = fairrelay.Settlement{Token: c.Token, Outcome: fairrelay.OutcomeRejected}
		if i >= n-3 {
			ss[i].Outcome = fairrelay.OutcomeIDConflict
		}
	}
	if _, err := q.SettleMany(ctx, fairrelay.SettleManyParams{At: 0, Settles: ss}); err != nil {
		t.Fatal(err)
	}
	q.Close()
	last := fmt.Sprintf("F%05d", n-1)
	out, errOut, code := cli(t, "", "redrive", "--queue", path, "--all", "--flow", last, "--reason", "fixed", "--operator", "ops", "--at", "1")
	if code != 0 || strings.TrimSpace(out) != fmt.Sprintf(`{"generation":2,"id":"E%05d","status":"ready"}`, n-1) {
		t.Fatalf("redrive --all --flow %s: exit %d\n%s\n%s", last, code, out, errOut)
	}
	out, errOut, code = cli(t, "", "redrive", "--queue", path, "--all", "--reason-is", "id_conflict", "--reason", "fixed", "--operator", "ops", "--at", "1")
	if code != 0 || strings.Count(out, `"status":"ready"`) != 2 {
		t.Fatalf("redrive --all --reason-is id_conflict: exit %d, want the 2 left\n%s\n%s", code, out, errOut)
	}
}

// TestMissingStoreSaysSoOnce: the error of a store that does not exist
// names the field and says what is wrong once (it once repeated itself).
func TestMissingStoreSaysSoOnce(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "nope.db")
	_, errOut, code := cli(t, "", "inspect", "--queue", path)
	if code != 2 || strings.Count(errOut, "no queue store there") != 1 || !strings.Contains(errOut, "queue: no queue store there: "+path) {
		t.Fatalf("exit %d, stderr %q: want exit 2 and the reason once, after the field", code, errOut)
	}
}

// A PostgreSQL server that refuses the connection is said once: pgx lists
// each attempt (with TLS, then without), the same refused dial twice, and
// the one error line printed both. The port is one this test listened on
// and closed, so nothing listens there.
func TestRefusedConnectionSaysSoOnce(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	for _, args := range [][]string{
		{"inspect", "--queue", "postgres://" + addr + "/test", "flows"},
		{"migrate", "--inbox", "postgres://" + addr + "/test"},
	} {
		_, errOut, code := cli(t, "", args...)
		if code != 2 || strings.Count(errOut, "connection refused") != 1 || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line saying the connection was refused once", args, code, errOut)
		}
	}
}

// Argument errors come out as input errors, like the flags': an unknown
// command (cobra printed its own text, and for a group of commands its
// help with exit code 0), too many or too few arguments.
func TestArgumentErrorsAreInputErrors(t *testing.T) {
	t.Parallel()
	q := filepath.Join(t.TempDir(), "q.db")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"nosuchcmd"}, "invalid_input: command: unknown command \"nosuchcmd\""},
		{[]string{"claimm", "--queue", q}, "invalid_input: command: unknown command \"claimm\""},
		{[]string{"console", "tokn", "--tokens", q}, "invalid_input: command: unknown command \"tokn\""},
		{[]string{"console", "token", "bogus"}, "invalid_input: command: unknown command \"bogus\""},
		{[]string{"completion", "bogus"}, "invalid_input: command: unknown command \"bogus\""},
		{[]string{"claim", "--queue", q, "extra"}, "invalid_input: args:"},
		{[]string{"console", "token", "add", "--tokens", filepath.Join(t.TempDir(), "t")}, "invalid_input: args: accepts 1 arg(s), received 0"},
	} {
		if _, errOut, code := cli(t, "", tc.args...); code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d, %q; want exit 2 and %s", tc.args, code, errOut, tc.want)
		}
	}
	// A group of commands without arguments still shows its help.
	if out, _, code := cli(t, "", "console", "token"); code != 0 || !strings.Contains(out, "add") {
		t.Errorf("console token: exit %d, %q; want its help", code, out)
	}
	if out, _, code := cli(t, "", "completion", "bash"); code != 0 || !strings.Contains(out, "bash completion") {
		t.Errorf("completion bash: exit %d, %.80q; want the script", code, out)
	}
}

// A flag whose empty value would mean "not given" is refused when given
// as "": redrive --all --flow "$F" with F unset must not redrive every
// flow (a breaker's report), enqueue --group "" must not put the flow in
// no group, --secret "" must not turn signing off. Nothing changes.
func TestExplicitlyEmptyFlagsAreRefused(t *testing.T) {
	t.Parallel()
	q := filepath.Join(t.TempDir(), "q.db")
	for _, f := range []string{"A", "B"} {
		if _, e, code := cli(t, "", "enqueue", "--queue", q, "--id", f+"1", "--flow", f, "--delta", "1", "--at", "0"); code != 0 {
			t.Fatal(e)
		}
		if _, e, code := cli(t, "", "claim", "--queue", q, "--at", "0"); code != 0 {
			t.Fatal(e)
		}
	}
	for _, f := range []string{"A1", "B1"} {
		if _, e, code := cli(t, "", "settle", "--queue", q, "--id", f, "--generation", "1", "--outcome", "rejected", "--at", "0"); code != 0 {
			t.Fatal(e)
		}
	}
	before, _, _ := cli(t, "", "inspect", "--queue", q, "heads", "--json")
	for _, tc := range []struct {
		args  []string
		field string
	}{
		{[]string{"redrive", "--queue", q, "--all", "--flow", "", "--reason", "r", "--at", "1"}, "flow"},
		{[]string{"redrive", "--queue", q, "--all", "--reason-is", "", "--reason", "r", "--at", "1"}, "reason-is"},
		{[]string{"redrive", "--queue", q, "--all", "--reason", "r", "--operator", "", "--at", "1"}, "operator"},
		{[]string{"enqueue", "--queue", q, "--id", "C1", "--flow", "C", "--group", "", "--delta", "1", "--at", "1"}, "group"},
		{[]string{"relay", "--queue", q, "--sink", "http://127.0.0.1:1/", "--secret", ""}, "secret"},
		{[]string{"receive", "--inbox", filepath.Join(t.TempDir(), "i.db"), "--addr", "127.0.0.1:0", "--secret", ""}, "secret"},
		{[]string{"console", "--queue", q, "--addr", "127.0.0.1:0", "--tokens", ""}, "tokens"},
		{[]string{"console", "--queue", q, "--addr", "127.0.0.1:0", "--inbox", ""}, "inbox"},
		{[]string{"relay", "--queue", q, "--sink", "http://127.0.0.1:1/", "--name", ""}, "name"},
		{[]string{"relay", "--queue", q, "--sink", "http://127.0.0.1:1/", "--permanent-status", ""}, "permanent-status"},
		{[]string{"relay", "--queue", q, "--sink", ""}, "sink"},
		{[]string{"receive", "--inbox", filepath.Join(t.TempDir(), "i.db"), "--from", ""}, "from"},
		{[]string{"inspect", "--queue", q, "--inbox", ""}, "inbox"},
		{[]string{"claim", "--queue", "", "--at", "1"}, "queue"},
	} {
		if _, errOut, code := cli(t, "", tc.args...); code != 2 || !strings.Contains(errOut, "invalid_input: "+tc.field+": must not be empty") {
			t.Errorf("%q: exit %d, %q; want invalid_input naming %s", tc.args, code, errOut, tc.field)
		}
	}
	if after, _, _ := cli(t, "", "inspect", "--queue", q, "heads", "--json"); after != before {
		t.Errorf("refused commands changed the store:\n%s\nwas:\n%s", after, before)
	}
}

// $FAIRRELAY_SECRET set but empty is refused as --secret "" is, naming the
// variable, before anything is opened: it silently meant "no signing" (an
// env file whose value was lost turned signing off with only a warning).
// Set, it is the secret; --secret given, the variable is not read.
func TestEmptySecretVariableIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	q, in := filepath.Join(dir, "q.db"), filepath.Join(dir, "i.db")
	// A bad flag that is checked later, so that the variable's error
	// shows it comes first (and a run that took the variable would stop).
	for _, args := range [][]string{
		{"relay", "--queue", q, "--sink", "http://127.0.0.1:1/", "--timeout", "0s"},
		{"receive", "--inbox", in, "--addr", "127.0.0.1:0", "--tolerance", "0s"},
	} {
		out, errOut, code := cliEnv(t, []string{secretEnv + "="}, "", args...)
		if code != 2 || out != "" || !strings.HasPrefix(errOut, "fairrelay: invalid_input: "+secretEnv+": is set but empty") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%s with %s=\"\": exit %d, stdout %q, stderr %q; want exit 2 and one line of invalid_input naming the variable", args[0], secretEnv, code, out, errOut)
		}
	}
	for _, p := range []string{q, in} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("refused for an empty %s, yet %s exists (%v)", secretEnv, p, err)
		}
	}
	// --secret given: the variable is not read.
	if _, errOut, code := cliEnv(t, []string{secretEnv + "="}, "", "receive", "--inbox", in, "--addr", "127.0.0.1:0", "--secret", "s", "--tolerance", "0s"); code != 2 || !strings.Contains(errOut, "invalid_input: tolerance:") {
		t.Errorf("receive --secret s with %s=\"\": exit %d, %q; want the variable ignored (and the bad --tolerance named)", secretEnv, code, errOut)
	}
}

// A command refused for what needs no store — a missing flag, a standard
// input that is a directory — creates none: script without --inbox made
// the queue's file, and a directory on stdin made both stores before the
// read failed, with no error code (a breaker's sweep).
func TestRefusalsBeforeTheStoreCreateNone(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	q, in := filepath.Join(dir, "q.db"), filepath.Join(dir, "i.db")
	text := filepath.Join(t.TempDir(), "text.db")
	if err := os.WriteFile(text, []byte("not a database, some text"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args     []string
		dirStdin bool
		want     string
	}{
		{[]string{"script", "--queue", q}, false, "invalid_input: inbox: missing: give --inbox"},
		{[]string{"migrate", "--queue", q, "--inbox", text}, false, "not_a_database: inbox: " + text + " is not a SQLite database"},
		{[]string{"script", "--queue", q, "--inbox", text}, false, "not_a_database: inbox: " + text + " is not a SQLite database"},
		{[]string{"script", "--queue", q, "--inbox", in}, true, "invalid_input: stdin: is a directory"},
		{[]string{"enqueue", "--queue", q}, true, "invalid_input: stdin: is a directory"},
	} {
		cmd := exec.Command(os.Args[0], c.args...)
		cmd.Env = append(os.Environ(), "FAIRRELAY_TEST_AS_CLI=1")
		if c.dirStdin {
			d, err := os.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			cmd.Stdin = d
		}
		var e bytes.Buffer
		cmd.Stderr = &e
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitFailed || !strings.Contains(e.String(), c.want) {
			t.Errorf("%v: %v, stderr %q; want exit %d and %q", c.args, err, e.String(), exitFailed, c.want)
		}
		for _, p := range []string{q, in} {
			if _, err := os.Stat(p); err == nil {
				t.Fatalf("%v created %s", c.args, p)
			}
		}
	}
}

// A store file this process may not write opens read-only in SQLite,
// without an error: every command that writes now refuses it at open,
// naming the flag and the cause, where its first write failed "attempt to
// write a readonly database" (a database error), and enqueue, relay and
// receive no longer take it for another application's database; inspect,
// which only reads, still reads it (a breaker's sweep). As root (which
// writes any file) the commands run as the user nobody.
func TestAStoreThisProcessMayNotWriteIsRefusedAtOpen(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "fairrelay-ro-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	q, in := filepath.Join(dir, "q.db"), filepath.Join(dir, "i.db")
	if _, e, code := cli(t, "", "enqueue", "--queue", q, "--id", "a", "--flow", "f", "--delta", "1"); code != 0 {
		t.Fatal(e)
	}
	if _, e, code := cli(t, "", "migrate", "--inbox", in); code != 0 {
		t.Fatal(e)
	}
	for _, p := range []string{q, q + "-wal", q + "-shm", in, in + "-wal", in + "-shm"} {
		if err := os.Chmod(p, 0o444); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
	bin := os.Args[0]
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		// The test binary, copied where the user nobody can run it.
		// A hard link where it can be: a copy is written through a file
		// descriptor that a fork in a parallel test can inherit, and exec
		// then fails "text file busy" until that child has exec'd (a
		// flake in a full run; run below retries it).
		bin = filepath.Join(dir, "fairrelay")
		if err := os.Link(os.Args[0], bin); err != nil {
			b, err := os.ReadFile(os.Args[0])
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(bin, b, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		cred = &syscall.Credential{Uid: 65534, Gid: 65534}
	}
	run := func(args ...string) (string, int) {
		t.Helper()
		// Bounded: a command that takes the store runs (relay, receive)
		// until it is stopped.
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "FAIRRELAY_TEST_AS_CLI=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		var e bytes.Buffer
		cmd.Stderr = &e
		err := cmd.Run()
		for try := 0; errors.Is(err, syscall.ETXTBSY) && try < 50; try++ {
			// The copy's descriptor is still open in a child forked by
			// another test; it closes when that child execs.
			time.Sleep(20 * time.Millisecond)
			cmd = exec.CommandContext(ctx, bin, args...)
			cmd.Dir, cmd.Env, cmd.SysProcAttr, cmd.Stderr = dir, append(os.Environ(), "FAIRRELAY_TEST_AS_CLI=1"), &syscall.SysProcAttr{Credential: cred}, &e
			err = cmd.Run()
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return e.String(), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return e.String(), 0
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"claim", "--queue", q}, "invalid_input: queue: cannot open: not writable: " + q},
		{[]string{"enqueue", "--queue", q, "--id", "b", "--flow", "f", "--delta", "1"}, "invalid_input: queue: cannot open: not writable: " + q},
		{[]string{"relay", "--queue", q, "--sink", "http://127.0.0.1:1/"}, "invalid_input: queue: cannot open: not writable: " + q},
		{[]string{"receive", "--inbox", in, "--addr", "127.0.0.1:0"}, "invalid_input: inbox: cannot open: not writable: " + in},
	} {
		if errOut, code := run(c.args...); code != exitFailed || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", c.args, code, errOut, exitFailed, c.want)
		}
	}
	if errOut, code := run("inspect", "--queue", q, "heads"); code != 0 {
		t.Errorf("inspect of a store it may only read: exit %d: %s", code, errOut)
	}
}

// migrate and script check both store arguments before either store is
// made: a queue created and then an inbox refused left the new queue
// behind with exit 2, "nothing changed" (a breaker's report): an inbox in a
// directory that does not exist, a symbolic link to the queue's file not
// made yet, a PostgreSQL schema name that is refused.
func TestTwoStoreCommandsMakeNeitherWhenOneIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	q := filepath.Join(dir, "q.db")
	link := filepath.Join(dir, "link.db")
	if err := os.Symlink("q.db", link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		inbox, want string
	}{
		{filepath.Join(dir, "nodir", "i.db"), "invalid_input: inbox: directory " + filepath.Join(dir, "nodir") + " does not exist"},
		{link, "invalid_input: inbox: names the same store as --queue"},
		{"postgres://postgres@127.0.0.1:5432/test?schema=information_schema", "invalid_input: inbox: schema \"information_schema\" is one of PostgreSQL's own"},
	} {
		for _, args := range [][]string{{"migrate", "--queue", q, "--inbox", c.inbox}, {"script", "--queue", q, "--inbox", c.inbox}} {
			out, errOut, code := cli(t, `{"op":"snapshot"}`+"\n", args...)
			if code != exitFailed || !strings.Contains(errOut, c.want) {
				t.Errorf("%v: exit %d %q %q, want exit 2 and %q", args, code, out, errOut, c.want)
			}
			if _, err := os.Stat(q); err == nil {
				t.Fatalf("%v: made the queue store", args)
			}
		}
	}
}

// script refuses another application's SQLite database, as queue or as
// inbox, before it makes either store, as enqueue and receive refuse it;
// before, it added its tables beside the application's (a breaker's
// report). migrate alone makes a store in such a database, on purpose.
func TestScriptRefusesAnotherApplicationsDatabase(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	app := filepath.Join(dir, "app.db")
	db, err := sql.Open("sqlite", app)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE users (id INTEGER)"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	fresh := filepath.Join(dir, "fresh.db")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"script", "--queue", fresh, "--inbox", app}, "invalid_input: inbox: " + app + " is a database that holds no inbox store"},
		{[]string{"script", "--queue", app, "--inbox", fresh}, "invalid_input: queue: " + app + " is a database that holds no queue store"},
	} {
		out, errOut, code := cli(t, `{"op":"snapshot"}`+"\n", c.args...)
		if code != exitFailed || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d %q %q, want exit 2 and %q", c.args, code, out, errOut, c.want)
		}
		if _, err := os.Stat(fresh); err == nil {
			t.Fatalf("%v: made %s", c.args, fresh)
		}
	}
	db, err = sql.Open("sqlite", app)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow("SELECT count(*) FROM sqlite_master WHERE type = 'table'").Scan(&n); err != nil || n != 1 {
		t.Errorf("the application's database holds %d tables (%v), want its own 1", n, err)
	}
}

// The same for a PostgreSQL store that cannot be made: a server that does
// not answer, and a new schema whose name is not lower case; and a
// PostgreSQL queue store is not made when the inbox is refused.
func TestTwoStoreCommandsCheckPostgresFirst(t *testing.T) {
	t.Parallel()
	base := pgtest.URL(t)
	dir := t.TempDir()
	q := filepath.Join(dir, "q.db")
	pgQueue := pgtest.Schema(t, "twostore")
	_, schema, err := pgstore.ParseDSN(pgQueue)
	if err != nil {
		t.Fatal(err)
	}
	upper, err := outboxbench.WithParams(base, "schema", "TWOSTORE_UPPER")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		queue, inbox, want string
	}{
		{q, "postgres://postgres@127.0.0.1:1/test?schema=x", "database: open inbox:"},
		{q, upper, `invalid_input: inbox: schema "TWOSTORE_UPPER" holds no store, and a new store's schema is lower case: use schema=twostore_upper`},
		{pgQueue, "postgres://postgres@127.0.0.1:1/test?schema=x", "database: open inbox:"},
	} {
		for _, cmd := range []string{"migrate", "script"} {
			args := []string{cmd, "--queue", c.queue, "--inbox", c.inbox}
			out, errOut, code := cli(t, `{"op":"snapshot"}`+"\n", args...)
			if code != exitFailed || !strings.Contains(errOut, c.want) {
				t.Errorf("%v: exit %d %q %q, want exit 2 and %q", args, code, out, errOut, c.want)
			}
			if _, err := os.Stat(q); err == nil {
				t.Fatalf("%v: made the queue store %s", args, q)
			}
			var made bool
			pgtest.QueryRow(t, base, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = '"+schema+"')", &made)
			if made {
				t.Fatalf("%v: made the queue store's schema %s", args, schema)
			}
		}
	}
}

// A store given as an argument, as sqlite3 and psql take theirs, is named
// in the refusal with the flag that takes it (a fresh user's `inspect URL
// heads` got "accepts at most 1 arg(s)" alone); and an argument that is a
// URL with a password is echoed with the password hidden, in cobra's words
// (unknown command "…") and in the CLI's own (unknown view, unknown
// command), as every store URL is in the CLI's output and logs.
func TestArgumentThatIsAStore(t *testing.T) {
	t.Parallel()
	const url = "postgres://app:hunter2@127.0.0.1:1/db"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"inspect", url, "heads"}, `"postgres://app:xxxxx@127.0.0.1:1/db" looks like a store; give it with --queue`},
		{[]string{"inspect", "heads", "queue.db"}, `"queue.db" looks like a store; give it with --queue`},
		{[]string{"enqueue", url}, `unknown command "postgres://app:xxxxx@127.0.0.1:1/db" for "fairrelay enqueue": "postgres://app:xxxxx@127.0.0.1:1/db" looks like a store; give it with --queue`},
		{[]string{"receive", "inbox.sqlite"}, `"inbox.sqlite" looks like a store; give it with --inbox`},
		{[]string{"inspect", url}, `unknown view "postgres://app:xxxxx@127.0.0.1:1/db"`},
		{[]string{url}, `unknown command "postgres://app:xxxxx@127.0.0.1:1/db" for fairrelay`},
		{[]string{"console", url}, `unknown command "postgres://app:xxxxx@127.0.0.1:1/db" for fairrelay console`},
	} {
		_, errOut, code := cli(t, "", tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) || strings.Contains(errOut, "hunter2") {
			t.Errorf("%q: exit %d, %q; want exit 2 and %s, with no password", tc.args, code, errOut, tc.want)
		}
	}
}
