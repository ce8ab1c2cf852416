package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/script"
)

// runBulkEnqueue is enqueue without --id: JSON lines from stdin. at is
// --at when given, else the stored tick.
func runBulkEnqueue(cmd *cobra.Command, queue string, pol fairrelay.Policy, at int64) error {
	if !cmd.Flags().Changed("at") {
		at = -1
	}
	for _, name := range []string{"flow", "body", "delta"} {
		if cmd.Flags().Changed(name) {
			return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: name, Message: "give --id too, or put it in the stdin lines"}
		}
	}
	q, err := openQueue(cmd.Context(), queue, pol)
	if err != nil {
		return err
	}
	defer q.Close()
	return bulkEnqueue(cmd.Context(), q, cmd.InOrStdin(), cmd.OutOrStdout(), at)
}

// bulkBatch is how many lines share one transaction (one fsync).
const bulkBatch = 500

// bulkLine is one line of bulk enqueue input.
type bulkLine struct {
	ID    string          `json:"id"`
	Flow  string          `json:"flow"`
	Body  json.RawMessage `json:"body"`
	Delta json.RawMessage `json:"delta"`
}

// bulkEnqueue reads JSON lines {"id", "flow", "body" | "delta"} from r and
// enqueues them in batched transactions, printing one JSON answer per line
// in order: the enqueue answer, or {"error": code, "field", "message"} for a
// line that cannot be enqueued (the others go on). at < 0 means "at the
// stored tick", read before each batch, so a running relay's clock is never
// contradicted. A database error stops the run and is returned.
func bulkEnqueue(ctx context.Context, q *fairrelay.Queue, r io.Reader, w io.Writer, at int64) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 2<<20) // a line holds a body of up to 1 MiB, escaped
	out := bufio.NewWriter(w)
	defer out.Flush()
	var (
		batch   []fairrelay.EnqueueParams
		answers []any // per line: nil (to fill from the batch) or an error line
	)
	flush := func() error {
		rs, err := enqueueBatch(ctx, q, batch, at)
		if err != nil {
			return err
		}
		k := 0
		for _, a := range answers {
			if a == nil {
				a, k = rs[k], k+1
			}
			if err := printJSON(out, a); err != nil {
				return err
			}
		}
		batch, answers = batch[:0], answers[:0]
		return out.Flush()
	}
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		p, err := parseBulkLine(sc.Bytes())
		if err != nil {
			answers = append(answers, script.ErrorResult(err))
		} else {
			batch = append(batch, p)
			answers = append(answers, nil)
		}
		if len(answers) >= bulkBatch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read stdin: %w", err)
	}
	return flush()
}

func parseBulkLine(b []byte) (fairrelay.EnqueueParams, error) {
	var l bulkLine
	if err := json.Unmarshal(b, &l); err != nil {
		return fairrelay.EnqueueParams{}, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "line", Message: "not a JSON object: " + err.Error()}
	}
	body, err := script.Body(l.Delta, l.Body)
	if err != nil {
		return fairrelay.EnqueueParams{}, err
	}
	return fairrelay.EnqueueParams{ID: l.ID, Flow: l.Flow, Body: body}, nil
}

// enqueueBatch enqueues ps in one transaction and answers each. When the
// batch fails on one bad item, every item is enqueued on its own so the bad
// ones answer an error and the others still go in.
func enqueueBatch(ctx context.Context, q *fairrelay.Queue, ps []fairrelay.EnqueueParams, at int64) ([]any, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	var rs []fairrelay.EnqueueResult
	err := atTick(ctx, q, at, func(at int64) (err error) {
		rs, err = q.EnqueueBatch(ctx, at, ps)
		return err
	})
	out := make([]any, len(ps))
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
		var r fairrelay.EnqueueResult
		err := atTick(ctx, q, at, func(at int64) (err error) {
			p.At = at
			r, err = q.Enqueue(ctx, p)
			return err
		})
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

// atTick runs fn at the given tick, or (at < 0) at the stored tick, read
// again and retried a few times when another writer moved it on meanwhile.
func atTick(ctx context.Context, q *fairrelay.Queue, at int64, fn func(at int64) error) error {
	if at >= 0 {
		return fn(at)
	}
	for i := 0; ; i++ {
		c, err := q.Clock(ctx)
		if err != nil {
			return err
		}
		err = fn(c.Tick)
		if !errors.Is(err, fairrelay.ErrClockRegressed) || i == 10 {
			return err
		}
	}
}
