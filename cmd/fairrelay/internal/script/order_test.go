package script

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
)

// A field of the wrong type or an unknown field is a field of the input:
// a write at a tick behind the store's answers clock_regressed first, as
// for every other bad field (SPEC §2: clock_regressed, then the fields of
// the input). The parser answered invalid_input before the clock was
// read. At a tick the clock allows, the field's error is the answer.
func TestScriptFieldErrorsComeAfterTheClock(t *testing.T) {
	ctx := context.Background()
	q, rn := runnerWithA1(t, 10)
	for _, c := range []struct{ line, field string }{
		{`{"op":"enqueue","id":5,"flow":"A","delta":1,"at":%d}`, "id"},
		{`{"id":"A2","flow":"A","delta":1,"bogus":true,"op":"enqueue","at":%d}`, "bogus"},
		{`{"op":"claim","at":%d,"weight":"heavy"}`, "weight"},
		// A known field of another op (a breaker's report: each was
		// ignored).
		{`{"op":"claim","at":%d,"id":"x"}`, "id"},
		{`{"op":"step","at":%d,"outcome":"accepted"}`, "outcome"},
		{`{"op":"settle","id":"A1","generation":1,"outcome":"accepted","reason":"x","at":%d}`, "reason"},
		{`{"op":"pause","flow":"A","reason":"x","id":"A1","at":%d}`, "id"},
		{`{"op":"settle","id":"A1","generation":"one","outcome":"accepted","at":%d}`, "generation"},
		{`{"op":"configure","group":"g","weight":"x","at":%d}`, "weight"},
		// Missing or empty fields the runner refuses itself (a breaker's
		// report: these answered invalid_input at a regressed tick).
		{`{"op":"enqueue","flow":"A","delta":1,"at":%d}`, "id"},
		{`{"op":"settle","generation":1,"outcome":"accepted","at":%d}`, "id"},
		{`{"op":"redrive","reason":"x","at":%d}`, "id"},
		{`{"op":"redrive","id":"A1","reason":"x","at":%d}`, "expected_generation"},
		{`{"op":"redrive","id":"A1","expected_generation":0,"at":%d}`, "reason"},
		{`{"op":"expedite","reason":"x","at":%d}`, "id"},
		{`{"op":"expedite","id":"A1","expected_generation":0,"at":%d}`, "reason"},
		{`{"op":"pause","reason":"x","at":%d}`, "flow"},
		{`{"op":"resume","flow":"A","at":%d}`, "reason"},
		{`{"op":"prune","at":%d}`, "acked_before"},
		{`{"op":"prune","acked_before":0,"at":%d}`, "ids_before"},
		{`{"op":"configure","group":"","at":%d}`, "group"},
		// An empty operator given is refused: the audit row would say
		// none (SPEC §9: null when omitted; a breaker's report).
		{`{"op":"redrive","id":"A1","expected_generation":0,"reason":"x","operator":"","at":%d}`, "operator"},
		{`{"op":"expedite","id":"A1","expected_generation":0,"reason":"x","operator":"","at":%d}`, "operator"},
		{`{"op":"pause","flow":"A","reason":"x","operator":"","at":%d}`, "operator"},
		{`{"op":"resume","flow":"A","reason":"x","operator":"","at":%d}`, "operator"},
	} {
		behind := fmt.Sprintf(c.line, 3)
		if r := rn.Do(ctx, []byte(behind)); fmt.Sprint(r["error"]) != string(fairrelay.CodeClockRegressed) {
			t.Errorf("%s: %v, want clock_regressed", behind, r)
		}
		ahead := fmt.Sprintf(c.line, 11)
		if r := rn.Do(ctx, []byte(ahead)); fmt.Sprint(r["error"]) != string(fairrelay.CodeInvalidInput) || r["field"] != c.field {
			t.Errorf("%s: %v, want invalid_input naming %s", ahead, r, c.field)
		}
	}
	// Ops that write no tick refuse another op's field at once.
	for _, c := range []struct{ line, field string }{
		{`{"op":"inbox","max_delta":3,"at":5}`, "at"},
		{`{"op":"snapshot","id":"x"}`, "id"},
		{`{"op":"receive","id":"A1","generation":1,"outcome":"accepted"}`, "outcome"},
	} {
		if r := rn.Do(ctx, []byte(c.line)); fmt.Sprint(r["error"]) != string(fairrelay.CodeInvalidInput) || r["field"] != c.field {
			t.Errorf("%s: %v, want invalid_input naming %s", c.line, r, c.field)
		}
	}
	// A bad op or at is answered at once: the clock cannot be read for it.
	if r := rn.Do(ctx, []byte(`{"op":"enqueue","id":"A3","flow":"A","delta":1,"at":"3"}`)); fmt.Sprint(r["error"]) != string(fairrelay.CodeInvalidInput) || r["field"] != "at" {
		t.Errorf("at of the wrong type: %v, want invalid_input naming at", r)
	}
	s, err := q.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Events) != 1 {
		t.Errorf("%d events stored, want 1: a refused op changed the store", len(s.Events))
	}
}

