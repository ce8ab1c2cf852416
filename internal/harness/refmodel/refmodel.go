// Package refmodel is a straightforward in-memory reference implementation of
// the queue store of SPEC §2, §8 and §9, written to be read against the SPEC
// line by line, not to be fast: claim finds every flow's head by scanning
// the flow's events and picks among all groups and flows by linear scans
// (the article's naive head query); backlogs are counted by scanning every
// event. The property test of the root package runs random operation
// sequences against it and against a real Queue and requires identical
// answers and snapshots (issues 4 and 16).
//
// Readings of the SPEC that the model fixes, beside its [decision]s:
//
//   - The budget [decision] of SPEC §2 claim step 2: every claim (also one
//     that answers idle, and each ClaimBatch once before its first pick)
//     moves EVERY head that is inflight, whose lease ran out (lease_until <=
//     at) and whose round used the whole budget (attempts >= budget) to
//     quarantined with reason budget_exhausted — not only the head that
//     would otherwise be picked. Step 1 looks at every flow's head, so every
//     such head is "moved … instead of being claimed". A paused flow's head
//     is left as it is (SPEC §9).
//   - ClaimBatch(at, k) is k consecutive claims at tick at in one
//     transaction; it stops at the first idle.
//   - A settle outcome is classed by the SPEC §2 table: accepted and
//     duplicate ack; id_conflict, sequence_conflict, unsupported_delta,
//     invalid_body and rejected (the project's operator-configured refusal)
//     are permanent; every other outcome, known or not, is transient.
//   - The backoff delay is d = min(base·2^(attempts-1), cap) computed here;
//     with jitter j > 0 the delay is taken from Policy.Backoff (the SPEC
//     fixes only that it is derived from (event_id, generation)) and must lie
//     in [d·(1-j), d], else the model panics.
//   - SettleParams.NotBefore raises next_at of a transient outcome within
//     the budget to it (a receiver's Retry-After).
//   - A failed operation (clock_regressed, invalid_input, not_found) and a
//     rejected redrive, expedite, pause or resume change nothing, not even
//     the tick; a batch fails as a whole.
//
// Groups (SPEC §8), as this project reads them (tenancy.go, claim.go):
//
//   - A flow created without a group, or naming its own name while no group
//     row of that name exists, is its own group: it has no group row, takes
//     its place in the rotation as a group of weight 1 with the flow's own
//     served and creation position, and the snapshot lists it in "groups"
//     as {its name, weight 1, its served, max_backlog null}.
//   - A group row is made when a new flow names another group, when
//     configure names a group that has none, or when a flow joins a group
//     named like a flow that is its own group: that flow becomes the first
//     member, and the row takes its served and creation position (and no
//     turn in progress). A row made by configure has no place in the
//     rotation (served null in the snapshot) until its first flow is
//     created; it then takes served (0 under seed, clock.ticket under fair)
//     and its creation position before that flow's.
//   - Flows and group rows take creation positions from one counter; the
//     fair policy's tie rule compares them across groups and own-group
//     flows alike, the seed policy's compares names.
//   - The group rule of enqueue: naming a group other than the group of an
//     existing flow (its own name when it has no row) is invalid_input
//     naming group, checked before existing, conflict and the limits; an
//     enqueue without a group to an existing flow is fine. In a batch the
//     flows created by earlier items count, and the whole batch fails.
//   - A weight w is a deficit-round-robin turn: a group keeps its served
//     for w claims and takes the claim's ticket with the last one (weight
//     1: every claim, as a flow). A turn left unfinished (the group ran out
//     of eligible flows) goes on when it is eligible again; configuring a
//     weight cuts a turn in progress to at most the new weight.
//   - Limits count events not acked (ready, inflight, quarantined). An
//     enqueue of a new id is full when the count of its store, group row
//     or flow is already at the limit, checked in that order, counting the
//     events of earlier items of the same batch; a flow that is its own
//     group has no group limit (configure makes it a row first). A full
//     answer changes nothing but the tick.
//   - Prune: an event's acked_at is the tick of the settle that acked it.
//     Tombstones are what retention keeps, by id; once a tombstone is
//     deleted the id is unknown again and an enqueue creates it anew.
//   - Configure checks weight without group, weight outside 1–1000, a
//     negative max_backlog, max_flow_backlog with group, a negative
//     max_flow_backlog, in that order (the SPEC names no order among them).
//
// The model checks no other input domain (ids, bodies, reasons, k >= 1):
// callers give it valid input only.
package refmodel

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"sort"
	"strings"

	"github.com/fairrelay/fairrelay"
)

