package main

import (
	"fmt"
	"os"
	"strings"

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
			if err := distinctStores(queue, inboxDSN); err != nil {
				return err
			}
			ctx := cmd.Context()
			if queue != "" {
				verb := statusVerb(queue)
				// Open applies the migrations the store lacks.
				q, err := openQueue(ctx, queue, fairrelay.Policy{}, nil)
				if err != nil {
					return err
				}
				defer q.Close()
				fmt.Fprintf(cmd.OutOrStdout(), "queue %s: %s\n", redactDSN(queue), verb)
			}
			if inboxDSN != "" {
				verb := statusVerb(inboxDSN)
				in, err := openInbox(ctx, inboxDSN, inbox.Options{})
				if err != nil {
					return err
				}
				defer in.Close()
				fmt.Fprintf(cmd.OutOrStdout(), "inbox %s: %s\n", redactDSN(inboxDSN), verb)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&queue, "queue", "", "queue store: a SQLite file path or a postgres:// URL")
	cmd.Flags().StringVar(&inboxDSN, "inbox", "", "inbox store: a SQLite file path or a postgres:// URL")
	return cmd
}

// statusVerb says what migrate is about to do to a store: create a SQLite
// file that does not exist yet, or bring an existing store up to date. A
// PostgreSQL schema is created or brought up to date, which migrate cannot
// tell apart beforehand.
func statusVerb(dsn string) string {
	if strings.Contains(dsn, "://") {
		return "schema created or up to date"
	}
	if _, err := os.Stat(dsn); err != nil {
		return "created"
	}
	return "schema up to date"
}
