package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fairrelay/fairrelay/internal/harness/outboxbench"
	"github.com/fairrelay/fairrelay/internal/pgtest"
)

// TestBenchOutboxSmoke runs `fairrelay bench outbox` for one cell of 200 ms
// (and at least 3 transactions each: a loaded machine once committed none
// in 200 ms) and one short latency run per backend (the producer a real
// child process, the relay real), as a proof that the command works; the
// real run is minutes long and not for CI (BENCHMARKS.md).
func TestBenchOutboxSmoke(t *testing.T) {
	t.Parallel()
	pg := pgtest.URL(t)
	dir := t.TempDir()
	out, errOut, code := cli(t, "", "bench", "outbox", "--pg", pg, "--dir", dir,
		"--txns", "2", "--work", "0", "--flows", "distinct", "--duration", "200ms", "--min-txns", "3",
		"--rates", "50", "--latency-duration", "200ms", "--min-events", "5", "--idle", "200ms", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep outboxbench.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if len(rep.Txn) != 2 || len(rep.Latency) != 2 || len(rep.Idle) != 2 {
		t.Fatalf("%d txn cells, %d latency rows, %d idle rows; want 2 each (one per backend):\n%s", len(rep.Txn), len(rep.Latency), len(rep.Idle), out)
	}
	for _, c := range rep.Txn {
		if c.PlainPerS <= 0 || c.EnqueueTxPerS <= 0 || c.PlainErrors+c.EnqueueTxErrors != 0 {
			t.Errorf("txn cell %+v: want both rates positive and no failure", c)
		}
	}
	for _, l := range rep.Latency {
		if l.Sent != 10 || l.Delivered != l.Sent || l.ProducerErrors != 0 || l.MaxMS <= 0 {
			t.Errorf("latency %+v: want 10 sent (50/s for 200ms), all delivered", l)
		}
		// The same deliveries from a later moment (each commit returns
		// after its body was written): every figure is the smaller.
		if l.FromCommitMaxMS == 0 || l.FromCommitMaxMS > l.MaxMS || l.FromCommitP50MS > l.P50MS || l.FromCommitP99MS > l.P99MS {
			t.Errorf("latency %+v: the figures from the commit are missing or larger than from the write", l)
		}
	}
	if pgIdle := rep.Idle[0]; pgIdle.Backend != outboxbench.BackendPostgres || pgIdle.ServerCPUPercent == nil {
		t.Errorf("idle %+v: want PostgreSQL first, with its server processes' CPU", pgIdle)
	}
	if c := rep.Statements; c == nil || c.Statements < 1 || c.RoundTrips < 1 {
		t.Errorf("statements per EnqueueTx: %+v, want at least one of each", c)
	}
	if len(rep.Targets) != 9 {
		t.Errorf("%d targets, want 9", len(rep.Targets))
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("the run left %d files in --dir", len(left))
	}
}

// TestBenchOutboxMinTxns: a cell whose transactions outlast --duration
// (each stays open 300 ms; 50 ms are measured) still counts --min-txns of
// them, and its rate is taken over the time they took, not --duration: a
// loaded machine is the same case, slower.
func TestBenchOutboxMinTxns(t *testing.T) {
	t.Parallel()
	out, errOut, code := cli(t, "", "bench", "outbox", "--backends", "sqlite", "--dir", t.TempDir(), "--only", "txn",
		"--txns", "1", "--work", "300ms", "--flows", "one", "--duration", "50ms", "--min-txns", "2", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep outboxbench.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if len(rep.Txn) != 1 {
		t.Fatalf("%d txn cells, want 1:\n%s", len(rep.Txn), out)
	}
	// Two transactions of at least 300 ms each, one after the other, the
	// first begun 10 ms (the warm-up) before the measured time: at most
	// 2 / 0.59 s.
	c := rep.Txn[0]
	for name, perS := range map[string]float64{"plain": c.PlainPerS, "EnqueueTx": c.EnqueueTxPerS} {
		if perS <= 0 || perS > 2/0.59 {
			t.Errorf("%s: %.2f txn/s, want more than 0 and at most %.2f (2 transactions over their own time)", name, perS, 2/0.59)
		}
	}
	if _, errOut, code := cli(t, "", "bench", "outbox", "--backends", "sqlite", "--dir", t.TempDir(), "--only", "txn", "--min-txns", "0"); code == 0 || !strings.Contains(errOut, "min-txns") {
		t.Errorf("--min-txns 0: exit %d, %q; want an error naming the flag", code, errOut)
	}
}

// TestBenchOutboxUpdateFile: --update-file appends the section once and
// then replaces only its generated part; a bad flag names itself.
func TestBenchOutboxUpdateFile(t *testing.T) {
	t.Parallel()
	md := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	if err := os.WriteFile(md, []byte("# Benchmarks\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"bench", "outbox", "--backends", "sqlite", "--dir", t.TempDir(), "--only", "txn",
		"--txns", "1", "--work", "0", "--flows", "one", "--duration", "100ms", "--update-file", md}
	for range 2 {
		out, errOut, code := cli(t, "", args...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if !strings.Contains(out, "| SQLite | one | 0 ms | 1 |") {
			t.Fatalf("no table row in:\n%s", out)
		}
	}
	b, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), outboxbench.SectionTitle); n != 1 {
		t.Fatalf("the section appears %d times:\n%s", n, b)
	}
	if n := strings.Count(string(b), "| SQLite | one | 0 ms | 1 |"); n != 1 {
		t.Fatalf("the table row appears %d times:\n%s", n, b)
	}
	for _, bad := range [][]string{{"--txns", "0"}, {"--work", "x"}, {"--flows", "many"}, {"--rates", "-1"}, {"--backends", "mysql"}} {
		_, errOut, code := cli(t, "", append([]string{"bench", "outbox", "--dir", t.TempDir()}, bad...)...)
		if code == 0 || !strings.Contains(errOut, strings.TrimPrefix(bad[0], "--")) {
			t.Errorf("%v: exit %d, %q: want an error naming the flag", bad, code, errOut)
		}
	}
}