// Model is the reference queue store. The zero value is not usable; call New.
type Model struct {
	policy fairrelay.Policy
	tick   int64
	ticket int64
	// created is the creation counter of flows and group rows (SPEC §7's
	// "creation order", shared by §8's groups).
	created    int64
	flows      map[string]*flow
	groups     map[string]*group // group rows only: not a flow's own group
	events     map[string]*event
	tombstones map[string]tombstone
	// The store's limits (SPEC §8; 0 is none).
	maxBacklog, maxFlowBacklog int64
	audit                      []fairrelay.AuditEntry
}

type flow struct {
	id     string
	ord    int64 // creation position
	served int64
	seq    int64    // last seq handed out
	group  string   // "" when the flow is its own group
	paused bool     // SPEC §9
	events []*event // not pruned, by seq
}

type group struct {
	name   string
	ord    int64 // creation position; 0 while it has no place in the rotation
	served int64
	weight int64
	left   int64 // claims left in the turn in progress; 0 when none is
	// maxBacklog is the group's limit (0 is none).
	maxBacklog int64
}

type event struct {
	id               string
	flow             string
	seq              int64
	body             []byte
	state            fairrelay.State
	generation       int64
	attempts         int64
	lifetimeAttempts int64
	reason           string
	nextAt           int64
	leaseUntil       int64
	ackedAt          int64
}

// tombstone is what a prune keeps of an acked event (SPEC §8).
type tombstone struct {
	flow    string
	seq     int64
	sum     [sha256.Size]byte
	ackedAt int64
}

// New returns an empty store with the given policy, whose every field must be
// set (use Queue.Policy() of the store under test).
func New(p fairrelay.Policy) *Model {
	return &Model{policy: p, flows: map[string]*flow{}, groups: map[string]*group{},
		events: map[string]*event{}, tombstones: map[string]tombstone{}}
}

// clone returns a deep copy of m: a batch runs on one, which replaces the
// model only when the whole batch succeeds.
func (m *Model) clone() *Model {
	c := *m
	c.events = make(map[string]*event, len(m.events))
	for id, e := range m.events {
		ce := *e
		c.events[id] = &ce
	}
	c.flows = make(map[string]*flow, len(m.flows))
	for id, f := range m.flows {
		cf := *f
		cf.events = make([]*event, len(f.events))
		for i, e := range f.events {
			cf.events[i] = c.events[e.id]
		}
		c.flows[id] = &cf
	}
	c.groups = make(map[string]*group, len(m.groups))
	for name, g := range m.groups {
		cg := *g
		c.groups[name] = &cg
	}
	c.tombstones = make(map[string]tombstone, len(m.tombstones))
	for id, ts := range m.tombstones {
		c.tombstones[id] = ts
	}
	c.audit = append([]fairrelay.AuditEntry{}, m.audit...)
	return &c
}

// Tick returns the stored tick.
func (m *Model) Tick() int64 { return m.tick }

func errorCode(code fairrelay.Code, format string, args ...any) error {
	return &fairrelay.Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

func invalid(field, format string, args ...any) error {
	return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: field, Message: fmt.Sprintf(format, args...)}
}

