package inbox_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
)

// deliveryOf is the delivery of event id at seq of flow, its body
// {"delta":delta}.
func deliveryOf(id, flow string, seq, delta int) inbox.Delivery {
	return inbox.Delivery{EventID: id, Flow: flow, Seq: int64(seq), Body: fmt.Appendf(nil, `{"delta":%d}`, delta)}
}

// receiver returns a receive into in that fails t unless it answers want.
func receiver(t *testing.T, in *inbox.Inbox) func(x inbox.Delivery, want fairrelay.Outcome) {
	return func(x inbox.Delivery, want fairrelay.Outcome) {
		t.Helper()
		if out, err := in.Receive(t.Context(), x); err != nil || out != want {
			t.Fatalf("receive %s %s/%d: %q %v, want %q", x.EventID, x.Flow, x.Seq, out, err, want)
		}
	}
}

// An operator waives a flow's next event, one the receiver can never take
// (an id another event's receipt holds; a delta it refuses): the flow's
// projection moves past it with its total unchanged, a delivery of that
// event then answers duplicate (the relay acks it after a redrive), any
// other delivery answers as before, the events after it apply, and a
// consumer's held copies of it go. Only the seq the flow waits for can be
// waived, with a reason; a refused waiver writes nothing. Both backends.
func TestWaive(t *testing.T) {
	eachBackend(t, "frinwaive", inbox.Options{MaxDelta: 5}, func(t *testing.T, in *inbox.Inbox) {
		ctx := t.Context()
		d, receive := deliveryOf, receiver(t, in)
		total := func(flow string) inbox.Projection {
			t.Helper()
			ps, err := in.Projections(ctx, "", 100)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range ps {
				if p.Flow == flow {
					return p
				}
			}
			return inbox.Projection{Flow: flow}
		}
		// A1 is applied; a producer uses its id again for A's seq 2.
		receive(d("A1", "A", 1, 1), fairrelay.OutcomeAccepted)
		reused := d("A1", "A", 2, 2)
		receive(reused, fairrelay.OutcomeIDConflict)
		for _, bad := range []struct {
			p     inbox.WaiveParams
			field string
		}{
			{inbox.WaiveParams{EventID: "A1", Flow: "A", Seq: 3, Reason: "x"}, "seq"}, // not the seq A waits for
			{inbox.WaiveParams{EventID: "A1", Flow: "A", Seq: 1, Reason: "x"}, "seq"}, // applied already
			{inbox.WaiveParams{EventID: "A1", Flow: "A", Seq: 2, Reason: "  "}, "reason"},
			{inbox.WaiveParams{EventID: "", Flow: "A", Seq: 2, Reason: "x"}, "id"},
			{inbox.WaiveParams{EventID: "A1", Flow: "A", Seq: 0, Reason: "x"}, "seq"},
			// The text rules of every audited action (a breaker's report).
			{inbox.WaiveParams{EventID: "A1", Flow: "A", Seq: 2, Reason: "line1\nline2"}, "reason"},
			{inbox.WaiveParams{EventID: "A1", Flow: "A", Seq: 2, Reason: "bad \xff\xfe utf8"}, "reason"},
			{inbox.WaiveParams{EventID: "A1", Flow: "A", Seq: 2, Reason: strings.Repeat("x", 100000)}, "reason"},
			{inbox.WaiveParams{EventID: "A1", Flow: "A", Seq: 2, Reason: "x", Operator: "bob\tx"}, "operator"},
			{inbox.WaiveParams{EventID: "A1", Flow: "A", Seq: 2, Reason: "x", Operator: "\x1b]0;pwn\a"}, "operator"},
		} {
			err := in.Waive(ctx, bad.p)
			var fe *fairrelay.Error
			if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != bad.field {
				t.Errorf("waive %+v: %v, want invalid_input naming %s", bad.p, err, bad.field)
			}
		}
		if got := total("A"); got != (inbox.Projection{Flow: "A", Seq: 1, Total: 1}) {
			t.Fatalf("A after refused waivers: %+v, want seq 1 total 1 (nothing written)", got)
		}
		if err := in.Waive(ctx, inbox.WaiveParams{EventID: "A1", Flow: "A", Seq: 2, Reason: "id reused after retention", Operator: "ana"}); err != nil {
			t.Fatal(err)
		}
		if got := total("A"); got != (inbox.Projection{Flow: "A", Seq: 2, Total: 1}) {
			t.Fatalf("A after the waiver: %+v, want seq 2 with the total unchanged", got)
		}
		// The same waiver again is already so: nil, nothing written (a
		// script that retries waive, then redrive, goes on).
		if err := in.Waive(ctx, inbox.WaiveParams{EventID: "A1", Flow: "A", Seq: 2, Reason: "retried"}); err != nil {
			t.Fatalf("the same waiver again: %v, want nil (already so)", err)
		}
		// Another id for the waived seq: refused, naming the event the seq
		// is waived for, nothing written.
		for _, again := range []struct {
			p    inbox.WaiveParams
			want string
		}{
			{inbox.WaiveParams{EventID: "Z9", Flow: "A", Seq: 2, Reason: "typo"}, `seq 2 of flow "A" is waived already, for event "A1", not "Z9"; the flow waits for seq 3`},
		} {
			err := in.Waive(ctx, again.p)
			var fe *fairrelay.Error
			if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != "seq" || fe.Message != again.want {
				t.Fatalf("waive %+v again: %v, want invalid_input on seq: %s", again.p, err, again.want)
			}
		}
		if ws, err := in.Waivers(ctx, "", 0, 10); err != nil || len(ws) != 1 || ws[0].Reason != "id reused after retention" {
			t.Fatalf("waivers after the refused repeats: %+v %v, want the one waiver as written", ws, err)
		}
		receive(reused, fairrelay.OutcomeDuplicate)
		receive(d("A1", "A", 1, 1), fairrelay.OutcomeDuplicate)        // its own receipt
		receive(d("Z9", "A", 2, 2), fairrelay.OutcomeSequenceConflict) // another id at the waived seq
		receive(d("A3", "A", 3, 3), fairrelay.OutcomeAccepted)
		if got := total("A"); got != (inbox.Projection{Flow: "A", Seq: 3, Total: 4}) {
			t.Fatalf("A after A3: %+v, want seq 3 total 4", got)
		}

		// A body refused for good, held by a consumer with what follows it.
		poison, next := d("B1", "B", 1, 100), d("B2", "B", 2, 1)
		receive(poison, fairrelay.OutcomeUnsupportedDelta)
		for _, x := range []inbox.Delivery{poison, next} {
			if held, err := in.Hold(ctx, x, fairrelay.OutcomeUnsupportedDelta); err != nil || !held {
				t.Fatalf("hold %s: %v %v", x.EventID, held, err)
			}
		}
		// The held events name the refused one: another id at its seq, or
		// an id held at another seq, is refused naming id, nothing written
		// (a fresh user's report: B2 waived at seq 1 was accepted).
		gap := d("C2", "C", 2, 1) // C's seq 1 never came
		if held, err := in.Hold(ctx, gap, fairrelay.OutcomeSequenceConflict); err != nil || !held {
			t.Fatalf("hold C2: %v %v", held, err)
		}
		for _, wrong := range []struct {
			p    inbox.WaiveParams
			want string
		}{
			{inbox.WaiveParams{EventID: "B2", Flow: "B", Seq: 1, Reason: "typo"}, `seq 1 of flow "B" is held for event "B1", not "B2"`},
			{inbox.WaiveParams{EventID: "X7", Flow: "B", Seq: 1, Reason: "typo"}, `seq 1 of flow "B" is held for event "B1", not "X7"`},
			{inbox.WaiveParams{EventID: "C2", Flow: "C", Seq: 1, Reason: "typo"}, `event "C2" is held at seq 2 of flow "C", not at seq 1`},
		} {
			err := in.Waive(ctx, wrong.p)
			var fe *fairrelay.Error
			if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != "id" || !strings.Contains(fe.Message, wrong.want) {
				t.Fatalf("waive %+v: %v, want invalid_input on id: %s", wrong.p, err, wrong.want)
			}
		}
		if ws, err := in.Waivers(ctx, "B", 0, 10); err != nil || len(ws) != 0 {
			t.Fatalf("waivers after the refused ones: %+v %v, want none", ws, err)
		}
		if n, err := in.HeldCount(ctx); err != nil || n != 3 {
			t.Fatalf("held after the refused waivers: %d %v, want B1, B2 and C2 still held", n, err)
		}
		if err := in.Waive(ctx, inbox.WaiveParams{EventID: "B1", Flow: "B", Seq: 1, Reason: "refund sent by hand"}); err != nil {
			t.Fatal(err)
		}
		receive(poison, fairrelay.OutcomeDuplicate)
		// A consumer whose Receive answered the refusal just before the
		// waiver committed holds nothing of it now (a breaker's report).
		if held, err := in.Hold(ctx, poison, fairrelay.OutcomeUnsupportedDelta); err != nil || held {
			t.Fatalf("hold of the waived B1: %v %v, want not held", held, err)
		}
		r, err := in.ReceiveHeld(ctx, "B", 100)
		if err != nil || !cmp.Equal(r.Applied, []inbox.Receipt{{ID: "B2", Flow: "B", Seq: 2}}) || r.Remaining {
			t.Fatalf("B's held after the waiver: %+v %v, want B2 applied, nothing left", r, err)
		}
		if n, err := in.HeldCount(ctx); err != nil || n != 1 {
			t.Fatalf("held after the waiver: %d %v, want C2 alone (B1's copy goes with the waiver)", n, err)
		}
		if got := total("B"); got != (inbox.Projection{Flow: "B", Seq: 2, Total: 1}) {
			t.Fatalf("B: %+v, want seq 2 total 1 (B1's delta never applied)", got)
		}

		ws, err := in.Waivers(ctx, "", 0, 10)
		want := []inbox.Waiver{
			{Flow: "A", Seq: 2, EventID: "A1", Reason: "id reused after retention", Operator: "ana"},
			{Flow: "B", Seq: 1, EventID: "B1", Reason: "refund sent by hand"},
		}
		if err != nil || !cmp.Equal(ws, want, cmpopts.IgnoreFields(inbox.Waiver{}, "WaivedAt")) {
			t.Fatalf("waivers: %+v %v, want %+v", ws, err, want)
		}
		for _, w := range ws {
			if w.WaivedAt.IsZero() {
				t.Errorf("waiver %s/%d has no time", w.Flow, w.Seq)
			}
		}
		if ws, err := in.Waivers(ctx, "A", 2, 10); err != nil || len(ws) != 1 || ws[0].Flow != "B" {
			t.Fatalf("waivers after A/2: %+v %v, want B's", ws, err)
		}
	})
}

