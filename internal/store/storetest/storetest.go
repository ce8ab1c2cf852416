// Package storetest is the conformance suite of the store seam
// (internal/store): the same cases, run directly against every backend,
// without the root package in between — the answers of Store.Enqueue, the
// order and locking-free answers of Tx.Read (picks in both dispatch orders,
// the due index and its paging, events with their flows and the events
// behind them), the row images Tx.Write leaves, every ReadTx listing, and
// the change signal (Store.Changes).
// A backend is done when Run passes (the model is River's riverdrivertest).
// It imports no fairrelay package above the seam.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fairrelay/fairrelay/internal/store"
)

// Opener opens a fresh, empty store under the entry rule entry ("seed" or
// "fair"), closed when the test ends. reopen opens the same store again
// under entry with adopt.
type Opener func(t *testing.T, entry string) (s store.Store, reopen func(entry string, adopt bool) (store.Store, error))

var bg = context.Background()

// Run runs every case against the backend open opens.
func Run(t *testing.T, open Opener) {
	t.Run("enqueue answers", func(t *testing.T) { t.Parallel(); enqueueAnswers(t, open) })
	t.Run("enqueue checks in SPEC order", func(t *testing.T) { t.Parallel(); enqueueChecks(t, open) })
	t.Run("identifier rule", func(t *testing.T) { t.Parallel(); identRule(t, open) })
	t.Run("pick order seed", func(t *testing.T) { t.Parallel(); pickOrder(t, open, "seed") })
	t.Run("pick order fair", func(t *testing.T) { t.Parallel(); pickOrder(t, open, "fair") })
	t.Run("due index and paging", func(t *testing.T) { t.Parallel(); dueIndex(t, open) })
	t.Run("events with flows and next", func(t *testing.T) { t.Parallel(); eventsRead(t, open) })
	t.Run("next of two events of one flow", func(t *testing.T) { t.Parallel(); nextOfTwo(t, open) })
	t.Run("writes read back", func(t *testing.T) { t.Parallel(); writesReadBack(t, open) })
	t.Run("read transaction listings", func(t *testing.T) { t.Parallel(); listings(t, open) })
	t.Run("console reads", func(t *testing.T) { t.Parallel(); consoleReads(t, open) })
	t.Run("entry rule is stored", func(t *testing.T) { t.Parallel(); entryRule(t, open) })
	t.Run("change signal", func(t *testing.T) { t.Parallel(); changeSignal(t, open) })
}

func body(n int) []byte { return fmt.Appendf(nil, `{"delta":%d}`, n) }

func ptr[T any](v T) *T { return &v }

// enqueue enqueues events at tick at and fails the test on an error.
func enqueue(t *testing.T, s store.Store, at int64, evs ...store.NewEvent) []store.EnqueueAnswer {
	t.Helper()
	r, err := s.Enqueue(bg, nil, store.EnqueueParams{At: at, MaxBodyBytes: 1 << 20, Events: evs})
	if err != nil {
		t.Fatalf("enqueue %v at %d: %v", evs, at, err)
	}
	return r.Answers
}

// twoPerFlow is two events each (Fnna, Fnnb) of the flows F00 to F(n-1).
func twoPerFlow(n int) []store.NewEvent {
	var evs []store.NewEvent
	for i := range n {
		f := fmt.Sprintf("F%02d", i)
		evs = append(evs, ev(f+"a", f, 1), ev(f+"b", f, 1))
	}
	return evs
}

func ev(id, flow string, n int) store.NewEvent {
	return store.NewEvent{ID: id, Flow: flow, Body: body(n)}
}

// write runs one write transaction of lanes: read rs, let decide compute the
// writes from the answer, write them, commit.
func write(t *testing.T, s store.Store, lanes store.Lane, rs store.ReadSet, decide func(rr *store.ReadResult) *store.WriteSet) *store.ReadResult {
	t.Helper()
	tx, err := s.Begin(bg, lanes)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(bg)
	rr, err := tx.Read(bg, rs)
	if err != nil {
		t.Fatal(err)
	}
	if ws := decide(rr); ws != nil {
		if err := tx.Write(bg, ws); err != nil {
			t.Fatal(err)
		}
	}
	// The rows a read hands out live as long as its transaction (a backend
	// may reuse their memory): keep copies for the test to look at after.
	kept := clone(rr)
	if err := tx.Commit(bg); err != nil {
		t.Fatal(err)
	}
	return kept
}

