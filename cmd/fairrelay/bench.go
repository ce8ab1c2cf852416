package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/harness/bench"
)

func init() { rootCmd.AddCommand(newBenchCmd()) }

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure on this machine: claims on its disk, the outbox under concurrency, the relay to a broker",
	}
	cmd.AddCommand(newBenchClaimCmd(), newBenchOutboxCmd(), newBenchOutboxProducerCmd(), newBenchBrokerCmd(), newBenchPruneCmd(), newBenchTimeFairCmd())
	for _, sub := range cmd.Commands() {
		if least, ok := benchLeast[sub.Name()]; ok {
			run := sub.RunE
			sub.RunE = func(cmd *cobra.Command, args []string) error {
				if err := checkLeast(cmd, least); err != nil {
					return err
				}
				return run(cmd, args)
			}
		}
	}
	return cmd
}

// benchLeast is the least value of each numeric flag of the bench
// commands, checked before anything runs: a zero duration, round count or
// batch ran (or failed late, naming no flag: a breaker's sweep).
var benchLeast = map[string]map[string]string{
	"claim":    {"backlog": "0", "duration": "1ms", "rounds": "1"},
	"outbox":   {"duration": "1ms", "idle": "0s", "latency-duration": "1ms", "min-events": "1", "relay-workers": "1"},
	"broker":   {"events": "1", "rounds": "1", "workers": "1"},
	"prune":    {"baseline": "0s", "batch": "1", "body-bytes": "1", "events": "1", "flows": "1", "pause": "0s"},
	"timefair": {"fast-flows": "0", "slow-flows": "0", "slots": "1", "measure": "1ms", "warmup": "0s", "quantum": "0s", "slow-latency": "0s"},
}

// checkLeast refuses a flag of cmd below its least value (an int or a
// duration flag): invalid_input naming the flag.
func checkLeast(cmd *cobra.Command, least map[string]string) error {
	for name, min := range least {
		f := cmd.Flags().Lookup(name)
		if f == nil {
			continue
		}
		switch f.Value.Type() {
		case "int":
			v, err1 := strconv.Atoi(f.Value.String())
			m, err2 := strconv.Atoi(min)
			if err1 == nil && err2 == nil && v < m {
				return fairrelay.InvalidInput(name, "must be at least %d, got %d", m, v)
			}
		case "duration":
			v, err1 := time.ParseDuration(f.Value.String())
			m, err2 := time.ParseDuration(min)
			if err1 == nil && err2 == nil && v < m {
				return fairrelay.InvalidInput(name, "must be at least %s, got %s", m, v)
			}
		}
	}
	return nil
}