// checkClock is the first check of every write (SPEC §2): at >= tick. It
// changes nothing; each write sets the tick once it knows it succeeds.
func (m *Model) checkClock(at int64) error {
	if at < m.tick {
		return errorCode(fairrelay.CodeClockRegressed, "at %d < tick %d", at, m.tick)
	}
	return nil
}

// head is SPEC §1: the event of the flow with the smallest seq that is not
// acked, whatever its state; nil when every event is acked.
func (f *flow) head() *event {
	for _, e := range f.events {
		if e.state != fairrelay.StateAcked {
			return e
		}
	}
	return nil
}

// groupName is the flow's group (SPEC §8): its own name when it has none.
func (f *flow) groupName() string {
	if f.group == "" {
		return f.id
	}
	return f.group
}

// newServed is where a new flow or group enters the rotation: served 0
// under seed, clock.ticket under fair (SPEC §7, §8).
func (m *Model) newServed() int64 {
	if m.policy.Entry == fairrelay.EntryFair {
		return m.ticket
	}
	return 0
}

// Enqueue is SPEC §2 enqueue in its own transaction.
func (m *Model) Enqueue(p fairrelay.EnqueueParams) (fairrelay.EnqueueResult, error) {
	rs, err := m.EnqueueBatch(p.At, []fairrelay.NewEvent{{ID: p.ID, Flow: p.Flow, Group: p.Group, Body: p.Body}})
	if err != nil {
		return fairrelay.EnqueueResult{}, err
	}
	return rs[0], nil
}

// EnqueueBatch is SPEC §2 enqueue for each item in order, all at tick at, in
// one transaction; the group rule of SPEC §8 fails the whole batch.
func (m *Model) EnqueueBatch(at int64, ps []fairrelay.NewEvent) ([]fairrelay.EnqueueResult, error) {
	if err := m.checkClock(at); err != nil {
		return nil, err
	}
	c := m.clone()
	out := make([]fairrelay.EnqueueResult, 0, len(ps))
	for _, p := range ps {
		r, err := c.enqueue(p, at)
		if err != nil {
			return nil, err
		}
		r.Tick = at
		out = append(out, r)
	}
	*m = *c
	m.tick = at
	return out, nil
}

func (m *Model) enqueue(p fairrelay.NewEvent, at int64) (fairrelay.EnqueueResult, error) {
	f := m.flows[p.Flow]
	// SPEC §8: the group is fixed by the enqueue that created the flow;
	// checked before existing, conflict and every limit.
	if f != nil && p.Group != "" && p.Group != f.groupName() {
		return fairrelay.EnqueueResult{}, invalid("group", "flow %q is in group %q, not %q", p.Flow, f.groupName(), p.Group)
	}
	if old, ok := m.events[p.ID]; ok {
		if old.flow == p.Flow && bytes.Equal(old.body, p.Body) {
			return fairrelay.EnqueueResult{Status: fairrelay.EnqueueExisting, Seq: old.seq}, nil
		}
		return fairrelay.EnqueueResult{Status: fairrelay.EnqueueConflict}, nil
	}
	// SPEC §8 retention: idempotency outlives the body.
	if ts, ok := m.tombstones[p.ID]; ok {
		if ts.flow == p.Flow && ts.sum == sha256.Sum256(p.Body) {
			return fairrelay.EnqueueResult{Status: fairrelay.EnqueueExisting, Seq: ts.seq}, nil
		}
		return fairrelay.EnqueueResult{Status: fairrelay.EnqueueConflict}, nil
	}
	groupName := p.Group
	switch {
	case f != nil:
		groupName = f.groupName()
	case groupName == "":
		groupName = p.Flow
	}
	// SPEC §8 capacity: store, group, flow, the first that applies.
	switch g := m.groups[groupName]; {
	case m.maxBacklog > 0 && m.backlog(func(*flow) bool { return true }) >= m.maxBacklog:
		return fairrelay.EnqueueResult{Status: fairrelay.EnqueueFull, Limit: fairrelay.LimitStore}, nil
	case g != nil && g.maxBacklog > 0 && m.backlog(func(o *flow) bool { return o.group == g.name }) >= g.maxBacklog:
		return fairrelay.EnqueueResult{Status: fairrelay.EnqueueFull, Limit: fairrelay.LimitGroup}, nil
	case f != nil && m.maxFlowBacklog > 0 && m.backlog(func(o *flow) bool { return o == f }) >= m.maxFlowBacklog:
		return fairrelay.EnqueueResult{Status: fairrelay.EnqueueFull, Limit: fairrelay.LimitFlow}, nil
	}
	if f == nil {
		f = m.createFlow(p.Flow, groupName)
	}
	f.seq++
	e := &event{
		id: p.ID, flow: p.Flow, seq: f.seq,
		body: bytes.Clone(p.Body), state: fairrelay.StateReady, nextAt: at,
	}
	f.events = append(f.events, e)
	m.events[p.ID] = e
	return fairrelay.EnqueueResult{Status: fairrelay.EnqueueCreated, Seq: e.seq}, nil
}

