package outboxbench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Report is one run of `fairrelay bench outbox`, in its JSON shape.
type Report struct {
	// Machine describes where and when it ran (free text: date, CPUs, load
	// average, server version).
	Machine []string    `json:"machine"`
	Txn     []TxnResult `json:"txn,omitempty"`
	// TxnWithRelay: a relay dispatched the queue store during the
	// EnqueueTx variant (TxnOptions.WithRelay).
	TxnWithRelay bool `json:"txn_with_relay,omitempty"`
	// Statements is what one EnqueueTx sends (PostgreSQL).
	Statements *StatementCount `json:"statements,omitempty"`
	Latency    []LatencyResult `json:"latency,omitempty"`
	Idle       []IdleResult    `json:"idle,omitempty"`
	Targets    []Target        `json:"targets"`
}

// Target is one of issue 14's targets beside what this run measured.
type Target struct {
	What     string `json:"what"`
	Want     string `json:"want"`
	Measured string `json:"measured"`
	// Met is "yes", "no", or "not measured".
	Met string `json:"met"`
}

// The targets of issue 14 (to be met after the store's rewrite).
const (
	TargetRatioWork20 = 0.8 // PostgreSQL, 32 txns on distinct flows, 20 ms of work
	TargetRatioWork0  = 0.5 // the same with no work
	TargetP99Slow     = 15  // ms, p99 at 2 events/s, both backends
	TargetP99Fast     = 50  // ms, p99 at 500 events/s, both backends
	TargetIdleCPU     = 2   // % of one core, the idle relay
	TargetStatements  = 2   // statements per EnqueueTx (PostgreSQL)
)

// ComputeTargets fills r.Targets from its results.
func (r *Report) ComputeTargets() {
	r.Targets = nil
	met := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "no"
	}
	for _, c := range []struct {
		work float64
		want float64
	}{{20, TargetRatioWork20}, {0, TargetRatioWork0}} {
		t := Target{What: fmt.Sprintf("PostgreSQL, 32 txns on distinct flows, %g ms of work: EnqueueTx ÷ plain insert", c.work),
			Want: fmt.Sprintf("≥ %.1f", c.want), Met: "not measured"}
		for _, x := range r.Txn {
			if x.Backend == BackendPostgres && x.Txns == 32 && x.Flows == FlowsDistinct && x.WorkMS == c.work {
				t.Measured, t.Met = fmt.Sprintf("%.2f", x.Ratio), met(x.Ratio >= c.want)
			}
		}
		r.Targets = append(r.Targets, t)
	}
	t := Target{What: "PostgreSQL, one EnqueueTx: statements (one round trip where the driver allows it)",
		Want: fmt.Sprintf("≤ %d", TargetStatements), Met: "not measured"}
	if c := r.Statements; c != nil {
		t.Measured = fmt.Sprintf("%.1f statements, %.1f round trips", c.Statements, c.RoundTrips)
		t.Met = met(c.Statements <= TargetStatements)
	}
	r.Targets = append(r.Targets, t)
	for _, backend := range []string{BackendPostgres, BackendSQLite} {
		for _, c := range []struct {
			rate float64
			want float64
		}{{2, TargetP99Slow}, {500, TargetP99Fast}} {
			t := Target{What: fmt.Sprintf("%s, latency from another process at %g/s: p99", backendTitle(backend), c.rate),
				Want: fmt.Sprintf("≤ %g ms", c.want), Met: "not measured"}
			for _, x := range r.Latency {
				if x.Backend == backend && x.RatePerS == c.rate {
					t.Measured = fmt.Sprintf("%.1f ms (from the commit: %.1f ms)", x.P99MS, x.FromCommitP99MS)
					t.Met = met(x.P99MS <= c.want && x.Delivered == x.Sent && x.Delivered > 0)
					if x.Delivered < x.Sent {
						t.Measured += fmt.Sprintf(" (%d of %d delivered)", x.Delivered, x.Sent)
					}
				}
			}
			r.Targets = append(r.Targets, t)
		}
		t := Target{What: fmt.Sprintf("%s, the idle relay's CPU", backendTitle(backend)), Want: fmt.Sprintf("≤ %d %% of one core", TargetIdleCPU), Met: "not measured"}
		for _, x := range r.Idle {
			if x.Backend == backend {
				t.Measured, t.Met = fmt.Sprintf("%.2f %%", x.RelayCPUPercent), met(x.RelayCPUPercent <= TargetIdleCPU)
			}
		}
		r.Targets = append(r.Targets, t)
	}
}

