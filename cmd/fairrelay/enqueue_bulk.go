package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/spf13/cobra"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/cmd/fairrelay/internal/script"
	"github.com/fairrelay/fairrelay/internal/jsontext"
)

// runBulkEnqueue is enqueue without --id: JSON lines from stdin. at is
// --at when given, else the stored tick (fairrelay.AtStored).
func runBulkEnqueue(cmd *cobra.Command, queue string, pol fairrelay.Policy, pf *policyFlags, at int64, retry *storeRetry) error {
	// A flag that applies to one event is refused, not ignored: --group
	// ignored would put every new flow in its own group for good.
	for _, name := range []string{"flow", "group", "body", "delta"} {
		if cmd.Flags().Changed(name) {
			// The field missing is --id: the flag given is right for one
			// event (a fresh user read "flow: give --id too" as --flow at
			// fault).
			return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "id",
				Message: "missing: --" + name + " is for one event, which needs --id too; or leave --" + name + " out and give the events as JSON lines on stdin (\"" + name + "\": …)"}
		}
	}
	if err := checkStdin(cmd.InOrStdin()); err != nil {
		return err
	}
	// --at is the command's tick, checked once before any line, as a
	// single enqueue checks it: one the store refuses (behind it, or
	// further ahead than --max-tick-jump) is exit 2 with nothing made or
	// read, not a refusal of every line with exit 1 and a new store left
	// behind (a breaker's report).
	var checkAt func(*fairrelay.Queue) error
	if at != fairrelay.AtStored {
		checkAt = func(s *fairrelay.Queue) error { return s.CheckTick(cmd.Context(), "enqueue", at, false) }
	}
	q, err := openEnqueueQueue(cmd, queue, pol, pf, checkAt)
	if err != nil {
		return err
	}
	defer q.Close()
	if checkAt != nil {
		if err := checkAt(q); err != nil {
			return err
		}
	}
	rep, err := bulkEnqueue(cmd.Context(), q, cmd.InOrStdin(), cmd.OutOrStdout(), at, retry)
	if err != nil {
		return stoppedAfter(err, rep)
	}
	if rep.failed > 0 {
		return notApplied("enqueue: %d of %d lines failed, conflicted or were refused (see their answers)", rep.failed, rep.total)
	}
	return nil
}

// bulkBatch is the most lines one transaction (one fsync) takes.
const bulkBatch = 500

// codeRefused is the error code of a line refused because an earlier line
// of its flow failed.
const codeRefused fairrelay.Code = "refused"

// inputLine is one line of stdin as the reader hands it over.
type inputLine struct {
	no      int
	text    []byte
	tooLong bool
}

// readLines sends the lines of r to the channel it returns, numbered from
// 1, and closes it at the end of r; a read error other than EOF is sent on
// errc. It runs until r ends: stdin has no deadline to stop a read.
func readLines(r io.Reader) (<-chan inputLine, <-chan error) {
	lines, errc := make(chan inputLine, bulkBatch), make(chan error, 1)
	go func() {
		defer close(lines)
		br := bufio.NewReaderSize(r, 64<<10)
		if err := script.SkipByteOrderMark(br); err != nil {
			errc <- err
			return
		}
		for no := 1; ; no++ {
			b, tooLong, err := script.ReadLine(br, script.MaxLineBytes)
			if err != nil && err != io.EOF {
				errc <- fmt.Errorf("read stdin: %w", err)
				return
			}
			if tooLong || len(bytes.TrimSpace(b)) > 0 {
				lines <- inputLine{no: no, text: bytes.Clone(bytes.TrimSpace(b)), tooLong: tooLong}
			}
			if err == io.EOF {
				return
			}
		}
	}()
	return lines, errc
}

