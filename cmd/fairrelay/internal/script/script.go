// Package script runs the JSON-lines scenario scripts of SPEC §6: one op per
// line in, one JSON result per line out, in order. It is the black-box
// contract of the shared test vectors and the engine of `fairrelay script`.
package script

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"slices"
	"strings"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/jsontext"
)

// Runner runs ops against one queue store and one inbox.
type Runner struct {
	Queue *fairrelay.Queue
	Inbox *inbox.Inbox
}

// MaxLineBytes is the longest script line read, in bytes (a body of the
// default 1 MiB limit plus room for the op's other fields).
const MaxLineBytes = 4 << 20

// Run reads ops from r and writes one result line per non-blank line to w.
// A failing op prints {"error": code, "message": …} and the script goes on.
// Run returns an error only when the script cannot be read or the output
// cannot be written.
func (rn *Runner) Run(ctx context.Context, r io.Reader, w io.Writer) error {
	br := bufio.NewReaderSize(r, 64<<10)
	if err := SkipByteOrderMark(br); err != nil {
		return err
	}
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	for {
		line, tooLong, err := ReadLine(br, MaxLineBytes)
		if err != nil && err != io.EOF {
			return fmt.Errorf("read script: %w", err)
		}
		var out Result
		switch {
		case tooLong:
			out = errResult(&fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "line", Message: fmt.Sprintf("longer than %d bytes; skipped", MaxLineBytes)})
		case len(bytes.TrimSpace(line)) > 0:
			out = rn.Do(ctx, bytes.TrimSpace(line))
		}
		if out != nil {
			b, merr := json.Marshal(out)
			if merr != nil {
				return merr
			}
			bw.Write(b)
			bw.WriteByte('\n')
			// Flush per line, so a reader sees each result as soon as it exists.
			if ferr := bw.Flush(); ferr != nil {
				return ferr
			}
		}
		if err == io.EOF {
			return nil
		}
	}
}

// SkipByteOrderMark drops a UTF-8 byte order mark at the start of br, which
// some editors and Windows tools begin a file with: it is not part of the
// first line (which failed "invalid character 'ï' looking for beginning of
// value": a breaker's report). One anywhere else is the line's own. Input
// in UTF-16 or UTF-32 — a byte order mark of either, or a NUL among the
// first bytes, as a Windows editor's "Unicode" writes it — is refused whole
// with ErrInvalidInput naming "input", before any line: each line failed
// "invalid character 'ÿ'" and the error named no cause.
func SkipByteOrderMark(br *bufio.Reader) error {
	if b, err := br.Peek(3); err == nil && bytes.Equal(b, []byte("\xef\xbb\xbf")) {
		br.Discard(3)
		return nil
	}
	head, _ := br.Peek(4)
	enc := ""
	switch {
	case bytes.HasPrefix(head, []byte("\xff\xfe\x00\x00")), bytes.HasPrefix(head, []byte("\x00\x00\xfe\xff")):
		enc = "UTF-32 (it begins with a UTF-32 byte order mark)"
	case bytes.HasPrefix(head, []byte("\xff\xfe")), bytes.HasPrefix(head, []byte("\xfe\xff")):
		enc = "UTF-16 (it begins with a UTF-16 byte order mark)"
	case bytes.IndexByte(head, 0) >= 0:
		enc = "UTF-16 or UTF-32 (a NUL byte among its first bytes)"
	}
	if enc != "" {
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "input", Message: "the input is " + enc +
			": JSON lines are UTF-8; convert it first (iconv -f UTF-16 -t UTF-8 FILE); nothing was read"}
	}
	return nil
}

// ReadLine reads one line without its newline. A line longer than max is
// read to its end and dropped, and tooLong is set, so one bad line does not
// stop the script (SPEC §6). err is io.EOF after the last line.
func ReadLine(br *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > max+1 {
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		return bytes.TrimSuffix(line, []byte("\n")), tooLong, err
	}
}

