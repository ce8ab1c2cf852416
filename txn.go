package fairrelay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/fairrelay/fairrelay/internal/faultpoint"
	"github.com/fairrelay/fairrelay/internal/store"
)

// writeOp describes one write transaction of Queue.write.
type writeOp struct {
	// name labels errors ("claim", "settle", …).
	name string
	// lanes are the writers the transaction is serialised with (store.Lane).
	lanes store.Lane
	// at is the tick of the write (AtStored: the stored tick).
	at int64
	// floor runs a write whose at lies below the stored tick at the stored
	// tick instead of failing with ErrClockRegressed (SPEC §7's daemon
	// clock, which never goes below the stored tick).
	floor bool
	// read is what the transaction asks before it decides (one round trip).
	read store.ReadSet
	// check validates the operation's input once the clock check passed
	// (SPEC §2: clock_regressed, then the input's fields); nil for none.
	check func() error
	// before and after name the fault points around the commit ("" for
	// none).
	before, after string
}

// write runs one write transaction: it reads op.read, checks the tick
// against the stored one (SPEC §2: at >= the stored tick, which then
// becomes at; §7's max_tick_jump), runs op.check, then fn, which decides
// the transaction's writes on t; then it writes them and commits. fn's
// error rolls everything back; errUnchanged rolls back too (the tick
// included) but makes write succeed. It returns the tick the write ran at.
func (q *Queue) write(ctx context.Context, op writeOp, fn func(t *txn, rr *store.ReadResult) error) (int64, error) {
	tx, err := q.store.Begin(ctx, op.lanes)
	if err != nil {
		return 0, dbError(op.name, err)
	}
	defer tx.Rollback(ctx)
	op.read.At = op.at
	op.read = withoutUnstorable(op.read)
	rr, err := tx.Read(ctx, op.read)
	if err != nil {
		return 0, dbError(op.name, err)
	}
	at, err := q.resolveTick(op.name, op.at, op.floor, rr.Clock.Tick)
	if err != nil {
		return 0, err
	}
	if op.check != nil {
		if err := op.check(); err != nil {
			return 0, err
		}
	}
	t := q.txns.get(q, tx, at, rr)
	t.claimLane = op.lanes&store.LaneClaim != 0
	defer q.txns.put(t)
	if err := fn(t, rr); err != nil {
		if errors.Is(err, errUnchanged) {
			return 0, nil // the answer is ready; the rollback keeps everything as it was
		}
		return 0, dbError(op.name, err)
	}
	ws, err := t.writeSet()
	if err != nil {
		return 0, dbError(op.name, err)
	}
	if err := tx.Write(ctx, ws); err != nil {
		return 0, dbError(op.name, err)
	}
	if op.before != "" {
		faultpoint.Hit(op.before)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, dbError(op.name+": commit", err)
	}
	if op.after != "" {
		faultpoint.Hit(op.after)
	}
	return at, nil
}

// withoutUnstorable leaves out of a read the names no row can hold —
// invalid UTF-8 or a NUL byte, which CheckID refuses in every name and
// PostgreSQL's text cannot even take (it failed the whole read with an
// encoding error, before the clock check and the operation's own checks,
// which must answer first: SPEC §2). Such a name reads nothing on any
// backend, so the write goes on to those checks. The caller's slices are
// not changed.
func withoutUnstorable(rs store.ReadSet) store.ReadSet {
	rs.Events = storableOnly(rs.Events)
	rs.Flows = storableOnly(rs.Flows)
	rs.Groups = storableOnly(rs.Groups)
	return rs
}

// storableOnly returns names, or a copy without the names no row can hold.
func storableOnly(names []string) []string {
	for i, n := range names {
		if !store.Storable(n) {
			out := slices.Clone(names[:i])
			for _, m := range names[i+1:] {
				if store.Storable(m) {
					out = append(out, m)
				}
			}
			return out
		}
	}
	return names
}

// errUnchanged, returned by a write's body after it has set its answer,
// rolls the whole transaction back — the tick included — and makes write
// succeed. A rejected redrive uses it: SPEC §2 says it changes nothing.
var errUnchanged = errors.New("answer changes nothing")

