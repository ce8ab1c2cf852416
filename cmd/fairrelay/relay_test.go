package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
)

// daemon is the CLI running in the background as a child process, whose
// stderr lines the test may read while it runs.
type daemon struct {
	cmd       *exec.Cmd
	firstLine chan []byte   // its first stdout line (nil at EOF)
	exited    chan struct{} // closed once it exited
	code      int           // its exit code, once exited is closed

	mu    sync.Mutex
	lines []string      // its stderr so far
	out   []string      // its stdout after the first line, so far
	grew  chan struct{} // a token when lines or out grew
}

func startCLI(t *testing.T, args ...string) *daemon {
	t.Helper()
	d := &daemon{cmd: exec.Command(os.Args[0], args...), firstLine: make(chan []byte, 1),
		exited: make(chan struct{}), grew: make(chan struct{}, 1)}
	d.cmd.Env = append(os.Environ(), "FAIRRELAY_TEST_AS_CLI=1")
	out, err := d.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errOut, err := d.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stdoutRead := make(chan struct{})
	go func() {
		defer close(stdoutRead)
		r := bufio.NewReader(out)
		line, _ := r.ReadBytes('\n')
		d.firstLine <- line
		s := bufio.NewScanner(r) // read all: never block the child on a full pipe
		s.Buffer(nil, 1<<20)
		for s.Scan() {
			d.mu.Lock()
			d.out = append(d.out, s.Text())
			d.mu.Unlock()
			select {
			case d.grew <- struct{}{}:
			default:
			}
		}
		io.Copy(io.Discard, r)
	}()
	go func() {
		s := bufio.NewScanner(errOut)
		s.Buffer(nil, 1<<20)
		for s.Scan() {
			d.mu.Lock()
			d.lines = append(d.lines, s.Text())
			d.mu.Unlock()
			select {
			case d.grew <- struct{}{}:
			default:
			}
		}
		<-stdoutRead // Wait closes the pipes: only once both are read
		d.cmd.Wait()
		d.code = d.cmd.ProcessState.ExitCode()
		close(d.exited)
	}()
	t.Cleanup(func() {
		d.cmd.Process.Kill()
		d.wait()
	})
	return d
}

// wait waits for the child to exit and returns its exit code.
func (d *daemon) wait() int {
	<-d.exited
	return d.code
}

// signal sends sig and returns the exit code.
func (d *daemon) signal(t *testing.T, sig os.Signal) int {
	t.Helper()
	if err := d.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	return d.wait()
}

// stderr returns what the child wrote to stderr so far.
func (d *daemon) stderr() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return strings.Join(d.lines, "\n")
}

// line returns the first stderr line so far that contains want, or "".
func (d *daemon) line(want string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, l := range d.lines {
		if strings.Contains(l, want) {
			return l
		}
	}
	return ""
}

// waitStdout waits up to 60 s for a stdout line (after the first) that
// contains want.
func (d *daemon) waitStdout(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		d.mu.Lock()
		found := slices.ContainsFunc(d.out, func(l string) bool { return strings.Contains(l, want) })
		d.mu.Unlock()
		if found {
			return
		}
		select {
		case <-d.grew:
		case <-d.exited:
			t.Fatalf("exited (%d) before a stdout line with %q; stderr:\n%s", d.code, want, d.stderr())
		case <-deadline:
			t.Fatalf("no stdout line with %q within 60 s; stderr:\n%s", want, d.stderr())
		}
	}
}

// waitLines waits up to 30 s for n stderr lines that contain want, failing
// the test if the child exits first.
func (d *daemon) waitLines(t *testing.T, want string, n int) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for strings.Count(d.stderr(), want) < n {
		select {
		case <-d.grew:
		case <-d.exited:
			t.Fatalf("exited (%d) before %d stderr lines with %q:\n%s", d.code, n, want, d.stderr())
		case <-deadline:
			t.Fatalf("fewer than %d stderr lines with %q within 30 s:\n%s", n, want, d.stderr())
		}
	}
}

// waitLine returns the first stderr line that contains want, waiting for
// it up to 30 s, or until the child exits without writing it.
func (d *daemon) waitLine(t *testing.T, want string) string {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		if l := d.line(want); l != "" {
			return l
		}
		select {
		case <-d.grew:
		case <-d.exited:
			if l := d.line(want); l != "" {
				return l
			}
			t.Fatalf("exited (%d) before a stderr line with %q:\n%s", d.code, want, d.stderr())
		case <-deadline:
			t.Fatalf("no stderr line with %q within 30 s:\n%s", want, d.stderr())
		}
	}
}

