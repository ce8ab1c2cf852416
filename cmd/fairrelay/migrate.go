package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
)

func init() { rootCmd.AddCommand(newMigrateCmd()) }

func newMigrateCmd() *cobra.Command {
	var queue, inboxDSN string
	cmd := &cobra.Command{
		Use:   "migrate --queue Q [--inbox I]",
		Short: "Create or upgrade the queue store (and an inbox) to the current schema",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if queue == "" && inboxDSN == "" {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "queue", Message: "missing: give --queue and/or --inbox"}
			}
			ctx := cmd.Context()
			if queue != "" {
				// Open applies the migrations; Migrate then reports that
				// nothing is left to apply.
				q, err := openQueue(ctx, queue, fairrelay.Policy{})
				if err != nil {
					return err
				}
				defer q.Close()
				fmt.Fprintf(cmd.OutOrStdout(), "queue %s: schema up to date\n", queue)
			}
			if inboxDSN != "" {
				in, err := openInbox(ctx, inboxDSN, inbox.Options{})
				if err != nil {
					return err
				}
				defer in.Close()
				fmt.Fprintf(cmd.OutOrStdout(), "inbox %s: schema up to date\n", inboxDSN)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&queue, "queue", "", "queue store: a SQLite file path or a postgres:// URL")
	cmd.Flags().StringVar(&inboxDSN, "inbox", "", "inbox store: a SQLite file path or a postgres:// URL")
	return cmd
}