// clone copies every row of rr.
func clone(rr *store.ReadResult) *store.ReadResult {
	out := &store.ReadResult{Clock: rr.Clock}
	events := func(m map[string]*store.EventRow) map[string]*store.EventRow {
		if m == nil {
			return nil
		}
		c := make(map[string]*store.EventRow, len(m))
		for k, v := range m {
			e := *v
			c[k] = &e
		}
		return c
	}
	out.Events, out.Next = events(rr.Events), events(rr.Next)
	if rr.Flows != nil {
		out.Flows = make(map[string]*store.FlowRow, len(rr.Flows))
		for k, v := range rr.Flows {
			f := *v
			out.Flows[k] = &f
		}
	}
	if rr.Held != nil {
		out.Held = make(map[string]bool, len(rr.Held))
		for k, v := range rr.Held {
			out.Held[k] = v
		}
	}
	heads := func(hs []store.FlowHead) []store.FlowHead {
		var c []store.FlowHead
		for _, h := range hs {
			if h.Head != nil {
				e := *h.Head
				h.Head = &e
			}
			c = append(c, h)
		}
		return c
	}
	out.Picks, out.Due = heads(rr.Picks), heads(rr.Due)
	return out
}

// read runs fn in a read transaction.
func read(t *testing.T, s store.Store, fn func(rt store.ReadTx)) {
	t.Helper()
	rt, err := s.BeginRead(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Rollback(bg)
	fn(rt)
}

func enqueueAnswers(t *testing.T, open Opener) {
	s, _ := open(t, "seed")
	got := enqueue(t, s, 3, ev("A1", "A", 1), ev("A2", "A", 1), ev("B1", "B", 1), ev("A1", "A", 1), ev("A1", "A", 2), ev("A1", "B", 1))
	want := []store.EnqueueAnswer{{Status: "created", Seq: 1}, {Status: "created", Seq: 2}, {Status: "created", Seq: 1}, {Status: "existing", Seq: 1}, {Status: "conflict", Seq: 0}, {Status: "conflict", Seq: 0}}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("batch answers (-want +got):\n%s", d)
	}
	r, err := s.Enqueue(bg, nil, store.EnqueueParams{At: store.AtStored, MaxBodyBytes: 1 << 20, Events: []store.NewEvent{ev("A3", "A", 1)}})
	if err != nil || r.Tick != 3 || r.Answers[0] != (store.EnqueueAnswer{Status: "created", Seq: 3}) {
		t.Fatalf("enqueue at the stored tick: %+v %v, want created 3 at tick 3", r, err)
	}
	// A regressed tick with Floor runs at the stored one.
	r, err = s.Enqueue(bg, nil, store.EnqueueParams{At: 1, Floor: true, MaxBodyBytes: 1 << 20, Events: []store.NewEvent{ev("C1", "C", 1)}})
	if err != nil || r.Tick != 3 {
		t.Fatalf("enqueue at 1 with the floor: %+v %v, want tick 3", r, err)
	}
	read(t, s, func(rt store.ReadTx) {
		fs, err := rt.FlowList(bg, "", 10)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, f := range fs {
			names = append(names, fmt.Sprintf("%s seq %d head %d runnable %v", f.Flow, f.Seq, f.HeadSeq, f.Runnable))
		}
		want := []string{"A seq 3 head 1 runnable true", "B seq 1 head 1 runnable true", "C seq 1 head 1 runnable true"}
		if d := cmp.Diff(want, names); d != "" {
			t.Fatalf("flows (-want +got):\n%s", d)
		}
		// Creation order follows the batch's order.
		ord := map[string]int64{}
		for _, f := range fs {
			ord[f.Flow] = f.Ord
		}
		if !(ord["A"] < ord["B"] && ord["B"] < ord["C"]) {
			t.Fatalf("creation order %v, want A < B < C", ord)
		}
		e, err := rt.EventGet(bg, "A2")
		if err != nil || e == nil || e.Seq != 2 || e.State != store.StateReady || e.NextAt != 3 || e.EnqueuedAt != 3 || string(e.Body) != string(body(1)) {
			t.Fatalf("A2: %+v %v", e, err)
		}
	})
}