// startReceiver runs `fairrelay receive` on a free loopback port and
// returns it with its address, read from its first stdout line.
func startReceiver(t *testing.T, inboxPath string, args ...string) (*daemon, string) {
	t.Helper()
	d := startCLI(t, append([]string{"receive", "--inbox", inboxPath, "--addr", "127.0.0.1:0"}, args...)...)
	line := <-d.firstLine
	var l struct{ Status, Addr string }
	if err := json.Unmarshal(line, &l); err != nil || l.Status != "listening" {
		t.Fatalf("receive printed %q, not its address; stderr: %s", line, d.stderr())
	}
	return d, l.Addr
}

// waitFor polls the queue store, which another process writes (nothing in
// this process can signal), until done holds or 60s pass.
func waitFor(t *testing.T, queuePath string, what string, done func(s *fairrelay.Snapshot) bool) *fairrelay.Snapshot {
	t.Helper()
	q, err := fairrelay.Open(t.Context(), queuePath, fairrelay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		s, err := q.Snapshot(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if done(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond) // polling another process's state, not synchronising
	}
}

func countState(s *fairrelay.Snapshot, st fairrelay.State) int {
	n := 0
	for _, e := range s.Events {
		if e.State == st {
			n++
		}
	}
	return n
}

// eventsFile writes the JSON lines of flows F1…Fn with k events each
// (delta = seq), after the given extra lines.
func eventsFile(flows, k int, extra ...string) string {
	var b strings.Builder
	for _, l := range extra {
		b.WriteString(l + "\n")
	}
	for f := 1; f <= flows; f++ {
		for s := 1; s <= k; s++ {
			fmt.Fprintf(&b, `{"id":"F%d-%d","flow":"F%d","delta":%d}`+"\n", f, s, f, s)
		}
	}
	return b.String()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func inboxLedger(t *testing.T, path string) (map[string]inbox.Projection, int) {
	t.Helper()
	in, err := inbox.Open(t.Context(), path, inbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	s, err := in.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return s.ByFlow(), len(s.Receipts)
}

// wantLedger checks that flows F1…Fn of eventsFile(n, k) were each applied
// once, in full: k receipts each, seq k, total 1+…+k. It returns the ledger.
func wantLedger(t *testing.T, inboxPath string, flows, k int) map[string]inbox.Projection {
	t.Helper()
	led, receipts := inboxLedger(t, inboxPath)
	if receipts != flows*k {
		t.Errorf("receipts %d, want %d", receipts, flows*k)
	}
	for f := 1; f <= flows; f++ {
		if p := led[fmt.Sprintf("F%d", f)]; p.Seq != int64(k) || p.Total != int64(k*(k+1)/2) {
			t.Errorf("flow F%d: %+v, want seq %d total %d (each effect once)", f, p, k, k*(k+1)/2)
		}
	}
	return led
}

// A relay and a receiver started by hand deliver a bulk-enqueued file in
// per-flow order, with the poison event quarantined; a snapshot works while
// both run; metrics are served; SIGTERM ends both with exit 0.
func TestRelayAndReceiverByHand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	queue, inboxPath := filepath.Join(dir, "queue.db"), filepath.Join(dir, "inbox.db")
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	recvMetrics := freeAddr(t)
	recv, addr := startReceiver(t, inboxPath, "--secret", secret, "--max-delta", "5", "--metrics-addr", recvMetrics)

	out, errOut, code := cli(t, eventsFile(4, 5, `{"id":"A1","flow":"A","delta":10}`, `{"id":"A2","flow":"A","delta":1}`), "enqueue", "--queue", queue)
	if code != 0 || strings.Count(out, `"status":"created"`) != 22 {
		t.Fatalf("bulk enqueue: exit %d\n%s%s", code, out, errOut)
	}
	metrics := freeAddr(t)
	rel := startCLI(t, "relay", "--queue", queue, "--sink", "http://"+addr+"/", "--secret", secret, "--workers", "4",
		"--metrics-addr", metrics, "--backoff-base", "50ms", "--backoff-cap", "200ms", "--log-format", "json")
	waitFor(t, queue, "20 acked and A1 quarantined", func(s *fairrelay.Snapshot) bool {
		return countState(s, fairrelay.StateAcked) == 20 && countState(s, fairrelay.StateQuarantined) == 1
	})

	out, errOut, code = cli(t, `{"op":"snapshot"}`+"\n", "script", "--queue", queue, "--inbox", inboxPath)
	if code != 0 || !strings.Contains(out, `"receipts":[{`) || strings.Contains(out, `"error"`) {
		t.Fatalf("snapshot beside a running relay and receiver: exit %d\n%s%s", code, out, errOut)
	}
	resp, err := http.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`fairrelay_settles_total{outcome="unsupported_delta",status="quarantined"} 1`,
		`fairrelay_settles_total{outcome="accepted",status="acked"} 20`,
		`fairrelay_events{state="quarantined"} 1`,
		`fairrelay_events{state="ready"} 1`,
		`fairrelay_delivery_seconds_count{class="ack"} 20`,
		`fairrelay_delivery_seconds_count{class="permanent"} 1`,
		// The process's and the runtime's, as every exporter has them.
		"\nprocess_start_time_seconds ", "\ngo_goroutines ", "\ngo_build_info{",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}

	// The receiver's own metrics and probes (receive --metrics-addr): the
	// 20 deliveries accepted (200) and A1's unsupported_delta (422).
	resp, err = http.Get("http://" + recvMetrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`fairrelay_receive_requests_total{code="200"} 20`,
		`fairrelay_receive_requests_total{code="422"} 1`,
		`fairrelay_receive_request_seconds_count{code="200"} 20`,
		"\nprocess_start_time_seconds ", "\ngo_goroutines ", "\ngo_build_info{",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("receiver metrics lack %s:\n%s", want, body)
		}
	}
	for _, probe := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get("http://" + recvMetrics + probe)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("receiver %s: %d, want 200", probe, resp.StatusCode)
		}
	}

	if code := rel.signal(t, syscall.SIGTERM); code != 0 {
		t.Errorf("relay exit %d on SIGTERM: %s", code, rel.stderr())
	}
	if code := recv.signal(t, syscall.SIGTERM); code != 0 {
		t.Errorf("receive exit %d on SIGTERM: %s", code, recv.stderr())
	}
	// --log-format json: every line the relay logged is one JSON object
	// with slog's keys, and its quarantine of A1 is among them.
	var logged, quarantine int
	for _, line := range strings.Split(strings.TrimSpace(rel.stderr()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("relay --log-format json logged a line that is not JSON (%v): %q", err, line)
			continue
		}
		if rec["time"] == nil || rec["level"] == nil || rec["msg"] == nil {
			t.Errorf("relay JSON log line lacks time, level or msg: %q", line)
		}
		logged++
		if strings.Contains(line, `"A1"`) && rec["level"] == "WARN" {
			quarantine++
		}
	}
	if logged == 0 || quarantine == 0 {
		t.Errorf("relay --log-format json: %d lines, %d warnings naming A1; want both:\n%s", logged, quarantine, rel.stderr())
	}
	led := wantLedger(t, inboxPath, 4, 5)
	if _, ok := led["A"]; ok {
		t.Errorf("flow A reached the receiver: %+v", led["A"])
	}
}

