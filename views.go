package fairrelay

import (
	"context"
	"time"

	"github.com/fairrelay/fairrelay/internal/store"
)

// The read views of an operator's console (package console): each reads
// bounded ranges of indexes in one read transaction, however large the
// store, and none changes anything.

// MaxCount bounds the counts of Overview unless OverviewParams.MaxCount
// sets another bound: a count of MaxCount means "MaxCount or more" (each
// reads at most that many index entries).
const MaxCount = 100000

// Overview is the queue at a glance (SPEC §1 states, §9 paused flows).
type Overview struct {
	// Clock is the stored clock.
	Clock ClockState `json:"clock"`
	// Backlog counts the events not acked (ready, inflight, quarantined)
	// when OverviewParams.Backlog asked for it (BacklogCounted); 0
	// otherwise.
	Backlog        int64 `json:"backlog"`
	BacklogCounted bool  `json:"backlog_counted"`
	// Flows counts the flows in the store when OverviewParams.Flows asked
	// for it (FlowsCounted); 0 otherwise.
	Flows        int64 `json:"flows"`
	FlowsCounted bool  `json:"flows_counted"`
	// Inflight, Quarantined and Paused count the inflight heads, the
	// quarantined heads (each blocks its flow) and the paused flows, each
	// up to OverviewParams.MaxCount (MaxCount when it is 0).
	Inflight    int64 `json:"inflight"`
	Quarantined int64 `json:"quarantined"`
	Paused      int64 `json:"paused"`
	// Oldest is the event not acked that was enqueued first (always its
	// flow's head), nil when every event is acked.
	Oldest *WaitingEvent `json:"oldest"`
}

// WaitingEvent is an event with the tick it was enqueued at.
type WaitingEvent struct {
	EventState
	// EnqueuedAt is the tick of its enqueue.
	EnqueuedAt int64 `json:"enqueued_at"`
}

// OverviewParams chooses what Overview reads.
type OverviewParams struct {
	// Backlog counts the events not acked too, at Queue.Backlog's cost:
	// a counter on SQLite, a read of every flow on PostgreSQL (O(flows)).
	// A console page leaves it out and counts in the background
	// (package console).
	Backlog bool
	// Flows counts the flows in the store too (Overview.Flows), O(flows):
	// on SQLite a count of the flow table (under a millisecond at 100 000
	// flows), on PostgreSQL one pass over it that also gives the backlog
	// (60 ms for both at 100 000 flows; BENCHMARKS.md, "The queue gauges").
	Flows bool
	// MaxCount bounds each of Overview's counts of inflight heads,
	// quarantined heads and paused flows: 0 means the package's MaxCount
	// (100 000), and a count equal to the bound means "that many or more".
	// Each count reads its own index up to the bound, so its cost is
	// O(min(count, bound)); relay.RegisterQueueGauges passes
	// math.MaxInt32 for exact gauges. Negative is ErrInvalidInput naming
	// max_count.
	MaxCount int
}

// Overview reads the counts of the queue in one read transaction: the
// stored clock, the inflight and quarantined heads and the paused flows
// (each up to p.MaxCount, through indexes), the oldest event not acked
// and, when p.Backlog and p.Flows ask for them, the backlog and the number
// of flows. Errors: ErrInvalidInput (field "max_count" negative), ErrBusy,
// ErrDatabase.
func (q *Queue) Overview(ctx context.Context, p OverviewParams) (*Overview, error) {
	if p.MaxCount < 0 {
		return nil, invalid("max_count", "must be 0 (MaxCount) or positive, got %d", p.MaxCount)
	}
	bound := p.MaxCount
	if bound == 0 {
		bound = MaxCount
	}
	tx, err := q.store.BeginRead(ctx)
	if err != nil {
		return nil, dbError("overview", err)
	}
	defer tx.Rollback(ctx)
	c, err := tx.Clock(ctx)
	if err != nil {
		return nil, dbError("overview", err)
	}
	o := &Overview{Clock: ClockState{Tick: c.Tick, Ticket: c.Ticket}}
	switch {
	case p.Flows:
		// One pass over the flows gives both on PostgreSQL.
		flows, backlog, err := tx.FlowTotals(ctx)
		if err != nil {
			return nil, dbError("overview", err)
		}
		o.Flows, o.FlowsCounted = flows, true
		if p.Backlog {
			o.Backlog, o.BacklogCounted = backlog, true
		}
	case p.Backlog:
		if o.Backlog, err = tx.Backlog(ctx); err != nil {
			return nil, dbError("overview", err)
		}
		o.BacklogCounted = true
	}
	n, err := tx.Counts(ctx, bound)
	if err != nil {
		return nil, dbError("overview", err)
	}
	o.Inflight, o.Quarantined, o.Paused = n.Inflight, n.Quarantined, n.Paused
	e, err := tx.OldestWaiting(ctx)
	if err != nil {
		return nil, dbError("overview", err)
	}
	if e != nil {
		o.Oldest = &WaitingEvent{EventState: eventState(*e), EnqueuedAt: e.EnqueuedAt}
	}
	return o, nil
}

