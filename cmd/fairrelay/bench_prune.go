package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/fairrelay/fairrelay/internal/harness/bench"
	"github.com/fairrelay/fairrelay/internal/harness/outboxbench"
)

func newBenchPruneCmd() *cobra.Command {
	var opts bench.PruneOptions
	var backends, pg, dir string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "prune [--events 1000000] [--batch 20] [--pause 2s] [--backends sqlite,postgres] [--json]",
		Short: "Retention on a large store: the longest prune transaction, dispatch beside it, the size before and after (BENCHMARKS.md)",
		Long: `Fills a fresh store per backend with --events acked events over --flows
flows (bodies of --body-bytes bytes), measures one worker's claim+settle step
alone for --baseline, then prunes every acked event in transactions of
--batch events (as the relay's retention does, SPEC §8) while the same
worker keeps dispatching other flows. It prints what the prune deleted
(events pruned; tombstones: the tombstones it deleted, none with
--tombstones, whose ids it keeps), its calls (txns: how many; on SQLite
more than events/--batch, as a transaction also ends after 2 ms of
deletes; s: their seconds, the pauses left out; longest, p99: each
Queue.Prune, with, on SQLite, its wait before its transaction for the
log's checkpoint, which holds nothing), its writes (longest, p99: how long
a call held the store's writer in one write, what a dispatch step can wait
behind; PruneResult.Held), the dispatch step's p50/p99/p99.9/max alone and
during the prune (with --pause D, the prune stops for D after every D of pruning and
the steps inside those pauses are reported apart: dispatch without the
prune in the same run, under the same load and about as long, so that
the tails compare),
and the store's size before the prune, right after it, and (PostgreSQL)
after a plain VACUUM. SQLite: the file plus its WAL; a new store frees
pages to the file system by incremental vacuum at each prune. PostgreSQL:
the tables of a fresh schema of --pg with their indexes, dropped at the
end. --tombstones makes every pruned event leave a tombstone (ids kept
longer than bodies, as --retain-ids > --retain-acked does).

On Linux a second table gives the prune's writes and the dispatch steps
beside it and in its pauses again, over the prune calls and steps during
which the machine's steal counter (/proc/stat: time its hypervisor ran
something else on its CPUs, in ticks of 10 ms) did not move, and the
share of the CPUs stolen while the prune ran: on a virtual machine those
stops, not the prune, can make the longest of both (BENCHMARKS.md,
"Prune (SPEC §8 retention)").`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Backends = strings.Split(backends, ",")
			opts.PgURL = pg
			var cleanup func()
			var err error
			if opts.Dir, cleanup, err = benchDir(dir); err != nil {
				return err
			}
			defer cleanup()
			if !asJSON {
				opts.OnProgress = pruneProgress(cmd)
			}
			reps, err := bench.RunPrune(cmd.Context(), opts)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(reps)
			}
			return bench.WritePruneTable(cmd.OutOrStdout(), reps)
		},
	}
	f := cmd.Flags()
	f.IntVar(&opts.Events, "events", 1_000_000, "acked events in the store before the prune")
	f.IntVar(&opts.Flows, "flows", 1000, "flows the events are spread over")
	f.IntVar(&opts.BodyBytes, "body-bytes", 256, "bytes per event body")
	f.IntVar(&opts.Batch, "batch", 20, "events per prune transaction (the relay's default)")
	f.BoolVar(&opts.Tombstones, "tombstones", false, "every pruned event leaves a tombstone")
	f.BoolVar(&opts.Refill, "refill", false, "after the prune, enqueue and ack as many events again and measure the size: is the space reused")
	f.DurationVar(&opts.Baseline, "baseline", 0, "how long dispatch is measured alone (default 5s)")
	f.DurationVar(&opts.Pause, "pause", 0, "stop the prune for this long after every as long of pruning, and report the dispatch steps inside the pauses apart (0: back to back)")
	f.StringVar(&backends, "backends", "sqlite,postgres", "backends to measure, comma-separated")
	f.StringVar(&pg, "pg", outboxbench.DefaultPG(), "PostgreSQL server on this machine (default: $"+outboxbench.PGEnvVar+", else the tests' server)")
	f.StringVar(&dir, "dir", "", "directory for the SQLite file, which is removed at the end (default: a temporary directory, removed too)")
	f.BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return cmd
}

// pruneProgress shows a progress bar per backend and phase on standard
// error.
func pruneProgress(cmd *cobra.Command) func(backend, phase string, done, total int) {
	var bar *progressbar.ProgressBar
	cur := ""
	return func(backend, phase string, done, total int) {
		if key := backend + " " + phase; key != cur {
			cur = key
			if bar != nil {
				bar.Finish()
			}
			bar = newBar(cmd, max(total, -1),
				progressbar.OptionSetDescription(fmt.Sprintf("%s: %s", backend, phase)),
				progressbar.OptionShowCount(), progressbar.OptionClearOnFinish())
		}
		bar.Set(done)
	}
}
