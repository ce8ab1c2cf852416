// Package store is the storage seam of the queue store (SPEC §2, §4).
//
// The protocol rules live in the root package fairrelay; a backend only
// persists rows and answers narrow, indexed questions about them. Every
// backend runs the same conformance suite (package storetest). The seam is
// internal and wide on purpose: noun-verb methods, one per question the
// protocol asks, each answered by one statement.
package store

import (
	"context"
	"errors"
)

// ErrBusy is returned (wrapped) by a backend when the database is busy or
// locked and the transaction could not start or commit. The caller may retry;
// nothing was changed (SPEC §7, last paragraph).
var ErrBusy = errors.New("database busy")

// ErrNotDatabase is returned (wrapped) by a backend when the file or server it
// was pointed at does not hold a usable database.
var ErrNotDatabase = errors.New("not a fairrelay database")

// Event states (SPEC §1).
const (
	StateReady       = "ready"
	StateInflight    = "inflight"
	StateAcked       = "acked"
	StateQuarantined = "quarantined"
)

// Clock is the clock of SPEC §2: the last tick any write saw, the last ticket
// handed out, and the number of flows created (for creation order). A
// backend may keep it as one row per lane (see Lane); ClockGet then answers
// the largest tick of all lanes, the dispatch lane's ticket and the enqueue
// lane's flow count, and ClockSet writes the transaction's own lane.
type Clock struct {
	Tick   int64
	Ticket int64
	Flows  int64
}

// FlowRow is one row of the flow table, including the head index that makes
// claim an index lookup (issue 4): HeadSeq is the seq of the flow's head
// (acked events + 1; the flow has a head when HeadSeq <= Seq). Runnable is
// true when the head is eligible now; WaitUntil, when set, is the tick at
// which a non-eligible head becomes eligible (backoff end or lease end).
type FlowRow struct {
	Flow      string
	Ord       int64 // creation order, 1-based
	Seq       int64 // last seq handed out
	Served    int64 // ticket of the latest claim
	HeadSeq   int64
	Runnable  bool
	WaitUntil *int64
}

// EventRow is one row of the event table. NextAt is meaningful when State is
// ready, LeaseUntil when inflight, Reason when quarantined.
type EventRow struct {
	ID               string
	Flow             string
	Seq              int64
	Body             []byte
	State            string
	Generation       int64
	Attempts         int64
	LifetimeAttempts int64
	Reason           string
	NextAt           int64
	LeaseUntil       int64
	EnqueuedAt       int64
}

// AuditRow is one row of the append-only audit table (SPEC §2 redrive).
type AuditRow struct {
	No             int64 // position in the audit log, 1-based; set by the store
	EventID        string
	Action         string
	Reason         string
	Operator       *string
	PreviousReason *string
	Generation     int64
	At             int64
}

// Order selects the tie-break of the runnable-head index.
type Order int

const (
	// OrderFlowID breaks ties on served by flow id (seed policy).
	OrderFlowID Order = iota
	// OrderCreation breaks ties on served by flow creation order (fair policy).
	OrderCreation
)

// Lane names the writers a write transaction is serialised with; a
// transaction may hold several (a bit set). A one-writer backend (SQLite)
// serialises every write whatever its lanes; a backend with concurrent
// writers (PostgreSQL) serialises each lane on its own lock and clock row,
// so that enqueuers, claimers and settlers do not wait for each other. The
// rows two lanes write (flow rows, and events through their flows) are then
// guarded by row locks; see the PostgreSQL backend.
type Lane int

const (
	// LaneClaim is claim: the writer of the ticket and of served.
	LaneClaim Lane = 1 << iota
	// LaneEnqueue is enqueue: the writer of flow creation (ord) and of each
	// flow's seq.
	LaneEnqueue
	// LaneSettle is settle and redrive: the writers of a claimed or
	// quarantined head's outcome.
	LaneSettle
)

// ConcurrentWriter is implemented by a Store whose lanes are concurrent
// writers (PostgreSQL): a claim and a settle can commit at the same time. A
// Store without it has one writer at a time (SQLite).
type ConcurrentWriter interface {
	// ConcurrentLanes reports whether the lanes write concurrently.
	ConcurrentLanes() bool
}

// Store opens transactions on one queue store.
type Store interface {
	// Begin starts a write transaction of the given lane that holds the
	// store's write lock for that lane (SQLite: BEGIN IMMEDIATE, one lock
	// for all lanes). Errors wrap ErrBusy when the lock could not be taken in
	// time.
	Begin(ctx context.Context, lane Lane) (Tx, error)
	// BeginRead starts a read-only transaction with a stable view.
	BeginRead(ctx context.Context) (Tx, error)
	// Wrap adapts a transaction the caller opened on the same database (the
	// outbox case) as a write transaction of the given lane. It returns an
	// error when tx is of a type the backend does not accept. Commit and
	// Rollback on the result are no-ops: the caller owns the transaction.
	Wrap(ctx context.Context, tx any, lane Lane) (Tx, error)
	// Migrate applies the embedded numbered migrations not applied yet and
	// returns the versions it applied.
	Migrate(ctx context.Context) ([]int, error)
	// Close releases the connections.
	Close() error
}

