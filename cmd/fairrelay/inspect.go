package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/fairrelay/fairrelay"
)

func init() { rootCmd.AddCommand(newInspectCmd()) }

func newInspectCmd() *cobra.Command {
	var queue, after string
	var asJSON bool
	var limit int
	var afterNo int64
	cmd := &cobra.Command{
		Use:   "inspect --queue Q [flows|heads|quarantined|audit|clock] [--json]",
		Short: "Show flows, heads, quarantined events, the audit log or the clock",
		Long: `Read-only views of a queue store:
  flows        each flow with its last seq and served ticket
  heads        each flow with its head event (the default)
  quarantined  the quarantined heads, with the generation a redrive needs
  audit        the redrive decisions, as written
  clock        the stored tick and the last ticket
A readable table by default; --json prints one JSON object per line. Stored
text is data: a table shows a value with control or format characters
Go-quoted ("a\tb"), and JSON escapes them (\u001b), so nothing a store holds
can forge lines or drive the terminal.`,
		Args:      cobra.MaximumNArgs(1),
		ValidArgs: []string{"flows", "heads", "quarantined", "audit", "clock"},
		RunE: func(cmd *cobra.Command, args []string) error {
			view := "heads"
			if len(args) == 1 {
				view = args[0]
			}
			if limit < 1 {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "limit", Message: "must be at least 1"}
			}
			// Each view pages its own way; a paging flag it does not take
			// is refused rather than ignored.
			if after != "" && view != "flows" && view != "heads" && view != "quarantined" {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "after", Message: fmt.Sprintf("pages the flows, heads and quarantined views only, not %s (audit pages with --after-no)", view)}
			}
			if afterNo != 0 && view != "audit" {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "after_no", Message: fmt.Sprintf("pages the audit view only, not %s", view)}
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
			case "quarantined", "audit", "clock":
			default:
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "view", Message: fmt.Sprintf("unknown view %q: flows, heads, quarantined, audit or clock", view)}
			}
			q, err := openExistingQueue(ctx, queue, fairrelay.Policy{})
			if err != nil {
				return err
			}
			defer q.Close()
			switch view {
			case "flows", "heads":
				hs, err := q.Heads(ctx, after, limit)
				if err != nil {
					return err
				}
				if len(hs) > 0 {
					next = "--after " + shellQuote(hs[len(hs)-1].Flow)
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
						fmt.Fprintln(w, "FLOW\tSEQ\tSERVED")
						for _, h := range hs {
							fmt.Fprintf(w, "%s\t%d\t%d\n", cell(h.Flow), h.Seq, h.Served)
						}
						return
					}
					fmt.Fprintln(w, "FLOW\tSEQ\tSERVED\tHEAD\tHEAD SEQ\tSTATE\tGEN\tATTEMPTS\tDUE\tREASON")
					for _, h := range hs {
						if h.Head == nil {
							fmt.Fprintf(w, "%s\t%d\t%d\t-\t-\t(all acked)\t\t\t\t\n", cell(h.Flow), h.Seq, h.Served)
							continue
						}
						e := h.Head
						fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%d\t%s\t%d\t%d\t%s\t%s\n", cell(h.Flow), h.Seq, h.Served, cell(e.ID), e.Seq, e.State, e.Generation, e.Attempts, due(*e), cell(deref(e.Reason)))
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
				for _, e := range es {
					rows = append(rows, e)
				}
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
			case "audit":
				as, err := q.Audit(ctx, afterNo, limit)
				if err != nil {
					return err
				}
				if len(as) > 0 {
					next = "--after-no " + strconv.FormatInt(as[len(as)-1].No, 10)
				}
				for _, a := range as {
					rows = append(rows, a)
				}
				table = func(w io.Writer) {
					fmt.Fprintln(w, "NO\tAT\tID\tACTION\tGENERATION\tOPERATOR\tPREVIOUS REASON\tREASON")
					for _, a := range as {
						fmt.Fprintf(w, "%d\t%d\t%s\t%s\t%d\t%s\t%s\t%s\n", a.No, a.At, cell(a.ID), cell(a.Action), a.Generation, cell(deref(a.Operator)), cell(deref(a.PreviousReason)), cell(a.Reason))
					}
				}
			}
			if len(rows) == limit && next != "" {
				// A full page: say so, on stderr (stdout stays the rows).
				fmt.Fprintf(cmd.ErrOrStderr(), "inspect: a full page (--limit %d); more may follow: ask again with %s\n", limit, next)
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
		},
	}
	f := cmd.Flags()
	f.StringVar(&queue, "queue", "", "queue store: a SQLite file path or a postgres:// URL")
	f.BoolVar(&asJSON, "json", false, "print one JSON object per line instead of a table")
	f.IntVar(&limit, "limit", 1000, "at most this many rows")
	f.StringVar(&after, "after", "", "flows, heads and quarantined: start after this flow id (paging)")
	f.Int64Var(&afterNo, "after-no", 0, "audit: start after the row numbered this (the NO column; paging)")
	return cmd
}

func deref(s *string) string {
	if s == nil {
		return "-"
	}
	return *s
}

// due says when a head can next be claimed: next_at for ready, lease end for
// inflight.
func due(e fairrelay.EventState) string {
	switch {
	case e.NextAt != nil:
		return "next_at " + strconv.FormatInt(*e.NextAt, 10)
	case e.LeaseUntil != nil:
		return "lease_until " + strconv.FormatInt(*e.LeaseUntil, 10)
	}
	return "-"
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
