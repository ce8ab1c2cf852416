package pgstore

import (
	"sync"

	"github.com/fairrelay/fairrelay/internal/store"
)

// txBuffers is the memory of one store-owned write transaction that the
// next one reuses: the collected writes and the arrays they are sent in. A relay runs hundreds of such transactions a second, each
// caching and writing up to a batch of rows; allocating all of it afresh
// every time made the garbage collector a quarter of the client's CPU, and
// on a machine it shares with the server, the throughput's limit.
//
// Nothing in it outlives the transaction: every row the store hands out is
// a copy, and the arrays are free again once the round trip that sent them
// has returned (pgx encodes the arguments before SendBatch returns).
type txBuffers struct {
	ws     writeSet
	arrays arrays
	// The rows a transaction's reads hand out (see rowSlab): valid until
	// it ends, which is as long as the root package keeps them.
	flows  rowSlab[store.FlowRow]
	events rowSlab[store.EventRow]
	// The scan targets of its reads, and the head states it learnt.
	scan rowScan
	hs   map[string]headStateSeq
}

// bufferPool keeps the buffers of ended transactions for the next ones
// (one per transaction under way at once is all it ever holds; a
// sync.Pool would lose them at every garbage collection, which is what they
// are there to make rarer). Buffers that grew past maxKeptElements array
// elements or cached rows (a very large batch) are left to the collector.
type bufferPool struct {
	mu    sync.Mutex
	spare []*txBuffers
}

const (
	maxSpareBuffers = 16
	maxKeptElements = 1 << 16
)

// get returns empty buffers.
func (p *bufferPool) get() *txBuffers {
	p.mu.Lock()
	if n := len(p.spare); n > 0 {
		b := p.spare[n-1]
		p.spare[n-1] = nil
		p.spare = p.spare[:n-1]
		p.mu.Unlock()
		return b
	}
	p.mu.Unlock()
	return &txBuffers{}
}

// put empties b and keeps it for the next transaction.
func (p *bufferPool) put(b *txBuffers) {
	if cap(b.arrays.int64s) > maxKeptElements || cap(b.arrays.strings) > maxKeptElements ||
		cap(b.ws.flowRows) > maxKeptElements || cap(b.ws.eventRows) > maxKeptElements ||
		len(b.flows.chunks)*slabChunk > maxKeptElements || len(b.events.chunks)*slabChunk > maxKeptElements {
		return
	}
	b.ws.reset()
	b.flows.reset()
	b.events.reset()
	b.hs = resetMap(b.hs)
	b.arrays.reset()
	p.mu.Lock()
	if len(p.spare) < maxSpareBuffers {
		p.spare = append(p.spare, b)
	}
	p.mu.Unlock()
}

// arrays hands out the parameter arrays of the set-based writes (stage)
// from buffers reused across transactions. A slice it returns is zeroed and
// stays valid until reset, even after the buffer grows (the old buffer
// lives on in the slices cut from it).
type arrays struct {
	int64s   []int64
	strings  []string
	bools    []bool
	int64Ps  []*int64
	stringPs []*string
}

func (a *arrays) reset() {
	a.int64s = resetBuf(a.int64s)
	a.strings = resetBuf(a.strings)
	a.bools = resetBuf(a.bools)
	a.int64Ps = resetBuf(a.int64Ps)
	a.stringPs = resetBuf(a.stringPs)
}

// resetBuf empties buf, dropping the references its elements held.
func resetBuf[T any](buf []T) []T {
	clear(buf)
	return buf[:0]
}

// take cuts n zeroed elements from *buf, growing it (to at least twice its
// capacity) when it has no room left.
func take[T any](buf *[]T, n int) []T {
	if cap(*buf)-len(*buf) < n {
		*buf = make([]T, 0, max(2*cap(*buf), n, 256))
	}
	l := len(*buf)
	*buf = (*buf)[:l+n]
	out := (*buf)[l : l+n : l+n]
	clear(out)
	return out
}

func (a *arrays) int64Array(n int) []int64     { return take(&a.int64s, n) }
func (a *arrays) stringArray(n int) []string   { return take(&a.strings, n) }
func (a *arrays) boolArray(n int) []bool       { return take(&a.bools, n) }
func (a *arrays) int64PArray(n int) []*int64   { return take(&a.int64Ps, n) }
func (a *arrays) stringPArray(n int) []*string { return take(&a.stringPs, n) }

// int64Ptr returns a pointer to a copy of v, valid until reset.
func (a *arrays) int64Ptr(v int64) *int64 {
	p := &take(&a.int64s, 1)[0]
	*p = v
	return p
}

// rowSlab hands out row pointers from chunks reused across transactions:
// one allocation per 128 rows instead of one per row.
type rowSlab[T any] struct {
	chunks [][]T
	chunk  int // chunks[chunk] is being filled
	next   int // its next free element
}

const slabChunk = 128

// put stores a copy of v and returns a pointer to it, valid until reset.
func (s *rowSlab[T]) put(v T) *T {
	if s.chunk < len(s.chunks) && s.next == slabChunk {
		s.chunk, s.next = s.chunk+1, 0
	}
	if s.chunk == len(s.chunks) {
		s.chunks = append(s.chunks, make([]T, slabChunk))
	}
	p := &s.chunks[s.chunk][s.next]
	s.next++
	*p = v
	return p
}

// reset frees every row, dropping the references they held.
func (s *rowSlab[T]) reset() {
	for i := 0; i <= s.chunk && i < len(s.chunks); i++ {
		clear(s.chunks[i])
	}
	s.chunk, s.next = 0, 0
}