// bulkEnqueue reads JSON lines {"id", "flow", "body" | "delta"} from r and
// enqueues them, printing one JSON answer per non-blank line, in order,
// each with its "line" number and "id": the enqueue answer, or
// {"error": code, "field", "message"} for a line that cannot be enqueued
// (the others go on). It reports how many lines it read, how many failed
// and how many transactions it wrote; a database error stops the run and
// is returned.
//
// Order: once a line of a flow fails (an error or a conflict), every later
// line of that flow is refused (code "refused", naming the failed line), so
// that a rerun of the fixed input stores the flow in the input's order (the
// lines already stored answer existing). A line whose flow cannot be read
// at all refuses every later line.
//
// Batching: the lines that are already there go in one transaction (up to
// bulkBatch); as soon as no further line is waiting, the batch is
// committed and answered, so `tail -f events | fairrelay enqueue` commits
// each line within milliseconds while a file streams in large batches.
func bulkEnqueue(ctx context.Context, q *fairrelay.Queue, r io.Reader, w io.Writer, at int64, retry *storeRetry) (bulkReport, error) {
	out := bufio.NewWriter(w)
	defer out.Flush()
	b := &bulk{ctx: ctx, q: q, at: at, out: out, failedFlows: map[string]int{}, groups: map[string]string{}, maxBody: q.Policy().MaxBodyBytes, retry: retry}
	lines, errc := readLines(r)
	ok := true
	for ok || len(b.answers) > 0 {
		var l inputLine
		if len(b.answers) == 0 {
			// Wait for the first line of a batch…
			select {
			case l, ok = <-lines:
			case <-ctx.Done():
				return b.bulkReport, ctx.Err()
			}
			if !ok {
				break
			}
			b.add(l)
			if b.stop != nil {
				return b.bulkReport, b.stop
			}
		}
		// …then take what is already there, without waiting, until the
		// batch is full or a line must go in the next one (cut).
	more:
		for ok && len(b.answers) < bulkBatch && b.cut == 0 {
			select {
			case l, ok = <-lines:
				if !ok {
					break more
				}
				b.add(l)
				if b.stop != nil {
					return b.bulkReport, b.stop
				}
			default:
				break more
			}
		}
		if err := b.flush(ctx); err != nil {
			return b.bulkReport, err
		}
	}
	select {
	case err := <-errc:
		return b.bulkReport, err
	default:
	}
	return b.bulkReport, b.flush(ctx)
}

// bulkReport counts what a bulk enqueue did.
type bulkReport struct {
	total        int // non-blank lines read
	failed       int // lines that failed, conflicted or were refused
	transactions int // EnqueueMany calls
	answered     int // lines answered on stdout (their batches committed)
}

// stoppedAfter is err, which stopped a bulk enqueue, saying what the run
// had done by then: the batches answered on stdout are committed, so the
// error's own "nothing was changed" holds for the batch it stopped only (an
// SRE's report: a bulk run stopped by a busy store after hundreds of
// created answers said nothing had changed). The code stays err's (exit 2).
//
// When the connection failed after the stopped batch's COMMIT was sent
// (ErrCommitUnknown), its lines may be stored: the message says so rather
// than that they were not (a breaker's report: they were).
func stoppedAfter(err error, rep bulkReport) error {
	if errors.Is(err, context.Canceled) && rep.answered == rep.total {
		// A signal while it waited for input, every line read answered:
		// the end of a `tail -f | fairrelay enqueue`, where "the lines
		// after them" and "run the whole input again" sent the operator
		// looking for lines that were never read.
		if rep.answered == 0 {
			return errors.New("enqueue stopped by a signal before it read a line: nothing was enqueued")
		}
		return fmt.Errorf("enqueue stopped by a signal after %d lines, each answered above and kept as answered, while it waited for the next line: a line not answered above was not read, and not enqueued (give it again; a line given again answers existing)", rep.answered)
	}
	if rep.answered == 0 {
		return err
	}
	rest := "the lines after them were not enqueued"
	if errors.Is(err, fairrelay.ErrCommitUnknown) {
		rest = "the connection failed once the next batch's commit was sent, so its lines may or may not be stored, and the lines after it were not enqueued"
	}
	done := fmt.Sprintf("enqueue stopped after %d lines, answered above and kept as answered; %s: run the whole input again (the stored lines answer existing)", rep.answered, rest)
	var fe *fairrelay.Error
	if !errors.As(err, &fe) {
		return fmt.Errorf("%s: %w", done, err)
	}
	named := *fe
	named.Message = done + "; " + cmp.Or(fe.Message, "error")
	return &named
}

// bulk is the state of one bulk enqueue.
type bulk struct {
	ctx     context.Context
	q       *fairrelay.Queue
	at      int64
	out     *bufio.Writer
	maxBody int
	// failedFlows maps a flow to the line of its first failure; unknownAt
	// is the first line whose flow could not be read (0: none).
	failedFlows map[string]int
	unknownAt   int
	// The batch: answers in input order, items to enqueue.
	answers []*bulkAnswer
	// groups maps each flow of the batch's items to the group its first
	// item names ("": none). cut, when not 0, is the index in answers of
	// the first item that names another group for its flow than an
	// earlier item of the batch: it and the lines after it go in the next
	// transaction. In one transaction the library weighs each event
	// apart, and an event naming another group is counted there: after
	// the earlier item answered full in its group, the later one could be
	// stored, overtaking it (a breaker's report). In the next transaction
	// it is refused as a later line of a failed flow.
	groups map[string]string
	cut    int
	// stop, when set, is the database error that stops the run before
	// the line being added is answered (tickFirst).
	stop error
	// retry tries the store's calls again while they fail for a while
	// (storeRetry).
	retry *storeRetry
	bulkReport
}

