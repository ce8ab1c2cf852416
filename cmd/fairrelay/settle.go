package main

import (
	"cmp"
	"github.com/spf13/cobra"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/cmd/fairrelay/internal/script"
)

func init() { rootCmd.AddCommand(newSettleCmd()) }

func newSettleCmd() *cobra.Command {
	var queue, id, outcome string
	var gen, at int64
	var pf policyFlags
	cmd := &cobra.Command{
		Use:   "settle --queue Q --id ID --generation G --outcome OUTCOME [--at TICK]",
		Short: "Settle a claim with the receiver's outcome (SPEC §2) and print the answer as JSON",
		Long: `Settle the claim (id, generation) with an outcome: accepted, duplicate,
id_conflict, sequence_conflict, unsupported_delta, invalid_body, rejected,
retry or gap. Prints acked, ready (with next_at), quarantined, stale or expired.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pol, err := pf.policy()
			if err != nil {
				return err
			}
			at := atFlag(cmd, at)
			if err := requireFlags(cmd, "id", "generation"); err != nil {
				return err
			}
			q, err := openExistingQueue(cmd.Context(), queue, pol, &pf)
			if err != nil {
				return err
			}
			defer q.Close()
			o, err := fairrelay.ParseOutcome(outcome)
			if err != nil {
				// After the clock's own answer, in SPEC §2's order.
				return cmp.Or(q.CheckTick(cmd.Context(), "settle", at, false), err)
			}
			r, err := q.Settle(cmd.Context(), fairrelay.SettleParams{Token: fairrelay.Token{EventID: id, Generation: gen}, Outcome: o, At: at})
			if err != nil {
				return err
			}
			if err := printJSON(cmd.OutOrStdout(), script.SettleResult(r)); err != nil {
				return err
			}
			switch r.Status {
			case fairrelay.SettleStale:
				return notApplied("settle %s: stale: the event is not inflight at generation %d; nothing was settled", id, gen)
			case fairrelay.SettleExpired:
				return notApplied("settle %s: expired: the lease ran out; nothing was settled", id)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&queue, "queue", "", "queue store: a SQLite file path or a postgres:// URL")
	f.StringVar(&id, "id", "", "event id of the claim")
	f.Int64Var(&gen, "generation", 0, "generation of the claim (its fencing token)")
	f.StringVar(&outcome, "outcome", "", "what the receiver answered")
	f.Int64Var(&at, "at", 0, atUsage)
	pf.register(cmd, fairrelay.DaemonPolicy(), false)
	return cmd
}
