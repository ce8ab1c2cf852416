package fairrelay

import (
	"context"
	"slices"
	"strings"

	"github.com/fairrelay/fairrelay/internal/store"
)

// State is an event's state (SPEC §1).
type State string

// The event states, as the snapshot, the CLI and the stores spell them
// (SPEC §1). StateAcked is final.
const (
	StateReady       State = "ready"
	StateInflight    State = "inflight"
	StateAcked       State = "acked"
	StateQuarantined State = "quarantined"
)

// ClockState is the store's clock: the last tick written and the last ticket
// handed out.
type ClockState struct {
	Tick   int64 `json:"tick"`
	Ticket int64 `json:"ticket"`
}

// FlowState is one flow in a snapshot: its last seq, its served ticket,
// whether an operator paused it (SPEC §9) and its group (SPEC §8: its own
// name when it joined none).
type FlowState struct {
	Flow   string `json:"flow"`
	Seq    int64  `json:"seq"`
	Served int64  `json:"served"`
	Paused bool   `json:"paused"`
	Group  string `json:"group"`
}

// GroupState is one group in a snapshot (SPEC §8): its weight, its served
// ticket (nil while it has no flow: a group configured before any flow
// joined it has no place in the rotation) and its backlog limit (nil when
// 0, no limit).
type GroupState struct {
	Group      string `json:"group"`
	Weight     int64  `json:"weight"`
	Served     *int64 `json:"served"`
	MaxBacklog *int64 `json:"max_backlog"`
}

// EventState is one event in a snapshot (SPEC §6). Reason is set only when
// quarantined, NextAt only when ready, LeaseUntil only when inflight; both are
// ticks.
type EventState struct {
	ID               string  `json:"id"`
	Flow             string  `json:"flow"`
	Seq              int64   `json:"seq"`
	State            State   `json:"state"`
	Generation       int64   `json:"generation"`
	Attempts         int64   `json:"attempts"`
	LifetimeAttempts int64   `json:"lifetime_attempts"`
	Reason           *string `json:"reason"`
	NextAt           *int64  `json:"next_at"`
	LeaseUntil       *int64  `json:"lease_until"`
}

// AuditEntry is one audit row: an operator's decision (SPEC §2 redrive, §9
// expedite, pause, resume). Action is the operation's name. ID is the event
// (nil for pause and resume); Flow the flow acted on. Generation is the
// event's new generation for redrive, its unchanged one for expedite, nil
// for pause and resume. PreviousReason is the quarantine reason a redrive
// cleared (nil for the others). Operator is nil when none was named.
type AuditEntry struct {
	// No numbers the row in the log, as Audit reads it: ascending in the
	// order written, with gaps (on PostgreSQL a rolled-back redrive may use
	// a number). It pages Audit; it is not part of the SPEC §6 shape, so
	// JSON leaves it out and Snapshot leaves it 0 (backends may number
	// differently).
	No             int64   `json:"-"`
	ID             *string `json:"id"`
	Flow           string  `json:"flow"`
	Action         string  `json:"action"`
	Reason         string  `json:"reason"`
	Operator       *string `json:"operator"`
	PreviousReason *string `json:"previous_reason"`
	Generation     *int64  `json:"generation"`
	At             int64   `json:"at"`
	// Wall is when the row was written on the wall clock (Config.Now),
	// in milliseconds since the Unix epoch, as Audit reads it. Not part of
	// the SPEC §6 shape (a script's output must replay exactly): JSON
	// leaves it out and Snapshot leaves it 0.
	Wall int64 `json:"-"`
}

// Snapshot is the whole queue store read in one read transaction (SPEC §6
// shape): flows by flow id, events by flow then seq, audit as written.
type Snapshot struct {
	Clock  ClockState   `json:"clock"`
	Flows  []FlowState  `json:"flows"`
	Groups []GroupState `json:"groups"`
	Events []EventState `json:"events"`
	Audit  []AuditEntry `json:"audit"`
}