// Backlog counts the events not acked (ready, inflight and quarantined;
// SPEC §8's backlog), in one read. Its cost depends on the backend: SQLite
// keeps a store-wide counter (O(1)); PostgreSQL keeps none, because every
// enqueue would write it and enqueues must share no lock (SPEC §10), so
// it sums every flow's backlog, one read of the flow table (O(flows): 44 ms
// at 100 000 flows, BENCHMARKS.md). Call it in the background, not per
// request, on a large PostgreSQL store. Errors: ErrBusy, ErrDatabase.
func (q *Queue) Backlog(ctx context.Context) (int64, error) {
	tx, err := q.store.BeginRead(ctx)
	if err != nil {
		return 0, dbError("backlog", err)
	}
	defer tx.Rollback(ctx)
	n, err := tx.Backlog(ctx)
	if err != nil {
		return 0, dbError("backlog", err)
	}
	return n, nil
}

// Delivery is one settled attempt, as Deliveries lists them.
type Delivery struct {
	// ID and Flow name the event; Generation the claim.
	ID         string `json:"id"`
	Flow       string `json:"flow"`
	Generation int64  `json:"generation"`
	// Settled is when the settle ran (wall clock, UTC, to the
	// millisecond); Duration how long the delivery took (to the
	// millisecond), as the relay reported it; in JSON a time.Duration's
	// integer, nanoseconds (a whole number of milliseconds).
	Settled  time.Time     `json:"settled"`
	Duration time.Duration `json:"duration"`
	// Outcome is the receiver's answer; Status the settle's answer (acked,
	// ready, quarantined, expired).
	Outcome string `json:"outcome"`
	Status  string `json:"status"`
}

// Deliveries lists up to limit attempts settled at or after since, newest
// first, in one read transaction (the attempt history's index on the
// settle's wall-clock time). Errors: ErrInvalidInput (field "limit" below
// 1); ErrBusy; ErrDatabase.
func (q *Queue) Deliveries(ctx context.Context, since time.Time, limit int) ([]Delivery, error) {
	if limit < 1 {
		return nil, invalid("limit", "must be at least 1, got %d", limit)
	}
	tx, err := q.store.BeginRead(ctx)
	if err != nil {
		return nil, dbError("deliveries", err)
	}
	defer tx.Rollback(ctx)
	rows, err := tx.SettledSince(ctx, since.UnixMilli(), limit)
	if err != nil {
		return nil, dbError("deliveries", err)
	}
	out := make([]Delivery, 0, len(rows))
	for _, r := range rows {
		d := Delivery{ID: r.EventID, Flow: r.Flow, Generation: r.Generation, Duration: time.Duration(r.DurationMs) * time.Millisecond,
			Outcome: r.Outcome, Status: r.Status}
		if r.SettledWall != nil {
			d.Settled = wallTime(*r.SettledWall)
		}
		out = append(out, d)
	}
	return out, nil
}

// FlowInfo is a flow with its head and what an operator needs to tell why
// it is not moving.
type FlowInfo struct {
	Head
	// HeadSeq is the seq of its head (Seq+1 when every event is acked);
	// Backlog the events not acked (Seq - HeadSeq + 1).
	HeadSeq int64 `json:"head_seq"`
	Backlog int64 `json:"backlog"`
	// PausedBy (may be empty), PausedReason and PausedAt (a tick) say who
	// paused the flow, why and when (SPEC §9); empty unless Paused.
	PausedBy     string `json:"paused_by,omitempty"`
	PausedReason string `json:"paused_reason,omitempty"`
	PausedAt     int64  `json:"paused_at,omitempty"`
}

// FlowsParams selects a page of flows by flow id (bytewise order).
type FlowsParams struct {
	// Prefix keeps the flows whose id starts with it ("" for every flow);
	// a range of the index, however many flows there are.
	Prefix string
	// After starts the page after this flow id ("" for the first page);
	// the last flow's id asks for the next page (keyset paging).
	After string
	// Paused keeps only the paused flows (Prefix must then be empty).
	Paused bool
	// Limit is the most flows returned, 1 to 1000.
	Limit int
}

// Flows lists a page of flows with their heads, in one read transaction.
// Errors: ErrInvalidInput (field "limit" outside 1 to 1000, "prefix" with
// paused; "prefix" or "after" not valid UTF-8 or holding a control
// character); ErrBusy; ErrDatabase.
func (q *Queue) Flows(ctx context.Context, p FlowsParams) ([]FlowInfo, error) {
	switch {
	case p.Limit < 1 || p.Limit > pageSize:
		return nil, invalid("limit", "must be in [1, %d], got %d", pageSize, p.Limit)
	case p.Paused && p.Prefix != "":
		return nil, invalid("prefix", "cannot be combined with paused")
	}
	if err := checkSearch("prefix", p.Prefix); err != nil {
		return nil, err
	}
	if err := checkSearch("after", p.After); err != nil {
		return nil, err
	}
	tx, err := q.store.BeginRead(ctx)
	if err != nil {
		return nil, dbError("flows", err)
	}
	defer tx.Rollback(ctx)
	var fs []store.FlowRow
	if p.Paused {
		fs, err = tx.PausedList(ctx, p.After, p.Limit)
	} else {
		fs, err = tx.FlowSearch(ctx, p.Prefix, p.After, p.Limit)
	}
	if err != nil {
		return nil, dbError("flows", err)
	}
	return flowInfos(ctx, tx, fs)
}

// Flow reads one flow with its head in a read transaction. Errors:
// ErrInvalidInput (field "flow"); ErrNotFound; ErrBusy; ErrDatabase.
func (q *Queue) Flow(ctx context.Context, flow string) (*FlowInfo, error) {
	if err := checkID("flow", flow); err != nil {
		return nil, err
	}
	tx, err := q.store.BeginRead(ctx)
	if err != nil {
		return nil, dbError("flow", err)
	}
	defer tx.Rollback(ctx)
	fs, err := tx.FlowSearch(ctx, flow, "", 1)
	if err != nil {
		return nil, dbError("flow", err)
	}
	if len(fs) == 0 || fs[0].Flow != flow {
		return nil, &Error{Code: CodeNotFound, Message: "no flow with id " + quote(flow)}
	}
	out, err := flowInfos(ctx, tx, fs)
	if err != nil {
		return nil, err
	}
	return &out[0], nil
}

func flowInfos(ctx context.Context, tx store.ReadTx, fs []store.FlowRow) ([]FlowInfo, error) {
	heads, err := tx.Heads(ctx, fs)
	if err != nil {
		return nil, dbError("flows", err)
	}
	out := make([]FlowInfo, 0, len(fs))
	for _, f := range fs {
		fi := FlowInfo{Head: Head{FlowState: flowState(f)}, HeadSeq: f.HeadSeq, Backlog: max(0, f.Seq-f.HeadSeq+1)}
		if f.Paused {
			fi.PausedBy, fi.PausedReason, fi.PausedAt = f.PausedBy, f.PausedReason, f.PausedAt
		}
		if e := heads[f.Flow]; e != nil {
			es := eventState(*e)
			fi.Head.Head = &es
		}
		out = append(out, fi)
	}
	return out, nil
}