// Tx is one transaction on the queue store. Every method is one indexed
// statement. Methods returning a row pointer return nil, nil when no row
// matches.
type Tx interface {
	// ClockGet reads the clock. In a write transaction the transaction's
	// lanes are locked from here until it ends (see Lane).
	ClockGet(ctx context.Context) (Clock, error)
	// ClockSet writes the clock of a write transaction's lanes.
	ClockSet(ctx context.Context, c Clock) error

	FlowGet(ctx context.Context, flow string) (*FlowRow, error)
	FlowInsert(ctx context.Context, f FlowRow) error
	FlowUpdate(ctx context.Context, f FlowRow) error
	// FlowListDue lists up to limit flows whose WaitUntil <= at, smallest
	// WaitUntil first.
	FlowListDue(ctx context.Context, at int64, limit int) ([]FlowRow, error)
	// FlowPickRunnable lists up to limit runnable flows in dispatch order:
	// smallest Served first, ties by the given order.
	FlowPickRunnable(ctx context.Context, order Order, limit int) ([]FlowRow, error)
	// FlowList lists flows by flow id (bytewise), starting after the given id,
	// at most limit rows.
	FlowList(ctx context.Context, after string, limit int) ([]FlowRow, error)

	EventGet(ctx context.Context, id string) (*EventRow, error)
	EventGetBySeq(ctx context.Context, flow string, seq int64) (*EventRow, error)
	EventInsert(ctx context.Context, e EventRow) error
	// EventUpdate writes the mutable columns (state, generation, attempts,
	// lifetime_attempts, reason, next_at, lease_until) of the event with e.ID.
	EventUpdate(ctx context.Context, e EventRow) error
	// EventList lists events ordered by flow then seq, after (flow, seq),
	// at most limit rows; state filters when non-empty.
	EventList(ctx context.Context, state string, afterFlow string, afterSeq int64, limit int) ([]EventRow, error)

	AuditInsert(ctx context.Context, a AuditRow) error
	// AuditList lists audit rows as written, after the given row number.
	AuditList(ctx context.Context, after int64, limit int) ([]AuditRow, error)

	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// Prefetcher is implemented by a Tx whose every question costs a network
// round trip (PostgreSQL). Before a batch, the protocol names the events and
// flows it is about to read; the backend reads them in one go and answers
// the following EventGet and FlowGet calls from what it read. The answers
// are the same with or without it.
type Prefetcher interface {
	Prefetch(ctx context.Context, eventIDs, flows []string) error
}

// Prefetch calls tx's Prefetch when the backend has one (see Prefetcher).
func Prefetch(ctx context.Context, tx Tx, eventIDs, flows []string) error {
	if p, ok := tx.(Prefetcher); ok {
		return p.Prefetch(ctx, eventIDs, flows)
	}
	return nil
}

// TxHint tells a backend, before a write transaction's first statement,
// what the transaction is about to ask, so that a backend whose every
// question costs a round trip (PostgreSQL) can ask it together with the
// first statement. The answers are the same with or without it.
type TxHint struct {
	// Events are the ids the transaction reads next with EventGet (a
	// settle, a redrive, an enqueue's existing ids).
	Events []string
	// Flows are the flows it reads next with FlowGet (an enqueue).
	Flows []string
	// Pick is the limit of the FlowPickRunnable the transaction asks first
	// (a claim), in PickOrder; 0 for none.
	Pick      int
	PickOrder Order
	// SkipHeld asks a store whose transactions run side by side
	// (PostgreSQL) not to wait for the flows of Events that another
	// transaction holds: it leaves those events unread, and HeldEvents
	// names them. A settle's hint only.
	SkipHeld bool
}

// HeldReporter is implemented by a Tx that can skip held flows (TxHint's
// SkipHeld).
type HeldReporter interface {
	// Held returns the events of the hint whose flows another transaction
	// held, which the transaction must not read or write; nil for none.
	Held() map[string]bool
}

// HeldEvents returns tx's Held, nil when tx never skips a flow.
func HeldEvents(tx Tx) map[string]bool {
	if x, ok := tx.(HeldReporter); ok {
		return x.Held()
	}
	return nil
}

// Hinter is implemented by a Tx that takes a TxHint before ClockGet.
type Hinter interface {
	Hint(h TxHint)
}

// Hint gives h to tx when the backend takes hints (see Hinter).
func Hint(tx Tx, h TxHint) {
	if x, ok := tx.(Hinter); ok {
		x.Hint(h)
	}
}
