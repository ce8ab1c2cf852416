package experiment

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Report is a run checked against the frozen document.
type Report struct {
	Results []Result
	// Diffs are the values that differ from the frozen document.
	Diffs []Diff
}

// Check compares a run with the frozen document. Pass frozen.Subset(names)
// when only some scenarios ran.
func Check(frozen Document, results []Result) Report {
	return Report{Results: results, Diffs: Compare(frozen, NewDocument(results))}
}

// OK reports whether every scenario ran, kept its SPEC claims and matches
// the frozen document.
func (r Report) OK() bool {
	if len(r.Diffs) > 0 {
		return false
	}
	for _, res := range r.Results {
		if res.Failed() {
			return false
		}
	}
	return true
}

var kindLabels = map[Kind]string{
	KindSQLite:          "SQLite files",
	KindProcesses:       "OS processes on SQLite files",
	KindSchedulingModel: "pure scheduling model, no database",
}

// Write prints one line per scenario (ok or FAIL, its SPEC source, what it
// runs on and its claim), the broken claims, errors and differences under a failing
// one, then the crash matrix and a summary line.
func (r Report) Write(w io.Writer) error {
	diffs := map[string][]Diff{}
	for _, d := range r.Diffs {
		diffs[d.Scenario] = append(diffs[d.Scenario], d)
	}
	width := 0
	for _, res := range r.Results {
		width = max(width, len(res.Name))
	}
	failed := 0
	names := map[string]bool{}
	for _, res := range r.Results {
		names[res.Name] = true
		status := "ok"
		if res.Failed() || len(diffs[res.Name]) > 0 {
			status = "FAIL"
			failed++
		}
		fmt.Fprintf(w, "%-4s  %-*s  %-15s  %-34s  %s\n", status, width, res.Name, res.Source, kindLabels[res.Kind], res.Claim)
		if res.Err != nil {
			fmt.Fprintf(w, "        error: %s\n", oneLine(res.Err.Error()))
		}
		for _, v := range res.Violations {
			fmt.Fprintf(w, "        claim broken: %s\n", oneLine(v))
		}
		for _, d := range diffs[res.Name] {
			fmt.Fprintf(w, "        differs from frozen: %s\n", oneLine(d.String()))
		}
	}
	for _, d := range r.Diffs {
		if !names[d.Scenario] {
			failed++
			fmt.Fprintf(w, "FAIL  %s\n        %s\n", d.Scenario, d)
		}
	}
	if err := writeCrashMatrix(w, r.Results); err != nil {
		return err
	}
	if failed == 0 {
		_, err := fmt.Fprintf(w, "\n%d scenarios: all ok, equal to the frozen results\n", len(r.Results))
		return err
	}
	_, err := fmt.Fprintf(w, "\n%d scenarios: %d FAILED\n", len(r.Results), failed)
	return err
}

// writeCrashMatrix prints the crash rows of results as the table of SPEC §5
// item 8; nothing when no crash row ran.
func writeCrashMatrix(w io.Writer, results []Result) error {
	var rows []Result
	for _, res := range results {
		if strings.HasPrefix(res.Name, "crash_") {
			rows = append(rows, res)
		}
	}
	if len(rows) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\ncrash matrix (SPEC §5 item 8): a child process exits at the point; recovery runs at tick %d\n\n", crashRecoveryAt)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "exit point\texit\tvisible before recovery\trecovery\tafter recovery")
	for _, res := range rows {
		f, ok := res.facts.(crashFacts)
		if !ok {
			fmt.Fprintf(tw, "%s\t\terror: %v\t\t\n", strings.TrimPrefix(res.Name, "crash_"), res.Err)
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", f.Point, f.ExitCode, f.Before, f.Recovery, f.After)
	}
	return tw.Flush()
}

func (v crashView) String() string {
	return fmt.Sprintf("%s, ticket %d, gen %d, attempts %d, receipts %d, total %d",
		v.State, v.Ticket, v.Generation, v.Attempts, v.Receipts, v.ProjectionTotal)
}

func (d delivery) String() string {
	if d.Claim == idle {
		return idle
	}
	s := fmt.Sprintf("claim %s gen %d → %s → %s", d.Claim, d.Generation, d.Received, d.Settled)
	if d.Settled == "ready" {
		s += fmt.Sprintf(" (next_at %d)", d.NextAt)
	}
	return s
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }
