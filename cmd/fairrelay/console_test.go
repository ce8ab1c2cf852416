package main

import (
	"database/sql"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
)

// `console token add` prints a token once and stores only its hash;
// `console` refuses a non-loopback address without credentials, serves on
// loopback (printing its URL) and stops on SIGTERM.
func TestConsoleCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	queue, tokens := filepath.Join(dir, "queue.db"), filepath.Join(dir, "tokens")
	if out, errOut, code := cli(t, "", "enqueue", "--queue", queue, "--id", "A1", "--flow", "A", "--delta", "1"); code != 0 {
		t.Fatalf("enqueue: %d %s%s", code, out, errOut)
	}
	tok, errOut, code := cli(t, "", "console", "token", "add", "alice", "--tokens", tokens)
	tok = strings.TrimSpace(tok)
	if code != 0 || !strings.HasPrefix(tok, "frc_") {
		t.Fatalf("token add: %d %q %s", code, tok, errOut)
	}
	b, _ := os.ReadFile(tokens)
	if strings.Contains(string(b), tok) || !strings.HasPrefix(string(b), "alice ") {
		t.Fatalf("token file %q: want alice's hash, never the token", b)
	}
	if _, errOut, code := cli(t, "", "console", "token", "add", "alice", "--tokens", tokens); code != 2 || !strings.Contains(errOut, "name") {
		t.Fatalf("alice again: %d %s", code, errOut)
	}
	if _, errOut, code := cli(t, "", "console", "--queue", queue, "--addr", "0.0.0.0:0"); code != 2 || !strings.Contains(errOut, "invalid_input: addr:") {
		t.Fatalf("a non-loopback address without credentials: %d %s", code, errOut)
	}
	// An inbox that does not exist is refused, not created empty.
	missing := filepath.Join(dir, "missing-inbox.db")
	if _, errOut, code := cli(t, "", "console", "--queue", queue, "--inbox", missing, "--addr", "127.0.0.1:0"); code != 2 || !strings.Contains(errOut, "inbox") {
		t.Fatalf("a missing inbox: %d %s", code, errOut)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatalf("the console created the missing inbox: %v", err)
	}
	if _, errOut, code := cli(t, "", "console", "--queue", filepath.Join(dir, "nope.db"), "--addr", "127.0.0.1:0"); code != 2 {
		t.Fatalf("a missing store: %d %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "nope.db")); err == nil {
		t.Fatal("console created a store")
	}

	d := startCLI(t, "console", "--queue", queue, "--addr", "127.0.0.1:0", "--tokens", tokens)
	var l struct{ Status, URL string }
	if line := <-d.firstLine; json.Unmarshal(line, &l) != nil || l.Status != "listening" {
		t.Fatalf("console printed %q; stderr: %s", line, d.stderr())
	}
	if st, body := get(t, l.URL+"login"); st != 200 || !strings.Contains(body, `name="token"`) {
		t.Fatalf("GET /login: %d %.200s", st, body)
	}
	if code := d.signal(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("console exit %d on SIGTERM: %s", code, d.stderr())
	}
	// It says it stopped, as relay and receive do.
	if !strings.Contains(d.stderr(), `msg="console: stopped"`) {
		t.Errorf("console's log has no stop line:\n%s", d.stderr())
	}
}

