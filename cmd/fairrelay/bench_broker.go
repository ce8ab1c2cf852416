package main

import (
	"encoding/json"
	"os"

	"github.com/spf13/cobra"

	"github.com/fairrelay/fairrelay/internal/harness/bench"
)

func newBenchBrokerCmd() *cobra.Command {
	var dir string
	var asJSON bool
	opts := bench.BrokerOptions{}
	cmd := &cobra.Command{
		Use:   "broker --sink URL [--events 20000] [--workers 100] [--rounds 5] [--json]",
		Short: "Relay to a broker against a plain publisher of the same client (BENCHMARKS.md)",
		Long: `Runs in one process against one broker — --sink nats://HOST:PORT (JetStream)
or amqp://HOST:PORT (RabbitMQ, amq.topic), with a stream or queue of its own,
deleted at the end, and a consumer that takes every message and does nothing:

  1. a plain publisher loop of the same client library: one publish at a
     time, each waiting for the broker's ack (JetStream) or confirm
     (RabbitMQ), with the sink's headers and message id;
  2. --workers such publishers at once;
  3. the relay: --events events enqueued up front on a SQLite queue, every
     one its own flow, dispatched by --workers workers through the sink,
     timed from the relay's start to the last ack settled.

The events are split over --rounds interleaved rounds. Prints the three
rates in events/s and the relay's ratio to each. RabbitMQ's
credentials come from $` + brokerUserEnv + ` and $` + brokerPasswordEnv + ` (default guest/guest).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			var cleanup func()
			if opts.Dir, cleanup, err = benchDir(dir); err != nil {
				return err
			}
			defer cleanup()
			opts.User, opts.Password = os.Getenv(brokerUserEnv), os.Getenv(brokerPasswordEnv)
			if !asJSON {
				opts.OnPhase = func(name string) { cmd.PrintErrln("measuring: " + name) }
			}
			rep, err := bench.RunBroker(cmd.Context(), opts)
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(rep)
			}
			return bench.WriteBrokerTable(cmd.OutOrStdout(), rep)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.URL, "sink", "", "the broker: nats://HOST:PORT or amqp://HOST:PORT")
	f.IntVar(&opts.Events, "events", 20000, "events per measurement, over all rounds")
	f.IntVar(&opts.Rounds, "rounds", 5, "interleaved rounds: each runs the three measurements on events/rounds events, so the machine's load changes affect every rate alike")
	f.IntVar(&opts.Workers, "workers", 100, "relay workers, and plain publishers of the concurrent run")
	f.StringVar(&dir, "dir", "", "directory for the queue store; defaults to a fresh temporary directory")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}
