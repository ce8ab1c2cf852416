package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/harness/outboxbench"
)

func newBenchOutboxCmd() *cobra.Command {
	var (
		pg, backends, parts, txns, work, flows, rates, dir, updateFile string
		asJSON                                                         bool
		to                                                             outboxbench.TxnOptions
		lo                                                             outboxbench.LatencyOptions
	)
	cmd := &cobra.Command{
		Use:   "outbox [--backends postgres,sqlite] [--only txn,latency] [--update-file BENCHMARKS.md] [--json]",
		Short: "The outbox at production concurrency: EnqueueTx against a plain insert, latency from another process, the idle relay (issue 14)",
		Long: `Two measurements, each in one run (BENCHMARKS.md, "The outbox under concurrency"):

txn: N concurrent business transactions (--txns), each one inserting an order,
writing its event, staying open for --work (the application's work after the
enqueue: the transaction holds whatever it locked), and committing; every
transaction on a flow of its own among those open at once (--flows distinct)
or all on one flow (one). The event is written with EnqueueTx, and in the
other variant as one row of a plain outbox table in the same transaction; the
two variants run back to back on fresh tables, for --duration each after a
short warm-up (longer, until --min-txns transactions committed, on a machine
too loaded for that many in --duration), and the table gives both rates
(transactions committed per second) and their ratio. On PostgreSQL it then
counts the statements and round trips of one EnqueueTx (a pgx tracer on the
application's connection).
No relay runs unless --with-relay: then one dispatches the queue store during
the EnqueueTx variant.

latency: a relay (package relay, default poll intervals, --relay-workers
deliveries at once) with a no-op sink runs on a fresh store; first its CPU
while idle for --idle (the relay's process, and on PostgreSQL the server's
processes serving its connections), then for each rate of --rates another OS
process (this binary, re-executed) commits business transactions with
EnqueueTx at that rate over 100 flows, each event's body stamped with the
wall clock just before its EnqueueTx; the sink reads the stamp at receipt.
Each rate runs for --latency-duration and at least --min-events events.

Prints Markdown tables with issue 14's targets beside the figures; --json
prints the same as JSON; --update-file FILE also writes the tables between the
generated-part markers of FILE (BENCHMARKS.md), or appends the section.
PostgreSQL work happens in fresh schemas of --pg, dropped at the end; SQLite
files in --dir (default: a fresh temporary directory). The machine's load
moves the absolute rates: compare the figures of one run with each other.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			var err error
			bs, err := parseList("backends", backends, []string{outboxbench.BackendPostgres, outboxbench.BackendSQLite})
			if err != nil {
				return err
			}
			ps, err := parseList("only", parts, []string{"txn", "latency"})
			if err != nil {
				return err
			}
			if to.Txns, err = parseCounts("txns", txns); err != nil {
				return err
			}
			if to.Work, err = parseDurations("work", work); err != nil {
				return err
			}
			if to.MinTxns < 1 {
				return fairrelay.InvalidInput("min-txns", "must be at least 1, got %d", to.MinTxns)
			}
			if to.Flows, err = parseList("flows", flows, []string{outboxbench.FlowsDistinct, outboxbench.FlowsOne}); err != nil {
				return err
			}
			if lo.Rates, err = parseRates(rates); err != nil {
				return err
			}
			to.RelayWorkers = lo.RelayWorkers
			if slices.Contains(bs, outboxbench.BackendPostgres) {
				to.PG, lo.PG = pg, pg
			}
			if slices.Contains(bs, outboxbench.BackendSQLite) {
				if dir == "" {
					if dir, err = os.MkdirTemp("", "fairrelay-bench-outbox-"); err != nil {
						return err
					}
					defer os.RemoveAll(dir)
				}
				to.SQLiteDir, lo.SQLiteDir = dir, dir
			}
			progress := func(s string) { fmt.Fprintln(cmd.ErrOrStderr(), "bench outbox:", s) }
			to.Progress, lo.Progress = progress, progress
			lo.Stderr = cmd.ErrOrStderr()
			lo.Producer = producerCommand

			rep := outboxbench.Report{Machine: outboxbench.Describe(ctx, to.PG)}
			if slices.Contains(ps, "txn") {
				if rep.Txn, err = outboxbench.RunTxn(ctx, to); err != nil {
					return err
				}
				rep.TxnWithRelay = to.WithRelay
				if to.PG != "" {
					progress("postgres: statements per EnqueueTx")
					c, err := outboxbench.CountStatements(ctx, to.PG, 200)
					if err != nil {
						return err
					}
					rep.Statements = &c
				}
			}
			if slices.Contains(ps, "latency") {
				if rep.Latency, rep.Idle, err = outboxbench.RunLatency(ctx, lo); err != nil {
					return err
				}
			}
			rep.ComputeTargets()
			var md bytes.Buffer
			if err := rep.WriteMarkdown(&md); err != nil {
				return err
			}
			if updateFile != "" {
				if err := outboxbench.UpdateFile(updateFile, md.Bytes()); err != nil {
					return err
				}
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			_, err = cmd.OutOrStdout().Write(md.Bytes())
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&pg, "pg", outboxbench.DefaultPG(), "PostgreSQL server on this machine (default: $"+outboxbench.PGEnvVar+", else the tests' server)")
	f.StringVar(&backends, "backends", "postgres,sqlite", "comma-separated: postgres, sqlite")
	f.StringVar(&parts, "only", "txn,latency", "comma-separated parts to run: txn, latency (the latter includes the idle relay)")
	f.StringVar(&txns, "txns", "1,8,32", "comma-separated numbers of concurrent business transactions")
	f.StringVar(&work, "work", "0,20ms", "comma-separated durations each transaction stays open after its enqueue")
	f.StringVar(&flows, "flows", "distinct,one", "comma-separated flow layouts: distinct (a flow per open transaction), one (all on one flow)")
	f.DurationVar(&to.Duration, "duration", 3*time.Second, "measured time of each txn rate, at least")
	f.IntVar(&to.MinTxns, "min-txns", 1, "transactions each txn rate counts, at least: the measured time goes on past --duration until that many committed")
	f.BoolVar(&to.WithRelay, "with-relay", false, "txn: run a relay (--relay-workers, no-op sink) on the queue store during the EnqueueTx variant")
	f.StringVar(&rates, "rates", "2,500", "comma-separated producer rates, events per second")
	f.DurationVar(&lo.Duration, "latency-duration", 5*time.Second, "how long the producer runs at each rate, at least")
	f.IntVar(&lo.MinEvents, "min-events", 200, "events the producer sends at each rate, at least (a p99 needs a hundred or more)")
	f.DurationVar(&lo.Idle, "idle", 10*time.Second, "how long the idle relay's CPU is measured")
	f.IntVar(&lo.RelayWorkers, "relay-workers", 8, "the relay's deliveries at once")
	f.StringVar(&dir, "dir", "", "directory for the SQLite files (default: a fresh temporary directory)")
	f.StringVar(&updateFile, "update-file", "", "also write the Markdown tables into this file (BENCHMARKS.md) between the generated-part markers")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON instead of Markdown")
	return cmd
}

// newBenchOutboxProducerCmd is the producer process of `bench outbox`:
// the same binary, re-executed.
func newBenchOutboxProducerCmd() *cobra.Command {
	var o outboxbench.ProducerOptions
	cmd := &cobra.Command{
		Use:    "outbox-producer",
		Short:  "The producer process of bench outbox (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The report goes out as soon as the transactions have ended;
			// the connections stay open until the parent closes this
			// process's standard input (ProducerOptions.Hold).
			o.Hold = func(rep outboxbench.ProducerReport) error {
				if err := json.NewEncoder(cmd.OutOrStdout()).Encode(rep); err != nil {
					return err
				}
				_, err := io.Copy(io.Discard, cmd.InOrStdin())
				return err
			}
			_, err := outboxbench.Produce(cmd.Context(), o)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Backend, "backend", "", "postgres or sqlite")
	f.StringVar(&o.Queue, "queue", "", "the queue store")
	f.StringVar(&o.App, "app", "", "PostgreSQL: the business tables' URL")
	f.Float64Var(&o.Rate, "rate", 0, "events per second")
	f.IntVar(&o.Count, "count", 0, "events to send")
	f.IntVar(&o.Flows, "flows", 0, "flows the events rotate over")
	f.IntVar(&o.Conns, "conns", 0, "transactions open at once, at most")
	f.StringVar(&o.Prefix, "prefix", "", "order id prefix")
	return cmd
}

// producerCommand re-executes this binary as the producer process. The
// environment is inherited (under go test, the variable that makes the test
// binary act as the CLI).
func producerCommand(ctx context.Context, args []string) *exec.Cmd {
	self, err := os.Executable()
	if err != nil {
		self = os.Args[0]
	}
	return exec.CommandContext(ctx, self, append([]string{"bench", "outbox-producer"}, args...)...)
}

// parseList parses a comma-separated list whose items must be among allowed.
func parseList(field, s string, allowed []string) ([]string, error) {
	var out []string
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if !slices.Contains(allowed, part) {
			return nil, fairrelay.InvalidInput(field, "%q is not one of %s", part, strings.Join(allowed, ", "))
		}
		out = append(out, part)
	}
	return out, nil
}

// parseDurations parses "0,20ms" (a bare 0 is zero).
func parseDurations(field, s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "0" {
			out = append(out, 0)
			continue
		}
		d, err := time.ParseDuration(part)
		if err != nil || d < 0 {
			return nil, fairrelay.InvalidInput(field, "%q is not a duration (0, 20ms, 1s)", part)
		}
		out = append(out, d)
	}
	return out, nil
}

// parseRates parses "2,500" into positive rates.
func parseRates(s string) ([]float64, error) {
	var out []float64
	for _, part := range strings.Split(s, ",") {
		r, err := strconv.ParseFloat(strings.TrimSpace(part), 64)
		if err != nil || !(r > 0) {
			return nil, fairrelay.InvalidInput("rates", "%q is not a positive rate", part)
		}
		out = append(out, r)
	}
	return out, nil
}