func eventState(e store.EventRow) EventState {
	s := EventState{
		ID: e.ID, Flow: e.Flow, Seq: e.Seq, State: State(e.State),
		Generation: e.Generation, Attempts: e.Attempts, LifetimeAttempts: e.LifetimeAttempts,
	}
	switch e.State {
	case store.StateQuarantined:
		r := e.Reason
		s.Reason = &r
	case store.StateReady:
		v := e.NextAt
		s.NextAt = &v
	case store.StateInflight:
		v := e.LeaseUntil
		s.LeaseUntil = &v
	}
	return s
}

// flowState is a flow row as the read views show it: its group is its own
// name when it joined none (SPEC §8).
func flowState(f store.FlowRow) FlowState {
	s := FlowState{Flow: f.Flow, Seq: f.Seq, Served: f.Served, Paused: f.Paused, Group: f.Group}
	if s.Group == "" {
		s.Group = f.Flow
	}
	return s
}

func groupState(g store.GroupRow) GroupState {
	s := GroupState{Group: g.Group, Weight: g.Weight}
	if g.Ord != 0 {
		v := g.Served
		s.Served = &v
	}
	if g.MaxBacklog != 0 {
		v := g.MaxBacklog
		s.MaxBacklog = &v
	}
	return s
}

func auditEntry(a store.AuditRow) AuditEntry {
	return AuditEntry{ID: a.EventID, Flow: a.Flow, Action: a.Action, Reason: a.Reason, Operator: a.Operator,
		PreviousReason: a.PreviousReason, Generation: a.Generation, At: a.At}
}

const pageSize = 1000

// Snapshot reads the whole store in one read transaction. It is meant for
// tests, scripts and small stores: it holds every event in memory. Errors:
// ErrBusy, ErrDatabase.
func (q *Queue) Snapshot(ctx context.Context) (*Snapshot, error) {
	tx, err := q.store.BeginRead(ctx)
	if err != nil {
		return nil, dbError("snapshot", err)
	}
	defer tx.Rollback(ctx)
	c, err := tx.Clock(ctx)
	if err != nil {
		return nil, dbError("snapshot", err)
	}
	s := &Snapshot{Clock: ClockState{Tick: c.Tick, Ticket: c.Ticket}, Flows: []FlowState{}, Groups: []GroupState{}, Events: []EventState{}, Audit: []AuditEntry{}}
	for after := ""; ; {
		fs, err := tx.FlowList(ctx, after, pageSize)
		if err != nil {
			return nil, dbError("snapshot", err)
		}
		for _, f := range fs {
			st := flowState(f)
			if f.Group == "" {
				// Its own group, which has no row (SPEC §8).
				served := f.Served
				s.Groups = append(s.Groups, GroupState{Group: f.Flow, Weight: 1, Served: &served})
			}
			s.Flows = append(s.Flows, st)
		}
		if len(fs) < pageSize {
			break
		}
		after = fs[len(fs)-1].Flow
	}
	for after := ""; ; {
		gs, err := tx.GroupList(ctx, after, pageSize)
		if err != nil {
			return nil, dbError("snapshot", err)
		}
		for _, g := range gs {
			s.Groups = append(s.Groups, groupState(g.GroupRow))
		}
		if len(gs) < pageSize {
			break
		}
		after = gs[len(gs)-1].Group
	}
	slices.SortFunc(s.Groups, func(a, b GroupState) int { return strings.Compare(a.Group, b.Group) })
	es, err := allEvents(ctx, tx)
	if err != nil {
		return nil, dbError("snapshot", err)
	}
	for _, e := range es {
		s.Events = append(s.Events, eventState(e))
	}
	for after := int64(0); ; {
		as, err := tx.AuditList(ctx, after, pageSize)
		if err != nil {
			return nil, dbError("snapshot", err)
		}
		for _, a := range as {
			s.Audit = append(s.Audit, auditEntry(a))
		}
		if len(as) < pageSize {
			break
		}
		after = as[len(as)-1].No
	}
	return s, nil
}

