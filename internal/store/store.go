// Package store is the storage seam of the queue store (SPEC §2, §4).
//
// The protocol rules live in the root package fairrelay: which head a claim
// takes, what a settle does with an outcome, when a redrive applies. A
// backend answers set-shaped questions and applies set-shaped writes, each
// batch in one straight path:
//
//   - Tx.Read answers, in one round trip, everything a write transaction
//     asks before it decides: the clock, the first k runnable flows with
//     their heads (a claim), the flows that came due (a claim), the events
//     of the tokens it settles with their flows (a settle, a redrive);
//   - Tx.Write applies the row images the transaction decided on, one
//     statement per kind of row (the writes of a whole batch), sent with the
//     commit;
//   - Store.Enqueue appends events, the one operation a backend carries out
//     whole: on PostgreSQL it is the SQL function enqueue(...) of the
//     store's schema, so that a business transaction in any language can
//     call it (SPEC §10); on SQLite it is Go code of the backend.
//
// Every backend runs the same seam conformance suite (package
// internal/conformance) and the root package's property test. This package
// never imports the root package: it is machinery below it.
package store

import (
	"context"
	"errors"
	"fmt"
)

// ErrBusy is returned (wrapped) by a backend when the database is busy or
// locked and the transaction could not start or commit. The caller may retry;
// nothing was changed (SPEC §7, last paragraph).
var ErrBusy = errors.New("database busy")

// ErrNotDatabase is returned (wrapped) by a backend when the file or server it
// was pointed at does not hold a usable database.
var ErrNotDatabase = errors.New("not a fairrelay database")

// ErrMissing is returned (wrapped) by a backend's Open with MustExist when
// there is no queue store there yet; nothing was created.
var ErrMissing = errors.New("no queue store there")

// ErrServer is returned (wrapped) by a backend's Open when the database
// server could not be reached or refused the connection: a database
// error, not the caller's input.
var ErrServer = errors.New("database server unavailable")

// EntryMismatchError is returned by a backend's Open when the store was
// created under another entry rule than the one asked for (SPEC §7: the
// rule is a property of the store). Nothing changed.
type EntryMismatchError struct {
	Stored, Asked string
}

func (e *EntryMismatchError) Error() string {
	return fmt.Sprintf("the store was created under the %s entry rule; it cannot be opened under %s", e.Stored, e.Asked)
}

// ClockRegressedError is returned by Store.Enqueue when the write's tick
// lies below the stored tick (SPEC §2) and Floor was not set. Nothing
// changed.
type ClockRegressedError struct {
	At, Stored int64
}

func (e *ClockRegressedError) Error() string {
	return fmt.Sprintf("enqueue at tick %d: the store is at tick %d", e.At, e.Stored)
}

// InvalidError is returned by Store.Enqueue for input it refuses (the SQL
// function checks its own input: a caller in another language has no Go
// in front of it). Field names the field; nothing changed.
type InvalidError struct {
	Field, Message string
}

func (e *InvalidError) Error() string { return e.Field + ": " + e.Message }

// Event states (SPEC §1).
const (
	StateReady       = "ready"
	StateInflight    = "inflight"
	StateAcked       = "acked"
	StateQuarantined = "quarantined"
)

// AtStored, as a tick, means the store's current tick, read in the
// transaction (fairrelay.AtStored).
const AtStored int64 = -1 << 63

// MaxTick is the largest tick a write accepts (fairrelay.MaxTick).
const MaxTick = 1 << 60

// Clock is the clock of SPEC §2: the last tick any write saw and the last
// ticket handed out.
type Clock struct {
	Tick   int64
	Ticket int64
}

// FlowRow is one row of the flow table, with the head index that makes a
// claim an index lookup: HeadSeq is the seq of the flow's head (acked events
// + 1; the flow has a head when HeadSeq <= Seq). Runnable is true when the
// head is eligible now (the runnable index); WaitUntil, when set, is the
// tick at which a head that is not eligible yet becomes so (backoff end or
// lease end: the due index). A flow in neither index has no head, or a
// quarantined one.
type FlowRow struct {
	Flow      string
	Ord       int64 // creation order, ascending; gaps allowed
	Seq       int64 // last seq handed out
	Served    int64 // ticket of the latest claim
	HeadSeq   int64
	Runnable  bool
	WaitUntil *int64
	// Paused flows are in neither index (SPEC §9); PausedBy (may be empty),
	// PausedReason and PausedAt (a tick) say who paused it, why and when.
	Paused       bool
	PausedBy     string
	PausedReason string
	PausedAt     int64
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
	// ClaimedWall is the wall-clock time of the latest claim, in
	// milliseconds since the Unix epoch (0: never claimed); AckedAt the
	// tick it was acked at (nil unless acked).
	ClaimedWall int64
	AckedAt     *int64
}

