package pgstore

import (
	"testing"

	"github.com/fairrelay/fairrelay/internal/store"
)

// A slice cut from arrays is zeroed, keeps its values when the buffer grows
// under it, and comes back zeroed after reset.
func TestArraysAreZeroedAndStable(t *testing.T) {
	var a arrays
	first := a.int64Array(200)
	for i := range first {
		first[i] = int64(i + 1)
	}
	p := a.int64Ptr(7)
	big := a.int64Array(1000) // past the capacity: a new buffer
	for i, v := range first {
		if v != int64(i+1) {
			t.Fatalf("first[%d] = %d after growth, want %d", i, v, i+1)
		}
	}
	if *p != 7 {
		t.Fatalf("int64Ptr = %d after growth, want 7", *p)
	}
	for i := range big {
		big[i] = -1
	}
	names := a.stringArray(3)
	names[0] = "kept"
	a.reset()
	if again := a.int64Array(1000); again[0] != 0 || again[999] != 0 {
		t.Fatalf("int64Array after reset = %d … %d, want zeroes", again[0], again[999])
	}
	if s := a.stringArray(3); s[0] != "" {
		t.Fatalf("stringArray after reset = %q, want empty", s[0])
	}
}

// rowSlab's pointers stay valid as it adds chunks; reset drops the rows.
func TestRowSlabPointersSurviveChunks(t *testing.T) {
	var s rowSlab[store.FlowRow]
	var ps []*store.FlowRow
	for i := range 3*slabChunk + 5 {
		ps = append(ps, s.put(store.FlowRow{Flow: "F", Seq: int64(i)}))
	}
	for i, p := range ps {
		if p.Seq != int64(i) {
			t.Fatalf("row %d holds seq %d", i, p.Seq)
		}
	}
	s.reset()
	if ps[0].Flow != "" || ps[3*slabChunk].Flow != "" {
		t.Fatal("reset kept the rows' references")
	}
	if p := s.put(store.FlowRow{Flow: "G"}); p != ps[0] {
		t.Fatal("reset did not reuse the first chunk")
	}
}

// The pool hands back buffers emptied, and drops ones a huge batch grew.
func TestBufferPoolEmptiesWhatItKeeps(t *testing.T) {
	var p bufferPool
	b := p.get()
	b.cache.putFlow(store.FlowRow{Flow: "F"})
	b.cache.putEvent(store.EventRow{ID: "E", Flow: "F", Seq: 1})
	b.cache.headStateSeq["F"] = nil
	one := int64(1)
	b.cache.minWait = &one
	b.ws.insertFlow(store.FlowRow{Flow: "F"})
	b.ws.updateEvent(store.EventRow{ID: "E", Flow: "F", Seq: 1})
	b.ws.clock = &store.Clock{Tick: 3}
	b.arrays.int64Array(10)
	p.put(b)
	got := p.get()
	if got != b {
		t.Fatal("the pool did not keep the buffers")
	}
	if len(got.cache.events)+len(got.cache.bySeq)+len(got.cache.flows)+len(got.cache.headStateSeq) != 0 || got.cache.minWait != nil {
		t.Fatalf("cache not emptied: %+v", got.cache)
	}
	if !got.ws.empty() || len(got.ws.flowInserted)+len(got.ws.eventUpdates) != 0 {
		t.Fatalf("writes not emptied: %+v", got.ws)
	}
	if len(got.arrays.int64s) != 0 {
		t.Fatal("arrays not emptied")
	}
	got.arrays.int64Array(maxKeptElements + 1)
	p.put(got)
	if again := p.get(); again == got {
		t.Fatal("the pool kept buffers past maxKeptElements")
	}
}

// Buffers whose row slabs grew past maxKeptElements rows are not kept.
func TestBufferPoolDropsLargeSlabs(t *testing.T) {
	var p bufferPool
	b := p.get()
	for range maxKeptElements + 1 {
		b.cache.flowSlab.put(store.FlowRow{})
	}
	p.put(b)
	if again := p.get(); again == b {
		t.Fatal("the pool kept buffers whose slab passed maxKeptElements rows")
	}
}