// A waiver holds its event's id as a receipt does (a breaker's report: a
// waived id, delivered again at the flow's next seq, was accepted and its
// effect applied). The waived id at another seq or flow answers
// id_conflict and changes nothing, unless that place is waived for it too
// (a producer that reused the id once more); at the waived place it is a
// duplicate. Both backends.
func TestWaivedIDIsHeld(t *testing.T) {
	eachBackend(t, "frinwaiveid", inbox.Options{MaxDelta: 5}, func(t *testing.T, in *inbox.Inbox) {
		ctx := t.Context()
		d, receive := deliveryOf, receiver(t, in)
		receive(d("U1", "U", 1, 1), fairrelay.OutcomeAccepted)
		receive(d("U2", "U", 2, 9), fairrelay.OutcomeUnsupportedDelta)
		if err := in.Waive(ctx, inbox.WaiveParams{EventID: "U2", Flow: "U", Seq: 2, Reason: "no capability"}); err != nil {
			t.Fatal(err)
		}
		receive(d("U2", "U", 2, 9), fairrelay.OutcomeDuplicate)
		receive(d("U2", "U", 3, 2), fairrelay.OutcomeIDConflict)
		receive(d("U2", "V", 1, 2), fairrelay.OutcomeIDConflict)
		s, err := in.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wantReceipts := []inbox.Receipt{{ID: "U1", Flow: "U", Seq: 1}}
		wantProjection := []inbox.Projection{{Flow: "U", Seq: 2, Total: 1}}
		if !cmp.Equal(s.Receipts, wantReceipts) || !cmp.Equal(s.Projection, wantProjection) {
			t.Fatalf("after the waived id at other places: receipts %+v, projection %+v; want %+v, %+v",
				s.Receipts, s.Projection, wantReceipts, wantProjection)
		}
		// The producer reused U2 for U's seq 3: an operator waives that too.
		if err := in.Waive(ctx, inbox.WaiveParams{EventID: "U2", Flow: "U", Seq: 3, Reason: "id reused"}); err != nil {
			t.Fatal(err)
		}
		receive(d("U2", "U", 3, 2), fairrelay.OutcomeDuplicate)
		receive(d("U4", "U", 4, 2), fairrelay.OutcomeAccepted)
	})
}

