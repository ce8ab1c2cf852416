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
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"
)

// ErrBusy is returned (wrapped) by a backend when the database is busy or
// locked and the transaction could not start or commit. The caller may retry;
// nothing was changed (SPEC §7, last paragraph).
var ErrBusy = errors.New("database busy")

// ErrClosed is returned (wrapped) by a backend for a call made after its
// Close: database/sql's "sql: database is closed", pgxpool's "closed pool".
// Nothing was changed, and waiting does not cure it: unlike ErrBusy or a
// server that does not answer, a closed store never opens again.
var ErrClosed = errors.New("the store was closed (Close was called on it): nothing was done; open it again")

// IsClosedDB reports whether err is database/sql's error for a call on a
// closed *sql.DB ("sql: database is closed"), which database/sql does not
// export: known by identity, taken once from a DB closed at start, not by
// its words. The backends' Translate wrap it in ErrClosed.
func IsClosedDB(err error) bool { return errors.Is(err, errDBClosed) }

var errDBClosed = func() error {
	db := sql.OpenDB(noConnector{})
	db.Close()
	return db.Ping()
}()

// noConnector is a driver.Connector that is never asked for a connection:
// errDBClosed's DB is closed before its first use.
type noConnector struct{}

func (noConnector) Connect(context.Context) (driver.Conn, error) {
	return nil, errors.New("store: noConnector connects nothing")
}
func (noConnector) Driver() driver.Driver { return nil }

// ErrNotDatabase is returned (wrapped) by a backend when the file or server it
// was pointed at does not hold a usable database.
var ErrNotDatabase = errors.New("not a fairrelay database")

// OtherKind is the error (errors.Is ErrNotDatabase) of a file or schema
// that holds the other kind of fairrelay store (an inbox given as a queue
// store, or the reverse): its message says what it holds, without
// ErrNotDatabase's "not a fairrelay database", which it is (a fresh user:
// "not a fairrelay database: the file holds a fairrelay inbox").
func OtherKind(format string, args ...any) error {
	return otherKind(fmt.Sprintf(format, args...))
}

type otherKind string

func (e otherKind) Error() string        { return string(e) }
func (e otherKind) Is(target error) bool { return target == ErrNotDatabase }

// ErrMissing is returned (wrapped) by a backend's Open with MustExist when
// there is no queue store there yet; nothing was created.
var ErrMissing = errors.New("no queue store there")

// ErrNoDatabase is in the chain (errors.Is) of the ErrMissing error of a
// database the server does not have: no Open creates one.
var ErrNoDatabase = errors.New("no such database")

// Missing returns an error that is ErrMissing (errors.Is) and says only
// what format gives: for a place that holds no store of any kind, where
// ErrMissing's own "no queue store" would misname an inbox.
func Missing(format string, args ...any) error {
	return missingError{fmt.Sprintf(format, args...)}
}

type missingError struct{ msg string }

func (e missingError) Error() string        { return e.msg }
func (e missingError) Is(target error) bool { return target == ErrMissing }

// ErrServer is returned (wrapped) by a backend's Open when the database
// server could not be reached or refused the connection: a database
// error, not the caller's input.
var ErrServer = errors.New("database server unavailable")

// ErrStorage is in the chain of an error when SQLite could not read or
// write the store's files: the disk full (SQLITE_FULL) or an I/O error
// (SQLITE_IOERR, which is what a full disk gives when the shared-memory
// file cannot grow). A database error that freeing space or mending the
// disk cures, not the caller's input.
var ErrStorage = errors.New("the store's disk failed a read or write (is it full?)")

// ErrCommitUnknown is in the chain of an error when the connection failed
// after the commit was sent, before its answer: the write may or may not
// have committed.
var ErrCommitUnknown = errors.New("the commit's outcome is unknown")

// ErrDeadlock is in the chain of an ErrBusy error (errors.Is) when the
// transaction was ended by the server's deadlock detector: nothing it did
// was kept, so the whole transaction may run again at once.
var ErrDeadlock = errors.New("deadlock")

// ErrRefusedSettings is returned (wrapped) by a backend's Open when the
// server refused the connection for what the URL says: a parameter it does
// not know or a value it does not take (a misspelt schema=, for example),
// or the user or password. The caller's input: trying again changes
// nothing, unlike ErrServer.
var ErrRefusedSettings = errors.New("the server refused the connection's settings")

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
	// Op names the write ("enqueue" when empty).
	Op string
}