// op is one script line. Pointers tell a missing field from a zero one.
type op struct {
	Op                 string
	ID                 *string
	Flow               *string
	Delta              json.RawMessage
	Body               json.RawMessage
	At                 *int64
	Generation         *int64
	Outcome            *string
	ExpectedGeneration *int64
	Reason             *string
	Operator           *string
	MaxDelta           *int64
	Unavailable        *bool
	Group              *string
	Weight             *int64
	MaxBacklog         *int64
	MaxFlowBacklog     *int64
	AckedBefore        *int64
	IDsBefore          *int64
}

// Result is one output line.
type Result = map[string]any

// ErrorResult renders a failed op's error as its output line:
// {"error": code, "message": …, "field": … when the error names one}.
func ErrorResult(err error) Result { return errResult(err) }

func errResult(err error) Result {
	var fe *fairrelay.Error
	if errors.As(err, &fe) {
		plain := *fe
		plain.Hint = "" // the library's names, not the script's fields
		r := Result{"error": string(fe.Code), "message": plain.Error()}
		if fe.Field != "" {
			r["field"] = fe.Field
		}
		return r
	}
	return Result{"error": string(fairrelay.CodeDatabase), "message": err.Error()}
}

// Do runs one op line and returns its result. A field refused as
// invalid_input, by the parser or by the runner (missing, empty), comes
// after the clock's answer when the op writes at a tick it names (SPEC §2
// order); the queue's own refusals already do, and for them this reads
// the same clock again.
func (rn *Runner) Do(ctx context.Context, line []byte) Result {
	o, err := parseOp(line)
	if o.At != nil && *o.At == fairrelay.AtStored && clockedOps[o.Op] {
		// The library's sentinel for "the store's tick" is a tick below
		// every stored one to a script, which names its ticks: the op ran
		// at the stored tick instead of failing (a breaker's report).
		return errResult(rn.regressed(ctx, o.Op, *o.At))
	}
	var res Result
	if err == nil {
		res, err = rn.do(ctx, o)
	}
	if err != nil {
		if o.At != nil && clockedOps[o.Op] && fairrelay.CodeOf(err) == fairrelay.CodeInvalidInput {
			err = rn.tickFirst(ctx, o.Op, *o.At, err)
		}
		return errResult(err)
	}
	return res
}

// regressed is clock_regressed for a write of op at tick at, below every
// stored tick, in the words of the queue's own refusal (SPEC §2), or the
// error of reading the clock.
func (rn *Runner) regressed(ctx context.Context, op string, at int64) error {
	c, err := rn.Queue.Clock(ctx)
	if err != nil {
		return err
	}
	return &fairrelay.Error{Code: fairrelay.CodeClockRegressed, Message: fmt.Sprintf("%s at tick %d: the store is at tick %d", op, at, c.Tick)}
}

// clockedOps are the ops that write the queue store at their at: their
// answers to bad fields come after the clock's (SPEC §2 order).
var clockedOps = map[string]bool{"enqueue": true, "claim": true, "settle": true, "step": true, "redrive": true,
	"expedite": true, "pause": true, "resume": true, "configure": true, "prune": true}

