package fairrelay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/fairrelay/fairrelay/internal/fsfault"
	"github.com/fairrelay/fairrelay/internal/sqlfile"
	"github.com/fairrelay/fairrelay/internal/store"
	"github.com/fairrelay/fairrelay/internal/store/pgstore"
	"github.com/fairrelay/fairrelay/internal/store/sqlitestore"
)

// MaxIDBytes is the longest event id, flow id or operator name accepted, in
// bytes.
const MaxIDBytes = 200

// MaxTick is the largest tick any operation accepts, and the largest lease
// or backoff a policy may set: 2^60 ticks (about 36 million years at the
// daemon's 1 tick = 1 ms). Bounding both keeps at+lease and at+backoff far
// from int64 overflow, which would otherwise hand out a second lease.
const MaxTick = store.MaxTick

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
	// (see Policy), the reference policy's numbers made for scripts (a
	// lease of 5 ticks, 3 claims a round, backoff 2 to 8 ticks): a Queue a
	// relay.Relay dispatches, where a tick is 1 ms, takes DaemonPolicy() (a
	// lease of 30 s, retries for about an hour) and changes fields of it;
	// ReferencePolicy() is the article's policy.
	Policy Policy
	// Logger receives the queue's debug logs. Defaults to a logger that
	// discards everything.
	Logger *slog.Logger
	// BusyTimeout is how long a write waits for another process's lock
	// before failing with ErrBusy (SQLite's busy timeout, PostgreSQL's
	// lock_timeout), rounded up to whole milliseconds. Defaults (when 0)
	// to 5s; a negative one is ErrInvalidInput naming busy_timeout.
	BusyTimeout time.Duration
	// MustExist makes Open fail with ErrInvalidInput (field "queue") when
	// the store does not exist yet — a missing SQLite file, a PostgreSQL
	// schema without a queue store — instead of creating an empty one: for
	// tools that inspect or settle, where a typo must not pass silently.
	MustExist bool
	// AdoptStoredEntry opens an existing store under the entry rule it
	// records (SPEC §7: the rule is a property of the store) instead of
	// failing when Policy.Entry names the other one; a new store still
	// records Policy.Entry. For tools that act on a store they did not
	// create (inspect, settle, redrive) and whose user named no rule.
	AdoptStoredEntry bool
	// ReadOnly makes Open write nothing, for tools that only read (inspect):
	// the store must exist (as MustExist), be migrated by this version and
	// record its entry rule; a store an older fairrelay made is refused
	// with ErrInvalidInput (field "queue", naming the migrations it lacks)
	// instead of migrated, since an older relay refuses a store a newer
	// fairrelay migrated. Writes through such a Queue are not refused by
	// Open's doing: do not make them.
	ReadOnly bool
	// Now is the wall clock the queue stamps attempt and audit rows with
	// (milliseconds since the Unix epoch, UTC): for display and retention
	// of history only; the protocol runs on ticks. Defaults to time.Now.
	Now func() time.Time
}

// Queue is the queue store of SPEC §2: enqueue, claim, settle, redrive and
// snapshot, each one atomic transaction that checks and advances the stored
// tick. A Queue is safe for concurrent use by many goroutines, and many
// processes may open the same store.
type Queue struct {
	store  store.Store
	policy Policy
	log    *slog.Logger
	now    func() time.Time
	txns   txnPool
}

// Open opens the queue store named by dsn, creating it and applying the
// migrations when needed. dsn is a file path (embedded SQLite) or a
// postgres:// (postgresql://) URL, whose optional schema=NAME parameter
// selects the schema the store lives in (created on first use; without it,
// the connection's current schema). The store records the entry rule of
// the policy it is created under (SPEC §7); a store created before
// fairrelay recorded it takes the rule of its first Open. Errors:
// ErrInvalidInput (field "queue" or a policy field) for a bad path, URL or
// policy (a URL of another scheme, postgress:// or mysql://, and SQLite URL
// forms, sqlite:x.db or file:x.db, are refused, not taken for paths), a
// PostgreSQL database the server does not hold, a store migrated by a newer fairrelay (it records a migration
// this build does not know), a missing store under MustExist, or a store
// not migrated to this version under ReadOnly;
// ErrInvalidInput (field "policy") for a store created under the other
// entry rule; ErrNotDatabase for a file that is not a database; ErrBusy or
// ErrDatabase from the backend; ctx's own error (errors.Is
// context.Canceled or context.DeadlineExceeded, no Code) when ctx ends
// first — a migration that ctx stopped part way is rolled back whole, and
// the next Open applies it.
func Open(ctx context.Context, dsn string, cfg Config) (*Queue, error) {
	if err := cfg.Policy.Validate(); err != nil {
		return nil, err
	}
	pol := cfg.Policy.withDefaults()
	if cfg.BusyTimeout < 0 {
		return nil, invalid("busy_timeout", "must not be negative (0: the default, %s), got %s", store.DefaultBusyTimeout, cfg.BusyTimeout)
	}
	cfg.BusyTimeout = store.BusyTimeout(cfg.BusyTimeout)
	if strings.TrimSpace(dsn) == "" {
		return nil, invalid("queue", "empty path")
	}
	if why := store.ForeignScheme(dsn); why != "" {
		return nil, invalid("queue", "%s", why)
	}
	var s store.Store
	var err error
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		// A URL or schema name that does not parse is the caller's input,
		// and so is a database the server does not hold (ErrMissing: what
		// the URL names is not there, as a SQLite file's missing
		// directory); anything else after that (the server unreachable,
		// refusing the user) is a database error.
		if _, _, perr := pgstore.PoolConfig(dsn, 0); perr != nil {
			return nil, invalid("queue", "%s", perr.Error())
		}
		s, err = pgstore.Open(ctx, dsn, pgstore.Options{LockTimeout: cfg.BusyTimeout, MustExist: cfg.MustExist,
			Entry: string(pol.Entry), AdoptEntry: cfg.AdoptStoredEntry, ReadOnly: cfg.ReadOnly})
	default:
		s, err = sqlitestore.Open(ctx, dsn, sqlitestore.Options{BusyTimeout: cfg.BusyTimeout, MustExist: cfg.MustExist,
			Entry: string(pol.Entry), AdoptEntry: cfg.AdoptStoredEntry, ReadOnly: cfg.ReadOnly})
		// Name a read-only or unwritable place, which the driver calls
		// "unable to open database file".
		err = fsfault.Explain(dsn, err)
		if err == nil && !cfg.ReadOnly {
			// A file this process may not write opens read-only, without
			// an error; its first write failed "attempt to write a
			// readonly database", a database error naming no field (a
			// breaker's sweep).
			if werr := fsfault.Check(dsn); werr != nil {
				s.Close()
				err = werr
			}
		}
	}
	if err != nil {
		err = openError(err)
		var fe *Error
		if (cfg.MustExist || cfg.ReadOnly) && errors.Is(err, store.ErrMissing) && !errors.Is(err, store.ErrNoDatabase) && errors.As(err, &fe) {
			// For a Go caller, whom "fairrelay migrate" does not help
			// alone (a library user's trial); the command leaves Hints
			// out. Not for a database the server lacks: Open makes none.
			named := *fe
			named.Hint = "in Go, Config.MustExist and Config.ReadOnly refuse to create a store; without them Open creates one"
			err = &named
		}
		return nil, err
	}
	pol.Entry = Entry(s.Entry())
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &Queue{store: s, policy: pol, log: log, now: now}, nil
}

