package main

import (
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
)

// inboxPage is where an inbox view starts and how many rows it shows.
type inboxPage struct {
	limit     int
	afterFlow string
	afterSeq  int64
}

// inspectInbox prints an inbox's receipts or projection, a page at a time,
// from a store that must exist.
func inspectInbox(cmd *cobra.Command, dsn, view string, asJSON bool, p inboxPage) error {
	switch view {
	case "receipts", "projection", "held", "waivers":
	default:
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "view", Message: fmt.Sprintf("unknown inbox view %q: receipts, projection, held or waivers", view)}
	}
	if p.afterSeq < 0 {
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "after_seq", Message: "must not be negative"}
	}
	if view == "projection" && p.afterSeq != 0 {
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "after_seq", Message: "pages the receipts, held and waivers views only (projection pages with --after)"}
	}
	if p.afterSeq != 0 && p.afterFlow == "" {
		// A seq is within a flow: alone it would be ignored.
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "after_seq", Message: "needs --after FLOW: the seq is within that flow"}
	}
	ctx := cmd.Context()
	in, err := openInbox(ctx, dsn, inbox.Options{ReadOnly: true})
	if err != nil {
		return err
	}
	defer in.Close()
	var rows []any
	var table func(w io.Writer)
	next := ""
	if view == "held" {
		hs, err := in.Held(ctx, p.afterFlow, p.afterSeq, p.limit)
		if err != nil {
			return err
		}
		if len(hs) >= p.limit {
			last := hs[len(hs)-1]
			next = "--after " + shellQuote(last.Flow) + " --after-seq " + strconv.FormatInt(last.Seq, 10)
		}
		table := func(w io.Writer) {
			fmt.Fprintln(w, "ID\tFLOW\tSEQ\tREASON\tSTATE")
			for _, h := range hs {
				fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", cell(h.ID), cell(h.Flow), h.Seq, cell(string(h.Reason)), h.State)
			}
		}
		return printView(cmd, anyRows(hs), table, asJSON, p.limit, next)
	}
	if view == "waivers" {
		ws, err := in.Waivers(ctx, p.afterFlow, p.afterSeq, p.limit)
		if err != nil {
			return err
		}
		if len(ws) >= p.limit {
			last := ws[len(ws)-1]
			next = "--after " + shellQuote(last.Flow) + " --after-seq " + strconv.FormatInt(last.Seq, 10)
		}
		table := func(w io.Writer) {
			fmt.Fprintln(w, "FLOW\tSEQ\tID\tWAIVED AT\tOPERATOR\tREASON")
			for _, x := range ws {
				fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\n", cell(x.Flow), x.Seq, cell(x.EventID), wallTime(x.WaivedAt.UnixMilli()), cell(x.Operator), cell(x.Reason))
			}
		}
		return printView(cmd, anyRows(ws), table, asJSON, p.limit, next)
	}
	if view == "receipts" {
		rs, err := in.Receipts(ctx, p.afterFlow, p.afterSeq, p.limit)
		if err != nil {
			return err
		}
		if len(rs) > 0 {
			last := rs[len(rs)-1]
			next = "--after " + shellQuote(last.Flow) + " --after-seq " + strconv.FormatInt(last.Seq, 10)
		}
		rows = anyRows(rs)
		table = func(w io.Writer) {
			fmt.Fprintln(w, "ID\tFLOW\tSEQ")
			for _, r := range rs {
				fmt.Fprintf(w, "%s\t%s\t%d\n", cell(r.ID), cell(r.Flow), r.Seq)
			}
		}
	} else {
		ps, err := in.Projections(ctx, p.afterFlow, p.limit)
		if err != nil {
			return err
		}
		if len(ps) > 0 {
			next = "--after " + shellQuote(ps[len(ps)-1].Flow)
		}
		rows = anyRows(ps)
		table = func(w io.Writer) {
			fmt.Fprintln(w, "FLOW\tSEQ\tTOTAL")
			for _, r := range ps {
				fmt.Fprintf(w, "%s\t%d\t%d\n", cell(r.Flow), r.Seq, r.Total)
			}
		}
	}
	return printView(cmd, rows, table, asJSON, p.limit, next)
}

// anyRows returns xs as the rows printView takes.
func anyRows[T any](xs []T) []any {
	rows := make([]any, len(xs))
	for i, x := range xs {
		rows[i] = x
	}
	return rows
}
