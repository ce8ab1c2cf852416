package fairrelay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/fairrelay/fairrelay/internal/faultpoint"
	"github.com/fairrelay/fairrelay/internal/fsfault"
	"github.com/fairrelay/fairrelay/internal/store"
	"github.com/fairrelay/fairrelay/internal/store/sqlitestore"
)

// MaxIDBytes is the longest event id, flow id or operator name accepted, in
// bytes.
const MaxIDBytes = 200

// MaxTick is the largest tick any operation accepts, and the largest lease
// or backoff a policy may set: 2^60 ticks (about 36 million years at the
// daemon's 1 tick = 1 ms). Bounding both keeps at+lease and at+backoff far
// from int64 overflow, which would otherwise hand out a second lease.
const MaxTick = 1 << 60

// AtStored, given as the tick of a write, runs it at the store's current
// tick, read in the same transaction: for operators and tools that act on a
// store whose clock a running relay moves every millisecond, where a tick
// read first and written next could already be behind (clock_regressed).
// It is math.MinInt64, a value no computed tick is by accident.
const AtStored int64 = math.MinInt64

// tickFloorKey is the context key of WithTickFloor.
type tickFloorKey struct{}

// WithTickFloor returns a context under which a write of a Queue (every
// operation of SPEC §2 but the reads) whose tick lies below the stored tick
// runs at the stored tick instead of failing with ErrClockRegressed: the
// daemon clock of SPEC §7, which never goes below the stored tick. It is
// for a dispatcher whose writes wait for locks while other processes
// commit later ticks (several relays on one PostgreSQL queue), where a
// retry at a fresher tick would lose the same race again. ran, when not
// nil, is called with the tick each write ran at, once it has committed (a
// …Tx variant: once it is written in the caller's transaction), so that the
// caller's clock can follow (relay's Clock.Observe). Scripts and tests
// that give explicit ticks do not use it: there a smaller tick is an error.
func WithTickFloor(ctx context.Context, ran func(tick int64)) context.Context {
	if ran == nil {
		ran = func(int64) {}
	}
	return context.WithValue(ctx, tickFloorKey{}, ran)
}

// tickFloor returns the callback of a WithTickFloor context, nil for any
// other context.
func tickFloor(ctx context.Context) func(tick int64) {
	ran, _ := ctx.Value(tickFloorKey{}).(func(int64))
	return ran
}

// skipHeldKey is the context key of WithSkipHeldFlows.
type skipHeldKey struct{}

// WithSkipHeldFlows returns a context under which SettleBatch and
// SettleAndClaim skip a token whose flow another transaction holds, instead
// of waiting for that transaction to end: its SettleResult has Held set,
// and nothing of it changes; settle it again later. On PostgreSQL an
// outbox transaction holds the rows of the flows it appended to until it
// commits (EnqueueTx); a settle of one of those flows' heads would wait
// for it, and so would every other settle of its batch. The relay settles
// under it. On SQLite (one writer at a time) no flow is ever held.
func WithSkipHeldFlows(ctx context.Context) context.Context {
	return context.WithValue(ctx, skipHeldKey{}, true)
}

// skipHeld reports whether ctx comes from WithSkipHeldFlows.
func skipHeld(ctx context.Context) bool {
	v, _ := ctx.Value(skipHeldKey{}).(bool)
	return v
}

// MaxReasonBytes is the longest redrive reason accepted, in bytes.
const MaxReasonBytes = 4096

// Config configures a Queue.
type Config struct {
	// Policy holds the protocol numbers. Zero fields take their defaults
	// (see Policy); use ReferencePolicy() for the article's policy.
	Policy Policy
	// Logger receives the queue's debug logs. Defaults to a logger that
	// discards everything.
	Logger *slog.Logger
	// BusyTimeout is how long a write waits for another process's lock
	// before failing with ErrBusy (SQLite's busy timeout, PostgreSQL's
	// lock_timeout). Defaults to 5s.
	BusyTimeout time.Duration
	// MustExist makes Open fail with ErrInvalidInput (field "queue") when
	// the store does not exist yet — a missing SQLite file, a PostgreSQL
	// schema without a queue store — instead of creating an empty one: for
	// tools that inspect or settle, where a typo must not pass silently.
	MustExist bool
}