// A relay killed (SIGKILL) with deliveries in flight, then started again:
// every event arrives, each effect once, and the attempt of each claim the
// killed relay held says its lease ran out in the killed relay's hands.
func TestRelayRestartAfterKill(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	queue, inboxPath := filepath.Join(dir, "queue.db"), filepath.Join(dir, "inbox.db")
	_, addr := startReceiver(t, inboxPath)
	if _, errOut, code := cli(t, eventsFile(5, 20), "enqueue", "--queue", queue); code != 0 {
		t.Fatalf("enqueue: %s", errOut)
	}
	args := []string{"relay", "--queue", queue, "--sink", "http://" + addr + "/", "--workers", "4",
		"--lease", "1500ms", "--timeout", "500ms", "--lease-margin", "200ms"}
	first := startCLI(t, append(args, "--name", "first")...)
	waitFor(t, queue, "30 acked", func(s *fairrelay.Snapshot) bool { return countState(s, fairrelay.StateAcked) >= 30 })
	if code := first.signal(t, syscall.SIGKILL); code == 0 {
		t.Fatal("a killed relay exited 0")
	}
	held := map[string]int64{} // the killed relay's claims: event id → generation
	for _, e := range waitFor(t, queue, "the kill", func(*fairrelay.Snapshot) bool { return true }).Events {
		if e.State == fairrelay.StateInflight {
			held[e.ID] = e.Generation
		}
	}
	second := startCLI(t, append(args, "--name", "second")...)
	waitFor(t, queue, "all acked", func(s *fairrelay.Snapshot) bool { return countState(s, fairrelay.StateAcked) == 100 })
	if code := second.signal(t, syscall.SIGTERM); code != 0 {
		t.Errorf("relay exit %d: %s", code, second.stderr())
	}
	wantLedger(t, inboxPath, 5, 20)
	// The second relay said at its start that heads were leased, and how
	// many: the killed relay's, which it waited out.
	leased := fmt.Sprintf("leased=%d ", len(held))
	if said := strings.Contains(second.stderr(), `msg="relay: heads leased at start`) && strings.Contains(second.stderr(), leased); said != (len(held) > 0) {
		t.Errorf("%d heads held by the killed relay; the second relay's log (want the leased heads named when there are any, with %q):\n%s", len(held), leased, second.stderr())
	}
	q, err := fairrelay.Open(t.Context(), queue, fairrelay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	t.Logf("%d claims held by the killed relay", len(held))
	for id, gen := range held {
		as, err := q.Attempts(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(as, func(a fairrelay.Attempt) bool { return a.Generation == gen })
		if i < 0 || as[i].Status != fairrelay.AttemptLeaseExpired || as[i].Relay != "first" {
			t.Errorf("%s, claimed (generation %d) by the killed relay: attempts %+v, want that generation lease_expired by first", id, gen, as)
		}
	}
}

// relay --help says what --quantum measures from as docs/relay.md does:
// V, the fair-share floor (it once said "the smallest").
func TestRelayHelpQuantumMatchesTheDocs(t *testing.T) {
	t.Parallel()
	out, errOut, code := cli(t, "", "relay", "--help")
	if code != 0 || !strings.Contains(out, "ahead of V (the fair-share floor)") {
		t.Errorf("relay --help: exit %d, %s; want --quantum described as ahead of V (the fair-share floor)\n%s", code, errOut, out)
	}
	page, err := os.ReadFile(filepath.Join("..", "..", "docs", "relay.md"))
	if err != nil || !strings.Contains(strings.Join(strings.Fields(string(page)), " "), "ahead of V") {
		t.Errorf("docs/relay.md no longer says \"ahead of V\" (%v): keep the help and the page alike", err)
	}
}

func TestRelayConfigErrorsNameTheFlag(t *testing.T) {
	t.Parallel()
	queue := filepath.Join(t.TempDir(), "queue.db")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--lease", "5s", "--timeout", "10s"}, "lease"},
		{[]string{"--workers", "0"}, "workers"},
		{[]string{"--workers", "4", "--max-group-slots", "5"}, "max-group-slots"},
		{[]string{"--max-group-slots", "-1"}, "max-group-slots"},
		{[]string{"--quantum", "0s"}, "quantum"},
		{[]string{"--permanent-status", "503"}, "permanent-status"},
		{[]string{"--secret", "whsec_!!"}, "secret"},
		// Settings checked by the relay package, and addresses: before the
		// store is created too.
		{[]string{"--retain-acked", "2h", "--retain-ids", "1h"}, "retain-ids"},
		{[]string{"--shutdown-timeout", "-1s"}, "shutdown-timeout"},
		{[]string{"--name", "a b "}, "name"},
		{[]string{"--metrics-addr", "nonsense"}, "metrics-addr"},
		{[]string{"--log-level", "loud"}, "log-level"},
		{[]string{"--log-format", "xml"}, "log-format"},
		// A console flag without the console would be ignored.
		{[]string{"--tls-cert", "c.pem", "--tls-key", "k.pem"}, "tls-cert"},
		{[]string{"--tokens", "t.txt"}, "tokens"},
		// Certificate files that do not load: the console stopped while
		// the relay ran on (a breaker's report).
		{[]string{"--console-addr", "127.0.0.1:0", "--tls-cert", "/nonexistent.pem", "--tls-key", "/nonexistent.key"}, "tls-cert: cannot load"},
	} {
		_, errOut, code := cli(t, "", append([]string{"relay", "--queue", queue, "--sink", "http://127.0.0.1:1/"}, tc.args...)...)
		if code == 0 || !strings.Contains(errOut, "invalid_input: "+tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want a message naming %s", tc.args, code, errOut, tc.want)
		}
	}
	if _, errOut, code := cli(t, "", "relay", "--queue", queue); code == 0 || !strings.Contains(errOut, "sink") {
		t.Errorf("no --sink: exit %d, %q", code, errOut)
	}
	// A sink of no kind the relay has names all three.
	if _, errOut, code := cli(t, "", "relay", "--queue", queue, "--sink", "ftp://x"); code != 2 || !strings.Contains(errOut, "invalid_input: sink:") ||
		!strings.Contains(errOut, "nats://") || !strings.Contains(errOut, "amqp") {
		t.Errorf("--sink ftp://x: exit %d, %q; want an input error naming the three kinds", code, errOut)
	}
	// A taken --metrics-addr too, before the store is created.
	if _, errOut, code := cli(t, "", "relay", "--queue", queue, "--sink", "http://127.0.0.1:1/", "--metrics-addr", holdPort(t)); code != 2 ||
		!strings.Contains(errOut, "invalid_input: metrics-addr:") {
		t.Errorf("--metrics-addr taken: exit %d, %q; want invalid_input naming metrics-addr", code, errOut)
	}
	// A refused run creates nothing.
	if _, err := os.Stat(queue); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("queue store after refused runs: %v, want none", err)
	}
}