// parseOp reads one line strictly: exact field names, no duplicates, no
// unknown fields, no nulls, valid UTF-8 without lone surrogate escapes (which
// encoding/json would silently turn into U+FFFD and so merge distinct ids).
// Errors name the field; a line that is not a JSON object is invalid_json.
// An unknown field or a value of the wrong type is the first error, but
// the line is read on, so that op and at are known (Do checks the clock
// before answering it); one in op or at itself is returned at once.
func parseOp(line []byte) (op, error) {
	var o op
	members, err := Members(line)
	if err != nil {
		return o, err
	}
	var first error
	refuse := func(key string, e error) bool {
		if key == "op" || key == "at" {
			first, o.At = e, nil // (a failed decoding may have set it)
			return true
		}
		if first == nil {
			first = e
		}
		return false
	}
	for _, m := range members {
		var target any
		switch m.Key {
		case "op":
			target = &o.Op
		case "id":
			target = &o.ID
		case "flow":
			target = &o.Flow
		case "delta":
			o.Delta = m.Value
		case "body":
			o.Body = m.Value
		case "at":
			target = &o.At
		case "generation":
			target = &o.Generation
		case "outcome":
			target = &o.Outcome
		case "expected_generation":
			target = &o.ExpectedGeneration
		case "reason":
			target = &o.Reason
		case "operator":
			target = &o.Operator
		case "max_delta":
			target = &o.MaxDelta
		case "unavailable":
			target = &o.Unavailable
		case "group":
			target = &o.Group
		case "weight":
			target = &o.Weight
		case "max_backlog":
			target = &o.MaxBacklog
		case "max_flow_backlog":
			target = &o.MaxFlowBacklog
		case "acked_before":
			target = &o.AckedBefore
		case "ids_before":
			target = &o.IDsBefore
		default:
			if refuse(m.Key, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: m.Key, Message: "unknown field"}) {
				return o, first
			}
			continue
		}
		if target == nil {
			continue
		}
		if err := json.Unmarshal(m.Value, target); err != nil {
			kind := "a string"
			switch target.(type) {
			case **int64:
				kind = "an integer"
				// A number past int64 is an integer still: say what range
				// it missed (a breaker's sweep: 99999999999999999999
				// read "must be an integer").
				if _, ok := new(big.Int).SetString(string(m.Value), 10); ok {
					kind = fmt.Sprintf("an integer of at most 64 bits (up to %d), got %s", int64(math.MaxInt64), m.Value)
				}
			case **bool:
				kind = "true or false"
			}
			if refuse(m.Key, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: m.Key, Message: "must be " + kind}) {
				return o, first
			}
		}
	}
	if fields, ok := opFields[o.Op]; ok && first == nil {
		// A field of another op is not this op's: ignored, it hid a
		// mistake ({"op":"claim","id":"A1"} claimed whatever was due; a
		// breaker's report), as an unknown field would have.
		for _, m := range members {
			if m.Key != "op" && !slices.Contains(fields, m.Key) {
				takes := "it takes none"
				if len(fields) > 0 {
					takes = "its fields: " + strings.Join(fields, ", ")
				}
				first = &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: m.Key,
					Message: fmt.Sprintf("not a field of %s (%s)", o.Op, takes)}
				break
			}
		}
	}
	return o, first
}

// opFields are the fields each op takes (SPEC §6, §8, §9): any other known
// field on its line is refused, naming it.
var opFields = map[string][]string{
	"enqueue":   {"id", "flow", "delta", "body", "group", "at"},
	"claim":     {"at"},
	"receive":   {"id", "generation"},
	"settle":    {"id", "generation", "outcome", "at"},
	"step":      {"at"},
	"redrive":   {"id", "expected_generation", "reason", "operator", "at"},
	"expedite":  {"id", "expected_generation", "reason", "operator", "at"},
	"pause":     {"flow", "reason", "operator", "at"},
	"resume":    {"flow", "reason", "operator", "at"},
	"inbox":     {"max_delta", "unavailable"},
	"snapshot":  {},
	"configure": {"group", "weight", "max_backlog", "max_flow_backlog", "at"},
	"prune":     {"acked_before", "ids_before", "at"},
}

// Members splits one input line into its fields, strictly: the line must be
// one JSON object without duplicate keys or an empty key (invalid_json
// otherwise, naming a duplicated field), and no value may be null or hold
// invalid text (invalid_input naming the field).
// Script lines and bulk enqueue lines share it.
func Members(line []byte) ([]jsontext.Member, error) {
	members, err := jsontext.Object(line)
	if err != nil {
		e := &fairrelay.Error{Code: "invalid_json", Message: "line is not one JSON object: " + err.Error()}
		if dup, ok := errors.AsType[*jsontext.DuplicateKeyError](err); ok {
			e.Field = dup.Key
		}
		return nil, e
	}
	for _, m := range members {
		if m.Key == "" {
			// No field of any line has an empty name, and an error could
			// not name it: refuse the line as malformed.
			return nil, &fairrelay.Error{Code: "invalid_json", Message: `a member with an empty name ("")`}
		}
		if !jsontext.ValidText(m.Value) {
			return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: m.Key, Message: jsontext.ErrNotText.Error()}
		}
		if string(m.Value) == "null" {
			return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: m.Key, Message: "must not be null"}
		}
	}
	return members, nil
}

