package main

import (
	"encoding/base64"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/fairrelay/fairrelay"
)

func init() { rootCmd.AddCommand(newInspectCmd()) }

func newInspectCmd() *cobra.Command {
	var queue, inboxDSN, after, eventID, flow string
	var asJSON bool
	var limit int
	var afterNo, afterSeq int64
	cmd := &cobra.Command{
		Use:   "inspect (--queue Q [flows|heads|quarantined|groups|settings|audit|clock] | --queue Q events [--flow F] | --queue Q attempts --id ID | --inbox I [receipts|projection|held|waivers]) [--json]",
		Short: "Show a queue store's flows, heads, events, quarantined events, groups, settings, audit log, an event's attempts or the clock, or an inbox's receipts, projection, held deliveries and waivers",
		Long: `Read-only views of a queue store:
  flows        each flow with its last seq, served ticket, group and whether paused
  heads        each flow with its head event (the default)
  events       the events, bodies included, by flow and seq (--flow F: F's only);
               acked ones too, until a prune deletes them
  quarantined  the quarantined heads, with the generation a redrive needs
  groups       the groups (SPEC §8); a flow created without a group is its own
               and not listed. The columns:
                 WEIGHT       the group's share of claims, 1-1000 (configure --weight):
                              saturated, it gets WEIGHT claims for every claim of a
                              saturated group of weight 1
                 MAX BACKLOG  its limit on events not acked; none: no limit
                 MAX SLOTS    its cap on each relay's delivery slots (configure
                              --max-slots, SPEC §11); none: no cap of its own
                 SERVED       its place in the rotation, a ticket: a claim picks the
                              group with the smallest SERVED, then in it the flow
                              served least. With weight 1 it is the ticket of the
                              group's last claim. With weight w it moves once every
                              w claims, to the ticket of the w-th (deficit round
                              robin): the group keeps its place for w claims, so
                              SERVED may be older than its last claim. -: no flow
                              yet, so not in the rotation
                 FLOWS        its flows
                 BACKLOG      its events not acked (ready, inflight, quarantined)
                 QUARANTINED  its quarantined heads, one per flow at most: what
                              redrive --all --group would take
  settings     the store-wide backlog limits and the backlog
  audit        the operators' decisions (redrive, expedite, pause, resume), as written,
               with the tick and the wall-clock time (UTC, RFC 3339) of each
  attempts     the attempt history of one event (--id): each claim's generation,
               claim and settle times, outcome, answer, detail, duration, relay
  clock        the stored tick and the last ticket
and of an inbox (--inbox, the receiver's store):
  receipts     each receipt: event id, flow, seq (the default), by flow and seq
  projection   each flow's ledger: the last seq applied and the total
  held         what a broker consumer keeps until it can be applied: event id,
               flow, seq and reason (gap: its flow's previous event is not
               applied yet; or the outcome that refuses it for good, retried
               until the cause is fixed), by flow and seq
  waivers      the events an operator waived (fairrelay waive): flow, seq,
               event id, when, who and why, by flow and seq
Both refuse a store that does not exist. --limit rows at a time; a full page
says on stderr how to ask for the next (--after FLOW, and --after-seq N for
receipts, held and waivers). A readable table by default; --json prints one JSON object per line. Stored
text is data: a table shows a value with control or format characters
Go-quoted ("a\tb"), and JSON escapes them (\u001b), so nothing a store holds
can forge lines or drive the terminal.`,
		Args:      cobra.MaximumNArgs(1),
		ValidArgs: []string{"flows", "heads", "events", "quarantined", "groups", "settings", "audit", "attempts", "clock"},
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 1 {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "limit", Message: "must be at least 1"}
			}
			if inboxDSN != "" {
				if queue != "" {
					return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "inbox", Message: "give --queue or --inbox, not both"}
				}
				view := "receipts"
				if len(args) == 1 {
					view = args[0]
				}
				if afterNo != 0 {
					return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "after_no", Message: "pages the queue's audit view only"}
				}
				// The queue's selectors, refused rather than ignored: an
				// inbox listing printed every flow's receipts for --flow A
				// (a breaker's sweep).
				if flow != "" {
					return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "flow", Message: "selects a flow of the queue's views only; page an inbox's receipts with --after FLOW"}
				}
				if eventID != "" {
					return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "id", Message: "selects the queue's attempts view only"}
				}
				if err := fairrelay.CheckSearch("after", after); err != nil {
					return err // named as the flag, not as the list's argument
				}
				return inspectInbox(cmd, inboxDSN, view, asJSON, inboxPage{limit: limit, afterFlow: after, afterSeq: afterSeq})
			}
			view := "heads"
			if len(args) == 1 {
				view = args[0]
			}
			if afterSeq != 0 && view != "events" {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "after_seq", Message: "pages the events view and the inbox's receipts, held and waivers views only"}
			}
			if afterSeq < 0 {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "after_seq", Message: "must not be negative"}
			}
			if afterSeq != 0 && after == "" && flow == "" {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "after_seq", Message: "a seq of which flow: give --after FLOW or --flow FLOW with it"}
			}
			if flow != "" && view != "events" && view != "heads" && view != "flows" {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "flow", Message: fmt.Sprintf("selects one flow of the events, heads and flows views only, not %s", view)}
			}
			if flow != "" && after != "" {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "after", Message: "with --flow, page with --after-seq alone"}
			}
			// Each view pages its own way; a paging flag it does not take
			// is refused rather than ignored.
			if after != "" && view != "flows" && view != "heads" && view != "events" && view != "quarantined" && view != "groups" {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "after", Message: fmt.Sprintf("pages the flows, heads, events, quarantined and groups views only, not %s (audit pages with --after-no)", view)}
			}
			if err := fairrelay.CheckSearch("after", after); err != nil {
				return err // named as the flag, not as the list's argument (after_flow)
			}
			if flow != "" {
				if err := fairrelay.CheckID("flow", flow); err != nil {
					return err // a flow id, named as the flag (the list pages from it: after_flow)
				}
			}
			if afterNo != 0 && view != "audit" {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "after_no", Message: fmt.Sprintf("pages the audit view only, not %s", view)}
			}
			if (eventID != "") != (view == "attempts") {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "id", Message: "the attempts view needs --id, and only it takes one"}
			}
			if afterNo < 0 {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "after_no", Message: "must not be negative"}
			}
			ctx := cmd.Context()
			var rows []any
			var table func(w io.Writer)
			next := "" // how to ask for the rows after a full page
			switch view {
			case "flows", "heads":
				// Open only after the view is known to be valid.
			case "events", "quarantined", "groups", "settings", "audit", "attempts", "clock":
			default:
				msg := fmt.Sprintf("unknown view %q: flows, heads, events, quarantined, groups, settings, audit, attempts or clock", redactDSN(view))
				switch {
				case queue == "":
					// `inspect q.db`: the store taken for a view (a fresh
					// user's report).
					msg += "; the store is given with --queue Q (or --inbox I, whose views are receipts, projection, held and waivers)"
				case view == "receipts" || view == "projection" || view == "held" || view == "waivers":
					// An inbox's view asked of --queue (a fresh user's
					// report: inspect --queue inbox.db receipts).
					msg += fmt.Sprintf("; %s is an inbox's view: give the inbox with --inbox I instead of --queue", view)
				}
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "view", Message: msg}
			}
			q, err := openReadOnlyQueue(ctx, queue)
			if err != nil {
				return err
			}
			defer q.Close()
			switch view {
			case "flows", "heads":
				var hs []fairrelay.Head
				if flow != "" {
					// One flow: what an operator asks first of a flow that
					// does not move (an operator's report: heads had to be
					// paged to it).
					fi, err := q.Flow(ctx, flow)
					if err != nil {
						return err
					}
					hs = []fairrelay.Head{fi.Head}
				} else if hs, err = q.Heads(ctx, after, limit); err != nil {
					return err
				}
				if len(hs) > 0 && flow == "" {
					next = "--after " + shellQuote(hs[len(hs)-1].Flow)
				}
				// The stored tick, for DUE's distance from it (1 tick = 1 ms
				// on the daemon clock).
				clock, err := q.Clock(ctx)
				if err != nil {
					return err
				}
				for _, h := range hs {
					if view == "flows" {
						rows = append(rows, h.FlowState)
					} else {
						rows = append(rows, h)
					}
				}
				table = func(w io.Writer) {
					if view == "flows" {
						fmt.Fprintln(w, "FLOW\tSEQ\tSERVED\tGROUP\tPAUSED")
						for _, h := range hs {
							fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%t\n", cell(h.Flow), h.Seq, h.Served, cell(h.Group), h.Paused)
						}
						return
					}
					// PAUSED: a paused flow's head is not claimed whatever its
					// state (SPEC §9), so the operator sees why it waits.
					fmt.Fprintln(w, "FLOW\tSEQ\tSERVED\tPAUSED\tHEAD\tHEAD SEQ\tSTATE\tGEN\tATTEMPTS\tDUE\tREASON")
					for _, h := range hs {
						if h.Head == nil {
							fmt.Fprintf(w, "%s\t%d\t%d\t%t\t-\t-\t(all acked)\t\t\t\t\n", cell(h.Flow), h.Seq, h.Served, h.Paused)
							continue
						}
						e := h.Head
						fmt.Fprintf(w, "%s\t%d\t%d\t%t\t%s\t%d\t%s\t%d\t%d\t%s\t%s\n", cell(h.Flow), h.Seq, h.Served, h.Paused, cell(e.ID), e.Seq, e.State, e.Generation, e.Attempts, due(*e, clock.Tick), cell(deref(e.Reason)))
					}
				}
			case "events":
				from := after
				if flow != "" {
					from = flow
				}
				es, err := q.Events(ctx, from, afterSeq, limit)
				if err != nil {
					return err
				}
				if flow != "" {
					// One flow's: the page ends where the next flow begins.
					n := 0
					for n < len(es) && es[n].Flow == flow {
						n++
					}
					es = es[:n]
					if n == 0 && afterSeq == 0 {
						// No events: a flow whose events were pruned, or a
						// misspelt name, which says so (a fresh user got an
						// empty table and exit 0 for --flow nosuch).
						if _, err := q.Flow(ctx, flow); err != nil {
							return err
						}
					}
				}
				if len(es) > 0 {
					last := es[len(es)-1]
					next = "--after " + shellQuote(last.Flow) + " --after-seq " + strconv.FormatInt(last.Seq, 10)
					if flow != "" {
						next = "--flow " + shellQuote(flow) + " --after-seq " + strconv.FormatInt(last.Seq, 10)
					}
				}
				for _, e := range es {
					rows = append(rows, eventRowOf(e))
				}
				table = func(w io.Writer) {
					fmt.Fprintln(w, "ID\tFLOW\tSEQ\tSTATE\tGEN\tATTEMPTS\tBODY")
					for _, e := range es {
						fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%d\t%d\t%s\n", cell(e.ID), cell(e.Flow), e.Seq, e.State, e.Generation, e.Attempts, cell(bodyCell(e.Body)))
					}
				}
			case "quarantined":
				es, err := q.QuarantinedAfter(ctx, after, limit)
				if err != nil {
					return err
				}
				if len(es) > 0 {
					next = "--after " + shellQuote(es[len(es)-1].Flow)
				}
				rows = anyRows(es)
				table = func(w io.Writer) {
					fmt.Fprintln(w, "ID\tFLOW\tSEQ\tGENERATION\tATTEMPTS\tLIFETIME\tREASON")
					for _, e := range es {
						fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\t%s\n", cell(e.ID), cell(e.Flow), e.Seq, e.Generation, e.Attempts, e.LifetimeAttempts, cell(deref(e.Reason)))
					}
				}
			case "clock":
				c, err := q.Clock(ctx)
				if err != nil {
					return err
				}
				rows = append(rows, c)
				table = func(w io.Writer) {
					fmt.Fprintln(w, "TICK\tTICKET")
					fmt.Fprintf(w, "%d\t%d\n", c.Tick, c.Ticket)
				}
			case "groups":
				gs, err := q.Groups(ctx, after, limit)
				if err != nil {
					return err
				}
				if len(gs) > 0 {
					next = "--after " + shellQuote(gs[len(gs)-1].Group)
				}
				rows = anyRows(gs)
				table = func(w io.Writer) {
					fmt.Fprintln(w, "GROUP\tWEIGHT\tMAX BACKLOG\tMAX SLOTS\tSERVED\tFLOWS\tBACKLOG\tQUARANTINED")
					for _, g := range gs {
						slots := "none"
						if g.MaxSlots > 0 {
							slots = strconv.FormatInt(g.MaxSlots, 10)
						}
						fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%d\t%d\t%d\n", cell(g.Group), g.Weight, optional(g.MaxBacklog, "none"), slots, optional(g.Served, "-"), g.Flows, g.Backlog, g.Quarantined)
					}
				}
			case "settings":
				s, err := q.Settings(ctx)
				if err != nil {
					return err
				}
				// The entry rule the store records (SPEC §7): the one a
				// --policy given to any command must match.
				entry := q.Policy().Entry
				rows = []any{struct {
					fairrelay.Settings
					Entry fairrelay.Entry `json:"entry"`
				}{s, entry}}
				table = func(w io.Writer) {
					fmt.Fprintln(w, "ENTRY RULE\tMAX BACKLOG\tMAX FLOW BACKLOG\tBACKLOG")
					fmt.Fprintf(w, "%s\t%s\t%s\t%d\n", entry, limitCell(s.MaxBacklog), limitCell(s.MaxFlowBacklog), s.Backlog)
				}
			case "audit":
				as, err := q.Audit(ctx, afterNo, limit)
				if err != nil {
					return err
				}
				if len(as) > 0 {
					next = "--after-no " + strconv.FormatInt(as[len(as)-1].No, 10)
				}
				for _, a := range as {
					rows = append(rows, auditRow{AuditEntry: a, No: a.No, WallTime: wallTime(a.Wall)})
				}
				table = func(w io.Writer) {
					fmt.Fprintln(w, "NO\tAT\tWALL\tFLOW\tID\tACTION\tGENERATION\tOPERATOR\tPREVIOUS REASON\tREASON")
					for _, a := range as {
						gen := "-"
						if a.Generation != nil {
							gen = strconv.FormatInt(*a.Generation, 10)
						}
						fmt.Fprintf(w, "%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.No, a.At, wallTime(a.Wall), cell(a.Flow), cell(deref(a.ID)), cell(a.Action), gen,
							cell(deref(a.Operator)), cell(deref(a.PreviousReason)), cell(a.Reason))
					}
				}
			case "attempts":
				as, err := q.Attempts(ctx, eventID)
				if err != nil {
					return err
				}
				rows = anyRows(as)
				table = func(w io.Writer) {
					fmt.Fprintln(w, "GENERATION\tCLAIMED\tLEASE UNTIL\tSETTLED AT\tSETTLED\tOUTCOME\tSTATUS\tDURATION\tRELAY\tDETAIL")
					for _, a := range as {
						// An attempt not settled (in flight, or its lease
						// ran out) has no settle time, duration or relay.
						settledAt, settled, duration := "-", "-", "-"
						if a.SettledAt != nil {
							settledAt, duration = strconv.FormatInt(*a.SettledAt, 10), a.Duration.String()
							if a.Duration < time.Millisecond {
								// Recorded to the millisecond: 0 is "under one", not "0s".
								duration = "<1ms"
							}
						}
						if !a.Settled.IsZero() {
							settled = wallTime(a.Settled.UnixMilli())
						}
						fmt.Fprintf(w, "%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.Generation, wallTime(a.Claimed.UnixMilli()), a.LeaseUntil,
							settledAt, settled, cell(orDash(a.Outcome)), cell(a.Status), duration, cell(orDash(a.Relay)), cell(orDash(a.Detail)))
					}
				}
			}
			return printView(cmd, rows, table, asJSON, limit, next)
		},
	}
	f := cmd.Flags()
	f.StringVar(&queue, "queue", "", "queue store: a SQLite file path or a postgres:// URL")
	f.StringVar(&inboxDSN, "inbox", "", "inbox store (instead of --queue): a SQLite file path or a postgres:// URL")
	f.BoolVar(&asJSON, "json", false, "print one JSON object per line instead of a table")
	f.IntVar(&limit, "limit", 1000, "at most this many rows")
	f.StringVar(&after, "after", "", "flows, heads, quarantined, groups and projection: start after this flow (groups: group) id; events, receipts, held and waivers: start at this flow, after its --after-seq (0: all of the flow's) (paging)")
	f.Int64Var(&afterNo, "after-no", 0, "audit: start after the row numbered this (the NO column; paging)")
	f.Int64Var(&afterSeq, "after-seq", 0, "events, receipts, held and waivers, with --after (events also with --flow): start after this seq of that flow (paging)")
	f.StringVar(&flow, "flow", "", "events: this flow's only; heads, flows: this flow alone")
	f.StringVar(&eventID, "id", "", "attempts: the event whose attempt history to print")
	return cmd
}