// Bulk enqueue answers one line per input line, in order, and a bad line
// changes nothing while the lines of other flows go in; a later line of a
// flow whose line failed is refused, and so is every line after one whose
// flow cannot be read.
func TestBulkEnqueueAnswersEachLine(t *testing.T) {
	t.Parallel()
	queue := filepath.Join(t.TempDir(), "queue.db")
	in := strings.Join([]string{
		`{"id":"A1","flow":"A","delta":10}`,
		`{"id":"A2","flow":"A","body":{"x":"y","delta":1}}`,
		`{"id":"","flow":"B","delta":1}`,
		`{"id":"A1","flow":"A","delta":10}`,
		`{"id":"A1","flow":"C","delta":10}`,
		`{"id":"D1","flow":"D","delta":1,"body":{"delta":1}}`,
		`{"id":"B1","flow":"B","delta":1}`,
		``,
		`{"id":"E1","flow":"E","body":null}`,
		`{"id":"E2","flow":"E","delta":1,"extra":1}`,
		`{"id":"F1","Flow":"F","delta":1}`,
		`not json`,
		`{"id":"G1","flow":"G","delta":1}`,
	}, "\n")
	out, errOut, code := cli(t, in, "enqueue", "--queue", queue)
	if code != exitNotApplied || !strings.Contains(errOut, "9 of 12 lines failed, conflicted or were refused") {
		t.Fatalf("exit %d, stderr %q: want 1 and a count of failed lines", code, errOut)
	}
	want := []string{
		`{"id":"A1","line":1,"seq":1,"status":"created"}`,
		`{"id":"A2","line":2,"seq":2,"status":"created"}`,
		`"error":"invalid_input","field":"id"`,
		`{"id":"A1","line":4,"seq":1,"status":"existing"}`,
		`{"id":"A1","line":5,"status":"conflict"}`,
		`"field":"delta"`,
		`{"error":"refused","field":"flow","id":"B1","line":7,"message":"flow: line 3 of flow \"B\" failed`,
		`"field":"body"`,
		`"error":"refused","field":"flow","id":"E2","line":10`,
		`"field":"Flow"`,
		`"error":"refused","field":"line","line":12,"message":"line: line 11 could not be read`,
		`"error":"refused","field":"line","id":"G1","line":13`,
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d answers for %d lines:\n%s", len(lines), len(want), out)
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("answer %d: %s, want %s", i+1, lines[i], w)
		}
	}
	// A line refused for an earlier unreadable one says its own fault too,
	// so that one run shows every line to fix (a fresh user's report); a
	// good one says none.
	if !strings.Contains(lines[10], "this line is also invalid") || strings.Contains(lines[11], "also invalid") {
		t.Errorf("lines 12 and 13 refused after line 11: %s / %s; want line 12's own error named, not line 13's", lines[10], lines[11])
	}
	out, _, _ = cli(t, "", "inspect", "--queue", queue, "flows", "--json")
	if strings.TrimSpace(out) != `{"flow":"A","seq":2,"served":0,"paused":false,"group":"A"}` {
		t.Errorf("flows after bulk enqueue: %s", out)
	}
}

