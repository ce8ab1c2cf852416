package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/store/pgstore"
)

func init() { rootCmd.AddCommand(newMigrateCmd()) }

func newMigrateCmd() *cobra.Command {
	var queue, inboxDSN, entry string
	cmd := &cobra.Command{
		Use:   "migrate --queue Q [--inbox I] [--policy seed|fair]",
		Short: "Create or upgrade the queue store (and an inbox) to the current schema",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if queue == "" && inboxDSN == "" {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "queue", Message: "missing: give --queue and/or --inbox"}
			}
			if err := distinctStores(queue, inboxDSN); err != nil {
				return err
			}
			// The entry rule a new store records (SPEC §7): fair unless
			// --policy names seed; an existing store keeps its own, and
			// naming the other is refused. migrate could make only fair
			// stores, so a PostgreSQL store, which only migrate makes,
			// could not run the article's rule (a breaker's report).
			pol, adopt := fairrelay.Policy{}, true
			if cmd.Flags().Changed("policy") {
				e, err := fairrelay.ParseEntry(entry)
				if err != nil {
					return err
				}
				if queue == "" {
					return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "policy", Message: "is the queue store's rule: give --queue too"}
				}
				pol.Entry, adopt = e, false
			}
			// Both stores before either is made: a queue created and then
			// an inbox refused left the new queue behind.
			ctx := cmd.Context()
			if err := checkBothStores(ctx, queue, inboxDSN, false); err != nil {
				return err
			}
			if queue != "" {
				// Open applies the migrations the store lacks.
				q, err := openQueueConfig(ctx, queue, fairrelay.Config{Policy: pol, AdoptStoredEntry: adopt})
				if err != nil {
					return err
				}
				defer q.Close()
				fmt.Fprintf(cmd.OutOrStdout(), "queue %s: %s\n", redactDSN(queue), migrateStatus(q.Migrated()))
				noteSchemaless(cmd, "queue", queue, q.Migrated())
			}
			if inboxDSN != "" {
				in, err := openInbox(ctx, inboxDSN, inbox.Options{})
				if err != nil {
					return err
				}
				defer in.Close()
				fmt.Fprintf(cmd.OutOrStdout(), "inbox %s: %s\n", redactDSN(inboxDSN), migrateStatus(in.Migrated()))
				noteSchemaless(cmd, "inbox", inboxDSN, in.Migrated())
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&queue, "queue", "", "queue store: a SQLite file path or a postgres:// URL")
	cmd.Flags().StringVar(&inboxDSN, "inbox", "", "inbox store: a SQLite file path or a postgres:// URL")
	cmd.Flags().StringVar(&entry, "policy", "", "entry and tie rule a new queue store records: seed (the article's) or fair (SPEC §7; the default); an existing store keeps its rule, and naming the other is refused (invalid_input naming policy)")
	return cmd
}

// noteSchemaless says on stderr, when migrate has just created a
// PostgreSQL store whose URL names no schema=, where it went: into the
// connection's current schema (public by default, or the first existing
// schema of a search_path the URL or the role sets), its tables (event,
// flow, …) among whatever else lives there. A fresh user's migrate filled
// public in silence; it is allowed (docs/cli.md), so it is said, not
// refused, and the schema is named (a fresh user read "public unless the
// server's search_path says otherwise" and could not tell which). When the
// name cannot be read, the note says "the connection's current schema".
func noteSchemaless(cmd *cobra.Command, what, dsn string, applied []int) {
	if !isPostgresURL(dsn) || len(applied) == 0 || applied[0] != 1 {
		return
	}
	if _, schema, err := pgstore.ParseDSN(dsn); err != nil || schema != "" {
		return
	}
	where := "the connection's current schema"
	if cur, err := currentSchema(cmd.Context(), dsn); err == nil && cur != "" {
		where = fmt.Sprintf("schema %s, the connection's current schema", pgx.Identifier{cur}.Sanitize())
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "fairrelay: the %s store was made in %s (the URL names no schema=), among any other tables there; to keep it apart, drop its tables and give schema=NAME in the URL\n", what, where)
}

// currentSchema reads the current schema of a new connection to dsn, a
// PostgreSQL URL without schema=, with the stores' own query
// (pgstore.NoSchemaQuery): "" when its search_path names no schema that
// exists.
func currentSchema(ctx context.Context, dsn string) (string, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var cur *string
	var path string
	if err := conn.QueryRow(ctx, pgstore.NoSchemaQuery).Scan(&cur, &path); err != nil || cur == nil {
		return "", err
	}
	return *cur, nil
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
