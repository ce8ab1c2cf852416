package main

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/cmd/fairrelay/internal/script"
	"github.com/fairrelay/fairrelay/inbox"
)

func init() {
	rootCmd.AddCommand(newConfigureCmd(), newPruneCmd(), newExpediteCmd(), newFlowActionCmd("pause"), newFlowActionCmd("resume"))
}

func newConfigureCmd() *cobra.Command {
	var queue, group string
	var weight, maxBacklog, maxFlowBacklog, maxSlots, at int64
	var pf policyFlags
	cmd := &cobra.Command{
		Use:   "configure --queue Q ([--max-backlog N] [--max-flow-backlog N] | --group G [--weight W] [--max-backlog N] [--max-slots N]) [--at TICK]",
		Short: "Set the store's backlog limits, or a group's weight, backlog limit and slot cap (SPEC §8, §11)",
		Long: `Settings live in the store: every process sees them at its next transaction.

Without --group: --max-backlog bounds the events not acked in the whole store,
--max-flow-backlog those of every flow. With --group: --weight (1 to 1000) is
the group's share of claims (a saturated group of weight w gets w claims for
every claim of a saturated group of weight 1) and of the relay's slot time,
--max-backlog bounds its events not acked, --max-slots (up to 1024, a
relay's most workers) caps the relay slots its deliveries hold at once; a
group that does not exist is created (weight 1, no limits), but only with
something to set: --group alone is refused, so a misspelt name makes nothing
(no command deletes a group). A flag left out leaves its setting as it is. A limit of 0 is none. An
enqueue of a new event that would go over a limit answers full (exit 1 of
fairrelay enqueue) and changes nothing; lowering a limit below the current
backlog drops nothing. Prints {"status":"ok"}; 'fairrelay inspect groups' and
'inspect settings' show the result.

On PostgreSQL, setting a limit where there was none counts the backlog once
while holding off the writers of the flows it counts (all of them, for the
store's limit): a pause of dispatch as long as that count.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pol, err := pf.policy()
			if err != nil {
				return err
			}
			p := fairrelay.ConfigureParams{At: atFlag(cmd, at), Group: group}
			if cmd.Flags().Changed("group") && group == "" {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "group", Message: "empty"}
			}
			if cmd.Flags().Changed("weight") {
				p.Weight = &weight
			}
			if cmd.Flags().Changed("max-backlog") {
				p.MaxBacklog = &maxBacklog
			}
			if cmd.Flags().Changed("max-flow-backlog") {
				p.MaxFlowBacklog = &maxFlowBacklog
			}
			if cmd.Flags().Changed("max-slots") {
				p.MaxSlots = &maxSlots
			}
			// The library's words name its fields (give group); here the
			// flags (a fresh user's report).
			for _, name := range []string{"weight", "max-slots"} {
				if cmd.Flags().Changed(name) && group == "" {
					return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: name, Message: "is a group's: give --group"}
				}
			}
			if cmd.Flags().Changed("max-flow-backlog") && group != "" {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "max-flow-backlog", Message: "is the store's, for every flow: leave --group out"}
			}
			if p.Weight == nil && p.MaxBacklog == nil && p.MaxFlowBacklog == nil && p.MaxSlots == nil {
				// No one flag is wrong: the field is what is missing. With
				// --group alone too: it would make the group, empty and for
				// good (no command deletes one), from a misspelt name as
				// readily (an SRE's report); --weight 1 makes one on purpose.
				msg := "missing: nothing to set: give --max-backlog, --max-flow-backlog, or --group with --weight, --max-backlog or --max-slots"
				if group != "" {
					msg = "missing: nothing to set for group " + strconv.Quote(group) + ": give --weight, --max-backlog or --max-slots (a group to make ahead of its first flow: --weight 1, its default)"
				}
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "settings", Message: msg}
			}
			q, err := openExistingQueue(cmd.Context(), queue, pol, &pf)
			if err != nil {
				return err
			}
			defer q.Close()
			if _, err := q.Configure(cmd.Context(), p); err != nil {
				return err
			}
			return printJSON(cmd.OutOrStdout(), script.Result{"status": "ok"})
		},
	}
	f := cmd.Flags()
	f.StringVar(&queue, "queue", "", "queue store: a SQLite file path or a postgres:// URL")
	f.StringVar(&group, "group", "", "the group to configure (default: the store)")
	// No defaults shown: a flag left out leaves its setting as it is (the
	// zero values below are never used; Changed decides).
	f.Int64Var(&weight, "weight", 0, "the group's weight, 1 to 1000 (with --group); left out: unchanged (a new group starts at 1)")
	f.Int64Var(&maxBacklog, "max-backlog", 0, "limit on events not acked, of the group (with --group) or the store; 0 is none; left out: unchanged (none at first)")
	f.Int64Var(&maxFlowBacklog, "max-flow-backlog", 0, "limit on events not acked in every flow (without --group); 0 is none; left out: unchanged (none at first)")
	f.Int64Var(&maxSlots, "max-slots", 0, "with --group: the most relay slots the group's deliveries hold at once, in each relay (SPEC §11), at most 1024; 0 is none; left out: unchanged (none at first)")
	f.Int64Var(&at, "at", 0, atUsage)
	pf.registerAdmin(cmd)
	return cmd
}

func newPruneCmd() *cobra.Command {
	var queue, inboxDSN string
	var ackedBefore, idsBefore, at int64
	var limit int
	var superseded bool
	var receiptsOlder time.Duration
	var pf policyFlags
	cmd := &cobra.Command{
		Use:   "prune (--queue Q --acked-before TICK --ids-before TICK [--limit N] [--at TICK] | --inbox I [--superseded-held] [--receipts-older-than D])",
		Short: "Delete acked events and old tombstones (SPEC §8 retention), or an inbox's old receipts and superseded held copies",
		Long: `Deletes every event acked at a tick below --acked-before, with its body and
attempt history, keeping a tombstone (id, flow, seq, SHA-256 of the body, the
tick it was acked at) unless it was acked below --ids-before, and deletes the
tombstones acked below --ids-before. An id enqueued again answers existing or
conflict by its tombstone: idempotency outlives the body. Events not acked,
heads, seqs, served and the audit are never touched. Ticks are the store's
(1 tick = 1 ms under the daemon's clock).

It runs in transactions of --limit events (default 1000, 0 for one
transaction) until nothing is left, so it never holds the write lock long
beside a running relay, and prints
{"events":N,"ids_forgotten":F,"ids_kept":K,"status":"pruned","tombstones":M}:
N events deleted, K of them leaving a tombstone, M older tombstones deleted,
and F ids no longer idempotent (N - K events acked below --ids-before, and
the M tombstones' ids).
'fairrelay relay --retain-acked D --retain-ids D' prunes on its own.

With --inbox I --superseded-held it deletes instead the inbox's held copies of
seqs applied already under another id or body (a faulty publisher's), which
can never apply and stay listed by 'fairrelay inspect --inbox I held' (and
counted in fairrelay_inbox_held{state="superseded"}) until dropped; held
deliveries that may still apply are untouched. It prints
{"status":"pruned","held":N}.

With --inbox I --receipts-older-than D it deletes the inbox's receipts written
longer than D ago (a receipt from before inbox migration 007 counts as written
when the migration ran), in transactions of 500, and prints
{"status":"pruned","receipts":N} ("held" too with --superseded-held).
Projections stay, so a late copy of a pruned event answers sequence_conflict
and is never applied twice; 'fairrelay waive' lets such a copy through.
'fairrelay receive --retain-receipts D' prunes on its own.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if inboxDSN != "" || superseded || cmd.Flags().Changed("receipts-older-than") {
				return pruneInbox(cmd, inboxDSN, queue, superseded, receiptsOlder)
			}
			pol, err := pf.policy()
			if err != nil {
				return err
			}
			if err := requireFlags(cmd, "acked-before", "ids-before"); err != nil {
				return err
			}
			q, err := openExistingQueue(cmd.Context(), queue, pol, &pf)
			if err != nil {
				return err
			}
			defer q.Close()
			if err := checkHorizons(cmd, q, atFlag(cmd, at), ackedBefore, idsBefore); err != nil {
				return err
			}
			var total fairrelay.PruneResult
			for {
				r, err := q.Prune(cmd.Context(), fairrelay.PruneParams{At: atFlag(cmd, at), AckedBefore: ackedBefore, IDsBefore: idsBefore, Limit: limit})
				total.Events += r.Events
				total.Tombstones += r.Tombstones
				total.Forgotten += r.Forgotten
				if err != nil {
					if total.Events > 0 || total.Tombstones > 0 {
						return afterDeleting(err, fmt.Sprintf("%d events and %d tombstones", total.Events, total.Tombstones))
					}
					return err
				}
				if !r.More {
					break
				}
			}
			if total.Forgotten > 0 && idsBefore == ackedBefore {
				// Legal (SPEC §8), and easy to type by mistake: say what it
				// did to idempotency (a fresh user's report).
				fmt.Fprintf(cmd.ErrOrStderr(), "fairrelay: prune: --ids-before equals --acked-before, so the events it pruned (%d) left no tombstone: their ids are forgotten: an id sent again becomes a new event, which a receiver that applied the old one answers id_conflict, quarantining its flow\n", total.Forgotten)
			}
			// The SPEC's answer (events, and tombstones: those deleted),
			// and what became of the ids: "tombstones":0 read as "no id
			// forgotten" where every pruned id went with its event.
			return printJSON(cmd.OutOrStdout(), script.Result{"status": "pruned", "events": total.Events, "tombstones": total.Tombstones,
				"ids_kept": total.Events - total.Forgotten, "ids_forgotten": total.Forgotten + total.Tombstones})
		},
	}
	f := cmd.Flags()
	f.StringVar(&queue, "queue", "", "queue store: a SQLite file path or a postgres:// URL")
	f.Int64Var(&ackedBefore, "acked-before", 0, "delete the events acked at a tick below this one")
	f.Int64Var(&idsBefore, "ids-before", 0, "keep no tombstone of events acked below this tick, and delete older tombstones (at most --acked-before)")
	f.IntVar(&limit, "limit", 1000, "events and tombstones per transaction; 0 for one transaction")
	f.Int64Var(&at, "at", 0, atUsage)
	f.StringVar(&inboxDSN, "inbox", "", "with --superseded-held: the inbox (a SQLite file path or a postgres:// URL)")
	f.BoolVar(&superseded, "superseded-held", false, "delete the inbox's held copies of seqs applied already (they never apply)")
	f.DurationVar(&receiptsOlder, "receipts-older-than", 0, "delete the inbox's receipts written longer ago than this (e.g. 2160h); a late copy of a pruned event then answers sequence_conflict")
	pf.registerAdmin(cmd)
	return cmd
}

// checkHorizons refuses a prune horizon further ahead of the store's tick
// (or of --at, when later) than --max-tick-jump, the rule --at follows: it is
// a typo — wall-clock milliseconds, a duration's digits — and would delete
// every tombstone, so that ids sent again become new events (a fresh
// user's report: --acked-before $(date +%s%3N) forgot every id). The
// clock's own answer to --at comes first (SPEC §2's order). A horizon of
// the stored tick + 1 prunes everything acked so far.
func checkHorizons(cmd *cobra.Command, q *fairrelay.Queue, at, ackedBefore, idsBefore int64) error {
	ctx := cmd.Context()
	if err := q.CheckTick(ctx, "prune", at, false); err != nil {
		return err
	}
	jump := q.Policy().MaxTickJump
	if jump <= 0 {
		return nil
	}
	c, err := q.Clock(ctx)
	if err != nil {
		return err
	}
	base, of := c.Tick, "the store's tick"
	if at > base {
		base, of = at, "--at" // a prune at a later tick sees acks up to it
	}
	for _, h := range []struct {
		name string
		v    int64
	}{{"acked-before", ackedBefore}, {"ids-before", idsBefore}} {
		if h.v > base+1 && h.v-base > jump {
			return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: h.name, Message: fmt.Sprintf(
				"%d is %d ticks ahead of %s %d, further than --max-tick-jump (%s): ticks are the store's clock (fairrelay inspect clock; 1 tick = 1 ms of a running relay), not wall-clock milliseconds; %d prunes everything acked so far",
				h.v, h.v-base, of, base, time.Duration(jump)*time.Millisecond, base+1)}
		}
	}
	return nil
}

// pruneInbox runs prune --inbox I with --superseded-held and/or
// --receipts-older-than: the inbox alone, no queue flag.
func pruneInbox(cmd *cobra.Command, inboxDSN, queue string, superseded bool, receiptsOlder time.Duration) error {
	receipts := cmd.Flags().Changed("receipts-older-than")
	what := "superseded-held"
	if receipts && !superseded {
		what = "receipts-older-than"
	}
	switch {
	case queue != "" && inboxDSN == "":
		// --queue Q --superseded-held: no --inbox was given to blame (a
		// fresh user's report).
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: what, Message: "prunes an inbox: give --inbox I, not --queue"}
	case queue != "":
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "inbox", Message: "give --queue or --inbox, not both"}
	case !superseded && !receipts:
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "superseded-held", Message: "required with --inbox (or --receipts-older-than D): what to prune of an inbox"}
	case inboxDSN == "":
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "inbox", Message: "required with --" + what}
	case receipts && receiptsOlder <= 0:
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "receipts-older-than", Message: fmt.Sprintf("must be a positive duration such as 2160h, got %s", receiptsOlder)}
	}
	for _, name := range []string{"acked-before", "ids-before", "limit", "at"} {
		if cmd.Flags().Changed(name) {
			return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: name, Message: "prunes a queue store, not an inbox"}
		}
	}
	// The queue's policy flags mean nothing to an inbox: refused, not
	// ignored (a breaker's sweep: --policy bogus, --jitter 5 passed).
	for _, name := range []string{"policy", "lease", "backoff-base", "backoff-cap", "budget", "jitter", "max-tick-jump"} {
		if cmd.Flags().Changed(name) {
			return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: name, Message: "a queue store's policy, not an inbox's"}
		}
	}
	in, err := openInbox(cmd.Context(), inboxDSN, inbox.Options{MustExist: true})
	if err != nil {
		return err
	}
	defer in.Close()
	out := script.Result{"status": "pruned"}
	if receipts {
		before := time.Now().Add(-receiptsOlder)
		var n int64
		for {
			r, err := in.PruneReceipts(cmd.Context(), inbox.PruneReceiptsParams{Before: before, Limit: 500})
			n += r.Deleted
			if err != nil {
				if n > 0 {
					return afterDeleting(err, fmt.Sprintf("%d receipts", n))
				}
				return err
			}
			if !r.More {
				break
			}
		}
		out["receipts"] = n
	}
	if superseded {
		n, err := in.DropSuperseded(cmd.Context())
		if err != nil {
			if r, _ := out["receipts"].(int64); r > 0 {
				return afterDeleting(err, fmt.Sprintf("%d receipts", r))
			}
			return err
		}
		out["held"] = n
	}
	return printJSON(cmd.OutOrStdout(), out)
}