// bulkAnswer is one line's answer; item is set for a line to enqueue.
type bulkAnswer struct {
	line   int
	id     string
	flow   string
	item   *fairrelay.EnqueueParams
	answer script.Result
}

// add parses one line into the batch: an item to enqueue, or its answer.
func (b *bulk) add(l inputLine) {
	b.total++
	a := &bulkAnswer{line: l.no}
	b.answers = append(b.answers, a)
	if l.tooLong {
		a.answer = script.ErrorResult(b.tickFirst(&fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "line", Message: fmt.Sprintf("longer than %d bytes; skipped", script.MaxLineBytes)}))
		b.fail(a, false)
		return
	}
	flow, flowKnown := lineFlow(l.text)
	a.flow = flow
	p, err := parseBulkLine(l.text)
	a.id = p.ID
	switch {
	case b.unknownAt != 0:
		msg := fmt.Sprintf("line %d could not be read, so its flow is unknown and every later line is refused (a flow's later line must not overtake it): fix line %d and run the whole input again (lines already stored answer existing)", b.unknownAt, b.unknownAt)
		if err == nil {
			err = b.check(p)
		}
		if err != nil {
			// Its own fault too, so that one run shows every line to fix
			// (a fresh user fixed line 4 only to meet line 5's).
			msg += "; this line is also invalid: " + err.Error()
		}
		a.answer = refusal("line", msg)
		b.failed++
		return
	}
	// A later line of a flow whose earlier line failed is kept to the
	// flush, which refuses it unless it is stored already (existing):
	// the same answer whether the failed line was in this batch or an
	// earlier one (predictConflicts).
	if err == nil {
		err = b.check(p)
	}
	if err != nil && flowKnown && b.failedFlows[flow] != 0 {
		n := b.failedFlows[flow]
		a.answer = flowRefusal(n, flow)
		b.failed++
		return
	}
	if err != nil {
		a.answer = script.ErrorResult(b.tickFirst(err))
		b.fail(a, flowKnown)
		return
	}
	a.item = &p
	b.group(len(b.answers)-1, a)
}

// group records the group of the batch's item at index i, or sets cut
// there when an earlier item of its flow in the batch names another.
func (b *bulk) group(i int, a *bulkAnswer) {
	if b.cut != 0 {
		return
	}
	if g, seen := b.groups[a.flow]; !seen {
		b.groups[a.flow] = a.item.Group
	} else if g != a.item.Group {
		b.cut = i
	}
}

// tickFirst returns the clock's answer to an enqueue at the command's
// --at, when it has one, else err: a line's bad field comes after
// clock_regressed and max_tick_jump, as in every write (SPEC §2 order).
// Without --at the enqueue is at the stored tick, which the clock allows.
// A read of the clock that fails (busy, a database error) is no answer of
// the line's: it stops the run (b.stop), as a failed batch does, and err
// is returned for the line, which is then not answered.
func (b *bulk) tickFirst(err error) error {
	if b.at == fairrelay.AtStored {
		return err
	}
	terr := b.q.CheckTick(b.ctx, "enqueue", b.at, false)
	switch {
	case terr == nil:
		return err
	case errors.Is(terr, fairrelay.ErrClockRegressed), errors.Is(terr, fairrelay.ErrInvalidInput):
		return terr
	}
	if b.stop == nil {
		b.stop = terr
	}
	return err
}

// check applies what Queue.EnqueueMany would refuse of one item, so that
// one bad line never fails the batch of the others.
func (b *bulk) check(p fairrelay.EnqueueParams) error {
	if err := fairrelay.CheckID("id", p.ID); err != nil {
		return err
	}
	if err := fairrelay.CheckID("flow", p.Flow); err != nil {
		return err
	}
	if p.Group != "" {
		if err := fairrelay.CheckID("group", p.Group); err != nil {
			return err
		}
	}
	if len(p.Body) > b.maxBody {
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "body", Message: fmt.Sprintf("%d bytes, more than the limit of %d", len(p.Body), b.maxBody)}
	}
	return nil
}