// FlowHead is a flow with its head event (nil when the flow has none, or
// the store lost it: the caller reports an inconsistent store).
type FlowHead struct {
	Flow FlowRow
	Head *EventRow
}

// AuditRow is one row of the append-only audit table (SPEC §2 redrive, §9).
// EventID and Generation are nil for an action on a flow (pause, resume).
type AuditRow struct {
	No             int64 // position in the audit log, ascending; set by the store
	EventID        *string
	Flow           string
	Action         string
	Reason         string
	Operator       *string
	PreviousReason *string
	Generation     *int64
	At             int64
	Wall           int64 // milliseconds since the Unix epoch, UTC
}

// AttemptRow is one claim of an event (its generation) and what became of
// it: the settle's outcome and answer, or "lease_expired" when its lease
// ran out unsettled. Ticks and wall-clock milliseconds (Unix epoch, UTC).
type AttemptRow struct {
	EventID     string
	Generation  int64
	Flow        string
	LeaseUntil  int64
	ClaimedWall int64
	SettledAt   *int64
	SettledWall *int64
	Outcome     string
	Status      string
	Detail      string
	DurationMs  int64
	Relay       string
}

// Order selects the tie-break of the runnable index (SPEC §2 step 3, §7).
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
// so that claimers and settlers do not wait for each other. The rows two
// lanes write (flow rows, and events through their flows) are then guarded
// by row locks; see the PostgreSQL backend. An enqueue takes no lane
// (SPEC §10): it locks only the rows of its own flows.
type Lane int

const (
	// LaneClaim is claim: the writer of the ticket and of served.
	LaneClaim Lane = 1 << iota
	// LaneSettle is settle and redrive: the writers of a claimed or
	// quarantined head's outcome.
	LaneSettle
)

// Store opens transactions on one queue store.
type Store interface {
	// Begin starts a write transaction of the given lanes. Its first Read
	// takes the store's write lock for them (SQLite: BEGIN IMMEDIATE, one
	// lock for all lanes). Errors wrap ErrBusy when the lock could not be
	// taken in time.
	Begin(ctx context.Context, lanes Lane) (Tx, error)
	// BeginRead starts a read-only transaction with a stable view.
	BeginRead(ctx context.Context) (ReadTx, error)
	// Enqueue carries out SPEC §2 enqueue for p.Events in one transaction:
	// the store's own when caller is nil, else caller, a transaction the
	// caller opened on the same database (*sql.Tx, or pgx.Tx on
	// PostgreSQL), which the caller commits. Errors: *ClockRegressedError,
	// *InvalidError (nothing changed), ErrBusy, and any other database
	// error; an unusable caller transaction is an *InvalidError naming
	// "tx".
	Enqueue(ctx context.Context, caller any, p EnqueueParams) (EnqueueResult, error)
	// Entry is the entry rule the store records ("seed" or "fair").
	Entry() string
	// ConcurrentWriters reports whether lanes commit side by side
	// (PostgreSQL) rather than one writer at a time (SQLite).
	ConcurrentWriters() bool
	// Migrate applies the embedded numbered migrations not applied yet and
	// returns the versions it applied.
	Migrate(ctx context.Context) ([]int, error)
	// Close releases the connections.
	Close() error
}

// EnqueueParams is one enqueue transaction (SPEC §2 enqueue, §10).
type EnqueueParams struct {
	// At is the tick of the write, or AtStored.
	At int64
	// Floor runs a write whose At lies below the stored tick at the stored
	// tick instead of failing.
	Floor bool
	// MaxTickJump, when positive, refuses an At further than this many
	// ticks ahead of the stored tick (an *InvalidError naming "at"); not
	// with Floor, a daemon clock's write.
	MaxTickJump int64
	// MaxBodyBytes is the largest body accepted, in bytes.
	MaxBodyBytes int
	// Events are the events, in order.
	Events []NewEvent
}

// NewEvent is one event to append.
type NewEvent struct {
	ID   string
	Flow string
	Body []byte
}

// EnqueueResult is the answer of Store.Enqueue: one answer per event, in
// order, and the tick the write ran at.
type EnqueueResult struct {
	Answers []EnqueueAnswer
	Tick    int64
}

// EnqueueAnswer is the answer for one event: Status "created" with the new
// Seq, "existing" with the stored Seq, or "conflict".
type EnqueueAnswer struct {
	Status string
	Seq    int64
}