func backendTitle(b string) string {
	switch b {
	case BackendPostgres:
		return "PostgreSQL"
	case BackendSQLite:
		return "SQLite"
	}
	return b
}

// WriteMarkdown writes the report as Markdown tables.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b bytes.Buffer
	if len(r.Machine) > 0 {
		fmt.Fprintf(&b, "Run: %s.\n\n", strings.Join(r.Machine, "; "))
	}
	if len(r.Txn) > 0 {
		relay := "no relay running"
		if r.TxnWithRelay {
			relay = "a relay dispatching the queue store during the EnqueueTx variant"
		}
		fmt.Fprintf(&b, "Concurrent business transactions (insert an order, write its event, work, commit), committed per second; %s:\n\n", relay)
		b.WriteString("| backend | flows | work | txns | plain insert txn/s | `EnqueueTx` txn/s | ratio | failed (plain, EnqueueTx) |\n")
		b.WriteString("|---|---|---:|---:|---:|---:|---:|---|\n")
		for _, x := range r.Txn {
			fmt.Fprintf(&b, "| %s | %s | %g ms | %d | %.0f | %.0f | %.2f | %d, %d |\n",
				backendTitle(x.Backend), x.Flows, x.WorkMS, x.Txns, x.PlainPerS, x.EnqueueTxPerS, x.Ratio, x.PlainErrors, x.EnqueueTxErrors)
		}
		for _, x := range r.Txn {
			if x.FirstError != "" {
				fmt.Fprintf(&b, "\n%s, flows %s, %g ms of work, %d txns, first failure: %s\n", backendTitle(x.Backend), x.Flows, x.WorkMS, x.Txns, x.FirstError)
			}
		}
		b.WriteString("\n")
	}
	if c := r.Statements; c != nil {
		fmt.Fprintf(&b, "One `EnqueueTx` on PostgreSQL (a pgx tracer on the application's connection, %d transactions after a warm-up, less the plain insert's one statement): "+
			"%.1f statements, %.1f round trips, %.1f of them setting search_path.\n\n", c.Transactions, c.Statements, c.RoundTrips, c.SearchPathSets)
	}
	if len(r.Latency) > 0 {
		b.WriteString("Enqueue-to-delivery latency of events committed by another OS process (the relay's no-op sink; wall clock): " +
			"from the moment the producer wrote the event's body, just before its `EnqueueTx` and commit (the targets' figure), " +
			"and from the moment its commit returned (the relay's part alone):\n\n")
		b.WriteString("| backend | rate/s | sent | achieved/s | producer's worst lag ms | delivered | p50 ms | p90 ms | p99 ms | max ms | from the commit: p50 / p90 / p99 / max ms |\n")
		b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
		for _, x := range r.Latency {
			fmt.Fprintf(&b, "| %s | %g | %d | %.1f | %.1f | %d | %.1f | %.1f | %.1f | %.1f | %.1f / %.1f / %.1f / %.1f |\n",
				backendTitle(x.Backend), x.RatePerS, x.Sent, x.AchievedPerS, x.MaxLagMS, x.Delivered, x.P50MS, x.P90MS, x.P99MS, x.MaxMS,
				x.FromCommitP50MS, x.FromCommitP90MS, x.FromCommitP99MS, x.FromCommitMaxMS)
		}
		for _, x := range r.Latency {
			if x.ProducerErrors > 0 {
				fmt.Fprintf(&b, "\n%s at %g/s: %d producer transactions failed, the first with: %s\n", backendTitle(x.Backend), x.RatePerS, x.ProducerErrors, x.FirstError)
			}
		}
		b.WriteString("\n")
	}
	if len(r.Idle) > 0 {
		b.WriteString("The idle relay (running, nothing to do):\n\n")
		b.WriteString("| backend | seconds | relay process CPU, % of one core | server processes of the relay's connections, % of one core |\n")
		b.WriteString("|---|---:|---:|---:|\n")
		for _, x := range r.Idle {
			server := "–"
			if x.ServerCPUPercent != nil {
				server = fmt.Sprintf("%.2f", *x.ServerCPUPercent)
			}
			fmt.Fprintf(&b, "| %s | %g | %.2f | %s |\n", backendTitle(x.Backend), x.Seconds, x.RelayCPUPercent, server)
		}
		for _, x := range r.Idle {
			if x.Note != "" {
				fmt.Fprintf(&b, "\n%s: %s\n", backendTitle(x.Backend), x.Note)
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("Issue 14's targets beside this run:\n\n")
	b.WriteString("| target | want | measured | met |\n|---|---|---|---|\n")
	for _, t := range r.Targets {
		m := t.Measured
		if m == "" {
			m = "–"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", t.What, t.Want, m, t.Met)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// The markers around the generated part of BENCHMARKS.md's section.
const (
	SectionTitle = "## The outbox under concurrency (issue 14)"
	beginMarker  = "<!-- fairrelay bench outbox: begin (generated; --update-file replaces what is between the markers) -->"
	endMarker    = "<!-- fairrelay bench outbox: end -->"
)

// UpdateFile puts markdown between the generated-part markers of path
// (BENCHMARKS.md), replacing what was there; a file without the markers
// gets a new section at its end (SectionTitle, then the markers).
func UpdateFile(path string, markdown []byte) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := ReplaceSection(old, markdown)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, out, 0o644)
}

// ReplaceSection is UpdateFile on a file's contents.
func ReplaceSection(doc, markdown []byte) ([]byte, error) {
	block := beginMarker + "\n\n" + strings.TrimSpace(string(markdown)) + "\n\n" + endMarker + "\n"
	s := string(doc)
	i := strings.Index(s, beginMarker)
	j := strings.Index(s, endMarker)
	switch {
	case i < 0 && j < 0:
		return []byte(strings.TrimRight(s, "\n") + "\n\n" + SectionTitle + "\n\n" + block), nil
	case i < 0 || j < i:
		return nil, fmt.Errorf("the markers %q and %q are not in order", beginMarker, endMarker)
	}
	end := j + len(endMarker)
	if end < len(s) && s[end] == '\n' {
		end++
	}
	return []byte(s[:i] + block + s[end:]), nil
}

// Describe returns notes on where and when a run happens: the time (UTC),
// the CPUs, the load average, the Go version and the commit built, and the
// PostgreSQL server's version when pg is set.
func Describe(ctx context.Context, pg string) []string {
	notes := []string{time.Now().UTC().Format("2006-01-02 15:04 UTC")}
	notes = append(notes, fmt.Sprintf("%d CPUs, GOMAXPROCS %d, %s", runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version()))
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			notes = append(notes, "load average "+strings.Join(f[:3], " "))
		}
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", ""
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = " (modified)"
				}
			}
		}
		if len(rev) >= 7 {
			notes = append(notes, "commit "+rev[:7]+dirty)
		}
	}
	if pg != "" {
		conn, err := pgx.Connect(ctx, pg)
		if err == nil {
			var v string
			if conn.QueryRow(ctx, "SHOW server_version").Scan(&v) == nil {
				notes = append(notes, "PostgreSQL "+strings.Fields(v)[0]+" on "+pgHost(pg))
			}
			conn.Close(ctx)
		}
	}
	return notes
}

// pgHost is the host part of a PostgreSQL URL.
func pgHost(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "?"
	}
	return p.Host
}