// backlog counts the events not acked of the flows in (SPEC §8).
func (m *Model) backlog(in func(*flow) bool) int64 {
	n := int64(0)
	for _, e := range m.events {
		if e.state != fairrelay.StateAcked && in(m.flows[e.flow]) {
			n++
		}
	}
	return n
}

// createFlow creates flow id in group groupName (see the package doc).
func (m *Model) createFlow(id, groupName string) *flow {
	f := &flow{id: id, served: m.newServed()}
	if groupName != id || m.groups[groupName] != nil {
		g := m.groupRow(groupName)
		if g.ord == 0 {
			// Its first flow: the group takes its place in the rotation.
			m.created++
			g.ord, g.served = m.created, m.newServed()
		}
		f.group = groupName
	}
	m.created++
	f.ord = m.created
	m.flows[id] = f
	return f
}

// groupRow returns the row of group name, making it when missing: from the
// flow named like it when that flow is its own group (its first member),
// else empty, with no place in the rotation.
func (m *Model) groupRow(name string) *group {
	if g := m.groups[name]; g != nil {
		return g
	}
	g := &group{name: name, weight: 1}
	if own := m.flows[name]; own != nil && own.group == "" {
		g.ord, g.served = own.ord, own.served
		own.group = name
	}
	m.groups[name] = g
	return g
}

// eligible is SPEC §2 claim step 2 for the head h of flow f at tick at; a
// paused flow's head never is (SPEC §9).
func eligible(f *flow, h *event, at int64) bool {
	if f.paused {
		return false
	}
	switch h.state {
	case fairrelay.StateReady:
		return h.nextAt <= at
	case fairrelay.StateInflight:
		return h.leaseUntil <= at
	}
	return false
}

// exhausted reports whether the [decision] of SPEC §2 claim step 2 moves the
// head h of flow f to quarantined at tick at.
func (m *Model) exhausted(f *flow, h *event, at int64) bool {
	return !f.paused && h.state == fairrelay.StateInflight && h.leaseUntil <= at && h.attempts >= m.policy.Budget
}

// place is one entry of the rotation of SPEC §8: a group row, or a flow
// that is its own group.
type place struct {
	name   string
	ord    int64
	served int64
	row    *group // nil for a flow that is its own group
	own    *flow  // the flow, when row is nil
}

// places lists the rotation: every group row with a place in it and every
// flow that is its own group.
func (m *Model) places() []place {
	var out []place
	for _, g := range m.groups {
		if g.ord != 0 {
			out = append(out, place{name: g.name, ord: g.ord, served: g.served, row: g})
		}
	}
	for _, f := range m.flows {
		if f.group == "" {
			out = append(out, place{name: f.id, ord: f.ord, served: f.served, own: f})
		}
	}
	return out
}