func enqueueChecks(t *testing.T, open Opener) {
	s, _ := open(t, "seed")
	enqueue(t, s, 5, ev("A1", "A", 1))
	try := func(p store.EnqueueParams) error {
		if p.MaxBodyBytes == 0 {
			p.MaxBodyBytes = 16
		}
		_, err := s.Enqueue(bg, nil, p)
		return err
	}
	var ce *store.ClockRegressedError
	// The clock first, whatever else is wrong.
	if err := try(store.EnqueueParams{At: 4, Events: []store.NewEvent{ev("", "A", 1)}}); !errors.As(err, &ce) || ce.At != 4 || ce.Stored != 5 {
		t.Fatalf("bad id at a regressed tick: %v, want clock regressed (4 against 5)", err)
	}
	for _, c := range []struct {
		name, field string
		p           store.EnqueueParams
	}{
		{"jump", "at", store.EnqueueParams{At: 100, MaxTickJump: 10, Events: []store.NewEvent{ev("", "A", 1)}}},
		{"beyond MaxTick", "at", store.EnqueueParams{At: store.MaxTick + 1, Events: []store.NewEvent{ev("B1", "B", 1)}}},
		{"empty id", "id", store.EnqueueParams{At: 5, Events: []store.NewEvent{ev("B1", "B", 1), ev("", "B", 1)}}},
		{"empty flow", "flow", store.EnqueueParams{At: 5, Events: []store.NewEvent{ev("B1", "", 1)}}},
		{"empty body", "body", store.EnqueueParams{At: 5, Events: []store.NewEvent{{ID: "B1", Flow: "B"}}}},
		{"long body", "body", store.EnqueueParams{At: 5, Events: []store.NewEvent{{ID: "B1", Flow: "B", Body: []byte(strings.Repeat("x", 17))}}}},
	} {
		var ie *store.InvalidError
		if err := try(c.p); !errors.As(err, &ie) || ie.Field != c.field {
			t.Errorf("%s: %v, want invalid %s", c.name, err, c.field)
		}
	}
	// Nothing of the failed batches was written, not even the tick.
	read(t, s, func(rt store.ReadTx) {
		c, err := rt.Clock(bg)
		if err != nil || c.Tick != 5 {
			t.Fatalf("clock %+v %v, want tick 5", c, err)
		}
		if e, err := rt.EventGet(bg, "B1"); err != nil || e != nil {
			t.Fatalf("B1 after failed batches: %+v %v", e, err)
		}
		if fs, err := rt.FlowList(bg, "", 10); err != nil || len(fs) != 1 {
			t.Fatalf("flows after failed batches: %+v %v, want A only", fs, err)
		}
	})
}

// Identifiers the rule refuses and ones it keeps (internal/ident). Each
// backend must agree: the PostgreSQL one checks in SQL.
var (
	badIDs = []string{
		"", strings.Repeat("x", 201), "S1 ", " S1", "S1\t", "A\n1", "A\x7f", "S\u00851", "S\u200b1", "S\u20281", "S\u20291", "S\u00a0",
		"\u3000S", "S\ufeff1", "S\u00ad", "S\U000e0041", "S\u202e1", "S\u2060",
	}
	goodIDs = []string{"S1", "a b", "ümlaut", "日本", "x-y_z.1", strings.Repeat("é", 100), "emoji 🙂", "hair\u200aspace", `back\slash`}
)

func identRule(t *testing.T, open Opener) {
	s, _ := open(t, "seed")
	for _, id := range badIDs {
		var ie *store.InvalidError
		_, err := s.Enqueue(bg, nil, store.EnqueueParams{At: 1, MaxBodyBytes: 64, Events: []store.NewEvent{ev(id, "F", 1)}})
		if !errors.As(err, &ie) || ie.Field != "id" {
			t.Errorf("id %q: %v, want invalid id", id, err)
		}
		_, err = s.Enqueue(bg, nil, store.EnqueueParams{At: 1, MaxBodyBytes: 64, Events: []store.NewEvent{ev("F1", id, 1)}})
		if !errors.As(err, &ie) || ie.Field != "flow" {
			t.Errorf("flow %q: %v, want invalid flow", id, err)
		}
	}
	for i, id := range goodIDs {
		if a := enqueue(t, s, 1, ev(id, id, i+1)); a[0].Status != "created" {
			t.Errorf("id %q: %+v", id, a)
		}
	}
}