// resolveTick is the clock check of SPEC §2 and §7: the tick a write whose
// requested tick is at runs at, given the stored tick. AtStored runs at the
// stored tick; a tick below it fails with ErrClockRegressed, or under floor
// runs at the stored tick; a tick further ahead than the policy's
// MaxTickJump, or beyond MaxTick, is invalid input naming "at". A floor
// write comes from a daemon clock (SPEC §7), which moves only by the
// monotonic time that passed: the jump check, there to stop a typed tick,
// would refuse a relay's first write after an outage longer than the limit.
func (q *Queue) resolveTick(op string, at int64, floor bool, stored int64) (int64, error) {
	switch {
	case at == AtStored:
		return stored, nil
	case at < stored && floor:
		return stored, nil
	case at < stored:
		return 0, clockRegressed(op, at, stored)
	case !floor && q.policy.MaxTickJump > 0 && at-stored > q.policy.MaxTickJump:
		return 0, invalid("at", "tick %d is %d ticks ahead of the stored tick %d, more than the policy's max_tick_jump of %d (a typo would poison the store's clock)",
			at, at-stored, stored, q.policy.MaxTickJump)
	case at > MaxTick:
		return 0, invalid("at", "must be a tick in [0, %d], got %d", int64(MaxTick), at)
	}
	return at, nil
}

// txn is the working set of one write transaction: the rows it read and the
// final images of those it changed, written in one WriteSet at the end. The
// rows are the ones the read handed out (a backend's rows are the caller's
// to change until the transaction ends). A Queue keeps ended txns for the
// next transactions (txnPool): a relay runs hundreds a second, and their
// maps and slices were most of its garbage.
type txn struct {
	q     *Queue
	tx    store.Tx
	at    int64
	clock store.Clock
	// flows and events hold every row the transaction knows, by id; bySeq
	// finds an event by its flow and seq.
	flows  map[string]*store.FlowRow
	events map[string]*store.EventRow
	bySeq  map[flowSeq]*store.EventRow
	// dirty rows, in the order they were first changed.
	dirtyFlows  []*store.FlowRow
	dirtyEvents []*store.EventRow
	flowDirty   map[*store.FlowRow]bool
	eventDirty  map[*store.EventRow]bool
	audit       []store.AuditRow
	attempts    []store.AttemptRow
	// quarantined are the heads a claim quarantined itself (promoteDue:
	// budget spent), for ClaimResult.Quarantined.
	quarantined []Quarantined
	// claimLane: the transaction holds LaneClaim, the only writer of a
	// member flow's Runnable and of group rows (store.GroupRow).
	claimLane bool
	// groups holds the group rows the transaction read, by name;
	// groupDelta the change of each group's RunnableFlows so far, and
	// turned the groups whose Served or Credit a claim changed.
	groups     map[string]*store.GroupRow
	groupDelta map[string]int64
	turned     map[string]bool
	// acked counts the acks, in all and by group (store.WriteSet.Acked).
	acked       int64
	ackedGroups map[string]int64
	// wall is the wall-clock time of the transaction in milliseconds since
	// the Unix epoch (Config.Now), for the attempt and audit rows.
	wall int64
	// claimer names the process of this transaction's claims
	// (ClaimParams.Relay), kept on each claimed head (EventRow.ClaimedBy).
	claimer string
	// Scratch of claim and writeSet.
	cands []*store.FlowRow
	seen  map[string]bool
	ws    store.WriteSet
}

type flowSeq struct {
	flow string
	seq  int64
}

// txnPool keeps ended txns for the next transactions (at most a few: one
// per transaction under way at once). A txn that held a very large batch
// is left to the collector.
type txnPool struct {
	mu   sync.Mutex
	free []*txn
}