// members lists the flows of p.
func (m *Model) members(p place) []*flow {
	if p.row == nil {
		return []*flow{p.own}
	}
	var out []*flow
	for _, f := range m.flows {
		if f.group == p.name {
			out = append(out, f)
		}
	}
	return out
}

// before is the order of SPEC §2 claim step 3 and §8, for flows and for
// places alike: smaller served first, ties by name (seed) or creation order
// (fair, SPEC §7).
func (m *Model) before(served int64, name string, ord int64, served2 int64, name2 string, ord2 int64) bool {
	if served != served2 {
		return served < served2
	}
	if m.policy.Entry == fairrelay.EntryFair {
		return ord < ord2
	}
	return name < name2
}

// Claim is SPEC §2 claim: nil, nil is idle.
func (m *Model) Claim(at int64) (*fairrelay.Claim, error) {
	cs, err := m.ClaimBatch(at, 1)
	if err != nil || len(cs) == 0 {
		return nil, err
	}
	return &cs[0], nil
}

// ClaimBatch is k consecutive claims at tick at in one transaction.
func (m *Model) ClaimBatch(at int64, k int) ([]fairrelay.Claim, error) {
	if err := m.checkClock(at); err != nil {
		return nil, err
	}
	m.tick = at
	// Step 2's [decision], read as "every such head" (see the package doc).
	for _, f := range m.flows {
		if h := f.head(); h != nil && m.exhausted(f, h, at) {
			h.state, h.reason = fairrelay.StateQuarantined, fairrelay.ReasonBudgetExhausted
		}
	}
	out := []fairrelay.Claim{}
	for len(out) < k {
		c := m.claimOne(at)
		if c == nil {
			break // step 5: idle
		}
		out = append(out, *c)
	}
	return out, nil
}

// claimOne is steps 1–4 with SPEC §8's two levels: the first place in the
// rotation that has a flow with an eligible head, then its first such flow.
func (m *Model) claimOne(at int64) *fairrelay.Claim {
	var best *place
	var bestFlow *flow
	for _, p := range m.places() {
		var first *flow
		for _, f := range m.members(p) {
			if h := f.head(); h == nil || !eligible(f, h, at) {
				continue
			}
			if first == nil || m.before(f.served, f.id, f.ord, first.served, first.id, first.ord) {
				first = f
			}
		}
		if first == nil {
			continue
		}
		if best == nil || m.before(p.served, p.name, p.ord, best.served, best.name, best.ord) {
			best, bestFlow = &p, first
		}
	}
	if best == nil {
		return nil
	}
	// Step 4.
	m.ticket++
	bestFlow.served = m.ticket
	if best.row != nil {
		m.turn(best.row)
	}
	h := bestFlow.head()
	h.state = fairrelay.StateInflight
	h.generation++
	h.attempts++
	h.lifetimeAttempts++
	h.leaseUntil = at + m.policy.Lease
	return &fairrelay.Claim{
		Token: fairrelay.Token{EventID: h.id, Generation: h.generation},
		Flow:  h.flow, Group: bestFlow.groupName(), Seq: h.seq, Body: bytes.Clone(h.body),
		LeaseUntil: h.leaseUntil, Ticket: m.ticket, Attempts: h.attempts,
	}
}

// turn is one claim of group row g under its weight: a turn is weight
// claims long, and the group's served becomes the ticket with the last
// one (see the package doc).
func (m *Model) turn(g *group) {
	if g.left == 0 || g.left > g.weight {
		g.left = g.weight // a new turn
	}
	g.left--
	if g.left == 0 {
		g.served = m.ticket
	}
}

// Settle is SPEC §2 settle in its own transaction.
func (m *Model) Settle(tok fairrelay.Token, o fairrelay.Outcome, at int64) (fairrelay.SettleResult, error) {
	rs, err := m.SettleBatch(at, []fairrelay.Settlement{{Token: tok, Outcome: o}})
	if err != nil {
		return fairrelay.SettleResult{}, err
	}
	return rs[0], nil
}