// ReadSet is what a write transaction asks before it decides, answered in
// one round trip by Tx.Read. Each part is optional.
type ReadSet struct {
	// At is the write's tick or AtStored; the due flows are those due at
	// max(At, the stored tick).
	At int64
	// Events are event ids the transaction settles or redrives: they come
	// back with their flows, locked. With Next, the event after each comes
	// along too (the flow's next head once it is acked). With SkipHeld, an
	// event whose flow another transaction holds is not read and is named
	// in ReadResult.Held instead of waited for.
	Events   []string
	Next     bool
	SkipHeld bool
	// Flows are flow ids an operator action names: they come back in
	// ReadResult.Flows with their heads in ReadResult.Events, locked (an
	// unknown flow is absent).
	Flows []string
	// PickLimit asks for the first PickLimit runnable flows in Order with
	// their heads, locked; a flow another transaction holds is skipped.
	PickLimit int
	Order     Order
	// DueLimit asks for up to DueLimit flows whose WaitUntil has come (see
	// At), smallest WaitUntil first (ties by flow id), after DueAfter when
	// set, with their heads, locked; a flow another transaction holds is
	// skipped.
	DueLimit int
	DueAfter *FlowKey
}

// FlowKey is a position in the due index: (WaitUntil, Flow).
type FlowKey struct {
	WaitUntil int64
	Flow      string
}

// ReadResult answers a ReadSet. Its rows are valid until the transaction
// ends: a backend may reuse their memory for the next one.
type ReadResult struct {
	// Clock is the stored clock (the largest tick any write recorded).
	Clock Clock
	// Events holds the events asked for that exist, by id; Flows their
	// flows by id; Next the event after each, by flow, when it exists.
	Events map[string]*EventRow
	Flows  map[string]*FlowRow
	Next   map[string]*EventRow
	// Held names the events asked for whose flows another transaction
	// held (ReadSet.SkipHeld): not read.
	Held map[string]bool
	// Picks are the runnable flows asked for, in order.
	Picks []FlowHead
	// Due are the due flows asked for, WaitUntil order.
	Due []FlowHead
}

// Tx is one write transaction on the queue store.
type Tx interface {
	// Read answers rs (see ReadSet). The first Read of a transaction takes
	// its lanes' locks and reads the clock after them.
	Read(ctx context.Context, rs ReadSet) (*ReadResult, error)
	// Write applies ws. The backend may hold the writes back until Commit
	// (a failing write then fails the commit, and nothing is kept).
	Write(ctx context.Context, ws *WriteSet) error
	Commit(ctx context.Context) error
	// Rollback ends the transaction unless it committed; safe to call
	// after Commit.
	Rollback(ctx context.Context) error
}

// WriteSet is the row images a write transaction decided on: each flow and
// event at most once, with its final values.
type WriteSet struct {
	// Flows are flow rows to update (every column but Flow and Ord).
	Flows []FlowRow
	// Events are event rows to update: the mutable columns (State,
	// Generation, Attempts, LifetimeAttempts, Reason, NextAt, LeaseUntil).
	Events []EventRow
	// Audit rows to append, in order.
	Audit []AuditRow
	// Attempts to record; one already recorded for the same event and
	// generation is kept (the first word wins).
	Attempts []AttemptRow
	// Clock is the clock to record (the tick, and the ticket when the
	// transaction holds LaneClaim).
	Clock Clock
}

// ReadTx is a read-only transaction with a stable view.
type ReadTx interface {
	// Clock reads the stored clock.
	Clock(ctx context.Context) (Clock, error)
	// FlowList lists flows by flow id (bytewise), after the given id, at
	// most limit rows.
	FlowList(ctx context.Context, after string, limit int) ([]FlowRow, error)
	// FlowPick lists the first limit runnable flows in order, with their
	// heads.
	FlowPick(ctx context.Context, order Order, limit int) ([]FlowHead, error)
	// NextWait is the smallest WaitUntil of any flow; ok is false when no
	// flow waits.
	NextWait(ctx context.Context) (wait int64, ok bool, err error)
	// EventGet reads one event; nil, nil when there is none.
	EventGet(ctx context.Context, id string) (*EventRow, error)
	// Heads reads the head events of flows (by flow id) that have one.
	Heads(ctx context.Context, flows []FlowRow) (map[string]*EventRow, error)
	// EventList lists events ordered by flow then seq, after (afterFlow,
	// afterSeq), at most limit rows.
	EventList(ctx context.Context, afterFlow string, afterSeq int64, limit int) ([]EventRow, error)
	// QuarantinedList lists quarantined events (each its flow's head, so
	// one per flow at most) by flow, after the flow afterFlow, at most
	// limit rows.
	QuarantinedList(ctx context.Context, afterFlow string, limit int) ([]EventRow, error)
	// AuditList lists audit rows as written, after the given row number.
	AuditList(ctx context.Context, after int64, limit int) ([]AuditRow, error)
	// Attempts lists an event's attempts by generation.
	Attempts(ctx context.Context, eventID string) ([]AttemptRow, error)
	Rollback(ctx context.Context) error
}