// allEvents pages through every event in (flow, seq) order.
func allEvents(ctx context.Context, tx store.ReadTx) ([]store.EventRow, error) {
	var out []store.EventRow
	afterFlow, afterSeq := "", int64(0)
	for {
		es, err := tx.EventList(ctx, afterFlow, afterSeq, pageSize)
		if err != nil {
			return nil, err
		}
		out = append(out, es...)
		if len(es) < pageSize {
			return out, nil
		}
		last := es[len(es)-1]
		afterFlow, afterSeq = last.Flow, last.Seq
	}
}

// Head is one flow with its head event (nil when every event is acked).
type Head struct {
	FlowState
	Head *EventState `json:"head"`
}

// Heads lists up to limit flows after the flow id after (bytewise order),
// each with its head, in one read transaction. Errors: ErrInvalidInput
// (field "limit" below 1; "after" not valid UTF-8 or holding a control
// character, CheckSearch), ErrBusy, ErrDatabase.
func (q *Queue) Heads(ctx context.Context, after string, limit int) ([]Head, error) {
	if limit < 1 {
		return nil, invalid("limit", "must be at least 1, got %d", limit)
	}
	if err := checkSearch("after", after); err != nil {
		return nil, err
	}
	tx, err := q.store.BeginRead(ctx)
	if err != nil {
		return nil, dbError("heads", err)
	}
	defer tx.Rollback(ctx)
	fs, err := tx.FlowList(ctx, after, limit)
	if err != nil {
		return nil, dbError("heads", err)
	}
	heads, err := tx.Heads(ctx, fs)
	if err != nil {
		return nil, dbError("heads", err)
	}
	out := make([]Head, 0, len(fs))
	for _, f := range fs {
		h := Head{FlowState: flowState(f)}
		if e := heads[f.Flow]; e != nil {
			es := eventState(*e)
			h.Head = &es
		}
		out = append(out, h)
	}
	return out, nil
}

// Quarantined lists up to limit quarantined events by flow then seq; each
// blocks its flow until a redrive. Errors: ErrInvalidInput (field "limit"
// below 1), ErrBusy, ErrDatabase.
func (q *Queue) Quarantined(ctx context.Context, limit int) ([]EventState, error) {
	return q.QuarantinedAfter(ctx, "", limit)
}

// QuarantinedAfter is Quarantined from the first flow after afterFlow (""
// for the first flow): a quarantined event is its flow's head, so there is
// one per flow at most, and the last one's Flow asks for the next page.
// Errors as Quarantined.
func (q *Queue) QuarantinedAfter(ctx context.Context, afterFlow string, limit int) ([]EventState, error) {
	return q.QuarantinedWhere(ctx, QuarantinedParams{After: afterFlow, Limit: limit})
}

// QuarantinedParams selects a page of quarantined heads.
type QuarantinedParams struct {
	// After starts the page at the first flow after this one ("" for the
	// first); the last head's Flow asks for the next page.
	After string
	// Flow, when set, keeps only that flow's head; Reason only the heads
	// quarantined for that reason (ReasonBudgetExhausted or a permanent
	// outcome). The store filters: a page holds Limit matching heads.
	Flow, Reason string
	// Prefix, when set, keeps only the heads of flows whose id starts
	// with it (a range of the index, however many flows there are).
	Prefix string
	// Group, when set, keeps only the heads of the flows in that group
	// (SPEC §8; a flow created without a group is in the group named like
	// itself, FlowState.Group). A page may take the store longer to fill
	// than without it: flows of other groups are read and passed over.
	Group string
	// Limit is the most heads returned, at least 1.
	Limit int
}