// SettleBatch is SPEC §2 settle for each item in order, at tick at, in one
// transaction; an unknown event id (a pruned one included) fails the whole
// batch.
func (m *Model) SettleBatch(at int64, ps []fairrelay.Settlement) ([]fairrelay.SettleResult, error) {
	if err := m.checkClock(at); err != nil {
		return nil, err
	}
	for _, p := range ps {
		if _, ok := m.events[p.Token.EventID]; !ok {
			return nil, errorCode(fairrelay.CodeNotFound, "no event %q", p.Token.EventID)
		}
	}
	m.tick = at
	out := make([]fairrelay.SettleResult, 0, len(ps))
	for _, p := range ps {
		out = append(out, m.settle(p, at))
	}
	return out, nil
}

// outcomeClass is the SPEC §2 settle table.
func outcomeClass(o fairrelay.Outcome) string {
	switch o {
	case "accepted", "duplicate":
		return "ack"
	case "id_conflict", "sequence_conflict", "unsupported_delta", "invalid_body", "rejected":
		return "permanent"
	}
	return "transient"
}

// backoff is min(base·2^(attempts-1), cap), with jitter taken from the policy
// and checked against [d·(1-j), d].
func (m *Model) backoff(e *event) int64 {
	d := m.policy.BackoffBase
	for n := int64(1); n < e.attempts && d < m.policy.BackoffCap; n++ {
		d *= 2
	}
	d = min(d, m.policy.BackoffCap)
	if m.policy.Jitter == 0 {
		return d
	}
	got := m.policy.Backoff(e.id, e.generation, e.attempts)
	if float64(got) < float64(d)*(1-m.policy.Jitter) || got > d {
		panic(fmt.Sprintf("refmodel: jittered backoff %d outside [%v, %d]", got, float64(d)*(1-m.policy.Jitter), d))
	}
	return got
}

func (m *Model) settle(p fairrelay.Settlement, at int64) fairrelay.SettleResult {
	e := m.events[p.Token.EventID]
	if e.state != fairrelay.StateInflight || e.generation != p.Token.Generation {
		return fairrelay.SettleResult{Status: fairrelay.SettleStale}
	}
	if at >= e.leaseUntil {
		return fairrelay.SettleResult{Status: fairrelay.SettleExpired}
	}
	switch outcomeClass(p.Outcome) {
	case "ack":
		e.state, e.ackedAt = fairrelay.StateAcked, at
		return fairrelay.SettleResult{Status: fairrelay.SettleAcked}
	case "permanent":
		e.state, e.reason = fairrelay.StateQuarantined, string(p.Outcome)
		return fairrelay.SettleResult{Status: fairrelay.SettleQuarantined}
	}
	if e.attempts < m.policy.Budget {
		e.state = fairrelay.StateReady
		e.nextAt = max(at+m.backoff(e), p.NotBefore)
		return fairrelay.SettleResult{Status: fairrelay.SettleReady, NextAt: e.nextAt}
	}
	e.state, e.reason = fairrelay.StateQuarantined, fairrelay.ReasonBudgetExhausted
	return fairrelay.SettleResult{Status: fairrelay.SettleQuarantined}
}

