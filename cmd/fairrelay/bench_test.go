package main

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
)

// TestBenchClaimJSON runs a tiny `fairrelay bench claim --json` and checks the
// report's exact field names (issue 4) and that the run cleans up its files.
func TestBenchClaimJSON(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out, errOut, code := cli(t, "", "bench", "claim", "--flows", "2,3", "--backlog", "3000", "--batch", "1,4",
		"--duration", "40ms", "--rounds", "2", "--dir", dir, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if got := slices.Sorted(maps.Keys(rep)); !slices.Equal(got, []string{"raw_commit_per_s", "results"}) {
		t.Errorf("top-level keys %v, want raw_commit_per_s and results", got)
	}
	var results []map[string]float64
	if err := json.Unmarshal(rep["results"], &results); err != nil {
		t.Fatal(err)
	}
	if len(results) != 4 {
		t.Fatalf("%d results, want 4 (2 flow counts x 2 batch sizes)", len(results))
	}
	want := []string{"backlog", "batch", "claim_settle_per_s", "flows", "groups", "peak_rss_mb", "ratio_to_raw"}
	for i, r := range results {
		if got := slices.Sorted(maps.Keys(r)); !slices.Equal(got, want) {
			t.Errorf("result %d keys %v, want %v", i, got, want)
		}
		if r["flows"] != []float64{2, 2, 3, 3}[i] || r["batch"] != []float64{1, 4, 1, 4}[i] {
			t.Errorf("result %d: flows %v batch %v", i, r["flows"], r["batch"])
		}
	}
	left, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("bench left %d files in --dir", len(left))
	}
}

func TestBenchClaimTableAndBadFlags(t *testing.T) {
	t.Parallel()
	out, errOut, code := cli(t, "", "bench", "claim", "--flows", "2", "--backlog", "500", "--batch", "2",
		"--duration", "20ms", "--rounds", "1", "--dir", t.TempDir())
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "raw single-row commits:") || !strings.Contains(out, "claim+settle/s") {
		t.Errorf("table output lacks the raw rate or the header:\n%s", out)
	}
	for _, args := range [][]string{
		{"--flows", "0"},
		{"--batch", "1,x"},
		{"--flows", "10", "--backlog", "5"},
	} {
		_, errOut, code := cli(t, "", append([]string{"bench", "claim", "--duration", "10ms", "--dir", t.TempDir()}, args...)...)
		if code == 0 {
			t.Errorf("%v: exit 0, want an error", args)
		}
		if !strings.Contains(errOut, strings.TrimPrefix(args[0], "--")) {
			t.Errorf("%v: error %q does not name the flag", args, errOut)
		}
	}
}

// A tiny `fairrelay bench timefair --json` (issue 19): one row with its
// fields, no files left behind; bad flags are named.
func TestBenchTimeFair(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out, errOut, code := cli(t, "", "bench", "timefair", "--relays", "1", "--slots", "4", "--slow-flows", "2", "--fast-flows", "2",
		"--slow-latency", "50ms", "--warmup", "100ms", "--measure", "300ms", "--dir", dir, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep struct {
		Rows []map[string]any `json:"rows"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if len(rep.Rows) != 1 {
		t.Fatalf("%d rows, want 1", len(rep.Rows))
	}
	want := []string{"fast_alone_per_s", "fast_beside_per_s", "fast_ratio", "fast_slots", "relays", "slow_fair_per_s", "slow_per_s",
		"slow_ratio", "slow_slots", "store", "weight_shares", "weights_worst_error"}
	if got := slices.Sorted(maps.Keys(rep.Rows[0])); !slices.Equal(got, want) {
		t.Errorf("row keys %v, want %v", got, want)
	}
	if left, err := os.ReadDir(dir); err != nil || len(left) != 0 {
		t.Errorf("bench left %d files in --dir (%v)", len(left), err)
	}
	for _, tc := range []struct{ args []string }{
		{[]string{"--relays", "3"}},
		{[]string{"--relays", "2"}},
		{[]string{"--warmup", "0s"}},
		{[]string{"--quantum", "-1s"}},
	} {
		_, errOut, code := cli(t, "", append([]string{"bench", "timefair", "--dir", t.TempDir()}, tc.args...)...)
		name := strings.TrimPrefix(tc.args[0], "--")
		if tc.args[1] == "2" {
			name = "pg" // two relays need a PostgreSQL server
		}
		if code == 0 || !strings.Contains(errOut, name) {
			t.Errorf("%v: exit %d, error %q, want one naming %s", tc.args, code, errOut, name)
		}
	}
}

// A progress bar is drawn only on a terminal: on a standard error
// redirected to a file or a pipe (a CI log) its redraws would fill it
// (bench prune's 200 000 events wrote 32 000 lines).
func TestProgressBarsOnlyOnATerminal(t *testing.T) {
	var errOut bytes.Buffer
	cmd := &cobra.Command{}
	cmd.SetErr(&errOut)
	bar := newBar(cmd, 100, progressbar.OptionSetDescription("loading"))
	for i := range 101 {
		bar.Set(i)
	}
	bar.Finish()
	if errOut.Len() != 0 {
		t.Errorf("a progress bar on a standard error that is not a terminal: %q", errOut.String())
	}
}

// Every bench command refuses a count or a duration below what it can run
// with before it runs, and a --dir that is a file, each as invalid_input
// naming the flag: they ran, or failed late with no error code (a
// breaker's sweep).
func TestBenchFlagsBelowTheirLeastAreRefused(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "text.db")
	if err := os.WriteFile(file, []byte("text"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args  []string
		field string
	}{
		{[]string{"claim", "--duration", "0s"}, "duration"},
		{[]string{"claim", "--rounds", "0"}, "rounds"},
		{[]string{"claim", "--flows", "0"}, "flows"},
		{[]string{"claim", "--dir", file}, "dir"},
		{[]string{"prune", "--flows", "0"}, "flows"},
		{[]string{"prune", "--batch", "0"}, "batch"},
		{[]string{"prune", "--dir", file}, "dir"},
		{[]string{"outbox", "--relay-workers", "0"}, "relay-workers"},
		{[]string{"outbox", "--idle", "-1s"}, "idle"},
		{[]string{"outbox", "--rates", "x"}, "rates"},
		{[]string{"broker", "--events", "0"}, "events"},
		{[]string{"timefair", "--fast-flows", "-1"}, "fast-flows"},
		{[]string{"timefair", "--slots", "0"}, "slots"},
	} {
		out, errOut, code := cli(t, "", append([]string{"bench"}, c.args...)...)
		if code != exitFailed || out != "" || !strings.Contains(errOut, "invalid_input: "+c.field+":") {
			t.Errorf("bench %v: exit %d, stdout %q, stderr %q; want exit %d and invalid_input naming %s", c.args, code, out, errOut, exitFailed, c.field)
		}
	}
}
