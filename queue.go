package fairrelay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fairrelay/fairrelay/internal/faultpoint"
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
		return nil, openError(err)
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

// writeOp describes one write transaction of writeTx.
type writeOp struct {
	// name labels errors ("claim", "settle", …).
	name string
	// lanes are the writers the transaction is serialised with (store.Lane).
	lanes store.Lane
	// hint says what the body asks first (store.TxHint).
	hint store.TxHint
	// at is the tick of the write (AtStored: the stored tick).
	at int64
	// floor runs a write whose at lies below the stored tick at the stored
	// tick instead of failing with ErrClockRegressed (SPEC §7's daemon
	// clock, which never goes below the stored tick).
	floor bool
	// before and after name the fault points around the commit ("" for
	// none).
	before, after string
}

// writeTx runs fn in one write transaction after the clock check of SPEC
// §2: at must be >= the stored tick, which then becomes at. fn's error, or
// a failed commit, rolls everything back. It returns the tick the write ran
// at.
func (q *Queue) writeTx(ctx context.Context, op writeOp, fn func(tx store.Tx, c *store.Clock) error) (int64, error) {
	if err := checkTick(op.at); err != nil {
		return 0, err
	}
	tx, err := q.store.Begin(ctx, op.lanes)
	if err != nil {
		return 0, dbError(op.name, err)
	}
	defer tx.Rollback(ctx)
	store.Hint(tx, op.hint)
	tick, err := q.inTx(ctx, op.name, tx, op.at, op.floor, fn)
	if err != nil {
		if errors.Is(err, errUnchanged) {
			return 0, nil // the answer is ready; the rollback keeps everything as it was
		}
		return 0, err
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
	return tick, nil
}

// errUnchanged, returned by a writeTx body after it has set its answer, rolls
// the whole transaction back — the tick included — and makes writeTx succeed.
// A rejected redrive uses it: SPEC §2 says it changes nothing.
var errUnchanged = errors.New("answer changes nothing")

// inTx is the body of writeTx without begin/commit, shared with the …Tx
// variants that run inside a caller's transaction; it returns the tick the
// write ran at. fn must take the tick of the write from c.Tick (at may be
// AtStored, or below the stored tick under floor).
func (q *Queue) inTx(ctx context.Context, op string, tx store.Tx, at int64, floor bool, fn func(tx store.Tx, c *store.Clock) error) (int64, error) {
	c, err := tx.ClockGet(ctx)
	if err != nil {
		return 0, dbError(op, err)
	}
	if at == AtStored {
		at = c.Tick
	}
	if at < c.Tick {
		if !floor {
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
	switch {
	case v == "":
		return invalid(field, "empty")
	case len(v) > MaxIDBytes:
		return invalid(field, "%d bytes, more than the limit of %d", len(v), MaxIDBytes)
	case !utf8.ValidString(v):
		return invalid(field, "not valid UTF-8")
	}
	// Ids and flows travel in HTTP headers (the webhook sink), which cannot
	// carry control characters: such an id could never be delivered and
	// would end quarantined. Refuse it at the door instead.
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c == 0x7f {
			return invalid(field, "control character 0x%02x at byte %d", c, i)
		}
	}
	return nil
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