// tickFirst returns the clock's answer to a write of op at tick at, when
// it has one, else err: a field this runner refuses before the queue sees
// it still comes after clock_regressed and max_tick_jump (SPEC §2 order).
func (rn *Runner) tickFirst(ctx context.Context, op string, at int64, err error) error {
	if terr := rn.Queue.CheckTick(ctx, op, at, false); terr != nil {
		return terr
	}
	return err
}

func need[T any](field string, p *T) (T, error) {
	if p == nil {
		var zero T
		return zero, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: field, Message: "missing"}
	}
	return *p, nil
}

func (rn *Runner) do(ctx context.Context, o op) (Result, error) {
	switch o.Op {
	case "enqueue":
		return rn.enqueue(ctx, o)
	case "claim":
		at, err := need("at", o.At)
		if err != nil {
			return nil, err
		}
		res, err := rn.Queue.Claim(ctx, fairrelay.ClaimParams{At: at})
		if err != nil {
			return nil, err
		}
		return claimResult(res.First()), nil
	case "receive":
		id, err := need("id", o.ID)
		if err != nil {
			return nil, err
		}
		// The inbox does not read the generation (SPEC §3 dedupes by id and
		// checks the seq), but it is one of the op's fields (SPEC §6):
		// missing or negative, it is refused as settle refuses it, before
		// anything is written (it was taken, and the effect applied: a
		// breaker's report).
		gen, err := need("generation", o.Generation)
		if err != nil {
			return nil, err
		}
		if gen < 0 {
			return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "generation", Message: fmt.Sprintf("must not be negative, got %d", gen)}
		}
		ev, err := rn.Queue.Event(ctx, id)
		if err != nil {
			return nil, err
		}
		out, err := rn.Inbox.Receive(ctx, inbox.Delivery{EventID: ev.ID, Flow: ev.Flow, Seq: ev.Seq, Body: ev.Body})
		if err != nil {
			return nil, err
		}
		return Result{"status": string(out)}, nil
	case "settle":
		at, err := need("at", o.At)
		if err != nil {
			return nil, err
		}
		id, err := need("id", o.ID)
		if err != nil {
			return nil, err
		}
		gen, err := need("generation", o.Generation)
		if err != nil {
			return nil, err
		}
		name, err := need("outcome", o.Outcome)
		if err != nil {
			return nil, err
		}
		outcome, err := fairrelay.ParseOutcome(name)
		if err != nil {
			return nil, err
		}
		r, err := rn.Queue.Settle(ctx, fairrelay.SettleParams{Token: fairrelay.Token{EventID: id, Generation: gen}, Outcome: outcome, At: at})
		if err != nil {
			return nil, err
		}
		return SettleResult(r), nil
	case "step":
		return rn.step(ctx, o)
	case "redrive":
		id, err := need("id", o.ID)
		if err != nil {
			return nil, err
		}
		gen, err := need("expected_generation", o.ExpectedGeneration)
		if err != nil {
			return nil, err
		}
		reason, err := need("reason", o.Reason)
		if err != nil {
			return nil, err
		}
		at, err := need("at", o.At)
		if err != nil {
			return nil, err
		}
		operator, err := operatorField(o)
		if err != nil {
			return nil, err
		}
		p := fairrelay.RedriveParams{EventID: id, ExpectedGeneration: gen, Reason: reason, At: at, Operator: operator}
		r, err := rn.Queue.Redrive(ctx, p)
		if err != nil {
			return nil, err
		}
		return RedriveResult(r), nil
	case "expedite":
		id, err := need("id", o.ID)
		if err != nil {
			return nil, err
		}
		gen, err := need("expected_generation", o.ExpectedGeneration)
		if err != nil {
			return nil, err
		}
		reason, at, operator, err := audited(o)
		if err != nil {
			return nil, err
		}
		r, err := rn.Queue.Expedite(ctx, fairrelay.ExpediteParams{EventID: id, ExpectedGeneration: gen, Reason: reason, Operator: operator, At: at})
		if err != nil {
			return nil, err
		}
		return ActionResult(r), nil
	case "pause", "resume":
		flow, err := need("flow", o.Flow)
		if err != nil {
			return nil, err
		}
		reason, at, operator, err := audited(o)
		if err != nil {
			return nil, err
		}
		p := fairrelay.FlowActionParams{Flow: flow, Reason: reason, Operator: operator, At: at}
		act := rn.Queue.Pause
		if o.Op == "resume" {
			act = rn.Queue.Resume
		}
		r, err := act(ctx, p)
		if err != nil {
			return nil, err
		}
		return ActionResult(r), nil
	case "inbox":
		if o.MaxDelta == nil && o.Unavailable == nil {
			return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "max_delta", Message: "inbox op needs max_delta and/or unavailable"}
		}
		if o.MaxDelta != nil {
			if *o.MaxDelta < 0 {
				return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "max_delta", Message: "must be >= 0"}
			}
			rn.Inbox.SetMaxDelta(*o.MaxDelta)
		}
		if o.Unavailable != nil {
			rn.Inbox.SetUnavailable(*o.Unavailable)
		}
		return Result{"status": "ok"}, nil
	case "snapshot":
		return rn.snapshot(ctx)
	case "configure":
		at, err := need("at", o.At)
		if err != nil {
			return nil, err
		}
		p := fairrelay.ConfigureParams{At: at, Weight: o.Weight, MaxBacklog: o.MaxBacklog, MaxFlowBacklog: o.MaxFlowBacklog}
		if o.Group != nil {
			if *o.Group == "" {
				return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "group", Message: "empty"}
			}
			p.Group = *o.Group
		}
		if _, err := rn.Queue.Configure(ctx, p); err != nil {
			return nil, err
		}
		return Result{"status": "ok"}, nil
	case "prune":
		at, err := need("at", o.At)
		if err != nil {
			return nil, err
		}
		acked, err := need("acked_before", o.AckedBefore)
		if err != nil {
			return nil, err
		}
		ids, err := need("ids_before", o.IDsBefore)
		if err != nil {
			return nil, err
		}
		r, err := rn.Queue.Prune(ctx, fairrelay.PruneParams{At: at, AckedBefore: acked, IDsBefore: ids})
		if err != nil {
			return nil, err
		}
		return Result{"status": "pruned", "events": r.Events, "tombstones": r.Tombstones}, nil
	case "":
		return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "op", Message: "missing"}
	}
	return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "op", Message: fmt.Sprintf("unknown op %q", o.Op)}
}