// Queue is the queue store of SPEC §2: enqueue, claim, settle, redrive and
// snapshot, each one atomic transaction that checks and advances the stored
// tick. A Queue is safe for concurrent use by many goroutines, and many
// processes may open the same store.
type Queue struct {
	store  store.Store
	policy Policy
	log    *slog.Logger
}

// Open opens the queue store named by dsn, creating it and applying the
// migrations when needed. dsn is a file path (embedded SQLite) or a
// postgres:// URL. Errors: ErrInvalidInput (field "queue" or a policy field)
// for a bad path or policy, or a store migrated by a newer fairrelay (it
// records a migration this build does not know), ErrNotDatabase for a file
// that is not a database, ErrBusy or ErrDatabase from the backend.
func Open(ctx context.Context, dsn string, cfg Config) (*Queue, error) {
	if err := cfg.Policy.Validate(); err != nil {
		return nil, err
	}
	s, err := openStore(ctx, dsn, cfg)
	if err != nil {
		return nil, err
	}
	return newQueue(s, cfg), nil
}

// openStoreFuncs lets backends other than SQLite register themselves by dsn
// prefix (the PostgreSQL backend registers postgres:// and postgresql://).
var openStoreFuncs = map[string]func(ctx context.Context, dsn string, cfg Config) (store.Store, error){}

func openStore(ctx context.Context, dsn string, cfg Config) (store.Store, error) {
	if strings.TrimSpace(dsn) == "" {
		return nil, invalid("queue", "empty path")
	}
	for prefix, open := range openStoreFuncs {
		if strings.HasPrefix(dsn, prefix) {
			s, err := open(ctx, dsn, cfg)
			if err != nil {
				return nil, openError(err)
			}
			return s, nil
		}
	}
	s, err := sqlitestore.Open(ctx, dsn, sqlitestore.Options{BusyTimeout: cfg.BusyTimeout, MustExist: cfg.MustExist})
	if err != nil {
		// Name a read-only or unwritable place, which the driver calls
		// "unable to open database file".
		return nil, openError(fsfault.Explain(dsn, err))
	}
	return s, nil
}

func openError(err error) error {
	var fe *Error
	if errors.As(err, &fe) {
		return err
	}
	if errors.Is(err, store.ErrBusy) || errors.Is(err, store.ErrNotDatabase) {
		return dbError("open", err)
	}
	return &Error{Code: CodeInvalidInput, Field: "queue", Message: "cannot open", Err: err}
}

func newQueue(s store.Store, cfg Config) *Queue {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Queue{store: s, policy: cfg.Policy.withDefaults(), log: log}
}

// ConcurrentWriters reports whether the store commits a claim and a settle
// at the same time: true on PostgreSQL, where enqueues, claims and settles
// are separate writers (lanes), each serialised on its own lock; false on
// SQLite, which has one writer at a time. A dispatcher that settles beside
// its claims (package relay) does so only when it is true; on SQLite it
// settles with its next claim (SettleAndClaim) instead.
func (q *Queue) ConcurrentWriters() bool {
	c, ok := q.store.(store.ConcurrentWriter)
	return ok && c.ConcurrentLanes()
}

// Policy returns the queue's policy with defaults filled in.
func (q *Queue) Policy() Policy { return q.policy }

// Close releases the store's connections.
func (q *Queue) Close() error { return q.store.Close() }

// Migrate applies the embedded migrations the store lacks and returns the
// versions applied (Open already does this; the CLI exposes it).
func (q *Queue) Migrate(ctx context.Context) ([]int, error) {
	v, err := q.store.Migrate(ctx)
	return v, dbError("migrate", err)
}

