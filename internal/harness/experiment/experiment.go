// Package experiment reproduces every result of the article (SPEC §5) with
// fairrelay's own code: each named scenario runs on fresh SQLite files (or,
// for the unfair baseline, as a pure scheduling model), checks the SPEC's
// claim itself, and returns the business facts it observed. Run collects them
// into one Document; Check compares a run with the frozen document committed
// at experiments/results.json.
//
// The frozen facts are business state only — answers, ids, states, counters,
// receipts, projections — never PIDs, durations, temporary paths or which
// process won a race, so a run on any machine reproduces them exactly.
//
// Scenarios that need real OS processes (the eight-process claim race and the
// six crash rows) start Options.Worker, an executable that runs RunWorker: the
// fairrelay binary's hidden `experiment worker` subcommand, or a test binary
// whose TestMain calls RunWorker.
package experiment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/faultpoint"
)

// Kind says what a scenario runs on.
type Kind string

const (
	// KindSQLite: the real queue store and inbox on fresh SQLite files, in
	// this process.
	KindSQLite Kind = "sqlite"
	// KindProcesses: real OS processes running fairrelay code on fresh
	// SQLite files (the claim race, the crash matrix).
	KindProcesses Kind = "processes"
	// KindSchedulingModel: a pure scheduling model with no database (the
	// article's unfair baseline, SPEC §5 item 2).
	KindSchedulingModel Kind = "scheduling_model"
)

// Scenario is one named experiment of SPEC §5.
type Scenario struct {
	// Name is the scenario's snake_case name, its key in the frozen file.
	Name string
	// Source is the SPEC result it reproduces ("SPEC §5 item 1").
	Source string
	// Kind says what it runs on.
	Kind Kind
	// Claim is the SPEC's claim in one line.
	Claim string
	run   func(ctx context.Context, s *session) (any, error)
}

// Scenarios returns every scenario, in the order Run runs them.
func Scenarios() []Scenario {
	out := []Scenario{
		{Name: "round_robin_nine_steps", Source: "SPEC §5 item 1", Kind: KindSQLite,
			Claim: "A, B, C with three events each: nine steps claim A1 B1 C1 A2 B2 C2 A3 B3 C3", run: roundRobinNineSteps},
		{Name: "first_unacked_baseline_starves", Source: "SPEC §5 item 2", Kind: KindSchedulingModel,
			Claim: "first-unacked selection picks A's conflicting head every step; B is never served", run: firstUnackedBaselineStarves},
		{Name: "poison_head_isolated", Source: "SPEC §5 item 3", Kind: KindSQLite,
			Claim: "A1 (delta 10) against max_delta 5 is quarantined, A2 is never claimed, B1 is acked", run: poisonHeadIsolated},
		{Name: "redrive_restores_flow", Source: "SPEC §5 item 3", Kind: KindSQLite,
			Claim: "redrive A1 and raise max_delta to 1000: A1, A2 acked, A seq 2 total 11, one audit row, A1 lifetime_attempts 2", run: redriveRestoresFlow},
		{Name: "retry_backoff_schedule", Source: "SPEC §5 item 4", Kind: KindSQLite,
			Claim: "retry sets next_at 2 then 6, the third failure quarantines; claims at ticks 1 and 5 skip A while B runs at 0", run: retryBackoffSchedule},
		{Name: "stale_generation_duplicate", Source: "SPEC §5 item 5", Kind: KindSQLite,
			Claim: "old token settles stale, new token acks: two deliveries, one effect, one valid settle", run: staleGenerationDuplicate},
		{Name: "expired_lease_without_takeover", Source: "SPEC §5 item 6", Kind: KindSQLite,
			Claim: "the lease ran out and nobody re-claimed: the old token's settle answers expired", run: expiredLeaseWithoutTakeover},
		{Name: "eight_process_claim_race", Source: "SPEC §5 item 7", Kind: KindProcesses,
			Claim: "eight OS processes claim at one tick: exactly {A1, B1, C1} claimed, five idle, none errors", run: eightProcessClaimRace},
	}
	for _, row := range crashRows() {
		out = append(out, Scenario{Name: "crash_" + row.point, Source: "SPEC §5 item 8", Kind: KindProcesses,
			Claim: "a child exits 73 " + strings.ReplaceAll(row.point, "_", " ") + "; " + row.claim, run: row.run})
	}
	out = append(out,
		Scenario{Name: "trigger_rejects_event_insert", Source: "SPEC §5 item 9", Kind: KindSQLite,
			Claim: "a trigger rejects the event insert: enqueue fails with the error, flow.seq unchanged", run: triggerRejectsEventInsert},
		Scenario{Name: "trigger_rejects_projection_write", Source: "SPEC §5 item 9", Kind: KindSQLite,
			Claim: "a trigger rejects the projection write: receive fails with the error, no receipt", run: triggerRejectsProjectionWrite},
		Scenario{Name: "trigger_rejects_audit_insert", Source: "SPEC §5 item 9", Kind: KindSQLite,
			Claim: "a trigger rejects the audit insert: redrive fails with the error, the event stays quarantined at its old generation", run: triggerRejectsAuditInsert},
		Scenario{Name: "new_flows_overtake_under_seed_entry", Source: "SPEC §5 item 10", Kind: KindSQLite,
			Claim: "seed entry (documented limit): B, C, D created one after another are each claimed before A2", run: newFlowsOvertakeUnderSeedEntry},
		Scenario{Name: "fair_entry_keeps_old_flow_turn", Source: "SPEC §7", Kind: KindSQLite,
			Claim: "fair entry: the same input claims A2 before B1, C1 and D1", run: fairEntryKeepsOldFlowTurn},
	)
	return out
}