// afterDeleting is a prune's error once what (a count: "3 receipts") was
// deleted and committed before it: the same error, its message saying so,
// so that nobody reads "nothing was changed" of the whole run.
func afterDeleting(err error, what string) error {
	var fe *fairrelay.Error
	if !errors.As(err, &fe) {
		return err
	}
	c := *fe
	c.Message = fmt.Sprintf("after %s were deleted: %s", what, c.Message)
	return &c
}

func newExpediteCmd() *cobra.Command {
	var queue, id, reason, operator, flow, group string
	var gen, at int64
	var all bool
	var pf policyFlags
	cmd := &cobra.Command{
		Use:   "expedite --queue Q (--id ID --expected-generation G | --all [--flow F] [--group G]) --reason TEXT [--operator NAME] [--at TICK]",
		Short: "Cut a head's backoff short: eligible now, attempts unchanged, with an audit row (SPEC §9)",
		Long: `For a head that is backing off (ready, with next_at after now) at the
generation given: next_at becomes now. Prints {"status":"ready","next_at":T} or
{"status":"rejected","reason":...} (empty_reason, not_ready, not_backing_off,
generation_mismatch; exit 1, nothing changed).

--all expedites every head backing off (of --flow, of the flows of --group,
when given) at the
generation the listing showed — after a receiver's outage, say, when every
flow's head waits out a backoff of up to the policy's cap — one expedite and
one audit row each, and prints one JSON line per event with its id. A head
that changed meanwhile is rejected and left alone (exit 1 when any was).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pol, err := pf.policy()
			if err != nil {
				return err
			}
			need := []string{"id", "expected-generation", "reason"}
			if all {
				if cmd.Flags().Changed("id") || cmd.Flags().Changed("expected-generation") {
					return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "all", Message: "give --all or --id with --expected-generation, not both"}
				}
				need = []string{"reason"}
			} else {
				for _, name := range []string{"flow", "group"} {
					if cmd.Flags().Changed(name) {
						return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: name, Message: "narrows --all only: give --all, or --id with --expected-generation"}
					}
				}
			}
			if err := requireFlags(cmd, need...); err != nil {
				return err
			}
			if operator == "" {
				operator = osUser()
			}
			q, err := openExistingQueue(cmd.Context(), queue, pol, &pf)
			if err != nil {
				return err
			}
			defer q.Close()
			if all {
				return expediteAll(cmd, q, flow, group, reason, operator, atFlag(cmd, at))
			}
			r, err := q.Expedite(cmd.Context(), fairrelay.ExpediteParams{EventID: id, ExpectedGeneration: gen, Reason: reason, Operator: operator, At: atFlag(cmd, at)})
			if err != nil {
				return err
			}
			hint := ""
			if r.Status == fairrelay.ActionRejected {
				hint = expediteHint(cmd.Context(), q, queue, id, r.RejectReason)
			}
			return printAction(cmd, "expedite "+id, r, hint)
		},
	}
	f := cmd.Flags()
	f.StringVar(&queue, "queue", "", "queue store: a SQLite file path or a postgres:// URL")
	f.StringVar(&id, "id", "", "the backing-off head's event id")
	f.Int64Var(&gen, "expected-generation", 0, "the event's current generation (optimistic concurrency)")
	f.StringVar(&reason, "reason", "", "why; kept in the audit row")
	f.StringVar(&operator, "operator", "", "who decided; kept in the audit row (default: the OS user running the command)")
	f.Int64Var(&at, "at", 0, atUsage)
	f.BoolVar(&all, "all", false, "expedite every head backing off (narrow with --flow and --group)")
	f.StringVar(&flow, "flow", "", "with --all: only this flow")
	f.StringVar(&group, "group", "", "with --all: only the flows of this group (a tenant's, SPEC §8; a flow without a group is its own)")
	pf.registerAdmin(cmd)
	return cmd
}

// expediteAll expedites the heads backing off (ready, next_at after the
// stored tick read first) of every flow, or of flow, or of the flows of
// group, each in its own
// transaction at the generation it was listed with, and prints one line
// per event. It pages through the flows by id (keyset), however many
// there are. Expedite errors stop it; rejections (a head that moved
// meanwhile) are printed and it goes on.
func expediteAll(cmd *cobra.Command, q *fairrelay.Queue, flow, group, reason, operator string, at int64) error {
	ctx := cmd.Context()
	// The clock first (SPEC §2), also when no head matches.
	if err := q.CheckTick(ctx, "expedite", at, false); err != nil {
		return err
	}
	if err := blankReasonAll(cmd, "expedite", reason); err != nil {
		return err
	}
	c, err := q.Clock(ctx)
	if err != nil {
		return err
	}
	now := c.Tick
	if at != fairrelay.AtStored {
		now = max(now, at)
	}
	if err := knownGroup(cmd, q, group); err != nil {
		return err
	}
	const page = 1000
	n, rejected := 0, 0
	why := map[string]int{}
	each := func(h fairrelay.Head) error {
		e := h.Head
		if group != "" && h.Group != group {
			return nil
		}
		if e == nil || e.State != fairrelay.StateReady || e.NextAt == nil || *e.NextAt <= now {
			return nil
		}
		r, err := q.Expedite(ctx, fairrelay.ExpediteParams{EventID: e.ID, ExpectedGeneration: e.Generation, Reason: reason, Operator: operator, At: at})
		if err != nil {
			return fmt.Errorf("expedite %s: %w", e.ID, err)
		}
		if r.Status == fairrelay.ActionRejected {
			rejected++
			why[r.RejectReason]++
		}
		line := script.ActionResult(r)
		line["id"] = e.ID
		n++
		return printJSON(cmd.OutOrStdout(), line)
	}
	if flow != "" {
		fi, err := q.Flow(ctx, flow)
		if err != nil {
			return err
		}
		if err := each(fi.Head); err != nil {
			return err
		}
	} else {
		for after := ""; ; {
			hs, err := q.Heads(ctx, after, page)
			if err != nil {
				return err
			}
			for _, h := range hs {
				if err := each(h); err != nil {
					return err
				}
			}
			if len(hs) < page {
				break
			}
			after = hs[len(hs)-1].Flow
		}
	}
	if n == 0 {
		return notApplied("expedite: no head is backing off; nothing changed")
	}
	return rejectedOf("expedite", n, rejected, why)
}

// newFlowActionCmd is pause or resume.
func newFlowActionCmd(action string) *cobra.Command {
	var queue, flow, reason, operator string
	var at int64
	var pf policyFlags
	short := "Take a flow out of dispatch: its head is never eligible while paused, with an audit row (SPEC §9)"
	long := `Pauses the flow: its head stays as it is and keeps blocking the flow. An
inflight head may still settle; one whose lease runs out is neither claimed
nor quarantined until resume. Prints {"status":"paused"} or
{"status":"rejected","reason":...} (empty_reason, already_paused; exit 1).`
	if action == "resume" {
		short = "Put a paused flow back in dispatch, its served unchanged, with an audit row (SPEC §9)"
		long = `Resumes the flow: its head is eligible again as its state says. Prints
{"status":"resumed"} or {"status":"rejected","reason":...} (empty_reason,
not_paused; exit 1).`
	}
	cmd := &cobra.Command{
		Use:   action + " --queue Q --flow FLOW --reason TEXT [--operator NAME] [--at TICK]",
		Short: short,
		Long:  long,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pol, err := pf.policy()
			if err != nil {
				return err
			}
			if err := requireFlags(cmd, "flow", "reason"); err != nil {
				return err
			}
			if operator == "" {
				operator = osUser()
			}
			q, err := openExistingQueue(cmd.Context(), queue, pol, &pf)
			if err != nil {
				return err
			}
			defer q.Close()
			p := fairrelay.FlowActionParams{Flow: flow, Reason: reason, Operator: operator, At: atFlag(cmd, at)}
			act := q.Pause
			if action == "resume" {
				act = q.Resume
			}
			r, err := act(cmd.Context(), p)
			if err != nil {
				return err
			}
			return printAction(cmd, action+" "+flow, r, "")
		},
	}
	f := cmd.Flags()
	f.StringVar(&queue, "queue", "", "queue store: a SQLite file path or a postgres:// URL")
	f.StringVar(&flow, "flow", "", "the flow")
	f.StringVar(&reason, "reason", "", "why; kept in the audit row")
	f.StringVar(&operator, "operator", "", "who decided; kept in the audit row (default: the OS user running the command)")
	f.Int64Var(&at, "at", 0, atUsage)
	pf.registerAdmin(cmd)
	return cmd
}

// printAction prints an operator action's answer; a rejection exits 1, its
// message followed by hint.
func printAction(cmd *cobra.Command, what string, r fairrelay.ActionResult, hint string) error {
	if err := printJSON(cmd.OutOrStdout(), script.ActionResult(r)); err != nil {
		return err
	}
	if r.Status == fairrelay.ActionRejected {
		return notApplied("%s: rejected (%s); nothing changed%s", what, r.RejectReason, hint)
	}
	return nil
}
