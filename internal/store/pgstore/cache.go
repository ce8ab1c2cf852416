package pgstore

import (
	"cmp"
	"slices"
	"strings"

	"github.com/fairrelay/fairrelay/internal/store"
)

// rowCache holds the rows one write transaction has read or written, so
// that a batch (ClaimBatch, SettleBatch, EnqueueBatch) asks the server once
// per row or once per batch instead of once per question. It is exact, not
// a guess, because of two facts:
//   - every row the transaction writes is locked before it is read (the
//     rules on Tx): the lane's clock row, the flow rows, and the events
//     through their flows; no other transaction changes them while the
//     cache lives. An enqueue's flows are the exception: read unlocked,
//     only their seq is exact (the enqueue lane alone writes it), and seq
//     is all an enqueue writes of them (FlowAppendMany);
//   - every write of the transaction goes through Tx, which updates the
//     cached row with the same values it sends to the server.
//
// A nil map value records a row known to be absent.
type rowCache struct {
	events map[string]*store.EventRow
	bySeq  map[flowSeq]string
	flows  map[string]*store.FlowRow
	// pick is a prefix of the runnable index in pickOrder: the flows
	// FlowPickRunnable would answer, first to last; pickAll says it holds
	// every runnable flow. pickValid is false once a write may have changed
	// the prefix.
	pick      []string
	pickOrder store.Order
	pickValid bool
	pickAll   bool
	// minWait is a lower bound of the smallest wait_until of any flow (nil:
	// no flow waits): read with the clock, lowered by every write that sets
	// a wait_until. While it lies after a tick, no head is due at that tick
	// (but for a settle committed meanwhile, whose head a later claim takes).
	minWait *int64
	// headStateSeq holds, for the flows read, their head_state_seq
	// (migration 004) as it stands in the transaction, nil for none; a
	// flow missing here is not known. It spares FlowFlushHeadState when no
	// flow needs it.
	headStateSeq map[string]*int64
	// The rows the maps point to (see rowSlab).
	eventSlab rowSlab[store.EventRow]
	flowSlab  rowSlab[store.FlowRow]
}

type flowSeq struct {
	flow string
	seq  int64
}

func newRowCache(minWait *int64) *rowCache {
	return &rowCache{
		events:       map[string]*store.EventRow{},
		bySeq:        map[flowSeq]string{},
		flows:        map[string]*store.FlowRow{},
		minWait:      minWait,
		headStateSeq: map[string]*int64{},
	}
}

// noneDue reports that no flow's wait_until is at or before tick at.
func (c *rowCache) noneDue(at int64) bool { return c.minWait == nil || *c.minWait > at }

// reset empties the cache for the next transaction (txBuffers).
func (c *rowCache) reset() {
	c.events = resetMap(c.events)
	c.bySeq = resetMap(c.bySeq)
	c.flows = resetMap(c.flows)
	c.headStateSeq = resetMap(c.headStateSeq)
	c.pick, c.pickOrder, c.pickValid, c.pickAll, c.minWait = nil, 0, false, false, nil
	c.eventSlab.reset()
	c.flowSlab.reset()
}

// resetMap empties m; one that held a very large batch is dropped rather
// than kept (clearing a map costs its capacity, not its length).
func resetMap[K comparable, V any](m map[K]V) map[K]V {
	if len(m) > 4096 {
		return map[K]V{}
	}
	clear(m)
	return m
}

func (c *rowCache) putEvent(e store.EventRow) {
	c.events[e.ID] = c.eventSlab.put(e)
	c.bySeq[flowSeq{e.Flow, e.Seq}] = e.ID
}

func (c *rowCache) putFlow(f store.FlowRow) { c.flows[f.Flow] = c.flowSlab.put(f) }