// Redrive is SPEC §2 redrive.
func (m *Model) Redrive(p fairrelay.RedriveParams) (fairrelay.RedriveResult, error) {
	if err := m.checkClock(p.At); err != nil {
		return fairrelay.RedriveResult{}, err
	}
	if p.ExpectedGeneration < 0 {
		// Generations start at 0 and only grow: a typo, not a stale token.
		return fairrelay.RedriveResult{}, invalid("expected_generation", "must not be negative, got %d", p.ExpectedGeneration)
	}
	e, ok := m.events[p.EventID]
	if !ok {
		return fairrelay.RedriveResult{}, errorCode(fairrelay.CodeNotFound, "no event %q", p.EventID)
	}
	// SPEC §2: a rejected redrive changes nothing, the tick included.
	switch {
	case strings.TrimSpace(p.Reason) == "":
		return fairrelay.RedriveResult{Status: fairrelay.RedriveRejected, RejectReason: fairrelay.RejectEmptyReason}, nil
	case e.state != fairrelay.StateQuarantined:
		return fairrelay.RedriveResult{Status: fairrelay.RedriveRejected, RejectReason: fairrelay.RejectNotQuarantined}, nil
	case e.generation != p.ExpectedGeneration:
		return fairrelay.RedriveResult{Status: fairrelay.RedriveRejected, RejectReason: fairrelay.RejectGenerationMismatch}, nil
	}
	m.tick = p.At
	previous := e.reason
	e.state, e.reason = fairrelay.StateReady, ""
	e.generation++
	e.attempts = 0
	e.nextAt = p.At
	id, gen := e.id, e.generation
	m.appendAudit(fairrelay.AuditEntry{ID: &id, Flow: e.flow, Action: "redrive", Reason: p.Reason, PreviousReason: &previous, Generation: &gen, At: p.At}, p.Operator)
	return fairrelay.RedriveResult{Status: fairrelay.RedriveReady, Generation: e.generation}, nil
}

// appendAudit appends a, naming the operator when one was given (SPEC §9:
// null when omitted).
func (m *Model) appendAudit(a fairrelay.AuditEntry, operator string) {
	if operator != "" {
		op := operator
		a.Operator = &op
	}
	m.audit = append(m.audit, a)
}

// Snapshot is the store in the SPEC §6 shape with §8's and §9's keys: flows
// by id (with their group and paused), groups by name (every group row, and
// every flow that is its own group), events by flow then seq (pruned ones
// gone), audit as written; next_at only for ready events, lease_until only
// for inflight ones, reason only for quarantined ones.
func (m *Model) Snapshot() *fairrelay.Snapshot {
	s := &fairrelay.Snapshot{
		Clock: fairrelay.ClockState{Tick: m.tick, Ticket: m.ticket},
		Flows: []fairrelay.FlowState{}, Groups: []fairrelay.GroupState{}, Events: []fairrelay.EventState{},
		Audit: append([]fairrelay.AuditEntry{}, m.audit...),
	}
	ids := make([]string, 0, len(m.flows))
	for id := range m.flows {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		f := m.flows[id]
		s.Flows = append(s.Flows, fairrelay.FlowState{Flow: id, Seq: f.seq, Served: f.served, Paused: f.paused, Group: f.groupName()})
		if f.group == "" {
			served := f.served
			s.Groups = append(s.Groups, fairrelay.GroupState{Group: id, Weight: 1, Served: &served})
		}
		for _, e := range f.events {
			es := fairrelay.EventState{
				ID: e.id, Flow: e.flow, Seq: e.seq, State: e.state, Generation: e.generation,
				Attempts: e.attempts, LifetimeAttempts: e.lifetimeAttempts,
			}
			switch e.state {
			case fairrelay.StateQuarantined:
				r := e.reason
				es.Reason = &r
			case fairrelay.StateReady:
				v := e.nextAt
				es.NextAt = &v
			case fairrelay.StateInflight:
				v := e.leaseUntil
				es.LeaseUntil = &v
			}
			s.Events = append(s.Events, es)
		}
	}
	for _, g := range m.groups {
		gs := fairrelay.GroupState{Group: g.name, Weight: g.weight}
		if g.ord != 0 {
			v := g.served
			gs.Served = &v
		}
		if g.maxBacklog != 0 {
			v := g.maxBacklog
			gs.MaxBacklog = &v
		}
		s.Groups = append(s.Groups, gs)
	}
	sort.Slice(s.Groups, func(i, j int) bool { return s.Groups[i].Group < s.Groups[j].Group })
	return s
}