// A relay stopping on a first SIGINT waits for its in-flight delivery (up
// to --shutdown-timeout, an hour here); a second SIGINT stops it at once,
// with exit code 130 (128 + SIGINT), saying how many heads it leaves
// leased (the one in flight) and for how long. Meanwhile /healthz answers 200 and
// /readyz 200 while it dispatches, 503 once it is stopping. The start line
// names the queue and the sink, the sink's password hidden.
func TestRelaySecondInterruptStopsAtOnce(t *testing.T) {
	t.Parallel()
	queue := filepath.Join(t.TempDir(), "queue.db")
	if _, errOut, code := cli(t, `{"id":"A1","flow":"A","delta":1}`+"\n", "enqueue", "--queue", queue); code != 0 {
		t.Fatalf("enqueue: %s", errOut)
	}
	arrived, hang := make(chan struct{}, 1), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		select { // a receiver that never answers
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(hang) // before srv.Close, which waits for the handlers
	sinkURL := strings.Replace(srv.URL, "http://", "http://hook:hunter2@", 1)
	metrics := freeAddr(t)
	rel := startCLI(t, "relay", "--queue", queue, "--sink", sinkURL, "--metrics-addr", metrics,
		"--timeout", "30s", "--lease", "60s", "--shutdown-timeout", "1h")
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatalf("no delivery within 30 s; stderr:\n%s", rel.stderr())
	}
	if code, body := get(t, "http://"+metrics+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while dispatching: %d %s", code, body)
	}
	if code, body := get(t, "http://"+metrics+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz while dispatching: %d %s", code, body)
	}
	if err := rel.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	rel.waitLine(t, "relay: stopping")
	if code, body := get(t, "http://"+metrics+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "stopping") {
		t.Errorf("/readyz while stopping: %d %s, want 503 saying stopping", code, body)
	}
	if code, body := get(t, "http://"+metrics+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while stopping: %d %s", code, body)
	}
	select {
	case <-rel.exited:
		t.Fatalf("exited %d on the first SIGINT with a delivery in flight, want it to wait", rel.code)
	default:
	}
	if err := rel.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rel.exited:
		if rel.code != 130 {
			t.Errorf("exit %d on the second SIGINT, want 130", rel.code)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("still running 10 s after a second SIGINT; stderr:\n%s", rel.stderr())
	}
	// What the stop left behind: the one delivery in flight, leased.
	if got := rel.line("left leased"); !strings.Contains(got, "leased=1 ") || !strings.Contains(got, "lease_ms=60000") {
		t.Errorf("after the second SIGINT: %q, want the one head left leased and the lease", got)
	}
	start := rel.line("relay: starting")
	if !strings.Contains(start, "queue="+queue) || !strings.Contains(start, "hook:xxxxx@127.0.0.1") || strings.Contains(start, "hunter2") {
		t.Errorf("start line %q: want the queue and the sink, without its password", start)
	}
}

