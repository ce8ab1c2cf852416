package pgstore

import (
	"github.com/fairrelay/fairrelay/internal/store"
)

// writeSet collects the writes of a write transaction that holds the clock
// lock, to send them as at most one statement per kind (FlowInsertMany,
// EventInsertMany, FlowFlushHeadState, FlowUpdateMany, EventUpdateMany,
// FlowClearHeadState), then the audit rows and the clock, with the next read
// that needs the server or with the commit. An updated event goes either on
// its flow row (the head state of migration 004) or to its own row: see
// stage.
//
// The order of the kinds is safe: inserts come first (an event needs its
// flow), then updates, which for a row written twice carry its last values —
// exactly the state the calls in their own order leave. A failing statement
// fails the transaction before it can commit, as a failing single write
// would.
type writeSet struct {
	flowInserts  []store.FlowRow
	eventInserts []store.EventRow
	// Indexes into the inserts: an update of a row inserted in the same set
	// is folded into its insert (one row version instead of two).
	flowInserted  map[string]int
	eventInserted map[string]int
	flowUpdates   map[string]int // flow id → index in flowRows
	flowRows      []store.FlowRow
	eventUpdates  map[string]int // event id → index in eventRows
	eventRows     []store.EventRow
	audits        []store.AuditRow
	clock         *store.Clock
	// Scratch of stage, kept for the next call (txBuffers).
	headState  map[string]int
	writtenSeq map[flowSeq]bool
	direct     []store.EventRow
}

// reset empties w, keeping its memory for the next writes (stage, and the
// next transaction: txBuffers).
func (w *writeSet) reset() {
	w.flowInserts = resetBuf(w.flowInserts)
	w.eventInserts = resetBuf(w.eventInserts)
	w.flowInserted = resetMap(w.flowInserted)
	w.eventInserted = resetMap(w.eventInserted)
	w.flowUpdates = resetMap(w.flowUpdates)
	w.flowRows = resetBuf(w.flowRows)
	w.eventUpdates = resetMap(w.eventUpdates)
	w.eventRows = resetBuf(w.eventRows)
	w.audits = resetBuf(w.audits)
	w.clock = nil
	w.headState = resetMap(w.headState)
	w.writtenSeq = resetMap(w.writtenSeq)
	w.direct = resetBuf(w.direct)
}

func (w *writeSet) empty() bool {
	return len(w.flowInserts) == 0 && len(w.eventInserts) == 0 && len(w.flowRows) == 0 &&
		len(w.eventRows) == 0 && len(w.audits) == 0 && w.clock == nil
}

func (w *writeSet) insertFlow(f store.FlowRow) {
	if w.flowInserted == nil {
		w.flowInserted = map[string]int{}
	}
	w.flowInserted[f.Flow] = len(w.flowInserts)
	w.flowInserts = append(w.flowInserts, f)
}

func (w *writeSet) insertEvent(e store.EventRow) {
	if w.eventInserted == nil {
		w.eventInserted = map[string]int{}
	}
	w.eventInserted[e.ID] = len(w.eventInserts)
	w.eventInserts = append(w.eventInserts, e)
}

func (w *writeSet) updateFlow(f store.FlowRow) {
	if i, ok := w.flowInserted[f.Flow]; ok {
		// FlowUpdate's columns; flow_id and ord stay as inserted.
		r := &w.flowInserts[i]
		r.Seq, r.Served, r.HeadSeq, r.Runnable, r.WaitUntil = f.Seq, f.Served, f.HeadSeq, f.Runnable, f.WaitUntil
		return
	}
	if w.flowUpdates == nil {
		w.flowUpdates = map[string]int{}
	}
	if i, ok := w.flowUpdates[f.Flow]; ok {
		w.flowRows[i] = f
		return
	}
	w.flowUpdates[f.Flow] = len(w.flowRows)
	w.flowRows = append(w.flowRows, f)
}

