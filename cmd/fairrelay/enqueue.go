package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/cmd/fairrelay/internal/script"
)

func init() { rootCmd.AddCommand(newEnqueueCmd()) }

func newEnqueueCmd() *cobra.Command {
	var queue, id, flow, group, body, delta string
	var at int64
	var retryFor time.Duration
	var pf policyFlags
	cmd := &cobra.Command{
		Use:   "enqueue --queue Q --id ID --flow FLOW [--group G] (--body JSON | --delta N) [--at TICK]  |  enqueue --queue Q [--at TICK] < events.jsonl",
		Short: "Enqueue one event, or JSON lines from stdin without --id (SPEC §2), printing the answers as JSON",
		Long: `Enqueue one event. The body is JSON (stored compact, keys sorted);
--delta N is shorthand for --body '{"delta":N}'. Prints {"status":"created","seq":N},
existing, conflict, or {"status":"full","limit":"store"|"group"|"flow"} when a
backlog limit refuses a new event (SPEC §8; see fairrelay configure), like the
script op. --group names the tenant the flow belongs to; the enqueue that
creates a flow fixes it.

Without --id it reads JSON lines {"id": …, "flow": …, "body": …} (or "delta",
and optionally "group")
from stdin and answers one JSON line each, at --at or by default at the stored
tick (so it can run beside a relay). The lines already waiting go in one
transaction (up to 500); when the input pauses, what came is committed and
answered at once (tail -f events | fairrelay enqueue). Once a line of a flow
fails, conflicts or is full, that flow's later lines are refused, so a rerun
of the fixed input keeps each flow's order.

A store that answers busy or fails (a restart, a lost connection, a lock
held by a stopped process) is tried again for up to --retry-for (default 1m;
0: stop at once), saying so on stderr; a retried line already stored answers
existing.

Exit codes: 0 applied (created or existing), 1 nothing applied (conflict,
full, or a bulk line failed or was refused), 2 an error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pol, err := pf.policy()
			if err != nil {
				return err
			}
			if retryFor < 0 {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "retry-for", Message: fmt.Sprintf("must not be negative (0: stop at the first busy or database error), got %s", retryFor)}
			}
			retry := &storeRetry{within: retryFor, out: cmd.ErrOrStderr(), what: "enqueue"}
			if !cmd.Flags().Changed("id") {
				return runBulkEnqueue(cmd, queue, pol, &pf, atFlag(cmd, at), retry)
			}
			var d, b json.RawMessage
			if cmd.Flags().Changed("delta") {
				d = json.RawMessage(delta)
			}
			if cmd.Flags().Changed("body") {
				b = json.RawMessage(body)
			}
			at := atFlag(cmd, at)
			payload, err := enqueueBody(d, b)
			if err != nil {
				return err // after the clock's answer: clockBeforeFields
			}
			ep := fairrelay.EnqueueParams{ID: id, Flow: flow, Group: group, Body: payload, At: at}
			q, err := openEnqueueQueue(cmd, queue, pol, &pf, func(scratch *fairrelay.Queue) error {
				_, err := scratch.Enqueue(cmd.Context(), ep)
				return err
			})
			if err != nil {
				return err
			}
			defer q.Close()
			var r fairrelay.EnqueueResult
			if err := retry.do(cmd.Context(), func() (err error) {
				r, err = q.Enqueue(cmd.Context(), ep)
				return err
			}); err != nil {
				return err
			}
			if err := printJSON(cmd.OutOrStdout(), script.EnqueueResult(r)); err != nil {
				return err
			}
			switch r.Status {
			case fairrelay.EnqueueConflict:
				return notApplied("enqueue: id %q is stored with another flow or body (conflict); nothing was written", id)
			case fairrelay.EnqueueFull:
				return notApplied("enqueue: the %s backlog limit is reached (full); nothing was written: wait for the relay, or raise the limit with fairrelay configure", r.Limit)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&queue, "queue", "", "queue store: a SQLite file path or a postgres:// URL")
	f.StringVar(&id, "id", "", "event id (1 to 200 bytes of UTF-8)")
	f.StringVar(&flow, "flow", "", "flow id, the ordering key (1 to 200 bytes of UTF-8)")
	f.StringVar(&group, "group", "", "the flow's group, its tenant (SPEC §8; default: the flow's own)")
	f.StringVar(&body, "body", "", "event body, JSON")
	f.StringVar(&delta, "delta", "", `shorthand for --body '{"delta":N}', N a positive integer`)
	f.Int64Var(&at, "at", 0, atUsage)
	f.DurationVar(&retryFor, "retry-for", time.Minute, "how long to try again while the store answers busy or fails (a restart, a lost connection, a lock held by a stopped process); 0 stops at the first such error")
	pf.registerAdmin(cmd)
	return cmd
}

// enqueueBody is script.Body (the script's fields delta and body) for the
// flags: its messages name --body and --delta, and a --body that is not
// JSON says so before the parser's words.
func enqueueBody(delta, body json.RawMessage) ([]byte, error) {
	payload, err := script.Body(delta, body)
	var fe *fairrelay.Error
	if err == nil || !errors.As(err, &fe) {
		return payload, err
	}
	named := *fe
	switch {
	case delta != nil && body != nil:
		named.Message = "give --delta or --body, not both"
	case delta == nil && body == nil:
		named.Message = "missing: give --body or --delta"
	case body != nil && !json.Valid(body):
		named.Message = "not JSON (the command takes JSON bodies; the library and the SQL function take any bytes): " + fe.Message
	}
	return nil, &named
}

// openEnqueueQueue opens enqueue's queue store, creating a missing SQLite
// file (the first enqueue makes the store; a PostgreSQL schema without one
// is refused: openQueueCreating), and then says so on stderr: a
// misspelt --queue would otherwise fill a new, empty store that no relay
// reads, in silence (relay and receive warn likewise).
//
// rehearse, when not nil, is the command's write, run first on a scratch
// store when the store would be created (openQueueCreating): a refused
// enqueue then creates nothing.
func openEnqueueQueue(cmd *cobra.Command, queue string, pol fairrelay.Policy, pf *policyFlags, rehearse func(*fairrelay.Queue) error) (*fairrelay.Queue, error) {
	q, created, err := openQueueCreating(cmd.Context(), queue, pol, pf, rehearse, false)
	if err != nil {
		return nil, err
	}
	if created != "" {
		fmt.Fprintf(cmd.ErrOrStderr(), "fairrelay: the queue store %s %s; if --queue is misspelt, remove it\n", redactDSN(queue), created)
	}
	return q, nil
}
