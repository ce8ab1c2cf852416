package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
)

func init() { rootCmd.AddCommand(newDemoCmd()) }

func newDemoCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "demo [--dir DIR]",
		Short: "Run the article's sample: a poison head quarantined, the others served, then a redrive",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				d, err := os.MkdirTemp("", "fairrelay-demo-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(d)
				dir = d
			}
			return runDemo(cmd.Context(), cmd.OutOrStdout(), dir)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "folder for queue.db and inbox.db (default: a temporary folder, removed afterwards)")
	return cmd
}

func runDemo(ctx context.Context, out io.Writer, dir string) error {
	q, err := fairrelay.Open(ctx, filepath.Join(dir, "queue.db"), fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		return err
	}
	defer q.Close()
	in, err := inbox.Open(ctx, filepath.Join(dir, "inbox.db"), inbox.Options{MaxDelta: 5})
	if err != nil {
		return err
	}
	defer in.Close()

	fmt.Fprintf(out, "fairrelay demo — queue and inbox in %s\n\n", dir)
	sample := []struct {
		id, flow string
		delta    int
	}{{"A1", "A", 10}, {"A2", "A", 1}, {"B1", "B", 1}, {"B2", "B", 1}, {"B3", "B", 1}, {"C1", "C", 1}, {"C2", "C", 1}, {"C3", "C", 1}}
	for _, e := range sample {
		if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: e.id, Flow: e.flow, Body: []byte(fmt.Sprintf(`{"delta":%d}`, e.delta)), At: 0}); err != nil {
			return err
		}
	}
	fmt.Fprintln(out, "Enqueued A1 (delta 10), A2, B1-B3, C1-C3 at tick 0. The receiver supports deltas up to 5,")
	fmt.Fprintln(out, "so A1 is a poison head: it must be quarantined without holding back B and C.")
	fmt.Fprintln(out)

	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TICK\tTICKET\tEVENT\tRECEIVER\tNEW STATE")
	if err := demoSteps(ctx, tw, q, in, 0); err != nil {
		return err
	}
	tw.Flush()
	fmt.Fprintln(out)
	if err := demoTable(ctx, out, q); err != nil {
		return err
	}

	qs, err := q.Quarantined(ctx, 10)
	if err != nil {
		return err
	}
	if len(qs) != 1 {
		return fmt.Errorf("demo: expected one quarantined event, found %d", len(qs))
	}
	reason := "receiver upgraded to accept large deltas"
	r, err := q.Redrive(ctx, fairrelay.RedriveParams{EventID: qs[0].ID, ExpectedGeneration: qs[0].Generation, Reason: reason, Operator: "demo", At: 1})
	if err != nil {
		return err
	}
	in.SetMaxDelta(1000)
	fmt.Fprintf(out, "\nRedrive %s at tick 1 (%q): %s, generation %d. The receiver now supports deltas up to 1000.\n\n", qs[0].ID, reason, r.Status, r.Generation)
	fmt.Fprintln(tw, "TICK\tTICKET\tEVENT\tRECEIVER\tNEW STATE")
	if err := demoSteps(ctx, tw, q, in, 2); err != nil {
		return err
	}
	tw.Flush()
	fmt.Fprintln(out)
	if err := demoTable(ctx, out, q); err != nil {
		return err
	}
	is, err := in.Snapshot(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "\nReceiver projection (one receipt and one effect per event):")
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FLOW\tSEQ\tTOTAL")
	for _, p := range is.Projection {
		fmt.Fprintf(tw, "%s\t%d\t%d\n", p.Flow, p.Seq, p.Total)
	}
	return tw.Flush()
}

// demoSteps claims, delivers and settles at tick at until nothing is
// eligible, printing one timeline row per claim.
func demoSteps(ctx context.Context, w io.Writer, q *fairrelay.Queue, in *inbox.Inbox, at int64) error {
	for {
		c, err := q.Claim(ctx, at)
		if err != nil || c == nil {
			return err
		}
		o, err := in.Receive(ctx, inbox.Delivery{EventID: c.Token.EventID, Flow: c.Flow, Seq: c.Seq, Body: c.Body})
		if err != nil {
			return err
		}
		s, err := q.Settle(ctx, c.Token, o, at)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%d\t%d\t%s\t%s\t%s\n", at, c.Ticket, c.Token.EventID, o, s.Status)
	}
}

func demoTable(ctx context.Context, out io.Writer, q *fairrelay.Queue) error {
	s, err := q.Snapshot(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "EVENT\tFLOW\tSEQ\tSTATE\tGENERATION\tLIFETIME ATTEMPTS\tREASON")
	for _, e := range s.Events {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%s\n", e.ID, e.Flow, e.Seq, e.State, e.Generation, e.LifetimeAttempts, deref(e.Reason))
	}
	return tw.Flush()
}