// pickOrder sets served on flows by hand and requires the runnable index in
// the entry rule's order (SPEC §2 step 3, §7), with the heads.
func pickOrder(t *testing.T, open Opener, entry string) {
	s, _ := open(t, entry)
	// Created in the order C, A, D, B; served set to C:5 A:2 D:2 B:9.
	for _, f := range []string{"C", "A", "D", "B"} {
		enqueue(t, s, 1, ev(f+"1", f, 1), ev(f+"2", f, 1))
	}
	served := map[string]int64{"C": 5, "A": 2, "D": 2, "B": 9}
	order := store.OrderFlowID
	want := []string{"A", "D", "C", "B"}
	if entry == "fair" {
		order = store.OrderCreation
		want = []string{"A", "D", "C", "B"} // A was created before D
	}
	write(t, s, store.LaneClaim, store.ReadSet{At: 1, PickLimit: 10, Order: order}, func(rr *store.ReadResult) *store.WriteSet {
		ws := &store.WriteSet{Clock: rr.Clock}
		for _, h := range rr.Picks {
			f := h.Flow
			f.Served = served[f.Flow]
			ws.Flows = append(ws.Flows, f)
		}
		return ws
	})
	for _, k := range []int{1, 2, 4, 10} {
		rr := write(t, s, store.LaneClaim, store.ReadSet{At: 1, PickLimit: k, Order: order}, func(*store.ReadResult) *store.WriteSet { return nil })
		var got []string
		for _, h := range rr.Picks {
			got = append(got, h.Flow.Flow)
			if h.Head == nil || h.Head.ID != h.Flow.Flow+"1" || h.Head.Seq != 1 {
				t.Fatalf("pick %s: head %+v, want %s1", h.Flow.Flow, h.Head, h.Flow.Flow)
			}
		}
		if w := want[:min(k, len(want))]; !slices.Equal(got, w) {
			t.Fatalf("pick %d under %s: %v, want %v", k, entry, got, w)
		}
	}
	// Ties on served break by flow id (seed) or creation order (fair): make
	// every served equal.
	write(t, s, store.LaneClaim, store.ReadSet{At: 1, PickLimit: 10, Order: order}, func(rr *store.ReadResult) *store.WriteSet {
		ws := &store.WriteSet{Clock: rr.Clock}
		for _, h := range rr.Picks {
			f := h.Flow
			f.Served = 7
			ws.Flows = append(ws.Flows, f)
		}
		return ws
	})
	rr := write(t, s, store.LaneClaim, store.ReadSet{At: 1, PickLimit: 10, Order: order}, func(*store.ReadResult) *store.WriteSet { return nil })
	var got []string
	for _, h := range rr.Picks {
		got = append(got, h.Flow.Flow)
	}
	tie := []string{"A", "B", "C", "D"}
	if entry == "fair" {
		tie = []string{"C", "A", "D", "B"}
	}
	if !slices.Equal(got, tie) {
		t.Fatalf("ties under %s: %v, want %v", entry, got, tie)
	}
	// A flow that is not runnable is not picked; the others keep their order.
	write(t, s, store.LaneClaim, store.ReadSet{At: 1, PickLimit: 10, Order: order}, func(rr *store.ReadResult) *store.WriteSet {
		f := rr.Picks[0].Flow
		w := int64(50)
		f.Runnable, f.WaitUntil = false, &w
		return &store.WriteSet{Clock: rr.Clock, Flows: []store.FlowRow{f}}
	})
	rr = write(t, s, store.LaneClaim, store.ReadSet{At: 1, PickLimit: 10, Order: order}, func(*store.ReadResult) *store.WriteSet { return nil })
	if len(rr.Picks) != 3 || rr.Picks[0].Flow.Flow != tie[1] {
		t.Fatalf("after the first stopped being runnable: %+v", rr.Picks)
	}
}

// dueIndex files flows in the due index and requires the due read in
// (wait_until, flow) order, at max(At, stored tick), paged by DueAfter.
func dueIndex(t *testing.T, open Opener) {
	s, _ := open(t, "fair")
	waits := map[string]int64{"F1": 30, "F2": 10, "F3": 20, "F4": 10, "F5": 99}
	var evs []store.NewEvent
	for f := range waits {
		evs = append(evs, ev(f+"e", f, 1))
	}
	slices.SortFunc(evs, func(a, b store.NewEvent) int { return strings.Compare(a.ID, b.ID) })
	enqueue(t, s, 1, evs...)
	write(t, s, store.LaneClaim, store.ReadSet{At: 1, PickLimit: 10, Order: store.OrderCreation}, func(rr *store.ReadResult) *store.WriteSet {
		ws := &store.WriteSet{Clock: rr.Clock}
		for _, h := range rr.Picks {
			f := h.Flow
			w := waits[f.Flow]
			f.Runnable, f.WaitUntil = false, &w
			ws.Flows = append(ws.Flows, f)
		}
		return ws
	})
	due := func(at int64, limit int, after *store.FlowKey) []string {
		rr := write(t, s, store.LaneClaim, store.ReadSet{At: at, DueLimit: limit, DueAfter: after}, func(*store.ReadResult) *store.WriteSet { return nil })
		var out []string
		for _, h := range rr.Due {
			if h.Head == nil || h.Head.ID != h.Flow.Flow+"e" {
				t.Fatalf("due %s: head %+v", h.Flow.Flow, h.Head)
			}
			out = append(out, fmt.Sprintf("%s@%d", h.Flow.Flow, *h.Flow.WaitUntil))
		}
		return out
	}
	if got, want := due(20, 10, nil), []string{"F2@10", "F4@10", "F3@20"}; !slices.Equal(got, want) {
		t.Fatalf("due at 20: %v, want %v", got, want)
	}
	if got, want := due(20, 2, &store.FlowKey{WaitUntil: 10, Flow: "F2"}), []string{"F4@10", "F3@20"}; !slices.Equal(got, want) {
		t.Fatalf("due at 20 after F2: %v, want %v", got, want)
	}
	if got := due(9, 10, nil); len(got) != 0 {
		t.Fatalf("due at 9: %v, want none", got)
	}
	// AtStored, and a tick below the stored one, read at the stored tick.
	enqueue(t, s, 30, ev("X1", "X", 1))
	if got, want := due(store.AtStored, 10, nil), []string{"F2@10", "F4@10", "F3@20", "F1@30"}; !slices.Equal(got, want) {
		t.Fatalf("due at the stored tick 30: %v, want %v", got, want)
	}
	if got := due(0, 10, nil); len(got) != 4 {
		t.Fatalf("due at 0 with the store at 30: %v, want 4 flows", got)
	}
	read(t, s, func(rt store.ReadTx) {
		if w, ok, err := rt.NextWait(bg); err != nil || !ok || w != 10 {
			t.Fatalf("next wait: %d %v %v, want 10", w, ok, err)
		}
	})
}

