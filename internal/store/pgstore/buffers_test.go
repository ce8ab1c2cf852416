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

// The pool hands back buffers emptied, and drops ones a huge batch grew.
func TestBufferPoolEmptiesWhatItKeeps(t *testing.T) {
	var p bufferPool
	b := p.get()
	b.ws.add(&store.WriteSet{Flows: []store.FlowRow{{Flow: "F"}}, Events: []store.EventRow{{ID: "E", Flow: "F", Seq: 1}},
		Audit: []store.AuditRow{{Flow: "F"}}, Clock: store.Clock{Tick: 3}})
	b.arrays.int64Array(10)
	p.put(b)
	got := p.get()
	if got != b {
		t.Fatal("the pool did not keep the buffers")
	}
	if len(got.ws.flowRows)+len(got.ws.flowIndex)+len(got.ws.eventRows)+len(got.ws.audits) != 0 || got.ws.clock != nil {
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

// Buffers whose collected rows grew past maxKeptElements are not kept.
func TestBufferPoolDropsLargeWriteSets(t *testing.T) {
	var p bufferPool
	b := p.get()
	b.ws.add(&store.WriteSet{Events: make([]store.EventRow, maxKeptElements+1)})
	p.put(b)
	if again := p.get(); again == b {
		t.Fatal("the pool kept buffers whose write set passed maxKeptElements rows")
	}
}
