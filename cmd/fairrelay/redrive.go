package main

import (
	"github.com/spf13/cobra"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/script"
)

func init() { rootCmd.AddCommand(newRedriveCmd()) }

func newRedriveCmd() *cobra.Command {
	var queue, id, reason, operator string
	var gen, at int64
	var pf policyFlags
	cmd := &cobra.Command{
		Use:   "redrive --queue Q --id ID --expected-generation G --reason TEXT [--operator NAME] --at TICK",
		Short: "Put a quarantined head back in dispatch, with an audit row (SPEC §2)",
		Long: `Redrive is the only way out of quarantine. It needs the event's current
generation (see 'fairrelay inspect quarantined') and a reason; it prints
{"status":"ready","generation":N} or {"status":"rejected","reason":...}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pol, err := pf.policy()
			if err != nil {
				return err
			}
			for _, name := range []string{"id", "expected-generation", "reason", "at"} {
				if !cmd.Flags().Changed(name) {
					return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: name, Message: "missing: give --" + name}
				}
			}
			q, err := openExistingQueue(cmd.Context(), queue, pol)
			if err != nil {
				return err
			}
			defer q.Close()
			r, err := q.Redrive(cmd.Context(), fairrelay.RedriveParams{EventID: id, ExpectedGeneration: gen, Reason: reason, Operator: operator, At: at})
			if err != nil {
				return err
			}
			return printJSON(cmd.OutOrStdout(), script.RedriveResult(r))
		},
	}
	f := cmd.Flags()
	f.StringVar(&queue, "queue", "", "queue store: a SQLite file path or a postgres:// URL")
	f.StringVar(&id, "id", "", "the quarantined event's id")
	f.Int64Var(&gen, "expected-generation", 0, "the event's current generation (optimistic concurrency)")
	f.StringVar(&reason, "reason", "", "why it is safe to try again; kept in the audit row")
	f.StringVar(&operator, "operator", "", "who decided; kept in the audit row")
	f.Int64Var(&at, "at", 0, "tick of the redrive")
	pf.register(cmd, "fair", 0)
	return cmd
}
