package main

import (
	"github.com/spf13/cobra"

	"github.com/fairrelay/fairrelay/cmd/fairrelay/internal/script"
	"github.com/fairrelay/fairrelay/inbox"
)

func init() { rootCmd.AddCommand(newWaiveCmd()) }

func newWaiveCmd() *cobra.Command {
	var inboxDSN, id, flow, reason, operator string
	var seq int64
	cmd := &cobra.Command{
		Use:   "waive --inbox I --flow F --seq N --id ID --reason TEXT [--operator NAME]",
		Short: "Let an inbox take a flow's next event with no effect, an operator's decision kept with its reason",
		Long: `For an event the receiver can never take — its id is another event's receipt
already (a producer used an id again after the queue's retention forgot it),
or its body is one the receiver refuses for good — whose flow is therefore
held up for good: the relay quarantines it, and a redrive meets the same
answer.

waive records, in the inbox, that the flow's next seq (--seq, its applied seq
+ 1, as 'fairrelay inspect --inbox I projection' shows) is taken by event
--id with no effect: the flow's projection moves to --seq with its total
unchanged, and from then on a delivery of that event answers duplicate. Then
redrive the quarantined head at the queue ('fairrelay redrive --queue Q --id
ID ...'): the relay delivers it, the inbox answers duplicate, the relay acks
it, and the flow goes on. A broker consumer's held events after it apply at
its next retry. Prints {"status":"waived"}; 'fairrelay inspect --inbox I
waivers' lists every waiver with who decided and why.

Only the seq the flow waits for can be waived (invalid_input naming seq
otherwise, nothing written).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireFlags(cmd, "inbox", "flow", "seq", "id", "reason"); err != nil {
				return err
			}
			if operator == "" {
				operator = osUser()
			}
			in, err := openInbox(cmd.Context(), inboxDSN, inbox.Options{MustExist: true})
			if err != nil {
				return err
			}
			defer in.Close()
			if err := in.Waive(cmd.Context(), inbox.WaiveParams{EventID: id, Flow: flow, Seq: seq, Reason: reason, Operator: operator}); err != nil {
				return err
			}
			return printJSON(cmd.OutOrStdout(), script.Result{"status": "waived"})
		},
	}
	f := cmd.Flags()
	f.StringVar(&inboxDSN, "inbox", "", "the inbox: a SQLite file path or a postgres:// URL")
	f.StringVar(&flow, "flow", "", "the flow held up")
	f.Int64Var(&seq, "seq", 0, "the seq the flow waits for: its applied seq + 1")
	f.StringVar(&id, "id", "", "the event that takes that seq with no effect")
	f.StringVar(&reason, "reason", "", "why the event may go without its effect; kept with the waiver")
	f.StringVar(&operator, "operator", "", "who decided; kept with the waiver (default: the OS user running the command)")
	return cmd
}
