package main

import (
	"fmt"
	"strconv"
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
			// Both paths before either store is made: a queue created and
			// then an inbox refused left the new queue behind.
			if err := checkStorePaths(queue, inboxDSN); err != nil {
				return err
			}
			ctx := cmd.Context()
			if queue != "" {
				// Open applies the migrations the store lacks.
				q, err := openQueue(ctx, queue, fairrelay.Policy{}, nil)
				if err != nil {
					return err
				}
				defer q.Close()
				fmt.Fprintf(cmd.OutOrStdout(), "queue %s: %s\n", redactDSN(queue), migrateStatus(q.Migrated()))
			}
			if inboxDSN != "" {
				in, err := openInbox(ctx, inboxDSN, inbox.Options{})
				if err != nil {
					return err
				}
				defer in.Close()
				fmt.Fprintf(cmd.OutOrStdout(), "inbox %s: %s\n", redactDSN(inboxDSN), migrateStatus(in.Migrated()))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&queue, "queue", "", "queue store: a SQLite file path or a postgres:// URL")
	cmd.Flags().StringVar(&inboxDSN, "inbox", "", "inbox store: a SQLite file path or a postgres:// URL")
	return cmd
}

// migrateStatus says what migrate did to a store, from the versions of the
// migrations its open applied: "created (migrations 1–5)" for a new store
// (the first migration applied), "migrated (applied 22, 23)", or "up to
// date (nothing to apply)".
func migrateStatus(applied []int) string {
	switch {
	case len(applied) == 0:
		return "up to date (nothing to apply)"
	case applied[0] == 1:
		return "created (migrations " + versionList(applied) + ")"
	}
	return "migrated (applied " + versionList(applied) + ")"
}

// versionList writes ascending versions with runs of three or more as
// ranges: "1–5", "22, 23", "3, 5–9".
func versionList(vs []int) string {
	var parts []string
	for i := 0; i < len(vs); {
		j := i
		for j+1 < len(vs) && vs[j+1] == vs[j]+1 {
			j++
		}
		switch {
		case j-i >= 2:
			parts = append(parts, fmt.Sprintf("%d–%d", vs[i], vs[j]))
		default:
			for k := i; k <= j; k++ {
				parts = append(parts, strconv.Itoa(vs[k]))
			}
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}
