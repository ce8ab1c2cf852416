// Package refmodel is a straightforward in-memory reference implementation of
// the queue store of SPEC §2, written to be read against the SPEC line by
// line, not to be fast: claim finds every flow's head by scanning the flow's
// events and picks among all eligible heads by a linear scan (the article's
// naive head query). The property test of the root package runs random
// operation sequences against it and against a real Queue and requires
// identical answers and snapshots (issue 4).
//
// Readings of the SPEC that the model fixes, beside its [decision]s:
//
//   - The budget [decision] of SPEC §2 claim step 2: every claim (also one
//     that answers idle, and each ClaimBatch once before its first pick)
//     moves EVERY head that is inflight, whose lease ran out (lease_until <=
//     at) and whose round used the whole budget (attempts >= budget) to
//     quarantined with reason budget_exhausted — not only the head that
//     would otherwise be picked. Step 1 looks at every flow's head, so every
//     such head is "moved … instead of being claimed".
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
//   - A failed operation (clock_regressed, not_found) and a rejected redrive
//     change nothing, not even the tick; a batch fails as a whole.
//
// The model checks no input domain (ids, bodies, k >= 1): callers give it
// valid input only.
package refmodel

import (
	"bytes"
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
	flows  map[string]*flow
	events map[string]*event
	audit  []fairrelay.AuditEntry
}

type flow struct {
	id     string
	ord    int64 // creation order, 1-based
	served int64
	events []*event // by seq: events[i].seq == i+1
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
}

// New returns an empty store with the given policy, whose every field must be
// set (use Queue.Policy() of the store under test).
func New(p fairrelay.Policy) *Model {
	return &Model{policy: p, flows: map[string]*flow{}, events: map[string]*event{}}
}

// Tick returns the stored tick.
func (m *Model) Tick() int64 { return m.tick }