func (e *ClockRegressedError) Error() string {
	op := e.Op
	if op == "" {
		op = "enqueue"
	}
	return fmt.Sprintf("%s at tick %d: the store is at tick %d", op, e.At, e.Stored)
}

// ResolveTick is the clock check of a write a backend carries out whole
// (enqueue, configure, prune), as the root package's for the others (SPEC
// §2, §7): AtStored runs at the stored tick; a tick below it fails (or runs
// at it under floor); a tick further ahead than maxJump (when positive, and
// not under floor) or beyond MaxTick is invalid input naming "at".
func ResolveTick(op string, at int64, floor bool, maxJump, stored int64) (int64, error) {
	switch {
	case at == AtStored:
		return stored, nil
	case at < stored && floor:
		return stored, nil
	case at < stored:
		return 0, &ClockRegressedError{At: at, Stored: stored, Op: op}
	case !floor && maxJump > 0 && at-stored > maxJump:
		return 0, &InvalidError{Field: "at", Message: fmt.Sprintf("tick %d is %d ticks ahead of the stored tick %d, more than the policy's max_tick_jump of %d (a typo would poison the store's clock)",
			at, at-stored, stored, maxJump)}
	case at > MaxTick:
		return 0, &InvalidError{Field: "at", Message: fmt.Sprintf("must be a tick in [0, %d], got %d", int64(MaxTick), at)}
	}
	return at, nil
}

// CheckHorizons refuses a prune whose horizon (AckedBefore, IDsBefore) lies
// further ahead of the tick it runs at than p.MaxTickJump (when positive,
// and not under Floor, whose caller's clock is the store's): wall-clock
// milliseconds or a duration's digits given for a tick, which would delete
// every tombstone so that ids sent again become new events. at is the
// prune's resolved tick (ResolveTick: at least the stored tick); at + 1
// prunes everything acked so far and is always allowed. Errors: an
// *InvalidError naming acked_before or ids_before.
func CheckHorizons(p PruneParams, at int64) error {
	if p.Floor || p.MaxTickJump <= 0 {
		return nil
	}
	for _, h := range []struct {
		name string
		v    int64
	}{{"acked_before", p.AckedBefore}, {"ids_before", p.IDsBefore}} {
		if h.v > at+1 && h.v-at > p.MaxTickJump {
			return &InvalidError{Field: h.name, Message: fmt.Sprintf(
				"%d is %d ticks ahead of the prune's tick %d, further than the policy's max_tick_jump of %d: ticks are the store's clock (1 tick = 1 ms of a running relay), not wall-clock milliseconds; %d prunes everything acked so far",
				h.v, h.v-at, at, p.MaxTickJump, at+1)}
		}
	}
	return nil
}