// printView prints a view's rows: as a table, or one JSON object per line
// with asJSON. A full page (limit rows) says on stderr how to ask for the
// next one (next: the paging flags).
func printView(cmd *cobra.Command, rows []any, table func(w io.Writer), asJSON bool, limit int, next string) error {
	if len(rows) >= limit && next != "" {
		// A full page: say so, on stderr (stdout stays the rows).
		fmt.Fprintf(cmd.ErrOrStderr(), "fairrelay: inspect: a full page (--limit %d); more may follow: ask again with %s\n", limit, next)
	}
	out := cmd.OutOrStdout()
	if asJSON {
		for _, r := range rows {
			if err := printJSON(out, r); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// auditRow is an audit entry as inspect prints it in JSON: the SPEC §6
// fields and the wall-clock time of the row (UTC, RFC 3339).
type auditRow struct {
	fairrelay.AuditEntry
	// No is the row's number, what --after-no pages by (the SPEC §6 shape
	// of AuditEntry leaves it out).
	No       int64  `json:"no"`
	WallTime string `json:"wall"`
}

// wallTime formats ms (milliseconds since the Unix epoch) as UTC RFC 3339
// with milliseconds; "-" for 0 (a row written before wall times were kept).
func wallTime(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func deref(s *string) string {
	if s == nil {
		return "-"
	}
	return *s
}

// due says when a head can next be claimed: next_at for ready, lease end for
// inflight.
func due(e fairrelay.EventState, stored int64) string {
	switch {
	case e.NextAt != nil:
		return "next_at " + strconv.FormatInt(*e.NextAt, 10) + fromStored(*e.NextAt, stored, "due now")
	case e.LeaseUntil != nil:
		return "lease_until " + strconv.FormatInt(*e.LeaseUntil, 10) + fromStored(*e.LeaseUntil, stored, "ended")
	}
	return "-"
}

// fromStored says how far tick is past the stored tick, as a duration of
// the daemon clock (1 tick = 1 ms, SPEC §7): " (stored +7.2s)", or
// " (reached)" — reached being "due now" or "ended" — once the stored tick
// is at or past it. A running relay's clock is up to about 10 s ahead of
// the stored tick (docs/relay.md), so this is when the head is due as the
// store knows it, not by a wall clock (a fresh user's report: the ticks
// alone meant nothing to an operator).
func fromStored(tick, stored int64, reached string) string {
	if tick <= stored {
		return " (" + reached + ")"
	}
	return " (stored +" + (time.Duration(tick-stored) * time.Millisecond).Round(100*time.Millisecond).String() + ")"
}

// shellQuote returns s as one shell word: as it is when it needs no
// quoting, else in single quotes (a paging hint must paste back as given).
// A value with characters a terminal would act on, or invalid UTF-8, is
// written in ANSI-C quotes ($'…', bash and zsh) with those bytes as \xNN,
// so the hint never carries them raw.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:@%+=,", r))
	}) < 0 {
		return s
	}
	if utf8.ValidString(s) && strings.IndexFunc(s, unsafe) < 0 {
		return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	var b strings.Builder
	b.WriteString("$'")
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case (r == utf8.RuneError && size == 1) || unsafe(r):
			for _, c := range []byte(s[i : i+size]) {
				fmt.Fprintf(&b, `\x%02x`, c)
			}
		case r == '\'' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	b.WriteString("'")
	return b.String()
}

// optional prints *v, or none when v is nil.
func optional(v *int64, none string) string {
	if v == nil {
		return none
	}
	return strconv.FormatInt(*v, 10)
}

// limitCell prints a backlog limit: none for 0.
func limitCell(v int64) string {
	if v == 0 {
		return "none"
	}
	return strconv.FormatInt(v, 10)
}

// eventRow is an event as the events view prints it in JSON: its state,
// and its body as text when it is UTF-8 (body), else in base64
// (body_base64).
type eventRow struct {
	fairrelay.EventState
	Body       *string `json:"body,omitempty"`
	BodyBase64 *string `json:"body_base64,omitempty"`
}

func eventRowOf(e fairrelay.EventRecord) eventRow {
	r := eventRow{EventState: e.EventState}
	if utf8.Valid(e.Body) {
		b := string(e.Body)
		r.Body = &b
	} else {
		b := base64.StdEncoding.EncodeToString(e.Body)
		r.BodyBase64 = &b
	}
	return r
}

// bodyCell is a body as the events table shows it: its text, cut to 80
// bytes (with "…"); a body that is not UTF-8 as "(N bytes, not text)".
func bodyCell(b []byte) string {
	if !utf8.Valid(b) {
		return fmt.Sprintf("(%d bytes, not text)", len(b))
	}
	if len(b) > 80 {
		cut := 80
		for cut > 0 && !utf8.RuneStart(b[cut]) {
			cut--
		}
		return string(b[:cut]) + "…"
	}
	return string(b)
}
