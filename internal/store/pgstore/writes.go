package pgstore

import (
	"github.com/fairrelay/fairrelay/internal/store"
)

// writeSet collects the writes of a write transaction (store.WriteSet), to
// send them with the commit as at most one statement per kind
// (FlowFlushHeadState, FlowUpdateMany, EventUpdateMany, FlowClearHeadState),
// then the audit rows and the clock. An updated event goes either on its
// flow row (the head state of migration 004) or to its own row: see stage.
// A failing statement fails the transaction before it can commit.
type writeSet struct {
	flowRows  []store.FlowRow
	flowIndex map[string]int // flow id → index in flowRows
	eventRows []store.EventRow
	audits    []store.AuditRow
	attempts  []store.AttemptRow
	groups    []store.GroupWrite
	acked     int64
	ackedBy   map[string]int64
	clock     *store.Clock
	// Scratch of stage, kept for the next call (txBuffers).
	headState  map[string]int
	writtenSeq map[flowSeq]bool
	direct     []store.EventRow
}

type flowSeq struct {
	flow string
	seq  int64
}

// reset empties w, keeping its memory for the next transaction.
func (w *writeSet) reset() {
	w.flowRows = resetBuf(w.flowRows)
	w.flowIndex = resetMap(w.flowIndex)
	w.eventRows = resetBuf(w.eventRows)
	w.audits = resetBuf(w.audits)
	w.attempts = resetBuf(w.attempts)
	w.groups = resetBuf(w.groups)
	w.acked = 0
	w.ackedBy = resetMap(w.ackedBy)
	w.clock = nil
	w.headState = resetMap(w.headState)
	w.writtenSeq = resetMap(w.writtenSeq)
	w.direct = resetBuf(w.direct)
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

// add takes the row images of ws.
func (w *writeSet) add(ws *store.WriteSet) {
	if w.flowIndex == nil {
		w.flowIndex = map[string]int{}
	}
	for _, f := range ws.Flows {
		if i, ok := w.flowIndex[f.Flow]; ok {
			w.flowRows[i] = f
			continue
		}
		w.flowIndex[f.Flow] = len(w.flowRows)
		w.flowRows = append(w.flowRows, f)
	}
	w.eventRows = append(w.eventRows, ws.Events...)
	w.audits = append(w.audits, ws.Audit...)
	w.attempts = append(w.attempts, ws.Attempts...)
	w.groups = append(w.groups, ws.Groups...)
	w.acked += ws.Acked
	for g, n := range ws.AckedGroups {
		if w.ackedBy == nil {
			w.ackedBy = map[string]int64{}
		}
		w.ackedBy[g] += n
	}
	c := ws.Clock
	w.clock = &c
}

// headStateSeq is a flow's head_state_seq (migration 004): ok false when
// the flow holds no head state.
type headStateSeq struct {
	seq int64
	ok  bool
}

// stage queues the collected writes on c and empties w. hs holds the
// head_state_seq of the flows the transaction read (a flow missing is not
// known), and is kept up to date with the head-state writes.
// The statements' arrays come from a, which must not be reset before they
// are sent.
func (w *writeSet) stage(c *pgxConn, lanes store.Lane, hs map[string]headStateSeq, a *arrays) {
	// The head state (migration 004): of the events the transaction
	// updated, the last one (by seq) of each flow whose row it writes goes
	// on that row (one row version instead of two; it is the flow's head,
	// or its last acked event while it has no newer one); every other goes
	// to its event row. A flow that takes the state of another event first
	// gives the state it holds back to that event's row (FlowFlushHeadState),
	// unless the transaction writes that row itself.
	headState := w.headState // flow id → index in eventRows of the event kept on its row
	for i, e := range w.eventRows {
		if _, ok := w.flowIndex[e.Flow]; !ok {
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
			// No flush when the flow is known to hold no head state, or
			// this event's, or one of an event written below.
			cur, known := hs[f.Flow]
			hs[f.Flow] = headStateSeq{seq: e.Seq, ok: true}
			if known && (!cur.ok || cur.seq == e.Seq || writtenSeq[flowSeq{f.Flow, cur.seq}]) {
				continue
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
	if n := len(w.flowRows); n > 0 {
		ids, seq, served, head := a.stringArray(n), a.int64Array(n), a.int64Array(n), a.int64Array(n)
		run, wait := a.boolArray(n), a.int64PArray(n)
		paused, pausedBy, pausedReason, pausedAt := a.boolArray(n), a.stringPArray(n), a.stringPArray(n), a.int64PArray(n)
		hsSeq, hsGen, hsAtt, hsLife, hsNext, hsLease := a.int64PArray(n), a.int64Array(n), a.int64Array(n), a.int64Array(n), a.int64Array(n), a.int64Array(n)
		hsState, hsReason := a.stringArray(n), a.stringPArray(n)
		hsClaimed, hsAcked, hsClaimedBy := a.int64Array(n), a.int64PArray(n), a.stringArray(n)
		for i, f := range w.flowRows {
			ids[i], seq[i], served[i], head[i], run[i], wait[i] = f.Flow, f.Seq, f.Served, f.HeadSeq, f.Runnable, f.WaitUntil
			if f.Paused {
				paused[i], pausedBy[i], pausedReason[i], pausedAt[i] = true, nullString(f.PausedBy), nullString(f.PausedReason), a.int64Ptr(f.PausedAt)
			}
			if h, ok := headState[f.Flow]; ok {
				e := &w.eventRows[h]
				hsSeq[i], hsState[i], hsGen[i], hsAtt[i], hsLife[i] = a.int64Ptr(e.Seq), e.State, e.Generation, e.Attempts, e.LifetimeAttempts
				hsReason[i], hsNext[i], hsLease[i] = nullString(e.Reason), e.NextAt, e.LeaseUntil
				hsClaimed[i], hsAcked[i], hsClaimedBy[i] = e.ClaimedWall, e.AckedAt, e.ClaimedBy
			}
		}
		c.queue("FlowUpdate", q["FlowUpdateMany"], ids, seq, served, head, run, wait,
			paused, pausedBy, pausedReason, pausedAt,
			hsSeq, hsState, hsGen, hsAtt, hsLife, hsReason, hsNext, hsLease, hsClaimed, hsAcked, hsClaimedBy)
	}
	if n := len(direct); n > 0 {
		ids, states, reasons := a.stringArray(n), a.stringArray(n), a.stringPArray(n)
		gen, att, life, next, lease := a.int64Array(n), a.int64Array(n), a.int64Array(n), a.int64Array(n), a.int64Array(n)
		claimed, acked, claimedBy := a.int64Array(n), a.int64PArray(n), a.stringArray(n)
		var clearFlows []string
		var clearSeqs []int64
		for i, e := range direct {
			ids[i], states[i], gen[i], att[i], life[i] = e.ID, e.State, e.Generation, e.Attempts, e.LifetimeAttempts
			reasons[i], next[i], lease[i], claimed[i], acked[i], claimedBy[i] = nullString(e.Reason), e.NextAt, e.LeaseUntil, e.ClaimedWall, e.AckedAt, e.ClaimedBy
			if _, ok := w.flowIndex[e.Flow]; !ok {
				// The flow row is not written here: its head state, if it
				// describes this event, must stop applying.
				clearFlows, clearSeqs = append(clearFlows, e.Flow), append(clearSeqs, e.Seq)
				if cur := hs[e.Flow]; cur.ok && cur.seq == e.Seq {
					hs[e.Flow] = headStateSeq{}
				}
			}
		}
		c.queue("EventUpdate", q["EventUpdateMany"], ids, states, gen, att, life, reasons, next, lease, claimed, acked, claimedBy)
		if len(clearFlows) > 0 {
			c.queue("FlowClearHeadState", q["FlowClearHeadState"], clearFlows, clearSeqs)
		}
	}
	for _, au := range w.audits {
		c.queue("AuditInsert", q["AuditInsert"], au.EventID, au.Flow, au.Action, au.Reason, au.Operator, au.PreviousReason, au.Generation, au.At, au.Wall)
	}
	if n := len(w.attempts); n > 0 {
		ids, gen, flows, leaseUntil, claimedWall := a.stringArray(n), a.int64Array(n), a.stringArray(n), a.int64Array(n), a.int64Array(n)
		settledAt, settledWall, dur := a.int64PArray(n), a.int64PArray(n), a.int64Array(n)
		outcome, status, detail, relay := a.stringArray(n), a.stringArray(n), a.stringArray(n), a.stringArray(n)
		for i, at := range w.attempts {
			ids[i], gen[i], flows[i], leaseUntil[i], claimedWall[i] = at.EventID, at.Generation, at.Flow, at.LeaseUntil, at.ClaimedWall
			settledAt[i], settledWall[i], dur[i] = at.SettledAt, at.SettledWall, at.DurationMs
			outcome[i], status[i], detail[i], relay[i] = at.Outcome, at.Status, at.Detail, at.Relay
		}
		c.queue("AttemptInsert", q["AttemptInsertMany"], ids, gen, flows, leaseUntil, claimedWall, settledAt, settledWall, outcome, status, detail, dur, relay)
	}
	if n := len(w.groups); n > 0 {
		ids, turn, served, credit, delta := a.stringArray(n), a.boolArray(n), a.int64Array(n), a.int64Array(n), a.int64Array(n)
		for i, g := range w.groups {
			ids[i], turn[i], served[i], credit[i], delta[i] = g.Group, g.Turn, g.Served, g.Credit, g.RunnableDelta
		}
		c.queue("GroupTurn", q["GroupTurnMany"], ids, turn, served, credit, delta)
	}
	if n := len(w.ackedBy); n > 0 {
		ids, counts := a.stringArray(n)[:0], a.int64Array(n)[:0]
		for g, k := range w.ackedBy {
			ids, counts = append(ids, g), append(counts, k)
		}
		c.queue("GroupAcked", q["GroupAckedMany"], ids, counts)
	}
	if w.acked > 0 {
		c.queue("ClockAcked", q["ClockAcked"], w.acked)
	}
	if w.clock != nil {
		c.queue("ClockSet", q["ClockSet"], w.clock.Tick, w.clock.Ticket, laneRows(lanes))
	}
	w.reset()
}

// nullString stores an empty reason as NULL, as the SQLite backend does.
func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// laneRows returns the clock row ids of the lanes of l, ascending: 1 the
// claim lane, 3 the settle lane (migration 003; row 2 was the enqueue
// lane's, unused since migration 005).
func laneRows(l store.Lane) []int32 {
	var ids []int32
	if l&store.LaneClaim != 0 {
		ids = append(ids, 1)
	}
	if l&store.LaneSettle != 0 {
		ids = append(ids, 3)
	}
	return ids
}