func eventsRead(t *testing.T, open Opener) {
	s, _ := open(t, "seed")
	enqueue(t, s, 2, ev("A1", "A", 1), ev("A2", "A", 2), ev("B1", "B", 3))
	rr := write(t, s, store.LaneSettle, store.ReadSet{At: 2, Events: []string{"A1", "B1", "nope"}, Next: true}, func(*store.ReadResult) *store.WriteSet { return nil })
	if len(rr.Events) != 2 || rr.Events["A1"].Seq != 1 || rr.Events["B1"].Flow != "B" || rr.Events["nope"] != nil {
		t.Fatalf("events: %+v", rr.Events)
	}
	if len(rr.Flows) != 2 || rr.Flows["A"].Seq != 2 || rr.Flows["B"].Seq != 1 {
		t.Fatalf("flows: %+v", rr.Flows)
	}
	if len(rr.Next) != 1 || rr.Next["A1"] == nil || rr.Next["A1"].ID != "A2" || string(rr.Next["A1"].Body) != string(body(2)) {
		t.Fatalf("next: %+v", rr.Next)
	}
	if rr.Clock.Tick != 2 {
		t.Fatalf("clock: %+v", rr.Clock)
	}
	rr = write(t, s, store.LaneSettle, store.ReadSet{At: 2, Events: []string{"A1"}}, func(*store.ReadResult) *store.WriteSet { return nil })
	if rr.Next != nil {
		t.Fatalf("next without asking: %+v", rr.Next)
	}
}