// get fetches url and returns the status and the body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// The start line's queue and sink: a password in a URL, in the user info or
// a parameter, never reaches the log; paths are kept as they are.
func TestStartLineHidesPasswords(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"queue.db":                            "queue.db",
		"/var/lib/q.db":                       "/var/lib/q.db",
		"http://127.0.0.1:8080/":              "http://127.0.0.1:8080/",
		"https://hook:hunter2@example.com/in": "https://hook:xxxxx@example.com/in",
		"postgres://app:s3cret@db:5432/shop?schema=relay":        "postgres://app:xxxxx@db:5432/shop?schema=relay",
		"postgres://app@db/shop?password=s3cret&sslmode=require": "postgres://app@db/shop?password=xxxxx&sslmode=require",
		// A space stays %20 (PostgreSQL reads + as a plus), the query as
		// written when nothing is hidden.
		"postgres://db/shop?options=-c%20statement_timeout%3D5s&schema=relay":                 "postgres://db/shop?options=-c%20statement_timeout%3D5s&schema=relay",
		"postgres://db/shop?options=-c%20statement_timeout%3D5s&password=s3cret&schema=relay": "postgres://db/shop?options=-c%20statement_timeout%3D5s&password=xxxxx&schema=relay",
	} {
		if got := redactDSN(in); got != want {
			t.Errorf("redactDSN(%q) = %q, want %q", in, got, want)
		}
	}
}