// event returns a copy of the cached event; ok is false when it is not
// cached (absent events are cached as ok with a nil row).
func (c *rowCache) event(id string) (e *store.EventRow, ok bool) {
	v, ok := c.events[id]
	if !ok || v == nil {
		return nil, ok
	}
	cp := *v
	return &cp, true
}

func (c *rowCache) eventBySeq(flow string, seq int64) (*store.EventRow, bool) {
	id, ok := c.bySeq[flowSeq{flow, seq}]
	if !ok {
		return nil, false
	}
	return c.event(id)
}

func (c *rowCache) flow(id string) (*store.FlowRow, bool) {
	v, ok := c.flows[id]
	if !ok || v == nil {
		return nil, ok
	}
	cp := *v
	return &cp, true
}

// picked answers FlowPickRunnable from the prefix, when it can.
func (c *rowCache) picked(order store.Order, limit int) ([]store.FlowRow, bool) {
	if !c.pickValid || c.pickOrder != order || (len(c.pick) < limit && !c.pickAll) {
		return nil, false
	}
	out := make([]store.FlowRow, 0, min(limit, len(c.pick)))
	for _, id := range c.pick[:min(limit, len(c.pick))] {
		f := c.flows[id]
		if f == nil {
			// A row dropped from the cache (forgetHeld invalidates the
			// prefix first; this is the fallback): read the pick again.
			return nil, false
		}
		out = append(out, *f)
	}
	return out, true
}

func (c *rowCache) setPick(order store.Order, ids []string, all bool) {
	c.pick, c.pickOrder, c.pickValid, c.pickAll = ids, order, true, all
}

// flowWritten records a FlowInsert or FlowUpdate of f. The prefix of the
// runnable index stays valid in three cases: its first flow stopped being
// runnable (a claim took it: the rest moves up); a flow outside it that is
// not runnable changed (the runnable index did not move); or a flow that was
// not runnable became runnable (a settle made its next head the head, a
// lease or a backoff ran out, a flow was created): it joins the prefix at
// its place in the index order, or stays out when it sorts after a prefix
// that does not hold every runnable flow. So a claim that follows a settle
// in the same transaction needs no second read of the index.
func (c *rowCache) flowWritten(f store.FlowRow) {
	old, known := c.flows[f.Flow]
	c.putFlow(f)
	if w := f.WaitUntil; w != nil && (c.minWait == nil || *w < *c.minWait) {
		v := *w
		c.minWait = &v
	}
	if !c.pickValid {
		return
	}
	switch i := slices.Index(c.pick, f.Flow); {
	case i == 0 && !f.Runnable:
		c.pick = c.pick[1:]
	case i < 0 && !f.Runnable:
	case i < 0 && f.Runnable && (!known || old == nil || !old.Runnable):
		at, _ := slices.BinarySearchFunc(c.pick, f.Flow, c.cmpPick)
		if at < len(c.pick) || c.pickAll {
			c.pick = slices.Insert(c.pick, at, f.Flow)
		}
	default:
		c.pickValid = false
	}
}

// cmpPick compares two cached flows in the runnable index's order: served,
// then the policy's tie-break (flow id bytewise, or creation order).
func (c *rowCache) cmpPick(a, b string) int {
	fa, fb := c.flows[a], c.flows[b]
	if d := cmp.Compare(fa.Served, fb.Served); d != 0 {
		return d
	}
	if c.pickOrder == store.OrderCreation {
		return cmp.Compare(fa.Ord, fb.Ord)
	}
	return strings.Compare(fa.Flow, fb.Flow)
}

// eventUpdated records an EventUpdate: the mutable columns of a cached row.
func (c *rowCache) eventUpdated(e store.EventRow) {
	v := c.events[e.ID]
	if v == nil {
		return
	}
	v.State, v.Generation, v.Attempts, v.LifetimeAttempts = e.State, e.Generation, e.Attempts, e.LifetimeAttempts
	v.Reason, v.NextAt, v.LeaseUntil = e.Reason, e.NextAt, e.LeaseUntil
}