// fail counts a failed line and makes its flow's later lines refused — or
// every later line, when its flow is unknown.
func (b *bulk) fail(a *bulkAnswer, flowKnown bool) {
	b.failed++
	switch {
	case !flowKnown:
		if b.unknownAt == 0 {
			b.unknownAt = a.line
		}
	case b.failedFlows[a.flow] == 0:
		b.failedFlows[a.flow] = a.line
	}
}

func refusal(field, msg string) script.Result {
	return script.ErrorResult(&fairrelay.Error{Code: codeRefused, Field: field, Message: msg})
}

// flowRefusal is the answer to a later line of flow, whose line n failed.
func flowRefusal(n int, flow string) script.Result {
	return refusal("flow", fmt.Sprintf("line %d of flow %q failed, and a flow's later line must not overtake it: fix line %d and run the whole input again (lines already stored answer existing)", n, flow, n))
}

// flush enqueues the batch's items in one transaction and prints every
// answer of the batch in input order.
func (b *bulk) flush(ctx context.Context) error {
	if len(b.answers) == 0 {
		return nil
	}
	// The lines from cut on wait for the next transaction.
	var rest []*bulkAnswer
	if b.cut != 0 {
		rest = slices.Clone(b.answers[b.cut:])
		b.answers = b.answers[:b.cut]
	}
	b.cut = 0
	clear(b.groups)
	if err := b.predictConflicts(ctx); err != nil {
		return err
	}
	var items []fairrelay.EnqueueParams
	for _, a := range b.answers {
		if a.item != nil {
			items = append(items, *a.item)
		}
	}
	var rs []script.Result
	if err := b.retry.do(ctx, func() (err error) {
		rs, err = enqueueBatch(ctx, b.q, items, b.at)
		return err
	}); err != nil {
		return err
	}
	if len(items) > 0 {
		b.transactions++
	}
	k := 0
	for _, a := range b.answers {
		if a.item != nil {
			a.answer, k = rs[k], k+1
			n := b.failedFlows[a.flow]
			_, bad := a.answer["error"]
			switch status := a.answer["status"]; {
			case n != 0 && n < a.line && (bad || status == string(fairrelay.EnqueueConflict) || status == string(fairrelay.EnqueueFull)):
				// Not written, after an earlier line of its flow failed in
				// this batch: refused, as the flow's later lines of the
				// next batches will be.
				a.answer = flowRefusal(n, a.flow)
				b.failed++
			case bad || status == string(fairrelay.EnqueueConflict) || status == string(fairrelay.EnqueueFull):
				b.fail(a, true)
			case n != 0 && n < a.line && status == string(fairrelay.EnqueueCreated):
				// Only a writer beside this one gets here: line n looked
				// safe when the batch was built, then conflicted in it.
				a.answer["warning"] = fmt.Sprintf("stored after line %d of this flow conflicted in the same transaction (another writer stored its id meanwhile): fix line %d and check this flow's order", n, n)
				b.failed++
			}
			// existing after a failed line: stored before, nothing written
			// now, nothing overtaken.
		}
		b.answered++
		a.answer["line"] = a.line
		if a.id != "" {
			a.answer["id"] = a.id
		}
		if err := printJSON(b.out, a.answer); err != nil {
			return err
		}
	}
	b.answers = append(b.answers[:0], rest...)
	for i, a := range b.answers {
		if a.item != nil {
			b.group(i, a)
		}
	}
	return b.out.Flush()
}

// predictConflicts finds, before the batch is written, the items that will
// answer conflict while a later item of their flow is in the same batch —
// one transaction, where the later item would be stored although its
// flow's earlier line failed. It reads the stored event of each such id
// (and looks at the batch's own earlier items); a predicted conflict fails
// its flow, and the later items of the flow are refused instead of written.
func (b *bulk) predictConflicts(ctx context.Context) error {
	last := map[string]int{} // flow → index of its last item in the batch
	for i, a := range b.answers {
		if a.item != nil {
			last[a.flow] = i
		}
	}
	earlier := map[string]*fairrelay.EnqueueParams{} // id → its first item in the batch
	for i, a := range b.answers {
		if a.item == nil {
			continue
		}
		if n := b.failedFlows[a.flow]; n != 0 && n < a.line {
			// Stored already with this flow and body: the batch answers
			// existing and writes nothing, as it does when the failed line
			// is in the same batch. Else refused.
			e, err := b.event(ctx, a.item.ID)
			switch {
			case errors.Is(err, fairrelay.ErrNotFound):
			case err != nil:
				return err
			case e.Flow == a.item.Flow && bytes.Equal(e.Body, a.item.Body):
				continue
			}
			a.item = nil
			a.answer = flowRefusal(n, a.flow)
			b.failed++
			continue
		}
		p := a.item
		first, seen := earlier[p.ID]
		if !seen {
			earlier[p.ID] = p
		}
		if last[a.flow] == i {
			continue // no later item of its flow in this batch
		}
		conflict := seen && (first.Flow != p.Flow || !bytes.Equal(first.Body, p.Body))
		if !seen {
			e, err := b.event(ctx, p.ID)
			switch {
			case errors.Is(err, fairrelay.ErrNotFound):
			case err != nil:
				return err
			default:
				conflict = e.Flow != p.Flow || !bytes.Equal(e.Body, p.Body)
			}
		}
		if conflict {
			b.failedFlows[a.flow] = a.line // its own answer, conflict, comes from the batch
		}
	}
	return nil
}