func errorCode(code fairrelay.Code, format string, args ...any) error {
	return &fairrelay.Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// advance is the clock rule of SPEC §2: at >= tick, then tick = at. It
// changes nothing on error.
func (m *Model) advance(at int64) error {
	if at < m.tick {
		return errorCode(fairrelay.CodeClockRegressed, "at %d < tick %d", at, m.tick)
	}
	m.tick = at
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

// Enqueue is SPEC §2 enqueue in its own transaction.
func (m *Model) Enqueue(p fairrelay.EnqueueParams) (fairrelay.EnqueueResult, error) {
	if err := m.advance(p.At); err != nil {
		return fairrelay.EnqueueResult{}, err
	}
	r := m.enqueue(fairrelay.NewEvent{ID: p.ID, Flow: p.Flow, Body: p.Body}, p.At)
	r.Tick = p.At
	return r, nil
}

// EnqueueBatch is SPEC §2 enqueue for each item in order, all at tick at, in
// one transaction.
func (m *Model) EnqueueBatch(at int64, ps []fairrelay.NewEvent) ([]fairrelay.EnqueueResult, error) {
	if err := m.advance(at); err != nil {
		return nil, err
	}
	out := make([]fairrelay.EnqueueResult, 0, len(ps))
	for _, p := range ps {
		r := m.enqueue(p, at)
		r.Tick = at
		out = append(out, r)
	}
	return out, nil
}

func (m *Model) enqueue(p fairrelay.NewEvent, at int64) fairrelay.EnqueueResult {
	if old, ok := m.events[p.ID]; ok {
		if old.flow == p.Flow && bytes.Equal(old.body, p.Body) {
			return fairrelay.EnqueueResult{Status: fairrelay.EnqueueExisting, Seq: old.seq}
		}
		return fairrelay.EnqueueResult{Status: fairrelay.EnqueueConflict}
	}
	f, ok := m.flows[p.Flow]
	if !ok {
		f = &flow{id: p.Flow, ord: int64(len(m.flows)) + 1}
		if m.policy.Entry == fairrelay.EntryFair {
			// SPEC §7: served = clock.ticket (the seed policy starts at 0).
			f.served = m.ticket
		}
		m.flows[p.Flow] = f
	}
	e := &event{
		id: p.ID, flow: p.Flow, seq: int64(len(f.events)) + 1,
		body: bytes.Clone(p.Body), state: fairrelay.StateReady, nextAt: at,
	}
	f.events = append(f.events, e)
	m.events[p.ID] = e
	return fairrelay.EnqueueResult{Status: fairrelay.EnqueueCreated, Seq: e.seq}
}

// eligible is SPEC §2 claim step 2 for a head at tick at.
func eligible(h *event, at int64) bool {
	switch h.state {
	case fairrelay.StateReady:
		return h.nextAt <= at
	case fairrelay.StateInflight:
		return h.leaseUntil <= at
	}
	return false
}

// exhausted reports whether the [decision] of SPEC §2 claim step 2 moves h to
// quarantined at tick at.
func (m *Model) exhausted(h *event, at int64) bool {
	return h.state == fairrelay.StateInflight && h.leaseUntil <= at && h.attempts >= m.policy.Budget
}

// before is the order of SPEC §2 claim step 3: smaller served first, ties by
// flow id (seed) or creation order (fair, SPEC §7).
func (m *Model) before(a, b *flow) bool {
	if a.served != b.served {
		return a.served < b.served
	}
	if m.policy.Entry == fairrelay.EntryFair {
		return a.ord < b.ord
	}
	return a.id < b.id
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
	if err := m.advance(at); err != nil {
		return nil, err
	}
	// Step 2's [decision], read as "every such head" (see the package doc).
	for _, f := range m.flows {
		if h := f.head(); h != nil && m.exhausted(h, at) {
			h.state, h.reason = fairrelay.StateQuarantined, fairrelay.ReasonBudgetExhausted
		}
	}
	out := []fairrelay.Claim{}
	for len(out) < k {
		// Steps 1–3: every flow's head, the eligible ones, the smallest.
		var best *flow
		var bestHead *event
		for _, f := range m.flows {
			h := f.head()
			if h == nil || !eligible(h, at) {
				continue
			}
			if best == nil || m.before(f, best) {
				best, bestHead = f, h
			}
		}
		if best == nil {
			break // step 5: idle
		}
		// Step 4.
		m.ticket++
		best.served = m.ticket
		h := bestHead
		h.state = fairrelay.StateInflight
		h.generation++
		h.attempts++
		h.lifetimeAttempts++
		h.leaseUntil = at + m.policy.Lease
		out = append(out, fairrelay.Claim{
			Token: fairrelay.Token{EventID: h.id, Generation: h.generation},
			Flow:  h.flow, Seq: h.seq, Body: bytes.Clone(h.body),
			LeaseUntil: h.leaseUntil, Ticket: m.ticket, Attempts: h.attempts,
		})
	}
	return out, nil
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
// transaction; an unknown event id fails the whole batch.
func (m *Model) SettleBatch(at int64, ps []fairrelay.Settlement) ([]fairrelay.SettleResult, error) {
	if at < m.tick {
		return nil, errorCode(fairrelay.CodeClockRegressed, "at %d < tick %d", at, m.tick)
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
		e.state = fairrelay.StateAcked
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
	if p.At < m.tick {
		return fairrelay.RedriveResult{}, errorCode(fairrelay.CodeClockRegressed, "at %d < tick %d", p.At, m.tick)
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
	a := fairrelay.AuditEntry{ID: &id, Flow: e.flow, Action: "redrive", Reason: p.Reason, PreviousReason: &previous, Generation: &gen, At: p.At}
	if p.Operator != "" {
		op := p.Operator
		a.Operator = &op
	}
	m.audit = append(m.audit, a)
	return fairrelay.RedriveResult{Status: fairrelay.RedriveReady, Generation: e.generation}, nil
}

// Snapshot is the store in the SPEC §6 shape: flows by id, events by flow
// then seq, audit as written; next_at only for ready events, lease_until
// only for inflight ones, reason only for quarantined ones.
func (m *Model) Snapshot() *fairrelay.Snapshot {
	s := &fairrelay.Snapshot{
		Clock: fairrelay.ClockState{Tick: m.tick, Ticket: m.ticket},
		Flows: []fairrelay.FlowState{}, Events: []fairrelay.EventState{},
		Audit: append([]fairrelay.AuditEntry{}, m.audit...),
	}
	ids := make([]string, 0, len(m.flows))
	for id := range m.flows {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		f := m.flows[id]
		s.Flows = append(s.Flows, fairrelay.FlowState{Flow: id, Seq: int64(len(f.events)), Served: f.served})
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
	return s
}

// Event returns the state and generation of event id, and whether it exists.
func (m *Model) Event(id string) (fairrelay.State, int64, bool) {
	e, ok := m.events[id]
	if !ok {
		return "", 0, false
	}
	return e.state, e.generation, true
}

// FlowPosition is one flow's place in the dispatch order.
type FlowPosition struct {
	Flow   string
	Served int64
	Ord    int64 // creation order, 1-based
}

// Positions lists every flow's served and creation order.
func (m *Model) Positions() []FlowPosition {
	out := make([]FlowPosition, 0, len(m.flows))
	for _, f := range m.flows {
		out = append(out, FlowPosition{Flow: f.id, Served: f.served, Ord: f.ord})
	}
	return out
}

// Eligible lists the flows a claim at tick at could pick: those whose head is
// eligible and not moved to quarantined by the budget [decision]. It changes
// nothing.
func (m *Model) Eligible(at int64) map[string]bool {
	out := map[string]bool{}
	for _, f := range m.flows {
		if h := f.head(); h != nil && eligible(h, at) && !m.exhausted(h, at) {
			out[f.id] = true
		}
	}
	return out
}
