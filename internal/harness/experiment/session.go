package experiment

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
)

// session is one scenario's run: its fresh directory, the worker to start,
// the SPEC claims found broken, and what to close at the end.
type session struct {
	dir        string
	worker     Worker
	violations []string
	closers    []func() error
}

// expect records a broken SPEC claim when ok is false. The scenario goes on,
// so its facts still show what happened.
func (s *session) expect(ok bool, format string, args ...any) {
	if !ok {
		s.violations = append(s.violations, fmt.Sprintf(format, args...))
	}
}

func (s *session) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
}

func (s *session) queuePath() string { return filepath.Join(s.dir, "queue.db") }
func (s *session) inboxPath() string { return filepath.Join(s.dir, "inbox.db") }

// openQueue opens the scenario's queue file (creating it) under pol.
func (s *session) openQueue(ctx context.Context, pol fairrelay.Policy) (*fairrelay.Queue, error) {
	q, err := fairrelay.Open(ctx, s.queuePath(), fairrelay.Config{Policy: pol})
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, q.Close)
	return q, nil
}

// openInbox opens the scenario's inbox file (creating it); maxDelta 0 is no
// limit.
func (s *session) openInbox(ctx context.Context, maxDelta int64) (*inbox.Inbox, error) {
	in, err := inbox.Open(ctx, s.inboxPath(), inbox.Options{MaxDelta: maxDelta})
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, in.Close)
	return in, nil
}

// open opens both stores with the article's reference policy (SPEC §2) and
// an inbox with no delta limit.
func (s *session) open(ctx context.Context) (*fairrelay.Queue, *inbox.Inbox, error) {
	return s.openWith(ctx, fairrelay.ReferencePolicy(), 0)
}

func (s *session) openWith(ctx context.Context, pol fairrelay.Policy, maxDelta int64) (*fairrelay.Queue, *inbox.Inbox, error) {
	q, err := s.openQueue(ctx, pol)
	if err != nil {
		return nil, nil, err
	}
	in, err := s.openInbox(ctx, maxDelta)
	if err != nil {
		return nil, nil, err
	}
	return q, in, nil
}

// seed creates the scenario's files with the reference policy, enqueues
// evs at tick 0 and closes both stores again, so that a worker process is
// the only one holding them.
func (s *session) seed(ctx context.Context, evs ...ledgerEvent) error {
	q, err := fairrelay.Open(ctx, s.queuePath(), fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		return err
	}
	err = enqueue(ctx, q, 0, evs...)
	if cerr := q.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	in, err := inbox.Open(ctx, s.inboxPath(), inbox.Options{})
	if err != nil {
		return err
	}
	return in.Close()
}

// ledgerEvent is one event of the reference ledger: body {"delta": n}.
type ledgerEvent struct {
	id, flow string
	delta    int64
}

// enqueue stores each event at tick at and expects it created.
func enqueue(ctx context.Context, q *fairrelay.Queue, at int64, evs ...ledgerEvent) error {
	for _, e := range evs {
		r, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: e.id, Flow: e.flow, Body: ledgerBody(e.delta), At: at})
		if err != nil {
			return fmt.Errorf("enqueue %s: %w", e.id, err)
		}
		if r.Status != fairrelay.EnqueueCreated {
			return fmt.Errorf("enqueue %s on fresh files answered %s", e.id, r.Status)
		}
	}
	return nil
}