// get returns an empty txn for a transaction at tick at whose read
// answered rr.
func (p *txnPool) get(q *Queue, tx store.Tx, at int64, rr *store.ReadResult) *txn {
	p.mu.Lock()
	var t *txn
	if n := len(p.free); n > 0 {
		t, p.free = p.free[n-1], p.free[:n-1]
	}
	p.mu.Unlock()
	if t == nil {
		t = &txn{
			flows: map[string]*store.FlowRow{}, events: map[string]*store.EventRow{}, bySeq: map[flowSeq]*store.EventRow{},
			flowDirty: map[*store.FlowRow]bool{}, eventDirty: map[*store.EventRow]bool{}, seen: map[string]bool{},
			groups: map[string]*store.GroupRow{}, groupDelta: map[string]int64{}, turned: map[string]bool{}, ackedGroups: map[string]int64{},
		}
	}
	t.q, t.tx, t.at, t.clock = q, tx, at, rr.Clock
	t.wall = q.now().UnixMilli()
	t.clock.Tick = at
	for _, f := range rr.Flows {
		t.addFlow(f)
	}
	for _, e := range rr.Events {
		t.addEvent(e)
	}
	for _, e := range rr.Next {
		t.addEvent(e)
	}
	t.addHeads(rr.Picks)
	t.addHeads(rr.Due)
	t.addGroups(rr)
	return t
}

// addGroups adds the group rows of a read, and the groups it picked with
// their first member flows.
func (t *txn) addGroups(rr *store.ReadResult) {
	for name, g := range rr.Groups {
		if _, ok := t.groups[name]; !ok {
			t.groups[name] = g
		}
	}
	for i := range rr.GroupPicks {
		gp := &rr.GroupPicks[i]
		if _, ok := t.groups[gp.Group.Group]; !ok {
			t.groups[gp.Group.Group] = &gp.Group
		}
		t.addHeads([]store.FlowHead{gp.First})
	}
}

// put empties t and keeps it, unless it grew past a large batch.
func (p *txnPool) put(t *txn) {
	if len(t.flows) > 4096 || len(t.events) > 4096 {
		return
	}
	clear(t.flows)
	clear(t.events)
	clear(t.bySeq)
	clear(t.flowDirty)
	clear(t.eventDirty)
	clear(t.seen)
	clear(t.groups)
	clear(t.groupDelta)
	clear(t.turned)
	clear(t.ackedGroups)
	t.acked, t.claimLane = 0, false
	clear(t.dirtyFlows)
	clear(t.dirtyEvents)
	clear(t.cands)
	clear(t.ws.Flows)
	clear(t.ws.Events)
	t.dirtyFlows, t.dirtyEvents, t.cands = t.dirtyFlows[:0], t.dirtyEvents[:0], t.cands[:0]
	t.ws = store.WriteSet{Flows: t.ws.Flows[:0], Events: t.ws.Events[:0]}
	t.audit, t.quarantined = nil, nil
	clear(t.attempts)
	t.attempts = t.attempts[:0]
	t.q, t.tx = nil, nil
	p.mu.Lock()
	if len(p.free) < 16 {
		p.free = append(p.free, t)
	}
	p.mu.Unlock()
}

// addFlow adds a row read from the store and returns the working row: the
// one already known, when there is one (it may have changed since).
func (t *txn) addFlow(f *store.FlowRow) *store.FlowRow {
	if w, ok := t.flows[f.Flow]; ok {
		return w
	}
	t.flows[f.Flow] = f
	return f
}

// addEvent is addFlow for an event.
func (t *txn) addEvent(e *store.EventRow) *store.EventRow {
	if w, ok := t.events[e.ID]; ok {
		return w
	}
	t.events[e.ID] = e
	t.bySeq[flowSeq{e.Flow, e.Seq}] = e
	return e
}

// addHeads adds flows read with their heads.
func (t *txn) addHeads(hs []store.FlowHead) {
	for i := range hs {
		t.addFlow(&hs[i].Flow)
		if hs[i].Head != nil {
			t.addEvent(hs[i].Head)
		}
	}
}

// changedFlow marks f (a working row) as written.
func (t *txn) changedFlow(f *store.FlowRow) {
	if !t.flowDirty[f] {
		t.flowDirty[f] = true
		t.dirtyFlows = append(t.dirtyFlows, f)
	}
}

// changedEvent marks e (a working row) as written.
func (t *txn) changedEvent(e *store.EventRow) {
	if !t.eventDirty[e] {
		t.eventDirty[e] = true
		t.dirtyEvents = append(t.dirtyEvents, e)
	}
}