// urlScheme is the scheme of a URL-like store name (RFC 3986: a letter,
// then letters, digits, +, - and .), with what follows it.
var urlScheme = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*):(//)?`)

// ForeignScheme says why dsn, given for a store, is neither a postgres://
// (or postgresql://) URL nor a file path, or "" when it may be either: a
// URL of another scheme (postgress://, mysql://, Postgres://), postgres:
// without //, a SQLite URL form (sqlite:x.db, sqlite:///x.db, file:x.db),
// or white space at either end. Each was taken for a
// relative file path ("directory postgress:/… does not exist"; a fresh
// user's report), or would have made a file of that name. A Windows drive
// letter (C:\x.db, C:/x.db) is a path. A NUL byte is refused too: no file
// path or URL holds one (the driver answered "unable to open database
// file", which named no reason: a breaker's report).
func ForeignScheme(dsn string) string {
	if i := strings.IndexByte(dsn, 0); i >= 0 {
		return fmt.Sprintf("holds a NUL byte at byte %d: no file path or URL does", i)
	}
	if strings.TrimSpace(dsn) != dsn {
		// 'q.db ' made a file whose name ends in a space, and the
		// messages that named it hid the space (a fresh user's report).
		return fmt.Sprintf("%q begins or ends with white space: a store's path or URL has none there", dsn)
	}
	m := urlScheme.FindStringSubmatch(dsn)
	if m == nil || len(m[1]) == 1 {
		return ""
	}
	scheme, slashes := m[1], m[2] != ""
	switch lower := strings.ToLower(scheme); {
	case lower == "postgres" || lower == "postgresql":
		if !slashes {
			return fmt.Sprintf("%s: is not a URL: write %s://USER@HOST:PORT/DATABASE", scheme, lower)
		}
		if scheme != lower {
			return fmt.Sprintf("the scheme %s:// is written in lower case: %s://", scheme, lower)
		}
		return ""
	case lower == "sqlite" || lower == "sqlite3" || lower == "file":
		return fmt.Sprintf("%s: is not needed: give the SQLite file's path itself (q.db, /var/lib/fairrelay/q.db)", scheme)
	case slashes:
		return fmt.Sprintf("unknown scheme %s://: a store is a SQLite file path or a postgres:// URL", scheme)
	}
	return ""
}

// InvalidError is returned by Store.Enqueue for input it refuses (the SQL
// function checks its own input: a caller in another language has no Go
// in front of it). Field names the field; nothing changed. Item, when
// positive, is the 1-based position in EnqueueParams.Events of the event at
// fault (CheckEvents); 0 when the error is not about one event.
type InvalidError struct {
	Field, Message string
	Item           int
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
	// Group is the group the flow joined (SPEC §8); "" when the flow is
	// its own group, the one named like the flow, which then has no row:
	// a store where groups are not used keeps no group rows, and such a
	// flow sits in the flow runnable index itself. A flow with a Group is
	// a member: it sits in its group's member index, and its group in the
	// group runnable index while RunnableFlows > 0.
	Group string
}

// GroupRow is one row of the group table (SPEC §8): a group a flow named, a
// group configured, or the own group of a flow that another flow joined
// (made a row then, with that flow's served and creation position).
type GroupRow struct {
	Group string
	// Ord is the group's creation position, from the same counter as a
	// flow's (so a group and a flow that is its own group compare by it);
	// 0 until its first flow is created (a group configured before any
	// flow has no place in the rotation yet). Served is the ticket of the
	// group's latest turn.
	Ord    int64
	Served int64
	// Weight is 1 to 1000 (SPEC §8); Credit the claims left in the
	// group's current turn (deficit round robin, see the root package).
	Weight int64
	Credit int64
	// RunnableFlows counts the member flows in the runnable index. Only
	// transactions that hold LaneClaim change it, and member flows'
	// Runnable, (everyone else files a member's head in the due index, and
	// a claim promotes it), so that a claim never waits for an enqueue.
	RunnableFlows int64
	// MaxBacklog is the group's limit on events not acked (0: none).
	MaxBacklog int64
}

// GroupPick is a group in the group runnable index with the first of its
// runnable member flows in dispatch order (and its head); First.Flow.Flow is
// "" when another transaction holds every one of them (PostgreSQL skips
// them): the group still counts in the page, so that a full page says the
// index may hold more.
type GroupPick struct {
	Group GroupRow
	First FlowHead
}

// GroupInfo is a group as the read views list it: its row and its backlog
// (events not acked in its member flows).
type GroupInfo struct {
	GroupRow
	Flows   int64
	Backlog int64
	// MaxSlots caps the relay slots the group's deliveries hold at once
	// (0: none; SPEC §11).
	MaxSlots int64
	// Quarantined counts the quarantined heads of the group's flows (the
	// heads QuarantinedFilter.Group selects).
	Quarantined int64
}

// GroupSetting is a group's settings alone (SPEC §8, §11): its weight,
// backlog limit and slot cap (0: none).
type GroupSetting struct {
	Group      string
	Weight     int64
	MaxBacklog int64
	MaxSlots   int64
}

// Settings are the store-wide settings of SPEC §8 (0: no limit).
type Settings struct {
	MaxBacklog     int64
	MaxFlowBacklog int64
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
	// ClaimedBy names the process of the latest claim (ClaimParams.Relay;
	// "" when it gave none, or never claimed), so that a claim whose lease
	// runs out unsettled names the relay that lost it (AttemptRow.Relay).
	ClaimedBy string
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

// Counts are the bounded counts ReadTx.Counts reads.
type Counts struct {
	Inflight    int64
	Quarantined int64
	Paused      int64
}

// PrefixEnd is the first valid UTF-8 string above every valid UTF-8
// string that starts with prefix in bytewise order (which is code point
// order), or "" when there is none (prefix empty or all U+10FFFF): the
// exclusive end of a prefix's range of an index. It increments the last
// code point that can be (skipping the surrogates), so that PostgreSQL,
// which takes valid UTF-8 only, can take it too.
func PrefixEnd(prefix string) string {
	rs := []rune(prefix)
	for i := len(rs) - 1; i >= 0; i-- {
		switch {
		case rs[i] == 0xD7FF:
			rs[i] = 0xE000
		case rs[i] < utf8.MaxRune:
			rs[i]++
		default:
			continue
		}
		return string(rs[:i+1])
	}
	return ""
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
	// Changes watches the store for commits made elsewhere (see
	// changes.go): a value on the channel means "look again". It runs
	// until ctx is done or the store is closed, then closes the channel.
	// status, when not nil, hears every failure to watch (the backend
	// retries by itself) and nil once it watches again.
	Changes(ctx context.Context, status func(error)) <-chan struct{}
	// Entry is the entry rule the store records ("seed" or "fair").
	Entry() string
	// ConcurrentWriters reports whether lanes commit side by side
	// (PostgreSQL) rather than one writer at a time (SQLite).
	ConcurrentWriters() bool
	// Configure changes settings (SPEC §8) in one transaction and returns
	// the tick it ran at. Errors: *ClockRegressedError, *InvalidError,
	// ErrBusy, and any other database error.
	Configure(ctx context.Context, p ConfigureParams) (int64, error)
	// Prune deletes acked events and tombstones (SPEC §8) in one
	// transaction. Errors as Configure's; an error after the deletions
	// committed (housekeeping after them: SQLite's flush and incremental
	// vacuum) comes with the result that counts them.
	Prune(ctx context.Context, p PruneParams) (PruneResult, error)
	// Migrate applies the embedded numbered migrations not applied yet and
	// returns the versions it applied.
	Migrate(ctx context.Context) ([]int, error)
	// Migrated returns the versions of the migrations Open applied, in
	// order (nil when the store was up to date, or opened read-only).
	Migrated() []int
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

// NewEvent is one event to append. Group is the group a new flow joins
// (SPEC §8; "" for the flow's own), and for an existing flow must be its
// group or "" (else an *InvalidError naming "group").
type NewEvent struct {
	ID    string
	Flow  string
	Group string
	Body  []byte
}

// EnqueueResult is the answer of Store.Enqueue: one answer per event, in
// order, and the tick the write ran at.
type EnqueueResult struct {
	Answers []EnqueueAnswer
	Tick    int64
}

// EnqueueAnswer is the answer for one event: Status "created" with the new
// Seq, "existing" with the stored Seq, "conflict", or "full" with the Limit
// that applied ("store", "group" or "flow"; SPEC §8).
type EnqueueAnswer struct {
	Status string
	Seq    int64
	Limit  string
}

// ConfigureParams is one change of the settings of SPEC §8, a write at a
// tick like an enqueue's (At, Floor, MaxTickJump as EnqueueParams's). With
// Group set, Weight and MaxBacklog are the group's (it is created when
// missing); else MaxBacklog and MaxFlowBacklog are the store's. A nil field
// is left as it is.
type ConfigureParams struct {
	At             int64
	Floor          bool
	MaxTickJump    int64
	Group          string
	Weight         *int64
	MaxBacklog     *int64
	MaxFlowBacklog *int64
	MaxSlots       *int64
	// Check validates the fields once the clock check passed (SPEC §2
	// order); nil for none.
	Check func() error
}

// PruneParams is one prune transaction of SPEC §8 (At, Floor, MaxTickJump
// as EnqueueParams's): acked events acked before AckedBefore go, keeping a
// tombstone unless acked before IDsBefore; tombstones acked before
// IDsBefore go. Limit, when positive, bounds the events and tombstones one
// call deletes (the oldest first), so a prune of a large store runs as
// many short transactions.
type PruneParams struct {
	At          int64
	Floor       bool
	MaxTickJump int64
	AckedBefore int64
	IDsBefore   int64
	// AckedWallBefore and IDsWallBefore (milliseconds since the Unix
	// epoch), when positive, keep, whatever their ticks, the events and
	// the ids (tombstones) whose event was last claimed (claimed_wall) at
	// or after them and not after WallNow, the pruner's wall clock: a
	// claim stamped later than that came from a clock ahead of it, which
	// proves nothing about the tick, and the ticks alone decide it (else
	// one claim of a relay whose clock was years ahead held every prune).
	// 0 keeps nothing back (Walls).
	AckedWallBefore int64
	IDsWallBefore   int64
	WallNow         int64
	Limit           int
	// Check as ConfigureParams.Check.
	Check func() error
}

// Walls returns AckedWallBefore, IDsWallBefore and WallNow as the
// backends compare them: a row is held when before <= claimed_wall <= now;
// math.MaxInt64 (every claim is before it) for a 0 before, and for now
// when 0.
func (p PruneParams) Walls() (acked, ids, now int64) {
	acked, ids, now = p.AckedWallBefore, p.IDsWallBefore, p.WallNow
	if acked <= 0 {
		acked = math.MaxInt64
	}
	if ids <= 0 {
		ids = math.MaxInt64
	}
	if now <= 0 {
		now = math.MaxInt64
	}
	return acked, ids, now
}

// PruneResult counts what a prune deleted, and the tick it ran at. More
// tells that Limit stopped it before everything due was deleted. Held is
// the longest the prune held the store's writer in one write (SQLite: its
// transaction from begin to the end of its commit, which does not wait for
// the disk's flush (sqlitestore's lazyWrite), one step of the incremental
// vacuum after it, or the checkpoint on the write connection before it
// (sqlitestore's checkpointBeside); PostgreSQL: its transaction, which
// locks only the rows it deletes); a wait before it that holds no lock
// (SQLite's checkpoints beside the writers and their flush) is not
// counted.
type PruneResult struct {
	Events     int64
	Tombstones int64
	// Forgotten counts the events among Events that left no tombstone
	// (acked before IDsBefore).
	Forgotten int64
	// WallKept counts the events and the ids due by their ticks that
	// AckedWallBefore or IDsWallBefore kept, of those the prune read (an
	// event stops a SQLite prune's pass: the first one kept ends it): an
	// event not deleted, a tombstone not deleted, or a tombstone written
	// for a deleted event whose id the ticks alone would have forgotten.
	WallKept int64
	Tick     int64
	More     bool
	Held     time.Duration
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
	// PickLimit asks for the first PickLimit runnable flows that are their
	// own group in Order with their heads, locked; a flow another
	// transaction holds is skipped. GroupPickLimit asks the same of the
	// group runnable index (ReadResult.GroupPicks), each group with its
	// first runnable member.
	PickLimit      int
	GroupPickLimit int
	Order          Order
	// Groups are groups whose rows the transaction needs (ReadResult.Groups;
	// an unknown one is absent).
	Groups []string
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
	// flows by id; Next the event after each, by the id of the event it
	// follows, when it exists (two tokens of one flow each have theirs).
	Events map[string]*EventRow
	Flows  map[string]*FlowRow
	Next   map[string]*EventRow
	// Held names the events asked for whose flows another transaction
	// held (ReadSet.SkipHeld): not read.
	Held map[string]bool
	// Picks are the runnable flows asked for, in order; GroupPicks the
	// runnable groups, in order.
	Picks      []FlowHead
	GroupPicks []GroupPick
	// Groups holds, by name, the groups asked for and those of the due
	// member flows read.
	Groups map[string]*GroupRow
	// Due are the due flows asked for, WaitUntil order.
	Due []FlowHead
}

// Tx is one write transaction on the queue store.
type Tx interface {
	// Read answers rs (see ReadSet). The first Read of a transaction takes
	// its lanes' locks and reads the clock after them.
	Read(ctx context.Context, rs ReadSet) (*ReadResult, error)
	// Members reads up to limit runnable member flows of group in Order
	// with their heads, locked, skipping flows another transaction holds
	// (a claim's next flows of a group it takes more than one turn of).
	Members(ctx context.Context, group string, order Order, limit int) ([]FlowHead, error)
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
	// Groups are group rows a LaneClaim transaction changed: RunnableFlows
	// by RunnableDelta, Served and Credit set.
	Groups []GroupWrite
	// Acked counts the events this transaction acked, in all (Acked) and
	// by group for member flows (AckedGroups): the backlog counters of SPEC
	// §8's limits.
	Acked       int64
	AckedGroups map[string]int64
	// Clock is the clock to record (the tick, and the ticket when the
	// transaction holds LaneClaim).
	Clock Clock
}

// GroupWrite is one group row a claim changed: RunnableFlows by
// RunnableDelta, and, when Turn, Served and Credit set.
type GroupWrite struct {
	Group         string
	RunnableDelta int64
	Turn          bool
	Served        int64
	Credit        int64
}

// TombstoneRow is what a prune keeps of an acked event it deleted (SPEC
// §8): the id's flow and seq, and the tick the event was acked at.
type TombstoneRow struct {
	Flow    string
	Seq     int64
	AckedAt int64
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
	// Tombstone reads the tombstone a prune left for a deleted event's id
	// (SPEC §8); nil, nil when there is none.
	Tombstone(ctx context.Context, id string) (*TombstoneRow, error)
	// Heads reads the head events of flows (by flow id) that have one.
	Heads(ctx context.Context, flows []FlowRow) (map[string]*EventRow, error)
	// EventList lists events ordered by flow then seq, after (afterFlow,
	// afterSeq), at most limit rows.
	EventList(ctx context.Context, afterFlow string, afterSeq int64, limit int) ([]EventRow, error)
	// QuarantinedList lists quarantined events (each its flow's head, so
	// one per flow at most) by flow, after the flow afterFlow, at most
	// limit rows, as f selects them.
	QuarantinedList(ctx context.Context, afterFlow string, f QuarantinedFilter, limit int) ([]EventRow, error)
	// FlowSearch lists the flows whose id starts with prefix ("" for all)
	// by flow id (bytewise), after the given id, at most limit rows: a
	// range of the primary key.
	FlowSearch(ctx context.Context, prefix, after string, limit int) ([]FlowRow, error)
	// PausedList lists the paused flows by flow id after the given one, at
	// most limit rows (an index of the paused flows).
	PausedList(ctx context.Context, after string, limit int) ([]FlowRow, error)
	// Counts counts the inflight heads, the quarantined heads and the
	// paused flows, each from an index and up to max (a count of max means
	// "max or more").
	Counts(ctx context.Context, max int) (Counts, error)
	// OldestWaiting reads the event not acked that was enqueued first
	// (smallest EnqueuedAt, ties by event id): always a flow's head. nil,
	// nil when every event is acked.
	OldestWaiting(ctx context.Context) (*EventRow, error)
	// SettledSince lists the attempts settled at or after the wall-clock
	// time sinceWall (milliseconds since the Unix epoch), newest first, at
	// most limit rows (an index on the settle's wall-clock time).
	SettledSince(ctx context.Context, sinceWall int64, limit int) ([]AttemptRow, error)
	// AuditList lists audit rows as written, after the given row number.
	AuditList(ctx context.Context, after int64, limit int) ([]AuditRow, error)
	// Attempts lists an event's attempts by generation.
	Attempts(ctx context.Context, eventID string) ([]AttemptRow, error)
	// GroupPick lists the first limit groups of the group runnable index.
	GroupPick(ctx context.Context, order Order, limit int) ([]GroupRow, error)
	// GroupList lists group rows by name after the given one, at most
	// limit, with their flow counts and backlogs.
	GroupList(ctx context.Context, after string, limit int) ([]GroupInfo, error)
	// GroupSettings lists, by name after the given one, at most limit of
	// the groups whose settings differ from a new group's (a weight other
	// than 1, a backlog limit or a slot cap), without reading their flows.
	GroupSettings(ctx context.Context, after string, limit int) ([]GroupSetting, error)
	// Settings reads the store-wide settings.
	Settings(ctx context.Context) (Settings, error)
	// Backlog counts the events not acked, in all.
	Backlog(ctx context.Context) (int64, error)
	// FlowTotals counts the flows in the store and the events not acked
	// (Backlog's count), in one statement: O(flows), one pass over the
	// flow table where the backlog needs one anyway (PostgreSQL).
	FlowTotals(ctx context.Context) (flows, backlog int64, err error)
	Rollback(ctx context.Context) error
}

// QuarantinedFilter narrows QuarantinedList; each field, when not empty,
// keeps only: Flow, that flow's head; Prefix, the heads of flows whose id
// starts with it (read as the range [Prefix, PrefixEnd(Prefix)) of the
// index); Reason, heads quarantined for that reason; Group, the heads of
// the flows in that group (SPEC §8: a flow created without a group is in
// the group named like itself).
type QuarantinedFilter struct {
	Flow, Prefix, Reason, Group string
}
