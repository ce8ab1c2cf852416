package main

import (
	"encoding/json"
	"time"

	"github.com/spf13/cobra"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/harness/bench"
)

func newBenchTimeFairCmd() *cobra.Command {
	var dir, relays string
	var asJSON bool
	opts := bench.TimeFairOptions{}
	cmd := &cobra.Command{
		Use:   "timefair [--pg URL] [--relays 1,2,4] [--slots 8] [--warmup 10s] [--measure 30s] [--json]",
		Short: "Fast flows beside slow ones: the relay's slots shared by time (SPEC §11, BENCHMARKS.md)",
		Long: `Runs in one process, with a receiver on loopback that answers the flows
named slow/N after --slow-latency and the flows named fast/N at once, every
flow its own group. For each relay count in --relays (--slots split evenly
between them; one relay on SQLite, more on PostgreSQL at --pg, a fresh
schema each, dropped at the end), three runs on fresh stores:

  1. the fast flows alone: their deliveries per second;
  2. the fast flows beside the slow ones: both rates, counted over
     --measure after --warmup, and the slots each side held on average
     (the relays' own accounts);
  3. three groups of weights 1, 2 and 5 whose receiver takes 50 ms: their
     shares of the slot time.

Prints fast beside ÷ fast alone (target at least 0.5), the slow flows'
rate against their fair share, half the slots over --slow-latency (target
at least 0.8), and the weighted shares (target within 20 % of 1:2:5).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if opts.Relays, err = parseCounts("relays", relays); err != nil {
				return err
			}
			for name, d := range map[string]time.Duration{"warmup": opts.Warmup, "measure": opts.Measure, "slow-latency": opts.SlowLatency} {
				if d <= 0 {
					return fairrelay.InvalidInput(name, "must be positive, got %s", d)
				}
			}
			if opts.Quantum < 0 {
				return fairrelay.InvalidInput("quantum", "must not be negative, got %s", opts.Quantum)
			}
			if opts.Slots < 1 {
				return fairrelay.InvalidInput("slots", "must be at least 1, got %d", opts.Slots)
			}
			var cleanup func()
			if opts.Dir, cleanup, err = benchDir(dir); err != nil {
				return err
			}
			defer cleanup()
			if !asJSON {
				opts.OnPhase = func(name string) { cmd.PrintErrln("measuring: " + name) }
			}
			rep, err := bench.RunTimeFair(cmd.Context(), opts)
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(rep)
			}
			return bench.WriteTimeFairTable(cmd.OutOrStdout(), rep)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.PostgresURL, "pg", "", "PostgreSQL server for the runs with more than one relay (postgres://…)")
	f.StringVar(&relays, "relays", "1,2,4", "relay counts to measure, comma-separated; each must divide --slots")
	f.IntVar(&opts.Slots, "slots", 8, "delivery slots of all the relays together")
	f.IntVar(&opts.SlowFlows, "slow-flows", 20, "flows whose receiver takes --slow-latency")
	f.IntVar(&opts.FastFlows, "fast-flows", 20, "flows answered at once")
	f.DurationVar(&opts.SlowLatency, "slow-latency", 2*time.Second, "how long the receiver takes to answer a slow flow")
	f.DurationVar(&opts.Warmup, "warmup", 10*time.Second, "time before the measurement of the run beside the slow flows")
	f.DurationVar(&opts.Measure, "measure", 30*time.Second, "measured time of the run beside the slow flows (a third of it for the other runs)")
	f.DurationVar(&opts.Quantum, "quantum", 0, "the relays' --quantum (default: the relay's, 100ms); 1h shares the slots by claims, as before SPEC §11, for comparison")
	f.StringVar(&dir, "dir", "", "directory for the SQLite stores; defaults to a fresh temporary directory")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}
