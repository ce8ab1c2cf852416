package main

import (
	"github.com/spf13/cobra"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/cmd/fairrelay/internal/script"
	"github.com/fairrelay/fairrelay/inbox"
)

func init() { rootCmd.AddCommand(newScriptCmd()) }

func newScriptCmd() *cobra.Command {
	var queue, inboxDSN string
	var pf policyFlags
	cmd := &cobra.Command{
		Use:   "script --queue Q --inbox I [--policy seed|fair] < ops.jsonl",
		Short: "Run a JSON-lines scenario script (SPEC §6): one result line per op",
		Long: `Reads one op per line from standard input and prints one JSON result per op.
A failing op prints {"error": code, "message": ...} and the script goes on;
the exit code is non-zero only when the script cannot be read.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pol, err := pf.policy()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			// What needs no store first: a refusal creates none.
			if err := requireFlags(cmd, "queue", "inbox"); err != nil {
				return err
			}
			if err := distinctStores(queue, inboxDSN); err != nil {
				return err
			}
			if err := checkStdin(cmd.InOrStdin()); err != nil {
				return err
			}
			if err := checkBothStores(ctx, queue, inboxDSN, true); err != nil {
				return err
			}
			q, err := openQueue(ctx, queue, pol, &pf)
			if err != nil {
				return err
			}
			defer q.Close()
			in, err := openInbox(ctx, inboxDSN, inbox.Options{})
			if err != nil {
				return err
			}
			defer in.Close()
			r := &script.Runner{Queue: q, Inbox: in}
			return r.Run(ctx, cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&queue, "queue", "", "queue store: a SQLite file path or a postgres:// URL")
	cmd.Flags().StringVar(&inboxDSN, "inbox", "", "inbox store: a SQLite file path or a postgres:// URL")
	pf.register(cmd, fairrelay.ReferencePolicy(), true)
	return cmd
}
