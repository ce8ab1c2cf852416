package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fairrelay/fairrelay/internal/harness/experiment"
)

const frozenResults = "../../experiments/results.json"

// TestExperimentCheckPassesOnTheFrozenResults runs `fairrelay experiment
// check` as a user does — a real process whose worker children are the same
// executable's hidden `experiment worker` — and expects exit 0, a line per
// scenario and the crash matrix.
func TestExperimentCheckPassesOnTheFrozenResults(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := cli(t, "", "experiment", "check", "--frozen", frozenResults)
	if code != 0 {
		t.Fatalf("experiment check exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, sc := range experiment.Scenarios() {
		if !strings.Contains(stdout, "ok    "+sc.Name) {
			t.Errorf("no ok line for %s:\n%s", sc.Name, stdout)
		}
	}
	for _, want := range []string{"crash matrix", "after_receipt_commit   73", "all ok, equal to the frozen results"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
}

// TestExperimentCheckFailsOnAnEditedValue edits one frozen value of the
// eight-process race and expects a non-zero exit naming that value.
func TestExperimentCheckFailsOnAnEditedValue(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(frozenResults)
	if err != nil {
		t.Fatal(err)
	}
	doc := mustParse(t, b)
	edits := 0
	for i, r := range doc.Scenarios {
		if r.Name != "eight_process_claim_race" {
			continue
		}
		var facts bytes.Buffer
		if err := json.Compact(&facts, r.Facts); err != nil {
			t.Fatal(err)
		}
		edited := strings.Replace(facts.String(), `"idle":5`, `"idle":4`, 1)
		if edited == facts.String() {
			t.Fatalf("frozen race facts lack \"idle\":5: %s", facts.String())
		}
		doc.Scenarios[i].Facts = json.RawMessage(edited)
		edits++
	}
	if edits != 1 {
		t.Fatalf("%d eight_process_claim_race records in the frozen results, want 1", edits)
	}
	out, err := doc.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "edited.json")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := cli(t, "", "experiment", "check", "--frozen", path, "--scenario", "eight_process_claim_race")
	if code == 0 {
		t.Fatalf("experiment check exited 0 against an edited frozen value:\n%s", stdout)
	}
	for _, want := range []string{"FAIL  eight_process_claim_race", "facts.idle: frozen 4, got 5", "1 FAILED"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\nstdout:\n%s\nstderr:\n%s", want, stdout, stderr)
		}
	}
}

// TestExperimentRunWritesTheDocument runs one scenario with --output and
// expects the file to hold exactly its frozen record.
func TestExperimentRunWritesTheDocument(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "out.json")
	stdout, stderr, code := cli(t, "", "experiment", "run", "--scenario", "retry_backoff_schedule", "--output", path)
	if code != 0 {
		t.Fatalf("experiment run exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	frozen, err := os.ReadFile(frozenResults)
	if err != nil {
		t.Fatal(err)
	}
	want := mustParse(t, frozen).Subset([]string{"retry_backoff_schedule"})
	if diffs := experiment.Compare(want, mustParse(t, b)); len(diffs) > 0 {
		t.Fatalf("run --output differs from the frozen record: %v", diffs)
	}
}

func mustParse(t *testing.T, b []byte) experiment.Document {
	t.Helper()
	d, err := experiment.ParseDocument(b)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