// writesReadBack writes row images as a claim and a settle do and reads
// them back through every read path: the write transaction's, the picks'
// heads, the read transaction's.
func writesReadBack(t *testing.T, open Opener) {
	s, _ := open(t, "seed")
	enqueue(t, s, 1, ev("A1", "A", 1), ev("A2", "A", 1), ev("B1", "B", 1))
	lease := int64(6)
	// A claim of A1: the head's event and its flow, the ticket.
	write(t, s, store.LaneClaim, store.ReadSet{At: 1, PickLimit: 1, Order: store.OrderFlowID}, func(rr *store.ReadResult) *store.WriteSet {
		h := rr.Picks[0]
		f, e := h.Flow, *h.Head
		f.Served, f.Runnable, f.WaitUntil = 1, false, &lease
		e.State, e.Generation, e.Attempts, e.LifetimeAttempts, e.LeaseUntil = store.StateInflight, 1, 1, 1, lease
		return &store.WriteSet{Clock: store.Clock{Tick: 1, Ticket: 1}, Flows: []store.FlowRow{f}, Events: []store.EventRow{e}}
	})
	read(t, s, func(rt store.ReadTx) {
		c, _ := rt.Clock(bg)
		e, err := rt.EventGet(bg, "A1")
		if err != nil || c != (store.Clock{Tick: 1, Ticket: 1}) || e.State != store.StateInflight || e.Generation != 1 || e.LeaseUntil != 6 {
			t.Fatalf("after the claim: clock %+v, A1 %+v %v", c, e, err)
		}
	})
	// Its ack: A1 acked, A2 the head, runnable; an audit row.
	write(t, s, store.LaneSettle, store.ReadSet{At: 2, Events: []string{"A1"}, Next: true}, func(rr *store.ReadResult) *store.WriteSet {
		e, f := *rr.Events["A1"], *rr.Flows["A"]
		e.State = store.StateAcked
		f.HeadSeq, f.Runnable, f.WaitUntil = 2, true, nil
		op := "ops"
		return &store.WriteSet{Clock: store.Clock{Tick: 2, Ticket: 1}, Flows: []store.FlowRow{f}, Events: []store.EventRow{e},
			Audit: []store.AuditRow{{EventID: ptr("A1"), Flow: "A", Action: "test", Reason: "r", Operator: &op, Generation: ptr(int64(1)), At: 2, Wall: 1700000000123}}}
	})
	// A claim of A2 (the flow row holds A2's state now, on PostgreSQL);
	// then a settle that writes A2 alone, without its flow row.
	write(t, s, store.LaneClaim, store.ReadSet{At: 2, PickLimit: 2, Order: store.OrderFlowID}, func(rr *store.ReadResult) *store.WriteSet {
		if len(rr.Picks) != 2 || rr.Picks[0].Flow.Flow != "B" || rr.Picks[1].Head.ID != "A2" {
			t.Fatalf("picks after the ack: %+v", rr.Picks)
		}
		h := rr.Picks[1]
		f, e := h.Flow, *h.Head
		f.Served, f.Runnable, f.WaitUntil = 2, false, &lease
		e.State, e.Generation, e.Attempts, e.LifetimeAttempts, e.LeaseUntil = store.StateInflight, 1, 1, 1, lease
		return &store.WriteSet{Clock: store.Clock{Tick: 2, Ticket: 2}, Flows: []store.FlowRow{f}, Events: []store.EventRow{e}}
	})
	write(t, s, store.LaneSettle, store.ReadSet{At: 3, Events: []string{"A2"}}, func(rr *store.ReadResult) *store.WriteSet {
		e := *rr.Events["A2"]
		if e.State != store.StateInflight || e.Generation != 1 {
			t.Fatalf("A2 as read: %+v", e)
		}
		e.Attempts = 9
		return &store.WriteSet{Clock: store.Clock{Tick: 3, Ticket: 2}, Events: []store.EventRow{e}}
	})
	read(t, s, func(rt store.ReadTx) {
		got := map[string]string{}
		es, err := rt.EventList(bg, "", 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			got[e.ID] = fmt.Sprintf("%s g%d a%d", e.State, e.Generation, e.Attempts)
		}
		want := map[string]string{"A1": "acked g1 a1", "A2": "inflight g1 a9", "B1": "ready g0 a0"}
		if d := cmp.Diff(want, got); d != "" {
			t.Fatalf("events (-want +got):\n%s", d)
		}
		as, err := rt.AuditList(bg, 0, 10)
		if err != nil || len(as) != 1 || *as[0].EventID != "A1" || as[0].Flow != "A" || *as[0].Operator != "ops" || as[0].PreviousReason != nil ||
			*as[0].Generation != 1 || as[0].Wall != 1700000000123 {
			t.Fatalf("audit: %+v %v", as, err)
		}
	})
}

