package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/user"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/cmd/fairrelay/internal/script"
)

func init() { rootCmd.AddCommand(newRedriveCmd()) }

func newRedriveCmd() *cobra.Command {
	var queue, id, reason, operator string
	var gen, at int64
	var all bool
	var flow, reasonIs, group string
	var pf policyFlags
	cmd := &cobra.Command{
		Use:   "redrive --queue Q (--id ID --expected-generation G | --all [--flow F] [--group G] [--reason-is R]) --reason TEXT [--operator NAME] [--at TICK]",
		Short: "Put quarantined heads back in dispatch, each with an audit row (SPEC §2)",
		Long: `Redrive is the only way out of quarantine. It needs the event's current
generation (see 'fairrelay inspect quarantined') and a reason; it prints
{"status":"ready","generation":N} or {"status":"rejected","reason":...}.

--all redrives every quarantined head (of --flow, of the flows of --group,
with the quarantine reason --reason-is, when given) at the generation the
listing showed, one
redrive and one audit row each, and prints one JSON line per event with its
id. A head that changed meanwhile answers generation_mismatch and is left
alone.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pol, err := pf.policy()
			if err != nil {
				return err
			}
			at := atFlag(cmd, at)
			need := []string{"id", "expected-generation", "reason"}
			if all {
				if cmd.Flags().Changed("id") || cmd.Flags().Changed("expected-generation") {
					return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "all", Message: "give --all or --id with --expected-generation, not both"}
				}
				need = []string{"reason"}
			} else {
				// A filter given with --id would be ignored: the one event
				// named is redriven whatever its flow or reason. Refused,
				// as expedite's --flow (a breaker's report).
				for _, name := range []string{"flow", "group", "reason-is"} {
					if cmd.Flags().Changed(name) {
						return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: name, Message: "narrows --all only: give --all, or --id with --expected-generation"}
					}
				}
			}
			if err := requireFlags(cmd, need...); err != nil {
				return err
			}
			if operator == "" {
				// An audited decision names who made it: the account
				// running the command, unless --operator says otherwise.
				operator = osUser()
			}
			q, err := openExistingQueue(cmd.Context(), queue, pol, &pf)
			if err != nil {
				return err
			}
			defer q.Close()
			if all {
				return redriveAll(cmd, q, flow, group, reasonIs, reason, operator, at)
			}
			r, err := q.Redrive(cmd.Context(), fairrelay.RedriveParams{EventID: id, ExpectedGeneration: gen, Reason: reason, Operator: operator, At: at})
			if err != nil {
				return err
			}
			if err := printJSON(cmd.OutOrStdout(), script.RedriveResult(r)); err != nil {
				return err
			}
			if r.Status == fairrelay.RedriveRejected {
				return notApplied("redrive %s: rejected (%s); nothing changed%s", id, r.RejectReason, generationHint(cmd.Context(), q, queue, id, r.RejectReason))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&queue, "queue", "", "queue store: a SQLite file path or a postgres:// URL")
	f.StringVar(&id, "id", "", "the quarantined event's id")
	f.Int64Var(&gen, "expected-generation", 0, "the event's current generation (optimistic concurrency)")
	f.StringVar(&reason, "reason", "", "why it is safe to try again; kept in the audit row")
	f.StringVar(&operator, "operator", "", "who decided; kept in the audit row (default: the OS user running the command)")
	f.Int64Var(&at, "at", 0, atUsage)
	f.BoolVar(&all, "all", false, "redrive every quarantined head (narrow with --flow, --group and --reason-is)")
	f.StringVar(&flow, "flow", "", "with --all: only this flow")
	f.StringVar(&group, "group", "", "with --all: only the flows of this group (a tenant's, SPEC §8; a flow without a group is its own)")
	f.StringVar(&reasonIs, "reason-is", "", "with --all: only heads quarantined for this reason (e.g. budget_exhausted)")
	pf.registerAdmin(cmd)
	return cmd
}

// redriveAll redrives the quarantined heads that match, each in its own
// transaction at the generation it was listed with, and prints one line per
// event. The store filters by --flow, --group and --reason-is, and it pages through
// every quarantined head that matches (one per flow at most), however many
// there are.
// Redrive errors stop it; rejections are printed and it goes on.
func redriveAll(cmd *cobra.Command, q *fairrelay.Queue, flow, group, reasonIs, reason, operator string, at int64) error {
	ctx := cmd.Context()
	// The clock first (SPEC §2), also when no head matches: a tick behind
	// the store's is clock_regressed, not "no quarantined head matched".
	if err := q.CheckTick(ctx, "redrive", at, false); err != nil {
		return err
	}
	if err := blankReasonAll(cmd, "redrive", reason); err != nil {
		return err
	}
	if reasonIs != "" && !quarantineReason(reasonIs) {
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "reason-is", Message: fmt.Sprintf("%q is not a quarantine reason: budget_exhausted or a permanent outcome (id_conflict, sequence_conflict, unsupported_delta, invalid_body, rejected)", reasonIs)}
	}
	if flow != "" {
		// An unknown flow is not_found, as for expedite --all --flow and
		// pause: a misspelt --flow is not "no quarantined head matched".
		if _, err := q.Flow(ctx, flow); err != nil {
			return err
		}
	}
	if err := knownGroup(cmd, q, group); err != nil {
		return err
	}
	const page = 1000
	n, rejected := 0, 0
	why := map[string]int{} // rejections by reason
	after := ""
	for done := false; !done; {
		es, err := q.QuarantinedWhere(ctx, fairrelay.QuarantinedParams{After: after, Flow: flow, Group: group, Reason: reasonIs, Limit: page})
		if err != nil {
			return err
		}
		done = len(es) < page
		if len(es) > 0 {
			after = es[len(es)-1].Flow
		}
		for _, e := range es {
			r, err := q.Redrive(ctx, fairrelay.RedriveParams{EventID: e.ID, ExpectedGeneration: e.Generation, Reason: reason, Operator: operator, At: at})
			if err != nil {
				return fmt.Errorf("redrive %s: %w", e.ID, err)
			}
			if r.Status == fairrelay.RedriveRejected {
				rejected++
				why[r.RejectReason]++
			}
			line := script.RedriveResult(r)
			line["id"] = e.ID
			if err := printJSON(cmd.OutOrStdout(), line); err != nil {
				return err
			}
			n++
		}
	}
	if n == 0 {
		return notApplied("redrive: no quarantined head matched; nothing changed")
	}
	return rejectedOf("redrive", n, rejected, why)
}

// blankReasonAll answers a bulk operator command (redrive --all, expedite
// --all) whose --reason is blank once, as its single form does, before it
// looks for anything to act on: {"reason":"empty_reason","status":"rejected"}
// and exit 1, nothing changed (SPEC §2, §9: empty_reason is checked first).
// It said "no quarantined head matched" when nothing matched, and printed
// one rejection per head when some did. nil for a reason that is not blank.
func blankReasonAll(cmd *cobra.Command, what, reason string) error {
	if strings.TrimSpace(reason) != "" {
		return nil
	}
	if err := printJSON(cmd.OutOrStdout(), map[string]any{"status": "rejected", "reason": fairrelay.RejectEmptyReason}); err != nil {
		return err
	}
	return notApplied("%s --all: rejected (empty_reason): give a --reason; nothing changed", what)
}

// rejectedOf is what a bulk operator command (redrive --all, expedite
// --all) answers after acting on n events, rejected of them rejected, why
// counting the rejections by reason: nil when none was, else a notApplied
// error that lists the reasons.
func rejectedOf(what string, n, rejected int, why map[string]int) error {
	if rejected == 0 {
		return nil
	}
	reasons := make([]string, 0, len(why))
	for _, k := range slices.Sorted(maps.Keys(why)) {
		reasons = append(reasons, fmt.Sprintf("%s %d", k, why[k]))
	}
	return notApplied("%s: %d of %d rejected (%s); nothing changed for them", what, rejected, n, strings.Join(reasons, ", "))
}

// quarantineReason reports whether s is a reason a head can be quarantined
// for: budget exhaustion or a permanent outcome.
func quarantineReason(s string) bool {
	if s == fairrelay.ReasonBudgetExhausted {
		return true
	}
	o, err := fairrelay.ParseOutcome(s)
	return err == nil && o.Class() == fairrelay.ClassPermanent
}

// osUser returns the name of the account running the process, "" when it
// cannot be found.
func osUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return os.Getenv("USER")
}

// generationHint is what a redrive rejected for generation_mismatch or
// not_quarantined adds to its message; expediteHint the same for an
// expedite (rejectionHint).
func generationHint(ctx context.Context, q *fairrelay.Queue, queue, id, reason string) string {
	return rejectionHint(ctx, q, queue, id, reason, "quarantined", map[string]bool{fairrelay.RejectNotQuarantined: true},
		"only a quarantined head can be redriven")
}

// expediteHint is what an expedite rejected for generation_mismatch,
// not_ready or not_backing_off adds to its message (a fresh user's report:
// it said only "rejected (generation_mismatch)", where redrive said the
// generation and where to read it).
func expediteHint(ctx context.Context, q *fairrelay.Queue, queue, id, reason string) string {
	return rejectionHint(ctx, q, queue, id, reason, "heads", map[string]bool{fairrelay.RejectNotReady: true, fairrelay.RejectNotBackingOff: true},
		"only a head backing off (ready, its next attempt not yet due) can be expedited")
}

// rejectionHint says the event's generation (generation_mismatch) or its
// state (a reason of stateReasons) now, read after the answer (it may have
// moved again since), and where to look further: the view of inspect that
// lists the generations, or the flow's events. Each command is given with
// --queue, so that it runs as printed (a fresh user's report), a URL's
// password hidden. Empty for other rejections, or when the read fails (the
// rejection itself stands).
func rejectionHint(ctx context.Context, q *fairrelay.Queue, queue, id, reason, view string, stateReasons map[string]bool, only string) string {
	if reason != fairrelay.RejectGenerationMismatch && !stateReasons[reason] {
		return ""
	}
	e, err := q.Event(ctx, id)
	if err != nil {
		return ""
	}
	if stateReasons[reason] {
		// A fresh user's report: the answer did not say what the event
		// is, so whether it had been redriven already, or never failed.
		return fmt.Sprintf(": the event is %s (seq %d of flow %q, generation %d); %s (fairrelay inspect events --queue %s --flow %s)",
			e.State, e.Seq, e.Flow, e.Generation, only, shellQuote(redactDSN(queue)), shellQuote(e.Flow))
	}
	what := map[string]string{"quarantined": "lists each quarantined head with the generation a redrive needs",
		"heads": "lists each flow's head with its generation, GEN"}[view]
	more := ""
	if view == "heads" {
		// A head that keeps retrying moves on to a new generation at each
		// claim, often before the operator's next command (a fresh user's
		// report): --all takes each head's generation as it finds it.
		more = fmt.Sprintf("; or fairrelay expedite --all --queue %s --flow %s --reason R, which takes the head's generation as it finds it",
			shellQuote(redactDSN(queue)), shellQuote(e.Flow))
	}
	return fmt.Sprintf(": the event is at generation %d (fairrelay inspect --queue %s %s %s%s)",
		e.Generation, shellQuote(redactDSN(queue)), view, what, more)
}

// knownGroup refuses a --group (given unless "") that is no valid group
// name (invalid_input) or that no flow and no configuration knows
// (not_found): a misspelt --group is not "nothing matched". A group is
// known when it has a row (inspect groups) or a flow of its name is its
// own group (SPEC §8).
func knownGroup(cmd *cobra.Command, q *fairrelay.Queue, group string) error {
	if group == "" {
		return nil
	}
	if err := fairrelay.CheckID("group", group); err != nil {
		return err
	}
	ctx := cmd.Context()
	switch fi, err := q.Flow(ctx, group); {
	case err == nil && fi.Group == group:
		return nil
	case err != nil && !errors.Is(err, fairrelay.ErrNotFound):
		return err
	}
	// The groups with a row, from just before the name: those between
	// its prefix and it first (few), then it, if it is there.
	_, size := utf8.DecodeLastRuneInString(group)
	const page = 100
	for after := group[:len(group)-size]; ; {
		gs, err := q.Groups(ctx, after, page)
		if err != nil {
			return err
		}
		for _, g := range gs {
			if g.Group == group {
				return nil
			}
			if g.Group > group {
				break
			}
		}
		if len(gs) < page || gs[len(gs)-1].Group > group {
			return &fairrelay.Error{Code: fairrelay.CodeNotFound, Field: "group", Message: fmt.Sprintf("no group %q: no flow is in it and none was configured (fairrelay inspect groups)", group)}
		}
		after = gs[len(gs)-1].Group
	}
}