// QuarantinedWhere lists quarantined heads by flow as p selects them, in
// one read transaction. Errors: ErrInvalidInput (field "limit" below 1;
// "flow" or "group" not a valid flow or group id; "after", "prefix" not
// valid UTF-8 or holding a control character, which no flow id holds;
// "reason" not a quarantine reason), ErrBusy, ErrDatabase.
func (q *Queue) QuarantinedWhere(ctx context.Context, p QuarantinedParams) ([]EventState, error) {
	afterFlow, limit := p.After, p.Limit
	if limit < 1 {
		return nil, invalid("limit", "must be at least 1, got %d", limit)
	}
	// A filter that nothing stored could match is a typo, not an empty
	// answer.
	if err := checkSearch("after", p.After); err != nil {
		return nil, err
	}
	if err := checkSearch("prefix", p.Prefix); err != nil {
		return nil, err
	}
	if p.Flow != "" {
		if err := checkID("flow", p.Flow); err != nil {
			return nil, err
		}
	}
	if p.Group != "" {
		if err := checkID("group", p.Group); err != nil {
			return nil, err
		}
	}
	if p.Reason != "" && p.Reason != ReasonBudgetExhausted && Outcome(p.Reason).Class() != ClassPermanent {
		return nil, invalid("reason", "%s is no quarantine reason: %s or a permanent outcome (id_conflict, sequence_conflict, unsupported_delta, invalid_body, rejected)", quote(p.Reason), ReasonBudgetExhausted)
	}
	tx, err := q.store.BeginRead(ctx)
	if err != nil {
		return nil, dbError("quarantined", err)
	}
	defer tx.Rollback(ctx)
	es, err := tx.QuarantinedList(ctx, afterFlow, store.QuarantinedFilter{Flow: p.Flow, Prefix: p.Prefix, Reason: p.Reason, Group: p.Group}, limit)
	if err != nil {
		return nil, dbError("quarantined", err)
	}
	out := make([]EventState, 0, len(es))
	for _, e := range es {
		out = append(out, eventState(e))
	}
	return out, nil
}

// Audit lists up to limit audit rows as written, those numbered above after
// (AuditEntry.No; 0 starts at the first row, and the last row's No asks for
// the next page). Errors: ErrInvalidInput (field "limit" below 1, "after"
// negative), ErrBusy, ErrDatabase.
func (q *Queue) Audit(ctx context.Context, after int64, limit int) ([]AuditEntry, error) {
	if limit < 1 {
		return nil, invalid("limit", "must be at least 1, got %d", limit)
	}
	if after < 0 {
		return nil, invalid("after", "must not be negative, got %d", after)
	}
	tx, err := q.store.BeginRead(ctx)
	if err != nil {
		return nil, dbError("audit", err)
	}
	defer tx.Rollback(ctx)
	as, err := tx.AuditList(ctx, after, limit)
	if err != nil {
		return nil, dbError("audit", err)
	}
	out := make([]AuditEntry, 0, len(as))
	for _, a := range as {
		e := auditEntry(a)
		e.No, e.Wall = a.No, a.Wall
		out = append(out, e)
	}
	return out, nil
}

// EventRecord is one event with its body, as Event reads it.
type EventRecord struct {
	EventState
	Body []byte `json:"body"`
}

// Event reads one event by id in a read transaction. Errors:
// ErrInvalidInput (field "id": not an id CheckID allows, which no event
// has), ErrNotFound, ErrBusy, ErrDatabase.
func (q *Queue) Event(ctx context.Context, id string) (*EventRecord, error) {
	if err := checkID("id", id); err != nil {
		return nil, err
	}
	tx, err := q.store.BeginRead(ctx)
	if err != nil {
		return nil, dbError("event", err)
	}
	defer tx.Rollback(ctx)
	e, err := tx.EventGet(ctx, id)
	if err != nil {
		return nil, dbError("event", err)
	}
	if e == nil {
		return nil, eventNotFound(ctx, tx, "event", id)
	}
	return &EventRecord{EventState: eventState(*e), Body: e.Body}, nil
}