func listings(t *testing.T, open Opener) {
	s, _ := open(t, "seed")
	enqueue(t, s, 1, twoPerFlow(25)...)
	// Quarantine the heads of F03, F11 and F20; ack F05's head.
	write(t, s, store.LaneSettle, store.ReadSet{At: 1, Events: []string{"F03a", "F11a", "F20a", "F05a"}}, func(rr *store.ReadResult) *store.WriteSet {
		ws := &store.WriteSet{Clock: rr.Clock}
		for id, e := range rr.Events {
			f := *rr.Flows[e.Flow]
			if id == "F05a" {
				e.State, f.HeadSeq = store.StateAcked, 2
			} else {
				e.State, e.Reason, e.Generation = store.StateQuarantined, "id_conflict", 1
				if id == "F11a" {
					e.Reason = store.StateQuarantined + "_other" // another reason, for the filter
				}
				f.Runnable, f.WaitUntil = false, nil
			}
			ws.Events = append(ws.Events, *e)
			ws.Flows = append(ws.Flows, f)
		}
		return ws
	})
	read(t, s, func(rt store.ReadTx) {
		var flows []string
		for after := ""; ; {
			fs, err := rt.FlowList(bg, after, 7)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range fs {
				flows = append(flows, f.Flow)
			}
			if len(fs) < 7 {
				break
			}
			after = fs[len(fs)-1].Flow
		}
		if len(flows) != 25 || flows[0] != "F00" || flows[24] != "F24" || !slices.IsSorted(flows) {
			t.Fatalf("flows paged by 7: %v", flows)
		}
		var events []string
		for af, as := "", int64(0); ; {
			es, err := rt.EventList(bg, af, as, 9)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range es {
				events = append(events, e.ID)
			}
			if len(es) < 9 {
				break
			}
			af, as = es[len(es)-1].Flow, es[len(es)-1].Seq
		}
		if len(events) != 50 || events[0] != "F00a" || events[1] != "F00b" || events[49] != "F24b" {
			t.Fatalf("events paged by 9: %d %v", len(events), events)
		}
		q1, err := rt.QuarantinedList(bg, "", store.QuarantinedFilter{}, 2)
		if err != nil || len(q1) != 2 || q1[0].ID != "F03a" || q1[1].ID != "F11a" || q1[0].Reason != "id_conflict" {
			t.Fatalf("quarantined page 1: %+v %v", q1, err)
		}
		q2, err := rt.QuarantinedList(bg, "F11", store.QuarantinedFilter{}, 2)
		if err != nil || len(q2) != 1 || q2[0].ID != "F20a" {
			t.Fatalf("quarantined after F11: %+v %v", q2, err)
		}
		// Filtered by the store: a page holds matching heads only.
		q3, err := rt.QuarantinedList(bg, "", store.QuarantinedFilter{Reason: "id_conflict"}, 1)
		if err != nil || len(q3) != 1 || q3[0].ID != "F03a" {
			t.Fatalf("quarantined for id_conflict, page of 1: %+v %v", q3, err)
		}
		q4, err := rt.QuarantinedList(bg, "F03", store.QuarantinedFilter{Reason: "id_conflict"}, 5)
		if err != nil || len(q4) != 1 || q4[0].ID != "F20a" {
			t.Fatalf("quarantined for id_conflict after F03: %+v %v (F11's reason is another)", q4, err)
		}
		q5, err := rt.QuarantinedList(bg, "", store.QuarantinedFilter{Flow: "F11"}, 5)
		if err != nil || len(q5) != 1 || q5[0].ID != "F11a" {
			t.Fatalf("quarantined of flow F11: %+v %v", q5, err)
		}
		fs, _ := rt.FlowList(bg, "F04", 2)
		heads, err := rt.Heads(bg, fs)
		if err != nil || heads["F05"].ID != "F05b" || heads["F06"].ID != "F06a" {
			t.Fatalf("heads of F05, F06: %+v %v", heads, err)
		}
		if e, err := rt.EventGet(bg, "nope"); err != nil || e != nil {
			t.Fatalf("absent event: %+v %v", e, err)
		}
		ps, err := rt.FlowPick(bg, store.OrderFlowID, 3)
		if err != nil || len(ps) != 3 || ps[0].Flow.Flow != "F00" || ps[2].Flow.Flow != "F02" {
			t.Fatalf("read pick: %+v %v", ps, err)
		}
		if _, ok, err := rt.NextWait(bg); err != nil || ok {
			t.Fatalf("next wait with none waiting: %v %v", ok, err)
		}
	})
}

func entryRule(t *testing.T, open Opener) {
	s, reopen := open(t, "seed")
	if s.Entry() != "seed" {
		t.Fatalf("entry %q, want seed", s.Entry())
	}
	var me *store.EntryMismatchError
	if _, err := reopen("fair", false); !errors.As(err, &me) || me.Stored != "seed" {
		t.Fatalf("reopen under fair: %v, want an entry mismatch", err)
	}
	o, err := reopen("fair", true)
	if err != nil {
		t.Fatalf("reopen adopting: %v", err)
	}
	defer o.Close()
	if o.Entry() != "seed" {
		t.Fatalf("adopted entry %q, want seed", o.Entry())
	}
}

// nextOfTwo: two events of one flow asked for (a settle batch holding the
// head's token and an older, stale one) each come with the event after
// them; keyed by flow, one once overwrote the other.
func nextOfTwo(t *testing.T, open Opener) {
	s, _ := open(t, "seed")
	enqueue(t, s, 1, ev("A1", "A", 1), ev("A2", "A", 2), ev("A3", "A", 3))
	rr := write(t, s, store.LaneSettle, store.ReadSet{At: 1, Events: []string{"A2", "A1"}, Next: true}, func(*store.ReadResult) *store.WriteSet { return nil })
	if len(rr.Next) != 2 || rr.Next["A1"] == nil || rr.Next["A1"].ID != "A2" || rr.Next["A2"] == nil || rr.Next["A2"].ID != "A3" {
		t.Fatalf("next: %+v, want A1 → A2 and A2 → A3", rr.Next)
	}
}