// `relay --console-addr` serves the console on the relay's queue.
func TestRelayServesTheConsole(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	queue, inboxPath := filepath.Join(dir, "queue.db"), filepath.Join(dir, "inbox.db")
	recv, addr := startReceiver(t, inboxPath, "--max-delta", "5")
	if _, errOut, code := cli(t, "", "relay", "--queue", queue, "--sink", "http://"+addr+"/", "--console-addr", "0.0.0.0:0"); code != 2 || !strings.Contains(errOut, "invalid_input: console-addr:") {
		t.Fatalf("relay with a non-loopback console and no credentials: %d %s", code, errOut)
	}
	if _, err := os.Stat(queue); err == nil {
		t.Fatal("the refused relay created its store")
	}
	if out, errOut, code := cli(t, "", "enqueue", "--queue", queue, "--id", "A1", "--flow", "A", "--delta", "10"); code != 0 {
		t.Fatalf("enqueue: %d %s%s", code, out, errOut)
	}
	console := freeAddr(t)
	rel := startCLI(t, "relay", "--queue", queue, "--sink", "http://"+addr+"/", "--console-addr", console)
	rel.waitLine(t, "console: serving")
	waitFor(t, queue, "A1 quarantined", func(s *fairrelay.Snapshot) bool { return countState(s, fairrelay.StateQuarantined) == 1 })
	if st, body := get(t, "http://"+console+"/flows"); st != 200 || !strings.Contains(body, "quarantined because unsupported_delta") {
		t.Fatalf("GET /flows: %d %.300s", st, body)
	}
	if code := rel.signal(t, syscall.SIGTERM); code != 0 {
		t.Errorf("relay exit %d on SIGTERM: %s", code, rel.stderr())
	}
	recv.signal(t, syscall.SIGTERM)
}

// `demo --console` prints the console's address first, ends the demo's
// story (A1 redriven by "demo"), leaves flow P paused for the operator to
// resume, and keeps serving until a signal.
func TestDemoKeepsTheConsoleUp(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	d := startCLI(t, "demo", "--console", addr, "--events", "40", "--flows", "4")
	if line := string(<-d.firstLine); !strings.Contains(line, "Operator console: http://"+addr+"/") {
		t.Fatalf("first line %q; stderr: %s", line, d.stderr())
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, body := get(t, "http://"+addr+"/audit")
		if st == 200 && strings.Contains(body, `<td class="operator">demo</td>`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no redrive by demo in the console's audit within 60 s: %d %.300s; stderr: %s", st, body, d.stderr())
		}
		select {
		case <-d.exited:
			t.Fatalf("the demo exited (%d) before a signal: %s", d.code, d.stderr())
		case <-time.After(100 * time.Millisecond): // the demo runs in another process: poll its console
		}
	}
	// The redrive is in the audit before the demo has drained; the signal
	// must come once it says it keeps running.
	d.waitStdout(t, "press Ctrl-C to end the demo")
	// Something left for the operator: flow P, paused with its events.
	if st, body := get(t, "http://"+addr+"/flows?paused=1"); st != 200 || !strings.Contains(body, `data-flow="P"`) {
		t.Errorf("the console lists no paused flow P: %d %.300s", st, body)
	}
	if code := d.signal(t, syscall.SIGINT); code != 0 {
		t.Fatalf("demo exit %d on SIGINT: %s", code, d.stderr())
	}
}

// A console whose queue store went (a table dropped under it) logs the
// first 20 failed pages at ERROR, then one a second, the others at DEBUG:
// it wrote an ERROR line per request.
func TestConsoleCapsRepeatedErrorLines(t *testing.T) {
	t.Parallel()
	const n = 60
	queue := filepath.Join(t.TempDir(), "queue.db")
	if out, errOut, code := cli(t, "", "enqueue", "--queue", queue, "--id", "A1", "--flow", "A", "--delta", "1"); code != 0 {
		t.Fatalf("enqueue: %d %s%s", code, out, errOut)
	}
	d := startCLI(t, "console", "--queue", queue, "--addr", "127.0.0.1:0", "--log-level", "debug")
	var l struct{ Status, URL string }
	if line := <-d.firstLine; json.Unmarshal(line, &l) != nil || l.Status != "listening" {
		t.Fatalf("console printed %q; stderr: %s", line, d.stderr())
	}
	db, err := sql.Open("sqlite", queue)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.ExecContext(t.Context(), "DROP TABLE event")
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	for i := range n {
		if st, _ := get(t, l.URL+"flows"); st != http.StatusInternalServerError {
			t.Fatalf("page %d of a store without its events: %d, want 500", i+1, st)
		}
	}
	checkCapped(t, d, "ERROR", "console: the queue store is gone (its schema or tables dropped?): restart the console once it is restored from a backup", n, time.Since(began))
	if code := d.signal(t, syscall.SIGTERM); code != 0 {
		t.Errorf("console exit %d: %s", code, d.stderr())
	}
}