// writeTx runs fn in one write transaction of the given lane after the clock
// check of SPEC §2: at must be >= the stored tick, which then becomes at.
// fn's error, or a failed commit, rolls everything back. before and after
// name the fault points around the commit ("" for none). hint says what fn
// asks first (store.TxHint).
func (q *Queue) writeTx(ctx context.Context, lane store.Lane, hint store.TxHint, op string, at int64, before, after string, fn func(tx store.Tx, c *store.Clock) error) error {
	if err := checkTick(at); err != nil {
		return err
	}
	tx, err := q.store.Begin(ctx, lane)
	if err != nil {
		return dbError(op, err)
	}
	defer tx.Rollback(ctx)
	store.Hint(tx, hint)
	tick, err := q.inTx(ctx, op, tx, at, fn)
	if err != nil {
		if errors.Is(err, errUnchanged) {
			return nil // the answer is ready; the rollback keeps everything as it was
		}
		return err
	}
	if before != "" {
		faultpoint.Hit(before)
	}
	if err := tx.Commit(ctx); err != nil {
		return dbError(op+": commit", err)
	}
	if after != "" {
		faultpoint.Hit(after)
	}
	if ran := tickFloor(ctx); ran != nil {
		ran(tick)
	}
	return nil
}

// errUnchanged, returned by a writeTx body after it has set its answer, rolls
// the whole transaction back — the tick included — and makes writeTx succeed.
// A rejected redrive uses it: SPEC §2 says it changes nothing.
var errUnchanged = errors.New("answer changes nothing")

// inTx is the body of writeTx without begin/commit, shared with the …Tx
// variants that run inside a caller's transaction; it returns the tick the
// write ran at. fn must take the tick of the write from c.Tick (at may be
// AtStored, or below the stored tick under WithTickFloor).
func (q *Queue) inTx(ctx context.Context, op string, tx store.Tx, at int64, fn func(tx store.Tx, c *store.Clock) error) (int64, error) {
	c, err := tx.ClockGet(ctx)
	if err != nil {
		return 0, dbError(op, err)
	}
	if at == AtStored {
		at = c.Tick
	}
	if at < c.Tick {
		if tickFloor(ctx) == nil {
			return 0, &Error{Code: CodeClockRegressed, Message: fmt.Sprintf("%s at tick %d: the store is at tick %d", op, at, c.Tick)}
		}
		at = c.Tick
	}
	c.Tick = at
	if err := fn(tx, &c); err != nil {
		if errors.Is(err, errUnchanged) {
			return 0, err
		}
		return 0, dbError(op, err)
	}
	if err := tx.ClockSet(ctx, c); err != nil {
		return 0, dbError(op, err)
	}
	return at, nil
}

func checkTick(at int64) error {
	if at == AtStored {
		return nil
	}
	if at < 0 || at > MaxTick {
		return invalid("at", "must be a tick in [0, %d], got %d", int64(MaxTick), at)
	}
	return nil
}

func checkID(field, v string) error {
	// One rule for every name that travels (ident.go).
	return CheckID(field, v)
}

// placeHead files the flow's head in the runnable index when it is eligible
// at tick at (due <= at), or in the waiting index until due otherwise.
func placeHead(f *store.FlowRow, due, at int64) {
	if due <= at {
		f.Runnable, f.WaitUntil = true, nil
		return
	}
	f.Runnable, f.WaitUntil = false, &due
}

// parkHead takes the flow out of both indexes: its head is quarantined, or
// the flow has no head.
func parkHead(f *store.FlowRow) { f.Runnable, f.WaitUntil = false, nil }

// SQLiteDSN returns the modernc.org/sqlite data source name fairrelay uses
// for the SQLite file at path: WAL, synchronous=FULL, a 5 s busy timeout and
// BEGIN IMMEDIATE transactions (SPEC §4). Open your own pool with
// sql.Open("sqlite", fairrelay.SQLiteDSN(path)) to call EnqueueTx inside your
// own transactions on the same file; with a deferred BEGIN, the first write
// of a transaction could fail busy instead of waiting for the lock.
func SQLiteDSN(path string) string {
	return sqlitestore.DSN(path, 5*time.Second, true)
}