// consoleReads: the bounded reads of the operator console (prefix
// search, paused flows, counts, the oldest waiting head, recent settles).
func consoleReads(t *testing.T, open Opener) {
	s, _ := open(t, "seed")
	enqueue(t, s, 1, twoPerFlow(25)...)
	enqueue(t, s, 2, ev("E1", "E", 1))
	lease := int64(40)
	// Ack F00's head, quarantine F03's and F11's, claim F05's, pause F07;
	// record three settled attempts.
	write(t, s, store.LaneSettle, store.ReadSet{At: 3, Events: []string{"F00a", "F03a", "F11a", "F05a", "F07a"}}, func(rr *store.ReadResult) *store.WriteSet {
		ws := &store.WriteSet{Clock: store.Clock{Tick: 3, Ticket: rr.Clock.Ticket}}
		for id, e := range rr.Events {
			f := *rr.Flows[e.Flow]
			switch id {
			case "F00a":
				e.State, e.AckedAt, f.HeadSeq = store.StateAcked, ptr(int64(3)), 2
				ws.Acked++
			case "F05a":
				e.State, e.LeaseUntil, e.Generation = store.StateInflight, lease, 1
				f.Runnable, f.WaitUntil = false, &lease
			case "F07a":
				f.Paused, f.PausedBy, f.PausedReason, f.PausedAt = true, "op", "why", 3
				f.Runnable, f.WaitUntil = false, nil
			default:
				e.State, e.Reason, e.Generation = store.StateQuarantined, "rejected", 1
				f.Runnable, f.WaitUntil = false, nil
			}
			ws.Events = append(ws.Events, *e)
			ws.Flows = append(ws.Flows, f)
		}
		for i, w := range []int64{1000, 2000, 3000} {
			ws.Attempts = append(ws.Attempts, store.AttemptRow{EventID: "F00a", Generation: int64(i + 1), Flow: "F00", LeaseUntil: 9,
				ClaimedWall: w - 5, SettledAt: ptr(int64(3)), SettledWall: ptr(w), Outcome: "retry", Status: "ready", DurationMs: 5})
		}
		return ws
	})
	ids := func(fs []store.FlowRow) []string {
		var out []string
		for _, f := range fs {
			out = append(out, f.Flow)
		}
		return out
	}
	read(t, s, func(rt store.ReadTx) {
		fs, err := rt.FlowSearch(bg, "F1", "", 100)
		if err != nil || !slices.Equal(ids(fs), []string{"F10", "F11", "F12", "F13", "F14", "F15", "F16", "F17", "F18", "F19"}) {
			t.Fatalf("flows of prefix F1: %v %v", ids(fs), err)
		}
		if fs, err = rt.FlowSearch(bg, "F1", "F15", 2); err != nil || !slices.Equal(ids(fs), []string{"F16", "F17"}) {
			t.Fatalf("flows of prefix F1 after F15: %v %v", ids(fs), err)
		}
		if fs, err = rt.FlowSearch(bg, "F19", "", 5); err != nil || !slices.Equal(ids(fs), []string{"F19"}) {
			t.Fatalf("flows of prefix F19 (the whole id): %v %v", ids(fs), err)
		}
		if fs, err = rt.FlowSearch(bg, "", "D", 2); err != nil || !slices.Equal(ids(fs), []string{"E", "F00"}) {
			t.Fatalf("flows of no prefix after D: %v %v", ids(fs), err)
		}
		if fs, err = rt.PausedList(bg, "", 5); err != nil || !slices.Equal(ids(fs), []string{"F07"}) || fs[0].PausedBy != "op" || fs[0].PausedReason != "why" {
			t.Fatalf("paused: %+v %v", fs, err)
		}
		if fs, err = rt.PausedList(bg, "F07", 5); err != nil || len(fs) != 0 {
			t.Fatalf("paused after F07: %v %v", ids(fs), err)
		}
		q, err := rt.QuarantinedList(bg, "", store.QuarantinedFilter{Prefix: "F1"}, 5)
		if err != nil || len(q) != 1 || q[0].ID != "F11a" {
			t.Fatalf("quarantined of prefix F1: %+v %v", q, err)
		}
		if q, err = rt.QuarantinedList(bg, "", store.QuarantinedFilter{Prefix: "F", Reason: "rejected"}, 5); err != nil || len(q) != 2 {
			t.Fatalf("quarantined of prefix F: %+v %v", q, err)
		}
		if c, err := rt.Counts(bg, 10); err != nil || c != (store.Counts{Inflight: 1, Quarantined: 2, Paused: 1}) {
			t.Fatalf("counts: %+v %v", c, err)
		}
		if c, err := rt.Counts(bg, 1); err != nil || c != (store.Counts{Inflight: 1, Quarantined: 1, Paused: 1}) {
			t.Fatalf("counts up to 1: %+v %v", c, err)
		}
		if o, err := rt.OldestWaiting(bg); err != nil || o == nil || o.ID != "F00b" || o.EnqueuedAt != 1 {
			t.Fatalf("oldest waiting: %+v %v", o, err)
		}
		as, err := rt.SettledSince(bg, 1500, 10)
		if err != nil || len(as) != 2 || *as[0].SettledWall != 3000 || *as[1].SettledWall != 2000 || as[0].DurationMs != 5 {
			t.Fatalf("settled since 1500: %+v %v", as, err)
		}
		if as, err = rt.SettledSince(bg, 0, 1); err != nil || len(as) != 1 || as[0].Generation != 3 {
			t.Fatalf("settled, 1: %+v %v", as, err)
		}
	})
}
