package experiment_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/fairrelay/fairrelay/internal/harness/experiment"
)

const frozenPath = "../../../experiments/results.json"

func loadFrozen(t *testing.T) experiment.Document {
	t.Helper()
	b, err := os.ReadFile(frozenPath)
	if err != nil {
		t.Fatal(err)
	}
	d, err := experiment.ParseDocument(b)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestCheck is `fairrelay experiment check` inside `go test ./...`: every
// scenario, child processes included, keeps its SPEC claim and reproduces the
// frozen results exactly; and the same run checked against a frozen file with
// one value edited fails, naming the value.
func TestCheck(t *testing.T) {
	frozen := loadFrozen(t)
	results, err := experiment.Run(context.Background(), experiment.Options{Dir: t.TempDir(), Worker: testWorker(t)})
	if err != nil {
		t.Fatal(err)
	}
	rep := experiment.Check(frozen, results)
	var out bytes.Buffer
	if err := rep.Write(&out); err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("experiment check failed:\n%s", out.String())
	}
	t.Logf("\n%s", out.String())
	if len(results) != len(experiment.Scenarios()) {
		t.Fatalf("ran %d scenarios, want all %d", len(results), len(experiment.Scenarios()))
	}
	for _, want := range []string{"ok  ", "crash matrix", "before_settle_commit", "pure scheduling model, no database"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}

	edited := editedCopy(t, frozen, "round_robin_nine_steps", func(facts map[string]any) {
		facts["order"].([]any)[1] = "C1"
	})
	rep = experiment.Check(edited, results)
	out.Reset()
	if err := rep.Write(&out); err != nil {
		t.Fatal(err)
	}
	if rep.OK() {
		t.Fatalf("check passed against a frozen file whose order was edited:\n%s", out.String())
	}
	for _, want := range []string{"FAIL  round_robin_nine_steps", `facts.order[1]: frozen "C1", got "B1"`, "1 FAILED"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

// editedCopy returns frozen with fn applied to one scenario's decoded facts.
func editedCopy(t *testing.T, frozen experiment.Document, name string, fn func(map[string]any)) experiment.Document {
	t.Helper()
	out := experiment.Document{Scenarios: slices.Clone(frozen.Scenarios)}
	for i, r := range out.Scenarios {
		if r.Name != name {
			continue
		}
		var facts map[string]any
		if err := json.Unmarshal(r.Facts, &facts); err != nil {
			t.Fatal(err)
		}
		fn(facts)
		b, err := json.Marshal(facts)
		if err != nil {
			t.Fatal(err)
		}
		out.Scenarios[i].Facts = b
		return out
	}
	t.Fatalf("no scenario %s in the frozen file", name)
	return out
}

// TestCompareFindsEveryEdit edits each value of the frozen file in turn,
// one at a time, and expects Compare to report exactly that value.
func TestCompareFindsEveryEdit(t *testing.T) {
	t.Parallel()
	frozen := loadFrozen(t)
	edits := 0
	for _, rec := range frozen.Scenarios {
		for i := 0; ; i++ {
			tree, skip := decode(t, rec), i
			path, ok := editLeaf(&tree, "", &skip)
			if !ok {
				break
			}
			edited := encodeRecord(t, tree)
			diffs := experiment.Compare(experiment.Document{Scenarios: []experiment.Record{rec}}, experiment.Document{Scenarios: []experiment.Record{edited}})
			edits++
			if path == "name" {
				if len(diffs) != 2 {
					t.Errorf("%s: renaming the scenario gave %v, want missing and extra", rec.Name, diffs)
				}
				continue
			}
			if len(diffs) != 1 || diffs[0].Path != path {
				t.Errorf("%s: editing %s gave %v, want one difference at %s", rec.Name, path, diffs, path)
			}
		}
	}
	if edits < 100 {
		t.Fatalf("only %d values edited: the frozen file looks empty", edits)
	}
}

func decode(t *testing.T, rec experiment.Record) any {
	t.Helper()
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func encodeRecord(t *testing.T, v any) experiment.Record {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var r experiment.Record
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// editLeaf changes the *skip-th leaf (depth first, keys sorted) of *v and
// returns its path; ok is false when there are fewer leaves.
func editLeaf(v *any, path string, skip *int) (string, bool) {
	switch t := (*v).(type) {
	case map[string]any:
		if len(t) > 0 {
			keys := make([]string, 0, len(t))
			for k := range t {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				c := t[k]
				p := k
				if path != "" {
					p = path + "." + k
				}
				if got, ok := editLeaf(&c, p, skip); ok {
					t[k] = c
					return got, true
				}
			}
			return "", false
		}
	case []any:
		if len(t) > 0 {
			for i := range t {
				if got, ok := editLeaf(&t[i], fmt.Sprintf("%s[%d]", path, i), skip); ok {
					return got, true
				}
			}
			return "", false
		}
	}
	if *skip > 0 {
		*skip--
		return "", false
	}
	switch t := (*v).(type) {
	case string:
		*v = t + "x"
	case json.Number:
		n, err := t.Int64()
		if err != nil {
			panic("the frozen file holds a number that is not an integer: " + string(t))
		}
		*v = json.Number(strconv.FormatInt(n+1, 10))
	case bool:
		*v = !t
	default: // null, {} or []
		*v = "x"
	}
	return path, true
}

// TestRunRejectsArmedParent: a fault point armed in the runner's own
// environment would crash the runner, so Run refuses to start.
func TestRunRejectsArmedParent(t *testing.T) {
	t.Setenv("FAIRRELAY_FAULT", "before_claim_commit")
	_, err := experiment.Run(context.Background(), experiment.Options{Dir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "FAIRRELAY_FAULT") {
		t.Fatalf("Run with FAIRRELAY_FAULT set: %v, want an error naming it", err)
	}
}

// TestSelect runs the named scenarios only and rejects unknown names.
func TestSelect(t *testing.T) {
	t.Parallel()
	scs, err := experiment.Select([]string{"crash_after_settle_commit", "round_robin_nine_steps"})
	if err != nil {
		t.Fatal(err)
	}
	if len(scs) != 2 || scs[0].Name != "round_robin_nine_steps" || scs[1].Name != "crash_after_settle_commit" {
		t.Fatalf("Select gave %v, want the two in the usual order", scs)
	}
	if _, err := experiment.Select([]string{"no_such_scenario"}); err == nil || !strings.Contains(err.Error(), "no_such_scenario") {
		t.Fatalf("Select(unknown) = %v, want an error naming it", err)
	}
	if _, err := experiment.Run(context.Background(), experiment.Options{Dir: filepath.Join(t.TempDir(), "missing")}); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Run with a missing Dir: %v, want an error saying it does not exist", err)
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := experiment.Run(context.Background(), experiment.Options{Dir: file}); err == nil || !strings.Contains(err.Error(), "is not a directory") {
		t.Fatalf("Run with a file as Dir: %v, want an error saying it is not a directory", err)
	}
}

// TestScenarioList holds the list of issue 3: every result of SPEC §5 has
// its named scenario, and the frozen file has exactly these scenarios.
func TestScenarioList(t *testing.T) {
	t.Parallel()
	want := []string{
		"round_robin_nine_steps", "first_unacked_baseline_starves", "poison_head_isolated", "redrive_restores_flow",
		"retry_backoff_schedule", "stale_generation_duplicate", "expired_lease_without_takeover", "eight_process_claim_race",
		"crash_before_claim_commit", "crash_after_claim_commit", "crash_before_receipt_commit", "crash_after_receipt_commit",
		"crash_before_settle_commit", "crash_after_settle_commit",
		"trigger_rejects_event_insert", "trigger_rejects_projection_write", "trigger_rejects_audit_insert",
		"new_flows_overtake_under_seed_entry", "fair_entry_keeps_old_flow_turn",
	}
	var got, frozen []string
	for _, sc := range experiment.Scenarios() {
		got = append(got, sc.Name)
	}
	for _, r := range loadFrozen(t).Scenarios {
		frozen = append(frozen, r.Name)
	}
	if !slices.Equal(got, want) {
		t.Errorf("scenarios %v\nwant %v", got, want)
	}
	if !slices.Equal(frozen, want) {
		t.Errorf("frozen scenarios %v\nwant %v", frozen, want)
	}
}