func newBenchClaimCmd() *cobra.Command {
	var flows, groups, batches, dir string
	var asJSON bool
	var pf policyFlags
	opts := bench.ClaimOptions{}
	cmd := &cobra.Command{
		Use:   "claim [--flows 10,1000,100000] [--backlog 1000000] [--batch 1,64] [--duration 5s] [--json]",
		Short: "Claim+settle rate against the raw commit rate of the same disk (BENCHMARKS.md)",
		Long: `Runs in one process: the raw single-row commit rate of SQLite on the same
disk with the same pragmas (the physical reference), and for each flow count a
fresh store loaded with the backlog spread over the flows, and for each batch
size k the rate of claim+settle with one worker and no delivery: each
transaction settles the k events the previous one claimed and claims k more
(one SettleMany with a ClaimLimit). The stores are loaded first; then every rate, the raw one
first, is measured for duration/rounds in each of --rounds interleaved rounds. --json prints
{"raw_commit_per_s": …, "results": [{flows, backlog, batch, claim_settle_per_s,
ratio_to_raw, peak_rss_mb}, …]}; otherwise a table, with a progress bar on
standard error while a store loads. peak_rss_mb is VmHWM of /proc/self/status:
the peak of the whole run, all stores open.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if opts.Groups, err = parseCountsFrom("groups", groups, 0); err != nil {
				return err
			}
			if opts.Flows, err = parseCounts("flows", flows); err != nil {
				return err
			}
			if opts.Batches, err = parseCounts("batch", batches); err != nil {
				return err
			}
			if opts.Policy, err = pf.policy(); err != nil {
				return err
			}
			var cleanup func()
			if opts.Dir, cleanup, err = benchDir(dir); err != nil {
				return err
			}
			defer cleanup()
			if !asJSON {
				opts.OnLoad = loadProgress(cmd)
			}
			rep, err := bench.RunClaim(cmd.Context(), opts)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			return bench.WriteTable(cmd.OutOrStdout(), rep)
		},
	}
	f := cmd.Flags()
	f.StringVar(&flows, "flows", "10,1000,100000", "comma-separated flow counts, each measured on a fresh store")
	f.StringVar(&groups, "groups", "0", "comma-separated group counts each flow count is measured with: 0 leaves every flow its own group, g puts flow i in group i mod g (SPEC §8)")
	f.IntVar(&opts.Backlog, "backlog", 1000000, "events loaded before measuring, spread over the flows")
	f.StringVar(&batches, "batch", "1,64", "comma-separated batch sizes k: each transaction settles the k events claimed by the previous one and claims k more")
	f.DurationVar(&opts.Duration, "duration", bench.DefaultDuration, "how long each rate is measured in total")
	f.IntVar(&opts.Rounds, "rounds", bench.DefaultRounds, "interleaved rounds the measuring time is split into, so the machine's load changes affect every rate alike")
	f.StringVar(&dir, "dir", "", "directory for the database files (the disk measured); defaults to a fresh temporary directory")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	def := fairrelay.ReferencePolicy()
	def.Entry = fairrelay.EntryFair
	pf.register(cmd, def, true) // the benchmark runs on explicit ticks
	return cmd
}

// parseCounts parses "10,1000" into positive integers.
// benchDir returns dir, or when it is "" a fresh temporary directory and
// a function that removes it.
func benchDir(dir string) (string, func(), error) {
	if dir != "" {
		if st, err := os.Stat(dir); err != nil {
			return "", nil, fairrelay.InvalidInput("dir", "%s does not exist", dir)
		} else if !st.IsDir() {
			return "", nil, fairrelay.InvalidInput("dir", "%s is a file, not a directory", dir)
		}
		return dir, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "fairrelay-bench-")
	if err != nil {
		return "", nil, err
	}
	return dir, func() { os.RemoveAll(dir) }, nil
}

func parseCounts(field, s string) ([]int, error) { return parseCountsFrom(field, s, 1) }

// parseCountsFrom is parseCounts with a smallest allowed count.
func parseCountsFrom(field, s string, least int) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n < least {
			return nil, fairrelay.InvalidInput(field, "%q is not an integer of at least %d", part, least)
		}
		out = append(out, n)
	}
	return out, nil
}

// newBar is a progress bar of max steps on the command's standard error,
// drawn only when that is a terminal: redirected to a file or a CI log,
// a bar's redraws would fill it with thousands of lines.
func newBar(cmd *cobra.Command, max int, opts ...progressbar.Option) *progressbar.ProgressBar {
	w := cmd.ErrOrStderr()
	f, ok := w.(*os.File)
	visible := ok && term.IsTerminal(int(f.Fd()))
	return progressbar.NewOptions(max, append([]progressbar.Option{progressbar.OptionSetWriter(w), progressbar.OptionSetVisibility(visible)}, opts...)...)
}

// loadProgress draws one progress bar per store while it loads.
func loadProgress(cmd *cobra.Command) func(flows, done, total int) {
	var bar *progressbar.ProgressBar
	barFlows := -1
	return func(flows, done, total int) {
		if flows != barFlows {
			barFlows = flows
			bar = newBar(cmd, total,
				progressbar.OptionSetDescription(fmt.Sprintf("loading %d events over %d flows", total, flows)),
				progressbar.OptionShowCount(),
				progressbar.OptionShowIts(),
				progressbar.OptionSetItsString("events"),
				progressbar.OptionClearOnFinish(),
			)
		}
		bar.Set(done)
		if done == total {
			bar.Finish()
		}
	}
}