// Body builds an event body from a script's delta or body field (SPEC §6):
// delta n is shorthand for {"delta": n} and must be a positive integer
// literal; a body is re-encoded canonically (compact, keys sorted, numbers as
// written; see jsontext.Canonical). Errors name the field.
func Body(delta, body json.RawMessage) ([]byte, error) {
	switch {
	case delta != nil && body != nil:
		return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "delta", Message: "give delta or body, not both"}
	case delta != nil:
		n, ok, tooLarge := jsontext.PositiveInt(delta)
		if tooLarge {
			return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "delta", Message: fmt.Sprintf("%s is larger than %d, the largest delta a body can carry here", delta, int64(math.MaxInt64))}
		}
		if !ok {
			return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "delta", Message: fmt.Sprintf("must be a positive integer as JSON writes one (decimal, no leading 0, + or fraction), got %s", delta)}
		}
		return []byte(fmt.Sprintf(`{"delta":%d}`, n)), nil
	case body != nil:
		b, err := jsontext.Canonical(body)
		if err != nil {
			return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "body", Message: err.Error()}
		}
		return b, nil
	}
	return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "body", Message: "missing: give body or delta"}
}

func (rn *Runner) enqueue(ctx context.Context, o op) (Result, error) {
	at, err := need("at", o.At)
	if err != nil {
		return nil, err
	}
	id, err := need("id", o.ID)
	if err != nil {
		return nil, err
	}
	flow, err := need("flow", o.Flow)
	if err != nil {
		return nil, err
	}
	body, err := Body(o.Delta, o.Body)
	if err != nil {
		return nil, err
	}
	p := fairrelay.EnqueueParams{ID: id, Flow: flow, Body: body, At: at}
	if o.Group != nil {
		if *o.Group == "" {
			return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "group", Message: "empty"}
		}
		p.Group = *o.Group
	}
	r, err := rn.Queue.Enqueue(ctx, p)
	if err != nil {
		return nil, err
	}
	return EnqueueResult(r), nil
}