// head returns the working head event of f, or an error naming an
// inconsistent store when it is not known (every flow the transaction can
// claim or settle was read with its head).
func (t *txn) head(f *store.FlowRow) (*store.EventRow, error) {
	if e := t.bySeq[flowSeq{f.Flow, f.HeadSeq}]; e != nil {
		return e, nil
	}
	return nil, fmt.Errorf("flow %q: head seq %d is missing: the store is inconsistent", f.Flow, f.HeadSeq)
}

// writeSet returns the transaction's writes.
func (t *txn) writeSet() (*store.WriteSet, error) {
	ws := &t.ws
	ws.Clock, ws.Audit, ws.Attempts = t.clock, t.audit, t.attempts
	for _, f := range t.dirtyFlows {
		ws.Flows = append(ws.Flows, *f)
	}
	for _, e := range t.dirtyEvents {
		ws.Events = append(ws.Events, *e)
	}
	ws.Acked, ws.AckedGroups = t.acked, nil
	if len(t.ackedGroups) > 0 {
		ws.AckedGroups = t.ackedGroups
	}
	ws.Groups = ws.Groups[:0]
	for name, d := range t.groupDelta {
		if d != 0 || t.turned[name] {
			ws.Groups = append(ws.Groups, t.groupWrite(name, d))
		}
	}
	for name := range t.turned {
		if _, ok := t.groupDelta[name]; !ok {
			ws.Groups = append(ws.Groups, t.groupWrite(name, 0))
		}
	}
	if len(ws.Groups) > 0 && !t.claimLane {
		// Every path that files a member flow's head outside a claim uses
		// the due index; a change here is a bug, never a store state.
		return nil, fmt.Errorf("group rows changed outside the claim lane: %v", ws.Groups)
	}
	slices.SortFunc(ws.Groups, func(a, b store.GroupWrite) int { return strings.Compare(a.Group, b.Group) })
	return ws, nil
}

// groupWrite is the write of group name's row: its RunnableFlows change d,
// and its turn (Served, Credit) as the working row holds it.
func (t *txn) groupWrite(name string, d int64) store.GroupWrite {
	w := store.GroupWrite{Group: name, RunnableDelta: d}
	if g := t.groups[name]; g != nil && t.turned[name] {
		w.Turn, w.Served, w.Credit = true, g.Served, g.Credit
	}
	return w
}

// setRunnable files f in the runnable index or takes it out, counting the
// change for its group when f is a member flow.
func (t *txn) setRunnable(f *store.FlowRow, r bool) {
	if f.Runnable == r {
		return
	}
	f.Runnable = r
	if f.Group != "" {
		if r {
			t.groupDelta[f.Group]++
		} else {
			t.groupDelta[f.Group]--
		}
	}
}

// ownsRunnable reports whether the transaction may change f's Runnable: a
// flow that is its own group, always; a member flow, only in a claim-lane
// transaction (store.GroupRow.RunnableFlows).
func (t *txn) ownsRunnable(f *store.FlowRow) bool { return f.Group == "" || t.claimLane }

// placeHead files the flow's head in the runnable index when it is eligible
// at the transaction's tick (due <= at), or in the due index until due
// otherwise. A member flow outside a claim goes to the due index even when
// eligible now (its group's count belongs to the claim lane; the next claim
// promotes it), unless it is runnable already. A paused flow is parked
// instead: its head is never eligible while paused (SPEC §9), and Resume
// files it again.
func (t *txn) placeHead(f *store.FlowRow, due int64) {
	if f.Paused {
		t.parkHead(f)
		return
	}
	if due <= t.at && (t.ownsRunnable(f) || f.Runnable) {
		t.setRunnable(f, true)
		f.WaitUntil = nil
		return
	}
	if t.ownsRunnable(f) {
		t.setRunnable(f, false)
	}
	f.WaitUntil = &due
}

// parkHead takes the flow out of both indexes: its head is quarantined, the
// flow has no head, or it is paused. A paused member flow that is runnable
// stays so outside a claim: the next claim that meets it parks it.
func (t *txn) parkHead(f *store.FlowRow) {
	f.WaitUntil = nil
	if t.ownsRunnable(f) {
		t.setRunnable(f, false)
	}
}

func quote(s string) string { return fmt.Sprintf("%q", s) }
