package main

import (
	"github.com/spf13/cobra"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/cmd/fairrelay/internal/script"
)

func init() { rootCmd.AddCommand(newClaimCmd()) }

func newClaimCmd() *cobra.Command {
	var queue string
	var at int64
	var pf policyFlags
	cmd := &cobra.Command{
		Use:   "claim --queue Q [--at TICK]",
		Short: "Claim the next eligible head (SPEC §2) and print the claim or idle as JSON",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pol, err := pf.policy()
			if err != nil {
				return err
			}
			at := atFlag(cmd, at)
			q, err := openExistingQueue(cmd.Context(), queue, pol, &pf)
			if err != nil {
				return err
			}
			defer q.Close()
			res, err := q.Claim(cmd.Context(), fairrelay.ClaimParams{At: at})
			if err != nil {
				return err
			}
			c := res.First()
			if c == nil {
				if err := printJSON(cmd.OutOrStdout(), script.Result{"status": "idle"}); err != nil {
					return err
				}
				return notApplied("claim: idle: no head is eligible; nothing was claimed")
			}
			return printJSON(cmd.OutOrStdout(), script.ClaimResult(*c))
		},
	}
	cmd.Flags().StringVar(&queue, "queue", "", "queue store: a SQLite file path or a postgres:// URL")
	cmd.Flags().Int64Var(&at, "at", 0, atUsage)
	pf.register(cmd, fairrelay.DaemonPolicy(), false)
	return cmd
}