// EnqueueResult renders an enqueue answer as SPEC §6 prints it.
func EnqueueResult(r fairrelay.EnqueueResult) Result {
	switch r.Status {
	case fairrelay.EnqueueConflict:
		return Result{"status": string(r.Status)}
	case fairrelay.EnqueueFull:
		return Result{"status": string(r.Status), "limit": r.Limit}
	}
	return Result{"status": string(r.Status), "seq": r.Seq}
}

func claimResult(c *fairrelay.Claim) Result {
	if c == nil {
		return Result{"status": "idle"}
	}
	return ClaimResult(*c)
}

// ClaimResult renders a claim as SPEC §6 prints it.
func ClaimResult(c fairrelay.Claim) Result {
	return Result{
		"status": "claimed", "id": c.Token.EventID, "flow": c.Flow, "seq": c.Seq,
		"generation": c.Token.Generation, "lease_until": c.LeaseUntil, "ticket": c.Ticket, "attempts": c.Attempts,
	}
}

// SettleResult renders a settle answer as SPEC §6 prints it.
func SettleResult(r fairrelay.SettleResult) Result {
	if r.Status == fairrelay.SettleReady {
		return Result{"status": string(r.Status), "next_at": r.NextAt}
	}
	return Result{"status": string(r.Status)}
}

// RedriveResult renders a redrive answer as SPEC §6 prints it.
func RedriveResult(r fairrelay.RedriveResult) Result {
	if r.Status == fairrelay.RedriveRejected {
		return Result{"status": string(r.Status), "reason": r.RejectReason}
	}
	return Result{"status": string(r.Status), "generation": r.Generation}
}

// ActionResult renders the answer of expedite, pause or resume as SPEC §9
// prints it.
func ActionResult(r fairrelay.ActionResult) Result {
	switch r.Status {
	case fairrelay.ActionRejected:
		return Result{"status": string(r.Status), "reason": r.RejectReason}
	case fairrelay.ActionReady:
		return Result{"status": string(r.Status), "next_at": r.NextAt}
	}
	return Result{"status": string(r.Status)}
}

// audited reads the fields every operator action has: reason and at
// (required), operator (optional).
func audited(o op) (reason string, at int64, operator string, err error) {
	if reason, err = need("reason", o.Reason); err != nil {
		return
	}
	if at, err = need("at", o.At); err != nil {
		return
	}
	operator, err = operatorField(o)
	return
}

// operatorField is an operator action's optional operator: "" when the
// line has none. An empty one given is refused, naming operator: the
// audit row would record none (SPEC §9: null when omitted), not the empty
// name the line asked for.
func operatorField(o op) (string, error) {
	if o.Operator == nil {
		return "", nil
	}
	if *o.Operator == "" {
		return "", &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "operator", Message: "empty: omit operator for none"}
	}
	return *o.Operator, nil
}

// step is claim, receive and settle at one tick.
func (rn *Runner) step(ctx context.Context, o op) (Result, error) {
	at, err := need("at", o.At)
	if err != nil {
		return nil, err
	}
	cr, err := rn.Queue.Claim(ctx, fairrelay.ClaimParams{At: at})
	c := cr.First()
	if err != nil || c == nil {
		return claimResult(c), err
	}
	res := ClaimResult(*c)
	out, err := rn.Inbox.Receive(ctx, inbox.Delivery{EventID: c.Token.EventID, Flow: c.Flow, Seq: c.Seq, Body: c.Body})
	if err != nil {
		return nil, err
	}
	res["received"] = string(out)
	s, err := rn.Queue.Settle(ctx, fairrelay.SettleParams{Token: c.Token, Outcome: out, At: at})
	if err != nil {
		return nil, err
	}
	res["settled"] = string(s.Status)
	if s.Status == fairrelay.SettleReady {
		res["next_at"] = s.NextAt
	}
	return res, nil
}

func (rn *Runner) snapshot(ctx context.Context) (Result, error) {
	qs, err := rn.Queue.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	is, err := rn.Inbox.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	return Result{
		"clock": qs.Clock, "flows": qs.Flows, "groups": qs.Groups, "events": qs.Events, "audit": qs.Audit,
		"receipts": is.Receipts, "projection": is.Projection,
	}, nil
}