func (w *writeSet) updateEvent(e store.EventRow) {
	if i, ok := w.eventInserted[e.ID]; ok {
		// EventUpdate's columns; the rest stays as inserted.
		r := &w.eventInserts[i]
		r.State, r.Generation, r.Attempts, r.LifetimeAttempts = e.State, e.Generation, e.Attempts, e.LifetimeAttempts
		r.Reason, r.NextAt, r.LeaseUntil = e.Reason, e.NextAt, e.LeaseUntil
		return
	}
	if w.eventUpdates == nil {
		w.eventUpdates = map[string]int{}
	}
	if i, ok := w.eventUpdates[e.ID]; ok {
		w.eventRows[i] = e
		return
	}
	w.eventUpdates[e.ID] = len(w.eventRows)
	w.eventRows = append(w.eventRows, e)
}

// stage queues the collected writes on c, in the safe order, and empties w.
// cache, when not nil, knows the head_state_seq of the flows it read and is
// kept up to date with the head-state writes. The statements' arrays come
// from a, which must not be reset before they are sent.
func (w *writeSet) stage(c *pgxConn, lane store.Lane, cache *rowCache, a *arrays) {
	if n := len(w.flowInserts); n > 0 {
		ids, ord, seq, served, head := a.stringArray(n), a.int64Array(n), a.int64Array(n), a.int64Array(n), a.int64Array(n)
		run, wait := a.boolArray(n), a.int64PArray(n)
		for i, f := range w.flowInserts {
			ids[i], ord[i], seq[i], served[i], head[i], run[i], wait[i] = f.Flow, f.Ord, f.Seq, f.Served, f.HeadSeq, f.Runnable, f.WaitUntil
		}
		c.queue("FlowInsert", q["FlowInsertMany"], ids, ord, seq, served, head, run, wait)
	}
	if n := len(w.eventInserts); n > 0 {
		ids, flows, states, reasons := a.stringArray(n), a.stringArray(n), a.stringArray(n), a.stringPArray(n)
		seq, gen, att, life, next, lease, enq := a.int64Array(n), a.int64Array(n), a.int64Array(n), a.int64Array(n), a.int64Array(n), a.int64Array(n), a.int64Array(n)
		bodies := a.bytesArray(n)
		for i, e := range w.eventInserts {
			ids[i], flows[i], seq[i], bodies[i], states[i] = e.ID, e.Flow, e.Seq, e.Body, e.State
			gen[i], att[i], life[i], reasons[i] = e.Generation, e.Attempts, e.LifetimeAttempts, nullString(e.Reason)
			next[i], lease[i], enq[i] = e.NextAt, e.LeaseUntil, e.EnqueuedAt
		}
		c.queue("EventInsert", q["EventInsertMany"], ids, flows, seq, bodies, states, gen, att, life, reasons, next, lease, enq)
	}
	// The head state (migration 004): of the events the transaction
	// updated, the last one (by seq) of each flow whose row it writes goes
	// on that row (one row version instead of two; it is the flow's head,
	// or its last acked event while it has no newer one); every other goes
	// to its event row. A flow that takes the state of another event first
	// gives the state it holds back to that event's row (FlowFlushHeadState),
	// unless the transaction writes that row itself.
	headState := w.headState // flow id → index in eventRows of the event kept on its row
	if lane != store.LaneEnqueue {
		for i, e := range w.eventRows {
			if _, ok := w.flowUpdates[e.Flow]; !ok {
				continue
			}
			if old, ok := headState[e.Flow]; !ok || e.Seq > w.eventRows[old].Seq {
				if headState == nil {
					headState = map[string]int{}
					w.headState = headState
				}
				headState[e.Flow] = i
			}
		}
	}
	direct := w.direct[:0]
	if w.writtenSeq == nil {
		w.writtenSeq = map[flowSeq]bool{}
	}
	writtenSeq := w.writtenSeq
	for i, e := range w.eventRows {
		if h, ok := headState[e.Flow]; !ok || h != i {
			direct = append(direct, e)
			writtenSeq[flowSeq{e.Flow, e.Seq}] = true
		}
	}
	w.direct = direct
	if n := len(headState); n > 0 {
		flows, seqs := a.stringArray(n)[:0], a.int64Array(n)[:0]
		for _, f := range w.flowRows { // the flows' order, not the map's
			h, ok := headState[f.Flow]
			if !ok {
				continue
			}
			e := &w.eventRows[h]
			if cache != nil {
				// No flush when the flow is known to hold no head state,
				// or this event's, or one of an event written below.
				cur, known := cache.headStateSeq[f.Flow]
				cache.headStateSeq[f.Flow] = a.int64Ptr(e.Seq)
				if known && (cur == nil || *cur == e.Seq || writtenSeq[flowSeq{f.Flow, *cur}]) {
					continue
				}
			}
			flows, seqs = append(flows, f.Flow), append(seqs, e.Seq)
		}
		if len(flows) > 0 {
			written := a.stringArray(len(direct))
			for i, e := range direct {
				written[i] = e.ID
			}
			c.queue("FlowFlushHeadState", q["FlowFlushHeadState"], flows, seqs, written)
		}
	}
	if n := len(w.flowRows); n > 0 && lane == store.LaneEnqueue {
		// An enqueue writes only what it owns (seq) and the wake-up of a
		// drained flow, locking the flows just now, in flow_id order.
		ids, seq := a.stringArray(n), a.int64Array(n)
		for i, f := range w.flowRows {
			ids[i], seq[i] = f.Flow, f.Seq
		}
		c.queue("FlowLock", q["FlowLock"], ids)
		c.queue("FlowAppend", q["FlowAppendMany"], ids, seq)
	} else if n := len(w.flowRows); n > 0 {
		ids, seq, served, head := a.stringArray(n), a.int64Array(n), a.int64Array(n), a.int64Array(n)
		run, wait := a.boolArray(n), a.int64PArray(n)
		hsSeq, hsGen, hsAtt, hsLife, hsNext, hsLease := a.int64PArray(n), a.int64Array(n), a.int64Array(n), a.int64Array(n), a.int64Array(n), a.int64Array(n)
		hsState, hsReason := a.stringArray(n), a.stringPArray(n)
		for i, f := range w.flowRows {
			ids[i], seq[i], served[i], head[i], run[i], wait[i] = f.Flow, f.Seq, f.Served, f.HeadSeq, f.Runnable, f.WaitUntil
			if h, ok := headState[f.Flow]; ok {
				e := &w.eventRows[h]
				hsSeq[i], hsState[i], hsGen[i], hsAtt[i], hsLife[i] = a.int64Ptr(e.Seq), e.State, e.Generation, e.Attempts, e.LifetimeAttempts
				hsReason[i], hsNext[i], hsLease[i] = nullString(e.Reason), e.NextAt, e.LeaseUntil
			}
		}
		c.queue("FlowUpdate", q["FlowUpdateMany"], ids, seq, served, head, run, wait,
			hsSeq, hsState, hsGen, hsAtt, hsLife, hsReason, hsNext, hsLease)
	}
	if n := len(direct); n > 0 {
		ids, states, reasons := a.stringArray(n), a.stringArray(n), a.stringPArray(n)
		gen, att, life, next, lease := a.int64Array(n), a.int64Array(n), a.int64Array(n), a.int64Array(n), a.int64Array(n)
		var clearFlows []string
		var clearSeqs []int64
		for i, e := range direct {
			ids[i], states[i], gen[i], att[i], life[i] = e.ID, e.State, e.Generation, e.Attempts, e.LifetimeAttempts
			reasons[i], next[i], lease[i] = nullString(e.Reason), e.NextAt, e.LeaseUntil
			if _, ok := w.flowUpdates[e.Flow]; !ok || lane == store.LaneEnqueue {
				// The flow row is not written here: its head state, if it
				// describes this event, must stop applying.
				clearFlows, clearSeqs = append(clearFlows, e.Flow), append(clearSeqs, e.Seq)
				if cache != nil {
					if cur := cache.headStateSeq[e.Flow]; cur != nil && *cur == e.Seq {
						cache.headStateSeq[e.Flow] = nil
					}
				}
			}
		}
		c.queue("EventUpdate", q["EventUpdateMany"], ids, states, gen, att, life, reasons, next, lease)
		if len(clearFlows) > 0 {
			c.queue("FlowClearHeadState", q["FlowClearHeadState"], clearFlows, clearSeqs)
		}
	}
	for _, a := range w.audits {
		c.queue("AuditInsert", q["AuditInsert"], a.EventID, a.Action, a.Reason, a.Operator, a.PreviousReason, a.Generation, a.At)
	}
	if w.clock != nil {
		c.queue("ClockSet", q["ClockSet"], w.clock.Tick, w.clock.Ticket, w.clock.Flows, laneRows(lane))
	}
	w.reset()
}
