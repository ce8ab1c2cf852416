package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/cmd/fairrelay/internal/script"
)

// runBulkEnqueue is enqueue without --id: JSON lines from stdin. at is
// --at when given, else the stored tick (fairrelay.AtStored).
func runBulkEnqueue(cmd *cobra.Command, queue string, pol fairrelay.Policy, pf *policyFlags, at int64) error {
	for _, name := range []string{"flow", "body", "delta"} {
		if cmd.Flags().Changed(name) {
			return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: name, Message: "give --id too, or put it in the stdin lines"}
		}
	}
	q, err := openQueue(cmd.Context(), queue, pol, pf)
	if err != nil {
		return err
	}
	defer q.Close()
	failed, total, err := bulkEnqueue(cmd.Context(), q, cmd.InOrStdin(), cmd.OutOrStdout(), at)
	if err != nil {
		return err
	}
	if failed > 0 {
		return &exitError{code: 1, err: fmt.Errorf("enqueue: %d of %d lines failed or conflicted (see their answers)", failed, total)}
	}
	return nil
}

// bulkBatch is how many lines share one transaction (one fsync).
const bulkBatch = 500

// bulkEnqueue reads JSON lines {"id", "flow", "body" | "delta"} from r and
// enqueues them in batched transactions, printing one JSON answer per
// non-blank line, in order, each with its "line" number and "id": the
// enqueue answer, or {"error": code, "field", "message"} for a line that
// cannot be enqueued (the others go on). It returns how many lines failed
// and how many it read; a database error stops the run and is returned.
func bulkEnqueue(ctx context.Context, q *fairrelay.Queue, r io.Reader, w io.Writer, at int64) (failed, total int, err error) {
	br := bufio.NewReaderSize(r, 64<<10)
	out := bufio.NewWriter(w)
	defer out.Flush()
	type pending struct {
		line   int
		id     string
		answer script.Result // nil: filled from the batch
	}
	var (
		batch   []fairrelay.NewEvent
		answers []pending
	)
	flush := func() error {
		rs, err := enqueueBatch(ctx, q, batch, at)
		if err != nil {
			return err
		}
		k := 0
		for _, a := range answers {
			if a.answer == nil {
				a.answer, k = rs[k], k+1
			}
			if _, bad := a.answer["error"]; bad || a.answer["status"] == string(fairrelay.EnqueueConflict) {
				failed++
			}
			a.answer["line"] = a.line
			if a.id != "" {
				a.answer["id"] = a.id
			}
			if err := printJSON(out, a.answer); err != nil {
				return err
			}
		}
		batch, answers = batch[:0], answers[:0]
		return out.Flush()
	}
	for line := 1; ; line++ {
		b, tooLong, rerr := script.ReadLine(br, script.MaxLineBytes)
		if rerr != nil && rerr != io.EOF {
			return failed, total, fmt.Errorf("read stdin: %w", rerr)
		}
		switch {
		case tooLong:
			total++
			answers = append(answers, pending{line: line, answer: script.ErrorResult(&fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "line", Message: fmt.Sprintf("longer than %d bytes; skipped", script.MaxLineBytes)})})
		case len(bytes.TrimSpace(b)) > 0:
			total++
			p, err := parseBulkLine(bytes.TrimSpace(b))
			if err != nil {
				answers = append(answers, pending{line: line, id: p.ID, answer: script.ErrorResult(err)})
			} else {
				batch = append(batch, p)
				answers = append(answers, pending{line: line, id: p.ID})
			}
		}
		if len(answers) >= bulkBatch || rerr == io.EOF {
			if err := flush(); err != nil {
				return failed, total, err
			}
		}
		if rerr == io.EOF {
			return failed, total, nil
		}
	}
}

// parseBulkLine reads one line as strictly as a script line: exact field
// names (id, flow, body, delta), no duplicates, no nulls, valid text.
func parseBulkLine(b []byte) (fairrelay.NewEvent, error) {
	var p fairrelay.NewEvent
	members, err := script.Members(b)
	if err != nil {
		return p, err
	}
	var body, delta json.RawMessage
	for _, m := range members {
		switch m.Key {
		case "id", "flow":
			var v string
			if err := json.Unmarshal(m.Value, &v); err != nil {
				return p, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: m.Key, Message: "must be a string"}
			}
			if m.Key == "id" {
				p.ID = v
			} else {
				p.Flow = v
			}
		case "body":
			body = m.Value
		case "delta":
			delta = m.Value
		default:
			return p, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: m.Key, Message: "unknown field (a line holds id, flow and body or delta)"}
		}
	}
	if p.Body, err = script.Body(delta, body); err != nil {
		return p, err
	}
	return p, nil
}

// enqueueBatch enqueues ps in one transaction and answers each. When the
// batch fails on one bad item, every item is enqueued on its own so the bad
// ones answer an error and the others still go in.
func enqueueBatch(ctx context.Context, q *fairrelay.Queue, ps []fairrelay.NewEvent, at int64) ([]script.Result, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	out := make([]script.Result, len(ps))
	rs, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: at, Events: ps})
	if err == nil {
		for i, r := range rs {
			out[i] = script.EnqueueResult(r)
		}
		return out, nil
	}
	if !errors.Is(err, fairrelay.ErrInvalidInput) {
		return nil, err
	}
	for i, p := range ps {
		r, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: p.ID, Flow: p.Flow, Body: p.Body, At: at})
		switch {
		case err == nil:
			out[i] = script.EnqueueResult(r)
		case errors.Is(err, fairrelay.ErrInvalidInput):
			out[i] = script.ErrorResult(err)
		default:
			return nil, err
		}
	}
	return out, nil
}