// claimA1 opens fresh stores, enqueues A1 (flow A) with delta and claims it
// at tick 0: the start of the single-event scenarios.
func (s *session) claimA1(ctx context.Context, delta int64) (*fairrelay.Queue, *inbox.Inbox, *fairrelay.Claim, error) {
	q, in, err := s.open(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := enqueue(ctx, q, 0, ledgerEvent{"A1", "A", delta}); err != nil {
		return nil, nil, nil, err
	}
	res, err := q.Claim(ctx, fairrelay.ClaimParams{At: 0})
	if err != nil {
		return nil, nil, nil, err
	}
	c := res.First()
	if c == nil {
		return nil, nil, nil, fmt.Errorf("claim at 0 answered idle, want A1")
	}
	return q, in, c, nil
}

func ledgerBody(delta int64) []byte { return fmt.Appendf(nil, `{"delta":%d}`, delta) }

// delivery is one claim → receive → settle at one tick, what a worker does
// with one head. Claim is the claimed event id, or "idle".
type delivery struct {
	Claim      string                 `json:"claim"`
	Generation int64                  `json:"generation,omitempty"`
	Ticket     int64                  `json:"ticket,omitempty"`
	Received   fairrelay.Outcome      `json:"received,omitempty"`
	Settled    fairrelay.SettleStatus `json:"settled,omitempty"`
	NextAt     int64                  `json:"next_at,omitempty"`
}

const idle = "idle"

// deliver claims one head at tick at, delivers it to the inbox and settles
// it with the inbox's answer at the same tick. Errors from any of the three
// are returned as they are: never turned into an outcome.
func deliver(ctx context.Context, q *fairrelay.Queue, in *inbox.Inbox, at int64) (delivery, error) {
	res, err := q.Claim(ctx, fairrelay.ClaimParams{At: at})
	if err != nil {
		return delivery{}, fmt.Errorf("claim at %d: %w", at, err)
	}
	c := res.First()
	if c == nil {
		return delivery{Claim: idle}, nil
	}
	d := delivery{Claim: c.Token.EventID, Generation: c.Token.Generation, Ticket: c.Ticket}
	out, err := in.Receive(ctx, inbox.Delivery{EventID: c.Token.EventID, Flow: c.Flow, Seq: c.Seq, Body: c.Body})
	if err != nil {
		return d, fmt.Errorf("receive %s: %w", c.Token.EventID, err)
	}
	d.Received = out
	r, err := q.Settle(ctx, fairrelay.SettleParams{Token: c.Token, Outcome: out, At: at})
	if err != nil {
		return d, fmt.Errorf("settle %s: %w", c.Token.EventID, err)
	}
	d.Settled, d.NextAt = r.Status, r.NextAt
	return d, nil
}

// drain delivers at tick at until the queue answers idle (at most limit
// deliveries) and returns every delivery, the final idle included.
func drain(ctx context.Context, q *fairrelay.Queue, in *inbox.Inbox, at int64, limit int) ([]delivery, error) {
	var out []delivery
	for range limit {
		d, err := deliver(ctx, q, in, at)
		if err != nil {
			return out, err
		}
		out = append(out, d)
		if d.Claim == idle {
			return out, nil
		}
	}
	return out, fmt.Errorf("still claiming after %d deliveries at tick %d", limit, at)
}

func claimed(ds []delivery) []string {
	var ids []string
	for _, d := range ds {
		if d.Claim != idle {
			ids = append(ids, d.Claim)
		}
	}
	return ids
}

// state is both stores as snapshots read them (SPEC §6 shape): the business
// state a scenario freezes.
type state struct {
	Clock      fairrelay.ClockState   `json:"clock"`
	Flows      []fairrelay.FlowState  `json:"flows"`
	Events     []fairrelay.EventState `json:"events"`
	Audit      []fairrelay.AuditEntry `json:"audit"`
	Receipts   []inbox.Receipt        `json:"receipts"`
	Projection []inbox.Projection     `json:"projection"`
}

func snapshot(ctx context.Context, q *fairrelay.Queue, in *inbox.Inbox) (state, error) {
	qs, err := q.Snapshot(ctx)
	if err != nil {
		return state{}, err
	}
	is, err := in.Snapshot(ctx)
	if err != nil {
		return state{}, err
	}
	return state{Clock: qs.Clock, Flows: qs.Flows, Events: qs.Events, Audit: qs.Audit,
		Receipts: is.Receipts, Projection: is.Projection}, nil
}

func (st state) event(id string) fairrelay.EventState {
	for _, e := range st.Events {
		if e.ID == id {
			return e
		}
	}
	return fairrelay.EventState{ID: id}
}

func (st state) flow(id string) fairrelay.FlowState {
	for _, f := range st.Flows {
		if f.Flow == id {
			return f
		}
	}
	return fairrelay.FlowState{Flow: id}
}

func (st state) projection(flow string) inbox.Projection {
	for _, p := range st.Projection {
		if p.Flow == flow {
			return p
		}
	}
	return inbox.Projection{Flow: flow}
}