// Events lists up to limit events, bodies included, by flow and then seq
// (bytewise flow order), starting after (afterFlow, afterSeq): "" and 0
// for the first; the last event's Flow and Seq ask for the next page. It
// reads one page in one read transaction, acked events included until a
// prune deletes them (SPEC §8). Errors: ErrInvalidInput (field "limit"
// below 1, "after_seq" negative or given without afterFlow, whose seq it
// is, "after_flow" not valid UTF-8 or holding a control character,
// CheckSearch), ErrBusy, ErrDatabase.
func (q *Queue) Events(ctx context.Context, afterFlow string, afterSeq int64, limit int) ([]EventRecord, error) {
	if limit < 1 {
		return nil, invalid("limit", "must be at least 1, got %d", limit)
	}
	if afterSeq < 0 {
		return nil, invalid("after_seq", "must not be negative, got %d", afterSeq)
	}
	if afterSeq != 0 && afterFlow == "" {
		return nil, invalid("after_seq", "is a seq of after_flow: give the flow too (\"\" and 0 start at the first event)")
	}
	if err := checkSearch("after_flow", afterFlow); err != nil {
		return nil, err
	}
	tx, err := q.store.BeginRead(ctx)
	if err != nil {
		return nil, dbError("events", err)
	}
	defer tx.Rollback(ctx)
	es, err := tx.EventList(ctx, afterFlow, afterSeq, limit)
	if err != nil {
		return nil, dbError("events", err)
	}
	out := make([]EventRecord, len(es))
	for i, e := range es {
		out[i] = EventRecord{EventState: eventState(e), Body: e.Body}
	}
	return out, nil
}

// Clock reads the store's clock (the last tick written and the last ticket)
// in a read transaction. The daemon's clock starts from it so it never goes
// below the stored tick (SPEC §7). Errors: ErrBusy, ErrDatabase.
func (q *Queue) Clock(ctx context.Context) (ClockState, error) {
	tx, err := q.store.BeginRead(ctx)
	if err != nil {
		return ClockState{}, dbError("clock", err)
	}
	defer tx.Rollback(ctx)
	c, err := tx.Clock(ctx)
	if err != nil {
		return ClockState{}, dbError("clock", err)
	}
	return ClockState{Tick: c.Tick, Ticket: c.Ticket}, nil
}

// NextDue tells, without writing, when a claim could next take a head. It
// returns the stored tick, and when ok, due: the stored tick itself when a
// head is eligible now, else the earliest tick at which a backoff or a lease
// ends. ok is false when no flow has a head that a claim could ever take
// (all acked or quarantined). An idle dispatcher uses it to sleep instead of
// running a claim — a write, since a claim advances the tick — on every
// poll; it must first raise its own clock to stored (SPEC §7). Errors:
// ErrBusy, ErrDatabase.
func (q *Queue) NextDue(ctx context.Context) (stored, due int64, ok bool, err error) {
	tx, err := q.store.BeginRead(ctx)
	if err != nil {
		return 0, 0, false, dbError("next due", err)
	}
	defer tx.Rollback(ctx)
	c, err := tx.Clock(ctx)
	if err != nil {
		return 0, 0, false, dbError("next due", err)
	}
	fs, err := tx.FlowPick(ctx, q.pickOrder(), 1)
	if err != nil {
		return 0, 0, false, dbError("next due", err)
	}
	gs, err := tx.GroupPick(ctx, q.pickOrder(), 1)
	if err != nil {
		return 0, 0, false, dbError("next due", err)
	}
	if len(fs) > 0 || len(gs) > 0 {
		return c.Tick, c.Tick, true, nil
	}
	wait, ok, err := tx.NextWait(ctx)
	if err != nil {
		return 0, 0, false, dbError("next due", err)
	}
	if !ok {
		return c.Tick, 0, false, nil
	}
	return c.Tick, wait, true, nil
}

// CheckTick answers what the clock checks of a write at tick at would
// answer now, in SPEC §2's order, without writing: ErrClockRegressed for a
// tick below the stored one (unless floor), ErrInvalidInput naming "at" for
// a tick further ahead than the policy's max_tick_jump or above MaxTick,
// nil otherwise. A caller that refuses a field of its own before calling
// the queue (a command line's --delta or --outcome, say) asks it first, so
// that its errors come in the SPEC's order too. op names the operation in
// the message. Errors also: ErrBusy, ErrDatabase.
func (q *Queue) CheckTick(ctx context.Context, op string, at int64, floor bool) error {
	c, err := q.Clock(ctx)
	if err != nil {
		return err
	}
	_, err = q.resolveTick(op, at, floor, c.Tick)
	return err
}

// checkSearch is CheckSearch for the package's own lists.
func checkSearch(field, v string) error { return CheckSearch(field, v) }
