package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/cmd/fairrelay/internal/script"
	"github.com/fairrelay/fairrelay/inbox"
)

func init() { rootCmd.AddCommand(newWaiveCmd()) }

func newWaiveCmd() *cobra.Command {
	var inboxDSN, queue, id, flow, reason, operator string
	var seq int64
	var unchecked bool
	cmd := &cobra.Command{
		Use:   "waive --inbox I --id ID (--queue Q | --flow F --seq N) --reason TEXT [--operator NAME] [--unchecked]",
		Short: "Let an inbox take a flow's next event with no effect, an operator's decision kept with its reason",
		Long: `For an event the receiver can never take — its id is another event's receipt
already (a producer used an id again after the queue's retention forgot it),
or its body is one the receiver refuses for good — whose flow is therefore
held up for good: the relay quarantines it, and a redrive meets the same
answer.

waive records, in the inbox, that the flow's next seq (its applied seq + 1, as
'fairrelay inspect --inbox I projection' shows) is taken by event --id with
no effect; or, for an event whose own seq a delivery under another id took
(it answers sequence_conflict), that it goes at that seq with no effect. With --queue, the event's flow and seq are read from the queue
store (it must hold the event, not acked), so a mistyped id that names
another event of the flow is refused rather than waived (its seq is not the
one the flow waits for), and so is one that is not quarantined there, or
quarantined for budget_exhausted (its retries, not a refusal: redrive it); give
--flow and --seq instead behind a broker, where the queue acked the event and
the inbox holds it (the held delivery is checked against --id). Without
--queue and with nothing held at --seq, nothing checks --id, and a wrong one
leaves the flow stuck for good: that needs --unchecked (the queue cannot be
reached). A waiver cannot be undone by a command. Then: the flow's projection moves to --seq with its total
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
			need := []string{"inbox", "id", "reason"}
			if queue == "" {
				need = append(need, "flow", "seq")
			}
			if err := requireFlags(cmd, need...); err != nil {
				var fe *fairrelay.Error
				if queue == "" && errors.As(err, &fe) && (fe.Field == "flow" || fe.Field == "seq") {
					// The usual way is --queue, which reads both (a fresh
					// user's report: the message named only the fallback).
					fe.Message += " (or --queue Q, where the event's flow and seq are read)"
				}
				return err
			}
			if unchecked && queue != "" {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "unchecked", Message: "with --queue the event is checked there: leave --unchecked out"}
			}
			if operator == "" {
				operator = osUser()
			}
			if queue != "" {
				// --id, --reason and --operator before the queue is read
				// (its flow and seq come from there; 1 stands in for the
				// seq meanwhile): a blank reason was answered by the
				// queue's read of the event (helper-171).
				if err := (inbox.WaiveParams{EventID: id, Flow: id, Seq: 1, Reason: reason, Operator: operator}).Check(); err != nil {
					return err
				}
				if err := waivedEvent(cmd, queue, id, &flow, &seq); err != nil {
					return err
				}
			}
			// The input is named before any read answers for it: vouched's
			// read of what is held at seq-1 answered --seq 0 with
			// "after_seq: must not be negative, got -1" and the lowest
			// int64 with nothing held there (a breaker's report).
			p := inbox.WaiveParams{EventID: id, Flow: flow, Seq: seq, Reason: reason, Operator: operator}
			if err := p.Check(); err != nil {
				return err
			}
			in, err := openInbox(cmd.Context(), inboxDSN, inbox.Options{MustExist: true})
			if err != nil {
				return err
			}
			defer in.Close()
			if queue == "" && !unchecked {
				if err := vouched(cmd, in, id, flow, seq); err != nil {
					return err
				}
			}
			if err := in.Waive(cmd.Context(), p); err != nil {
				return err
			}
			// The same waiver again is already so, and keeps the first
			// one's operator and reason: say so when they are not these,
			// which an operator would otherwise think recorded (an SRE's
			// report: a second operator's decision left no trace).
			ws, rerr := in.Waivers(cmd.Context(), flow, seq-1, 1)
			if rerr == nil && len(ws) == 1 && ws[0].Flow == flow && ws[0].Seq == seq &&
				(ws[0].Reason != reason || ws[0].Operator != operator) {
				fmt.Fprintf(cmd.ErrOrStderr(), "fairrelay: flow %s seq %d was waived already for %s, by %s at %s (reason %q); this --operator and --reason are not recorded\n",
					flow, seq, id, ws[0].Operator, ws[0].WaivedAt.UTC().Format("2006-01-02T15:04:05Z"), ws[0].Reason)
			}
			if err := printJSON(cmd.OutOrStdout(), script.Result{"status": "waived"}); err != nil {
				return err
			}
			if rerr != nil {
				// The waiver committed: a failed read after it must not
				// pass for a waive that failed (it printed the read's error
				// alone, and the waiver looked not made).
				return waivedThen(rerr)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&inboxDSN, "inbox", "", "the inbox: a SQLite file path or a postgres:// URL")
	f.StringVar(&queue, "queue", "", "the queue store holding the event (a SQLite file path or a postgres:// URL): its flow and seq are read there")
	f.StringVar(&flow, "flow", "", "the flow held up (without --queue; checked against the queue with it)")
	f.Int64Var(&seq, "seq", 0, "the seq the flow waits for: its applied seq + 1 (without --queue; checked against the queue with it)")
	f.StringVar(&id, "id", "", "the event that takes that seq with no effect")
	f.StringVar(&reason, "reason", "", "why the event may go without its effect; kept with the waiver")
	f.StringVar(&operator, "operator", "", "who decided; kept with the waiver (default: the OS user running the command)")
	f.BoolVar(&unchecked, "unchecked", false, "without --queue, waive though nothing in the inbox vouches for --id at --seq (nothing held there): when the queue cannot be reached")
	return cmd
}

// vouched returns nil when the inbox itself vouches for event id at seq of
// flow, so that a waive without --queue is checked: a delivery held there
// (Waive refuses an id the held ones contradict), or this very waiver
// recorded already. Otherwise an invalid_input naming queue: with nothing
// held, a wrong --id was waived unchecked, and the flow was left stuck for
// good (the right event then answered id_conflict, the next one
// sequence_conflict; an SRE's report).
func vouched(cmd *cobra.Command, in *inbox.Inbox, id, flow string, seq int64) error {
	hs, err := in.Held(cmd.Context(), flow, seq-1, 1)
	if err != nil {
		return err
	}
	if len(hs) > 0 && hs[0].Flow == flow && hs[0].Seq == seq {
		return nil
	}
	ws, err := in.Waivers(cmd.Context(), flow, seq-1, 1)
	if err != nil {
		return err
	}
	if len(ws) > 0 && ws[0].Flow == flow && ws[0].Seq == seq && ws[0].EventID == id {
		return nil
	}
	return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "queue", Message: fmt.Sprintf(
		"missing: the inbox holds no delivery at seq %d of flow %q, so nothing checks that %q is the event there, and a wrong one cannot be undone: give --queue Q, where the event's flow and seq are read, or --unchecked when the queue cannot be reached", seq, flow, id)}
}

// waivedEvent reads event id from the queue store at dsn (read-only) and
// sets flow and seq from it; given on the command line too, they must
// match it. The event must be quarantined for a refusal, not for its
// retries (budget_exhausted): a waiver drops its effect, and only an event
// the receiver refused for good holds its flow up.
func waivedEvent(cmd *cobra.Command, dsn, id string, flow *string, seq *int64) error {
	q, err := openReadOnlyQueue(cmd.Context(), dsn)
	if err != nil {
		return err
	}
	defer q.Close()
	e, err := q.Event(cmd.Context(), id)
	if err != nil {
		return err
	}
	switch {
	case cmd.Flags().Changed("flow") && *flow != e.Flow:
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "flow", Message: fmt.Sprintf("event %q is in flow %q in the queue, not %q", id, e.Flow, *flow)}
	case cmd.Flags().Changed("seq") && *seq != e.Seq:
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "seq", Message: fmt.Sprintf("event %q is seq %d of its flow in the queue, not %d", id, e.Seq, *seq)}
	case e.State == fairrelay.StateAcked:
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "id", Message: fmt.Sprintf("event %q is acked in the queue: it holds nothing up there (behind a broker, an event the inbox refuses is held in the inbox, 'inspect --inbox I held': waive it with --flow and --seq)", id)}
	case e.State != fairrelay.StateQuarantined:
		// A waiver drops the event's effect: only one the receiver
		// refused for good (a third fresh user's report: an event never
		// delivered yet was waived, and its effect would have been lost).
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "id", Message: fmt.Sprintf("event %q is %s in the queue, not quarantined: the receiver has not refused it for good, so there is nothing to waive", id, e.State)}
	case e.Reason != nil && *e.Reason == fairrelay.ReasonBudgetExhausted:
		// Quarantined for its retries, not for a refusal: the receiver
		// may never have seen it (down, a wrong secret), and a redrive
		// delivers it; waived, its effect was lost for good (a fresh
		// user's report).
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "id", Message: fmt.Sprintf(
			"event %q is quarantined in the queue for budget_exhausted, not refused by the receiver: it may never have reached it, and a redrive delivers it again once the cause is fixed ('fairrelay inspect --queue %s attempts --id %s' shows its answers); if the receiver can never take it, waive it with --flow %s --seq %d --unchecked instead of --queue",
			id, shellQuote(redactDSN(dsn)), shellQuote(id), shellQuote(e.Flow), e.Seq)}
	}
	*flow, *seq = e.Flow, e.Seq
	return nil
}

// waivedThen is waive's error when the read of the waiver back, after it
// committed, failed: err's code and chain, its message saying that the
// waiver is recorded (exit 2 all the same: the database failed).
func waivedThen(err error) error {
	const done = "the waiver is recorded; reading it back (to compare with an earlier waiver's operator and reason) failed"
	var fe *fairrelay.Error
	if !errors.As(err, &fe) {
		return fmt.Errorf("%s: %w", done, err)
	}
	named := *fe
	named.Message = done + ": " + fe.Message
	return &named
}