// A seq another event's receipt took (a delivery under another id got
// there first): the real event answers sequence_conflict for good and
// holds its flow up in the queue, and waive refused every seq but the next
// (an SRE's report: no way out but hand SQL). It can now be waived at its
// own seq: it answers duplicate, the projection stays as the receipt left
// it, the flow's next event applies, and no other id can take that waiver's
// place. Both backends.
func TestWaiveASeqAnotherEventTook(t *testing.T) {
	eachBackend(t, "frinwaivesc", inbox.Options{}, func(t *testing.T, in *inbox.Inbox) {
		ctx := t.Context()
		d, receive := deliveryOf, receiver(t, in)
		receive(d("forged-1", "S", 1, 7), fairrelay.OutcomeAccepted)
		receive(d("S1", "S", 1, 1), fairrelay.OutcomeSequenceConflict)
		if err := in.Waive(ctx, inbox.WaiveParams{EventID: "S1", Flow: "S", Seq: 1, Reason: "seq 1 taken by forged-1"}); err != nil {
			t.Fatalf("waive S1 at the seq forged-1 took: %v", err)
		}
		receive(d("S1", "S", 1, 1), fairrelay.OutcomeDuplicate)
		receive(d("S2", "S", 2, 1), fairrelay.OutcomeAccepted)
		ps, err := in.Projections(ctx, "", 10)
		if err != nil || len(ps) != 1 || ps[0].Seq != 2 || ps[0].Total != 8 {
			t.Errorf("projections %+v %v, want S at seq 2 with total 8 (forged-1's 7 and S2's 1)", ps, err)
		}
		for _, bad := range []inbox.WaiveParams{
			{EventID: "Y1", Flow: "S", Seq: 1, Reason: "x"},       // waived already, for S1
			{EventID: "forged-1", Flow: "S", Seq: 1, Reason: "x"}, // its own receipt
		} {
			if err := in.Waive(ctx, bad); fieldOf(err) != "seq" {
				t.Errorf("waive %+v: %v, want invalid_input naming seq", bad, err)
			}
		}
		ws, err := in.Waivers(ctx, "", 0, 10)
		if err != nil || len(ws) != 1 || ws[0].EventID != "S1" || ws[0].Seq != 1 {
			t.Errorf("waivers %+v %v, want S1's alone", ws, err)
		}
	})
}

// fieldOf is the field an invalid_input error names, or "".
func fieldOf(err error) string {
	var fe *fairrelay.Error
	if errors.As(err, &fe) && fe.Code == fairrelay.CodeInvalidInput {
		return fe.Field
	}
	return ""
}