// event is Queue.Event under b.retry.
func (b *bulk) event(ctx context.Context, id string) (e *fairrelay.EventRecord, err error) {
	err = b.retry.do(ctx, func() error {
		e, err = b.q.Event(ctx, id)
		return err
	})
	return e, err
}

// lineFlow returns the flow a line names, when it is one JSON object with
// one "flow" member holding a string of valid text — also when the line
// fails for another reason.
func lineFlow(line []byte) (string, bool) {
	members, err := jsontext.Object(line)
	if err != nil {
		return "", false
	}
	for _, m := range members {
		if m.Key != "flow" {
			continue
		}
		var flow string
		if !jsontext.ValidText(m.Value) || json.Unmarshal(m.Value, &flow) != nil {
			return "", false
		}
		return flow, true
	}
	return "", false
}

// parseBulkLine reads one line as strictly as a script line: exact field
// names (id, flow, body, delta), no duplicates, no nulls, valid text.
func parseBulkLine(b []byte) (fairrelay.EnqueueParams, error) {
	var p fairrelay.EnqueueParams
	members, err := script.Members(b)
	if err != nil {
		return p, err
	}
	var body, delta json.RawMessage
	for _, m := range members {
		switch m.Key {
		case "id", "flow", "group":
			var v string
			if err := json.Unmarshal(m.Value, &v); err != nil {
				return p, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: m.Key, Message: "must be a string"}
			}
			switch m.Key {
			case "id":
				p.ID = v
			case "flow":
				p.Flow = v
			default:
				if v == "" {
					return p, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "group", Message: "empty"}
				}
				p.Group = v
			}
		case "body":
			body = m.Value
		case "delta":
			delta = m.Value
		default:
			return p, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: m.Key, Message: "unknown field (a line holds id, flow, body or delta, and optionally group)"}
		}
	}
	if p.Body, err = script.Body(delta, body); err != nil {
		return p, err
	}
	return p, nil
}

// enqueueBatch enqueues ps in one transaction and answers each. When the
// batch fails on bad input (which bulk.check leaves to the tick), every
// item is enqueued on its own, in order, so the bad ones answer an error
// and the others still go in — except the later items of a flow whose item
// failed, which are refused.
func enqueueBatch(ctx context.Context, q *fairrelay.Queue, ps []fairrelay.EnqueueParams, at int64) ([]script.Result, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	out := make([]script.Result, len(ps))
	evs := make([]fairrelay.NewEvent, len(ps))
	for i, p := range ps {
		evs[i] = fairrelay.NewEvent{ID: p.ID, Flow: p.Flow, Group: p.Group, Body: p.Body}
	}
	rs, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: at, Events: evs})
	if err == nil {
		for i, r := range rs {
			out[i] = script.EnqueueResult(r)
		}
		return out, nil
	}
	if !errors.Is(err, fairrelay.ErrInvalidInput) {
		return nil, err
	}
	failedFlows := map[string]bool{}
	for i, p := range ps {
		if failedFlows[p.Flow] {
			out[i] = refusal("flow", fmt.Sprintf("an earlier line of flow %q failed, and a flow's later line must not overtake it", p.Flow))
			continue
		}
		p.At = at
		r, err := q.Enqueue(ctx, p)
		switch {
		case err == nil:
			out[i] = script.EnqueueResult(r)
			if r.Status == fairrelay.EnqueueConflict {
				failedFlows[p.Flow] = true
			}
		case errors.Is(err, fairrelay.ErrInvalidInput):
			out[i] = script.ErrorResult(err)
			failedFlows[p.Flow] = true
		default:
			return nil, err
		}
	}
	return out, nil
}