// Worker is how to start a worker process: Path with Args, then the worker's
// own arguments; Env is added to the parent's environment.
type Worker struct {
	Path string
	Args []string
	Env  []string
}

// Options configure Run.
type Options struct {
	// Dir is where fresh SQLite files are made, one subdirectory per
	// scenario. It must exist.
	Dir string
	// Worker starts the child processes of the KindProcesses scenarios.
	Worker Worker
	// Only, when not empty, names the scenarios to run (in the usual order).
	Only []string
	// Progress, when set, is called after each scenario with the count done,
	// the total and the scenario's name.
	Progress func(done, total int, name string)
	// Timeout bounds each scenario, child processes included. Defaults to
	// 60s; it only guards against a hang.
	Timeout time.Duration
}

// Result is one scenario's run: its record, the SPEC claims it found broken
// (Violations) and the error that stopped it (Err, with Record.Facts null).
type Result struct {
	Record
	Violations []string
	Err        error
	facts      any
}

// Failed reports whether the scenario stopped on an error or found a claim
// broken.
func (r Result) Failed() bool { return r.Err != nil || len(r.Violations) > 0 }

// Record is one scenario in a Document: its Scenario's labels and the
// business facts it observed (JSON, scenario-specific; null when the
// scenario stopped on an error).
type Record struct {
	Name   string          `json:"name"`
	Source string          `json:"source"`
	Kind   Kind            `json:"kind"`
	Claim  string          `json:"claim"`
	Facts  json.RawMessage `json:"facts"`
}

// Document is what `fairrelay experiment run` writes and what
// experiments/results.json freezes: every scenario's business facts.
type Document struct {
	Scenarios []Record `json:"scenarios"`
}

// Marshal renders d as indented JSON with a final newline, the form of the
// frozen file.
func (d Document) Marshal() ([]byte, error) {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// ParseDocument reads a document. Errors: not JSON, or no scenarios.
func ParseDocument(b []byte) (Document, error) {
	var d Document
	if err := json.Unmarshal(b, &d); err != nil {
		return Document{}, fmt.Errorf("frozen results: %w", err)
	}
	if len(d.Scenarios) == 0 {
		return Document{}, errors.New("frozen results: no scenarios")
	}
	return d, nil
}

// NewDocument collects the records of rs, in order.
func NewDocument(rs []Result) Document {
	d := Document{Scenarios: make([]Record, 0, len(rs))}
	for _, r := range rs {
		d.Scenarios = append(d.Scenarios, r.Record)
	}
	return d
}

// Select returns the scenarios named in only (all when only is empty), in
// the usual order. Errors: ErrInvalidInput naming field "scenario" for an
// unknown name.
func Select(only []string) ([]Scenario, error) {
	all := Scenarios()
	if len(only) == 0 {
		return all, nil
	}
	want := map[string]bool{}
	for _, n := range only {
		want[n] = true
	}
	var out []Scenario
	for _, sc := range all {
		if want[sc.Name] {
			out = append(out, sc)
			delete(want, sc.Name)
		}
	}
	for n := range want {
		return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "scenario", Message: fmt.Sprintf("unknown scenario %q", n)}
	}
	return out, nil
}

// Run runs the selected scenarios one after another, each on fresh files in
// its own subdirectory of opts.Dir, and returns one Result per scenario. A
// scenario's failure is in its Result; Run's own error is for bad options
// only: an unknown scenario name (ErrInvalidInput, field "scenario"), a
// missing Dir, or a fault point armed in this process's environment (which
// would crash the runner itself).
func Run(ctx context.Context, opts Options) ([]Result, error) {
	if v := os.Getenv(faultpoint.EnvVar); v != "" {
		return nil, fmt.Errorf("experiment: %s=%s is set in this process; unset it (the runner arms fault points in its children only)", faultpoint.EnvVar, v)
	}
	if st, err := os.Stat(opts.Dir); errors.Is(err, fs.ErrNotExist) {
		// Said as it is (a fresh user read "is not a directory" of a path
		// that did not exist yet).
		return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "dir", Message: fmt.Sprintf("%q does not exist: create it first (mkdir -p)", opts.Dir)}
	} else if err != nil || !st.IsDir() {
		return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "dir", Message: fmt.Sprintf("%q is not a directory", opts.Dir)}
	}
	scs, err := Select(opts.Only)
	if err != nil {
		return nil, err
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 60 * time.Second
	}
	out := make([]Result, 0, len(scs))
	for i, sc := range scs {
		out = append(out, runOne(ctx, sc, opts))
		if opts.Progress != nil {
			opts.Progress(i+1, len(scs), sc.Name)
		}
	}
	return out, nil
}

func runOne(ctx context.Context, sc Scenario, opts Options) Result {
	r := Result{Record: Record{Name: sc.Name, Source: sc.Source, Kind: sc.Kind, Claim: sc.Claim, Facts: json.RawMessage("null")}}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	s := &session{dir: filepath.Join(opts.Dir, sc.Name), worker: opts.Worker}
	defer s.close()
	if err := os.Mkdir(s.dir, 0o755); err != nil {
		r.Err = err
		return r
	}
	facts, err := sc.run(ctx, s)
	if err != nil {
		r.Err = err
		return r
	}
	b, err := json.Marshal(facts)
	if err != nil {
		r.Err = fmt.Errorf("encode facts: %w", err)
		return r
	}
	r.Facts, r.facts, r.Violations = b, facts, s.violations
	return r
}