// openError classifies an error of a backend's Open.
func openError(err error) error {
	var fe *Error
	var ee *store.EntryMismatchError
	switch {
	case errors.As(err, &fe):
		return err
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// Stopped, not refused: nothing about the caller's input is wrong.
		return fmt.Errorf("open stopped: %w", err)
	case errors.As(err, &ee):
		return &Error{Code: CodeInvalidInput, Field: "policy", Message: ee.Error()}
	case errors.Is(err, store.ErrMissing), errors.Is(err, store.ErrRefusedSettings), errors.Is(err, sqlfile.ErrNewerSchema), errors.Is(err, sqlfile.ErrOlderSchema):
		// The message is the error's own (Err keeps it for errors.Is).
		return &Error{Code: CodeInvalidInput, Field: "queue", Err: err}
	case errors.Is(err, store.ErrNotDatabase):
		// The place the caller gave holds something else: name it.
		return &Error{Code: CodeNotDatabase, Field: "queue", Message: "open", Err: err}
	case errors.Is(err, store.ErrBusy), errors.Is(err, store.ErrServer), errors.Is(err, store.ErrStorage):
		return dbError("open", err)
	}
	return &Error{Code: CodeInvalidInput, Field: "queue", Message: "cannot open", Err: err}
}

// ConcurrentWriters reports whether the store commits a claim and a settle
// at the same time: true on PostgreSQL, where claims and settles are
// separate writers (lanes), each serialised on its own lock, and enqueues
// lock only their own flows; false on SQLite, which has one writer at a
// time. A dispatcher that settles beside its claims (package relay) does so
// only when it is true; on SQLite it settles with its next claim
// (SettleMany with a ClaimLimit) instead.
func (q *Queue) ConcurrentWriters() bool { return q.store.ConcurrentWriters() }

// Policy returns the queue's policy with defaults filled in.
func (q *Queue) Policy() Policy { return q.policy }

// Close releases the store's connections.
func (q *Queue) Close() error { return q.store.Close() }

// Migrated returns the versions of the store's migrations that Open
// applied, in order: all of them for a store Open created, none (nil) for
// one that was up to date or opened with Config.ReadOnly. fairrelay
// migrate prints them.
func (q *Queue) Migrated() []int { return q.store.Migrated() }

// Migrate applies the embedded migrations the store lacks and returns the
// versions applied (Open already does this; the CLI exposes it).
func (q *Queue) Migrate(ctx context.Context) ([]int, error) {
	v, err := q.store.Migrate(ctx)
	return v, dbError("migrate", err)
}

// pickOrder is the tie-break of the runnable index under the queue's policy
// (SPEC §2 step 3, §7).
func (q *Queue) pickOrder() store.Order {
	if q.policy.Entry == EntryFair {
		return store.OrderCreation
	}
	return store.OrderFlowID
}

// SQLiteDSN returns the modernc.org/sqlite data source name fairrelay uses for
// the SQLite file at path: WAL, synchronous=FULL, a 5 s busy timeout and
// BEGIN IMMEDIATE transactions (SPEC §4). Open your own pool with
// sql.Open("sqlite", fairrelay.SQLiteDSN(path)) to call EnqueueTx inside your
// own transactions on the same file; with a deferred BEGIN, the first write
// of a transaction could fail busy instead of waiting for the lock.
func SQLiteDSN(path string) string {
	return sqlitestore.DSN(path, store.DefaultBusyTimeout, true)
}