// An at of math.MinInt64 — the library's AtStored sentinel — is a tick
// below every stored one to a script: every write op answers
// clock_regressed naming it and changes nothing (it ran at the stored
// tick).
func TestScriptLowestTickIsClockRegressed(t *testing.T) {
	ctx := context.Background()
	q, rn := runnerWithA1(t, 100)
	const low = `-9223372036854775808`
	for _, line := range []string{
		`{"op":"claim","at":` + low + `}`,
		`{"op":"step","at":` + low + `}`,
		`{"op":"enqueue","id":"A2","flow":"A","delta":1,"at":` + low + `}`,
		`{"op":"settle","id":"A1","generation":1,"outcome":"accepted","at":` + low + `}`,
		`{"op":"redrive","id":"A1","expected_generation":1,"reason":"x","at":` + low + `}`,
		`{"op":"expedite","id":"A1","expected_generation":1,"reason":"x","at":` + low + `}`,
		`{"op":"pause","flow":"A","reason":"x","at":` + low + `}`,
		`{"op":"resume","flow":"A","reason":"x","at":` + low + `}`,
		`{"op":"configure","group":"g","weight":2,"at":` + low + `}`,
		`{"op":"prune","acked_before":0,"ids_before":0,"at":` + low + `}`,
		`{"op":"claim","bogus":1,"at":` + low + `}`,
	} {
		r := rn.Do(ctx, []byte(line))
		want := fmt.Sprintf("at tick %s: the store is at tick 100", low)
		if r["error"] != string(fairrelay.CodeClockRegressed) || !strings.Contains(fmt.Sprint(r["message"]), want) {
			t.Errorf("%s: %v, want clock_regressed (%s)", line, r, want)
		}
	}
	s, err := q.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Clock.Tick != 100 || s.Clock.Ticket != 0 || len(s.Events) != 1 || s.Events[0].State != fairrelay.StateReady {
		t.Errorf("after the refused writes: clock %+v, events %+v; want tick 100, ticket 0, A1 ready", s.Clock, s.Events)
	}
}

// runnerWithA1 is a Runner on a fresh SQLite store under the reference
// policy, where event A1 (flow A) was enqueued at tick at.
func runnerWithA1(t *testing.T, at int64) (*fairrelay.Queue, *Runner) {
	t.Helper()
	ctx := context.Background()
	q, err := fairrelay.Open(ctx, filepath.Join(t.TempDir(), "q.db"), fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	rn := &Runner{Queue: q}
	if r := rn.Do(ctx, fmt.Appendf(nil, `{"op":"enqueue","id":"A1","flow":"A","delta":1,"at":%d}`, at)); r["status"] != "created" {
		t.Fatalf("enqueue at %d: %v", at, r)
	}
	return q, rn
}

// receive refuses a generation that is missing or negative, naming it, and
// records no receipt: the inbox took them and applied the effect (a
// breaker's report), though settle refuses the same values. 0 is taken
// (a vector receives an event never claimed at generation 0).
func TestScriptReceiveRefusesABadGeneration(t *testing.T) {
	ctx := context.Background()
	_, rn := runnerWithA1(t, 0)
	in, err := inbox.Open(ctx, filepath.Join(t.TempDir(), "i.db"), inbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	rn.Inbox = in
	for _, line := range []string{
		`{"op":"receive","id":"A1"}`,
		`{"op":"receive","id":"A1","generation":-1}`,
		`{"op":"receive","id":"A1","generation":-9223372036854775808}`,
	} {
		if r := rn.Do(ctx, []byte(line)); fmt.Sprint(r["error"]) != string(fairrelay.CodeInvalidInput) || r["field"] != "generation" {
			t.Errorf("%s: %v, want invalid_input naming generation", line, r)
		}
	}
	if rs, err := in.Receipts(ctx, "", 0, 10); err != nil || len(rs) != 0 {
		t.Fatalf("receipts after the refused receives: %v, %v; want none", rs, err)
	}
	if r := rn.Do(ctx, []byte(`{"op":"receive","id":"A1","generation":0}`)); r["status"] != "accepted" {
		t.Errorf("receive at generation 0: %v, want accepted", r)
	}
}

// Run skips a byte order mark at the start of the script, as the bulk
// enqueue does: the first op runs (it failed invalid_json, "invalid
// character 'ï'"); a mark before a later line is that line's, refused.
func TestScriptRunSkipsALeadingByteOrderMark(t *testing.T) {
	_, rn := runnerWithA1(t, 0)
	var out strings.Builder
	in := "\ufeff" + `{"op":"enqueue","id":"A2","flow":"A","delta":1,"at":1}` + "\n\ufeff" + `{"op":"claim","at":2}` + "\n"
	if err := rn.Run(context.Background(), strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || lines[0] != `{"seq":2,"status":"created"}` || !strings.Contains(lines[1], `"error":"invalid_json"`) {
		t.Errorf("results %q: want A2 created, then the second line refused as JSON", lines)
	}
}

// A script in UTF-16 or UTF-32 (a Windows editor's "Unicode") is refused
// whole, naming the encoding, before any op runs: each line failed
// invalid_json ("invalid character 'ÿ'") with no word of the cause.
func TestScriptRunRefusesUTF16(t *testing.T) {
	utf16 := func(s string, bom string) string {
		var b strings.Builder
		b.WriteString(bom)
		for _, r := range s {
			b.WriteByte(byte(r))
			b.WriteByte(0)
		}
		return b.String()
	}
	op := `{"op":"enqueue","id":"A2","flow":"A","delta":1,"at":1}` + "\n"
	for name, in := range map[string]string{
		"UTF-16 LE with a mark": utf16(op, "\xff\xfe"),
		"UTF-16 without a mark": utf16(op, ""),
		"UTF-32 LE with a mark": "\xff\xfe\x00\x00{\x00\x00\x00",
	} {
		_, rn := runnerWithA1(t, 0)
		var out strings.Builder
		err := rn.Run(context.Background(), strings.NewReader(in), &out)
		var fe *fairrelay.Error
		if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != "input" || !strings.Contains(fe.Message, "UTF-") || out.Len() != 0 {
			t.Errorf("%s: %v, output %q; want invalid_input naming input and the encoding, nothing run", name, err, out.String())
		}
	}
}
