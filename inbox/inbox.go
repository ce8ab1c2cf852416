// Package inbox is the receiver's side of fairrelay (SPEC §3): a store of
// receipts and an effect, written in ONE transaction per delivery,
// deduplicated by event id and checked against the flow's sequence. The
// effect is the receiver's own (Options.Apply: its writes in the receipt's
// transaction) or, without one, the reference effect of the article, the
// "ledger" projection of {"delta": N} bodies. It lives in its own database,
// apart from the queue store.
//
// A receiver embeds an Inbox in its own handler (see Handler for HTTP), or
// runs the ledger as a service with `fairrelay receive`.
package inbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/errs"
	"github.com/fairrelay/fairrelay/internal/faultpoint"
	"github.com/fairrelay/fairrelay/internal/fsfault"
	"github.com/fairrelay/fairrelay/internal/jsontext"
	"github.com/fairrelay/fairrelay/internal/sqlfile"
	"github.com/fairrelay/fairrelay/internal/store"
	"github.com/fairrelay/fairrelay/internal/store/pgstore"
	"github.com/fairrelay/fairrelay/internal/store/sqlitestore"
)

//go:embed queries.sql
var queriesSQL string

//go:embed migrations
var migrationsFS embed.FS

var q = sqlfile.Queries(queriesSQL)

// MigrationTable records the inbox's applied migrations; it differs from the
// queue store's, so a queue file given as an inbox (or the reverse) fails
// clearly instead of passing as migrated.
const MigrationTable = "fairrelay_inbox_migration"

// Delivery is one event as the relay sends it.
type Delivery struct {
	// EventID and Flow follow fairrelay.CheckID's rule.
	EventID string
	Flow    string
	// Seq is the event's place in its flow, >= 1.
	Seq  int64
	Body []byte
}

// check applies the queue's rule to what a delivery names, so the inbox
// stores no id or flow a queue could not have sent (a TAB, invalid UTF-8,
// 300 bytes).
func (d Delivery) check() error {
	if err := fairrelay.CheckID("id", d.EventID); err != nil {
		return err
	}
	if err := fairrelay.CheckID("flow", d.Flow); err != nil {
		return err
	}
	if d.Seq < 1 {
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "seq", Message: fmt.Sprintf("must be at least 1, got %d", d.Seq)}
	}
	return nil
}

// Options configure an Inbox.
//
// Connections: a receive holds one of the inbox's connections for its
// transaction, Options.Apply included. A PostgreSQL inbox keeps at most
// pool_max_conns of them open (a URL parameter; pgx's default is 4, or the
// number of CPUs when more), a SQLite inbox one; a receive that finds them
// all in use waits for one until its ctx ends (Handler: until the client
// gives up, answered 499). Raise pool_max_conns for an Apply that waits on
// other services.
type Options struct {
	// MaxDelta is the largest ledger delta the receiver supports; a larger
	// one answers unsupported_delta. Defaults (when 0) to NoDeltaLimit.
	MaxDelta int64
	// BusyTimeout is how long a receive waits for another process's write
	// lock (SQLite), or a row lock (PostgreSQL's lock_timeout), rounded up
	// to whole milliseconds. Defaults (when 0) to 5s; a negative one is
	// ErrInvalidInput naming busy_timeout.
	BusyTimeout time.Duration
	// MustExist makes Open fail with ErrInvalidInput (field "inbox"),
	// creating nothing, when there is no inbox yet — a missing SQLite file,
	// a PostgreSQL schema without one — instead of creating an empty one:
	// for tools that only read, and for a receiver whose inbox is made
	// beforehand (fairrelay receive on PostgreSQL), where a typo must not
	// pass silently.
	MustExist bool
	// ReadOnly makes Open write nothing, for tools that only read (inspect
	// --inbox): the inbox must exist (as MustExist) and be migrated by this
	// version; one an older fairrelay made is refused with ErrInvalidInput
	// (field "inbox", naming the migrations it lacks) instead of migrated.
	ReadOnly bool
	// Apply, when set, is the receiver's own effect in place of the
	// reference ledger (SPEC §3 step 4): Receive (and ReceiveHeld) calls it
	// for a delivery that passed the id and sequence checks, inside the
	// transaction that then writes the receipt and moves the flow's seq, so
	// that the effect and the receipt commit together or not at all. tx is
	// on the inbox's database — the SQLite file, or the PostgreSQL database
	// whose schema holds the inbox (first on tx's search_path) — so the
	// effect's tables live there; Apply must not commit or roll back tx.
	//
	// Return fairrelay.OutcomeAccepted to commit. Return a refusal the
	// event itself earns — OutcomeInvalidBody, OutcomeUnsupportedDelta or
	// OutcomeRejected (permanent: the relay quarantines the event until a
	// redrive, or an operator waives it, Waive) or OutcomeRetry (transient:
	// delivered again later) — and everything Apply wrote is rolled back,
	// no receipt is written, and Receive answers it. An error rolls back
	// too and reaches Receive's caller (wrapped, matching ErrApply; the
	// HTTP handler answers 500 — 503 when Apply's statement met a busy
	// database, a deadlock or a serialization failure (ErrBusy too) —
	// which the relay retries, and package
	// consume redelivers, also when it wraps ErrInvalidInput); any other
	// outcome is such an error, and so is a tx Apply ended itself — but
	// what Apply committed itself stays committed, without a receipt, and a
	// redelivery applies it again: Apply must leave tx to Receive. A panic
	// in Apply is such an error too (its value and stack in the message):
	// rolled back and answered as one, never the caller's panic.
	// A redelivery of an accepted event answers duplicate without calling
	// Apply: it runs again for an event only when an earlier call's
	// transaction did not commit. With Apply set, MaxDelta does not apply
	// and the projection keeps each flow's last seq, its total unchanged.
	Apply func(ctx context.Context, tx *sql.Tx, d Delivery) (fairrelay.Outcome, error)
}

// ErrApply matches (errors.Is) every error of Options.Apply as Receive and
// ReceiveHeld return it — Apply's own error, wrapped, which errors.Is and
// errors.As still find, or a misuse of Apply (an outcome it may not
// answer, a tx it ended itself) — so that a caller tells the receiver's
// own failure from a delivery that is malformed: an Apply error that wraps
// fairrelay.ErrInvalidInput is still Apply's (Handler answers 500, which
// the relay retries; package consume redelivers it), never a bad id,
// flow or seq (400; rejected by a broker consumer).
var ErrApply = errors.New("inbox: the receiver's Apply failed")

// applyError is an error of Options.Apply: it reaches Receive's caller as
// it is (wrapped), never as a database error.
type applyError struct{ err error }

func (e *applyError) Error() string        { return "apply: " + e.err.Error() }
func (e *applyError) Unwrap() error        { return e.err }
func (e *applyError) Is(target error) bool { return target == ErrApply }

// receiveError is dbError for the errors of receive: an Apply error is
// returned wrapped with op — as ErrBusy (still ErrApply) when Apply's own
// statement met a busy database, a deadlock or a serialization failure,
// so that Handler answers 503 with Retry-After as for the inbox's own —
// the rest as database errors.
func receiveError(op string, err error, translate func(error) error) error {
	var ae *applyError
	if errors.As(err, &ae) {
		if errors.Is(translate(ae.err), store.ErrBusy) {
			return &fairrelay.Error{Code: fairrelay.CodeBusy, Message: "inbox: " + op, Err: ae}
		}
		return fmt.Errorf("inbox: %s: %w", op, ae)
	}
	return dbError(op, translate(err))
}

// NoDeltaLimit is the MaxDelta of an inbox that supports every delta.
const NoDeltaLimit = math.MaxInt64

// Inbox is one receiver's store. Safe for concurrent use.
type Inbox struct {
	db        *sql.DB
	translate func(error) error // the backend's error translation (busy, not a database)
	// lock, when not empty, is run first in every receive with the
	// delivery's flow and event id: it serialises the receives of one flow
	// and of one id (PostgreSQL; SQLite's transactions are serialised).
	lock string
	// path and file identify a SQLite inbox's file as opened (begin); ""
	// and nil on PostgreSQL.
	path string
	file os.FileInfo
	// busy is how long a write waits for another connection's writer
	// (Options.BusyTimeout).
	busy        time.Duration
	maxDelta    atomic.Int64
	unavailable atomic.Bool
	// migrated: the migrations Open applied (Migrated).
	migrated []int
	// apply is Options.Apply.
	apply func(ctx context.Context, tx *sql.Tx, d Delivery) (fairrelay.Outcome, error)
	// commitHook, when set (by tests), commits in place of tx.Commit: it
	// lets a test cancel the request at the commit or fail a commit that
	// applied. ctx is Receive's.
	commitHook func(ctx context.Context, tx *sql.Tx) error
}

// Open opens (creating if missing) the inbox at dsn — a file path (SQLite) or
// a postgres:// URL, whose optional schema=NAME parameter selects the
// schema the inbox lives in, as fairrelay.Open's does (created on first
// use; without it, the connection's current schema; one schema holds one
// store, so give the inbox a schema of its own beside a queue store's:
// SPEC §4) — and applies its migrations. Errors name the field
// "inbox" for a bad path (a URL of another scheme, or a SQLite URL form
// such as sqlite:x.db, is refused, not taken for a path); database errors
// wrap the driver's.
func Open(ctx context.Context, dsn string, opts Options) (*Inbox, error) {
	if opts.BusyTimeout < 0 {
		return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "busy_timeout",
			Message: fmt.Sprintf("must not be negative (0: the default, %s), got %s", store.DefaultBusyTimeout, opts.BusyTimeout)}
	}
	opts.BusyTimeout = store.BusyTimeout(opts.BusyTimeout)
	opts.MustExist = opts.MustExist || opts.ReadOnly
	if strings.TrimSpace(dsn) == "" {
		return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "inbox", Message: "empty path"}
	}
	if why := store.ForeignScheme(dsn); why != "" {
		return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "inbox", Message: why}
	}
	var err error
	in := &Inbox{translate: sqlitestore.Translate, busy: opts.BusyTimeout, apply: opts.Apply}
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		if in.db, err = openPostgres(ctx, dsn, opts, &in.migrated); err != nil {
			return nil, openError(err)
		}
		in.translate, in.lock = pgstore.Translate, receiveLock
	default:
		if in.db, in.path, in.file, err = openSQLite(ctx, dsn, opts, &in.migrated); err != nil {
			return nil, err
		}
	}
	if opts.MaxDelta == 0 {
		opts.MaxDelta = NoDeltaLimit
	}
	in.maxDelta.Store(opts.MaxDelta)
	return in, nil
}

// openSQLite opens the SQLite inbox at path, and returns with it the file's
// absolute path and identity, which its writes check (Inbox.begin).
func openSQLite(ctx context.Context, path string, opts Options, applied *[]int) (_ *sql.DB, abs string, file os.FileInfo, err error) {
	abs, err = filepath.Abs(path)
	if err != nil {
		return nil, "", nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "inbox", Message: err.Error()}
	}
	if st, err := os.Stat(filepath.Dir(abs)); err != nil {
		return nil, "", nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "inbox", Message: "directory " + filepath.Dir(abs) + " does not exist"}
	} else if !st.IsDir() {
		return nil, "", nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "inbox", Message: filepath.Dir(abs) + " is a file, not a directory"}
	}
	if st, err := os.Stat(abs); err == nil && st.IsDir() {
		// SQLite's own answer, "disk I/O error" (a database error), does
		// not say what is wrong (a breaker's sweep).
		return nil, "", nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "inbox", Message: abs + " is a directory, not an inbox's file"}
	}
	if opts.MustExist {
		if _, err := os.Stat(abs); err != nil {
			return nil, "", nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "inbox", Err: store.Missing("%s does not exist (create it with fairrelay migrate --inbox or receive)", abs)}
		}
		// An existing file that holds no inbox (empty, or another
		// application's database) is missing too: refused on a read-only
		// connection, before one that would switch it to WAL mode or give an
		// empty file its first page, so that nothing in it changes.
		if err := sqlitestore.Probe(ctx, abs, opts.BusyTimeout, MigrationTable, "fairrelay_migration", "a fairrelay queue store, not an inbox", "no inbox"); err != nil {
			if errors.Is(err, store.ErrMissing) {
				return nil, "", nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "inbox", Err: store.Missing("%s holds no inbox (create one in it with fairrelay migrate --inbox)", abs)}
			}
			return nil, "", nil, openSQLiteError(abs, err)
		}
	}
	if !opts.MustExist {
		if err := sqlitestore.CreateFile(abs); err != nil {
			return nil, "", nil, openSQLiteError(abs, err)
		}
	}
	if !opts.ReadOnly {
		if err := sqlitestore.EnsureWAL(ctx, abs, opts.BusyTimeout); err != nil {
			return nil, "", nil, openSQLiteError(abs, err)
		}
	}
	// Only the file as it is now: a connection the pool opens again later
	// must not make a new one where the inbox was removed.
	dsn := sqlitestore.ExistingOnly(sqlitestore.DSN(abs, opts.BusyTimeout, true))
	if opts.ReadOnly {
		dsn = sqlitestore.ReadOnlyDSN(abs, opts.BusyTimeout)
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, "", nil, err
	}
	db.SetMaxOpenConns(1)
	if !opts.MustExist { // else Probe checked it
		if err := sqlitestore.RefuseForeign(ctx, db, "fairrelay_migration", "a fairrelay queue store, not an inbox"); err != nil {
			db.Close()
			return nil, "", nil, openSQLiteError(abs, err)
		}
	}
	migs, err := sqlfile.Migrations(migrationsFS, "migrations/sqlite")
	if err != nil {
		db.Close()
		return nil, "", nil, err
	}
	if opts.ReadOnly {
		err = sqlfile.Check(ctx, db, MigrationTable, migs)
	} else {
		*applied, err = sqlfile.ApplyNamed(ctx, db, MigrationTable, migs, "")
	}
	if err != nil {
		db.Close()
		return nil, "", nil, openSQLiteError(abs, sqlitestore.Translate(err))
	}
	// The file its writes must keep going to (it exists now).
	if file, err = os.Stat(abs); err != nil {
		db.Close()
		return nil, "", nil, openSQLiteError(abs, err)
	}
	if !opts.ReadOnly {
		// A file this process may not write opens read-only, without an
		// error: refused now, not at the first receive.
		if werr := fsfault.Check(abs); werr != nil {
			db.Close()
			return nil, "", nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "inbox", Message: "cannot open", Err: werr}
		}
	}
	return db, abs, file, nil
}

// openSQLiteError classifies a failure to open the SQLite inbox at path: a
// place that is read-only or not writable is ErrInvalidInput naming
// "inbox", with the cause (the driver says only "unable to open database
// file"); anything else as dbError.
func openSQLiteError(path string, err error) error {
	if err := fsfault.Explain(path, err); errors.Is(err, fsfault.ErrNotWritable) {
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "inbox", Message: "cannot open", Err: err}
	}
	return openError(err)
}

// begin starts a write transaction, on a context that ctx's cancellation
// does not reach (see Receive), after waits that ctx ends, once a SQLite inbox's file is checked to be
// the one opened (sqlitestore.CheckFile: removed or replaced under a
// running receiver, its receipts and effects would go to a file nobody sees,
// and a broker consumer would ack them: lost at its next start).
//
// On SQLite the transaction begins IMMEDIATE through
// sqlitestore.BeginImmediate, which waits for another process's writer
// (the application's, writing the same file) by trying again every 50-500
// µs, not on SQLite's busy handler's 1, 2, 5, 10 … ms; on PostgreSQL it is
// a plain transaction. Either way Commit and Rollback end it and give its
// connection back.
func (in *Inbox) begin(ctx context.Context) (*sqlitestore.WriteTx, error) {
	// The waits to begin end with ctx (a breaker's report: a receive
	// whose caller had given up waited out the whole busy timeout behind
	// another writer, or for as long as a PostgreSQL server that stopped
	// answering); only the transaction outlives it.
	if in.path == "" { // PostgreSQL
		// The transaction's ctx is cancelled if ctx ends before BEGIN has
		// answered, and never after.
		life, cancel := context.WithCancel(context.WithoutCancel(ctx))
		stop := context.AfterFunc(ctx, cancel)
		tx, err := in.db.BeginTx(life, nil)
		if !stop() {
			// ctx ended first: database/sql ends the transaction.
			if err == nil {
				tx.Rollback()
			}
			// BEGIN's own error is then most often the cancel of its
			// ctx, which says nothing more than ctx's: one line, not
			// "context canceled; context canceled".
			if err == nil || errors.Is(err, context.Canceled) {
				return nil, ctx.Err()
			}
			return nil, errs.Join(ctx.Err(), err)
		}
		if err != nil {
			return nil, err
		}
		return &sqlitestore.WriteTx{Tx: tx}, nil
	}
	if err := sqlitestore.CheckFile(in.path, in.file); err != nil {
		return nil, err
	}
	return sqlitestore.BeginImmediateWaiting(ctx, context.WithoutCancel(ctx), in.db, in.busy)
}

// Ping reports whether the inbox can take deliveries: for SQLite its file
// is the one opened (not removed or replaced since;
// sqlitestore.ErrFileReplaced, wrapped), and a read of its receipts
// answers — so a database that answers but no longer holds the inbox (a
// PostgreSQL schema dropped, restored elsewhere, or a failover target
// without it), where every delivery fails, is not ready: a connection
// check alone called it ready (an SRE's drill). One indexed read. For
// readiness probes. Errors: ErrDatabase, ErrNotDatabase (the inbox's
// tables are gone) or ErrBusy, wrapping the database's.
func (in *Inbox) Ping(ctx context.Context) error {
	if err := sqlitestore.CheckFile(in.path, in.file); err != nil {
		return dbError("ping", err)
	}
	var n int
	if err := in.db.QueryRowContext(ctx, q["Ready"]).Scan(&n); err != nil {
		return dbError("ping: read the receipts", in.translate(err))
	}
	return nil
}

// CheckFile returns nil unless the inbox is a SQLite file that was removed
// or replaced since Open; then an ErrDatabase error with
// fairrelay.ErrFileReplaced in its chain (errors.Is), naming the path. Every
// write of such an inbox answers that error, and no wait cures it: whatever
// the process wrote would go to a file no other process sees. It is one
// stat(2), no database round trip, so a receiver may call it every second
// to stop while idle (fairrelay receive does). Always nil for PostgreSQL.
func (in *Inbox) CheckFile() error {
	if err := sqlitestore.CheckFile(in.path, in.file); err != nil {
		return dbError("check the inbox's file", err)
	}
	return nil
}

// Migrated returns the versions of the inbox's migrations that Open
// applied, in order: all of them for an inbox Open created, none (nil) for
// one that was up to date or opened with Options.ReadOnly.
func (in *Inbox) Migrated() []int { return in.migrated }

// DB returns the inbox's database, for receivers that keep more of their own
// state beside it and for tests that install triggers.
func (in *Inbox) DB() *sql.DB { return in.db }

// Close closes the database.
func (in *Inbox) Close() error { return in.db.Close() }

// SetMaxDelta changes the largest supported delta: every delta above n
// answers unsupported_delta from now on (n = 0 supports none; NoDeltaLimit
// supports all).
func (in *Inbox) SetMaxDelta(n int64) { in.maxDelta.Store(n) }

// MaxDelta returns the largest supported delta.
func (in *Inbox) MaxDelta() int64 { return in.maxDelta.Load() }

// SetUnavailable marks the receiver unavailable (every receive answers
// retry and writes nothing) or available again.
func (in *Inbox) SetUnavailable(v bool) { in.unavailable.Store(v) }

// openError is dbError for opening the inbox: a store that is not an
// inbox (not_a_database) names the field "inbox", the place the caller gave.
func openError(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		// Stopped, not refused: no Code (fairrelay.Open does the same).
		return fmt.Errorf("open inbox stopped: %w", err)
	}
	var fe *fairrelay.Error
	if errors.As(err, &fe) && fe.Field != "" {
		return err // named already ("inbox: inbox: …" otherwise)
	}
	if errors.Is(err, sqlfile.ErrNewerSchema) || errors.Is(err, sqlfile.ErrOlderSchema) || errors.Is(err, store.ErrMissing) {
		// The inbox's version, not the database, is at fault: as for a
		// queue store.
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "inbox", Err: err}
	}
	out := dbError("open inbox", err)
	if e, ok := out.(*fairrelay.Error); ok && e.Code == fairrelay.CodeNotDatabase && e.Field == "" {
		named := *e
		named.Field = "inbox"
		return &named
	}
	return out
}

func dbError(op string, err error) error {
	var fe *fairrelay.Error
	if errors.As(err, &fe) {
		return err
	}
	code := fairrelay.CodeDatabase
	switch {
	case errors.Is(err, store.ErrBusy):
		code = fairrelay.CodeBusy
	case errors.Is(err, store.ErrNotDatabase):
		code = fairrelay.CodeNotDatabase
	}
	return &fairrelay.Error{Code: code, Message: op, Err: err}
}

// Delta parses the ledger body of SPEC §3: a JSON object (no duplicate
// keys) whose "delta" is a positive integer literal; other keys are ignored.
// ok is false for any other body (invalid_body). tooLarge is set for a
// positive integer beyond int64: a well-formed body whose delta this
// receiver cannot hold (unsupported_delta).
func Delta(body []byte) (delta int64, ok, tooLarge bool) {
	if !jsontext.ValidText(body) {
		return 0, false, false
	}
	members, err := jsontext.Object(body)
	if err != nil {
		return 0, false, false
	}
	for _, m := range members {
		if m.Key == "delta" {
			return jsontext.PositiveInt(m.Value)
		}
	}
	return 0, false, false
}

// Receive handles one delivery in one transaction (SPEC §3): unavailable →
// retry; a known id → duplicate (same flow, seq, body) or id_conflict;
// seq <= the flow's projected seq → sequence_conflict; seq beyond the next →
// gap; a body that is not a ledger body → invalid_body; delta over
// MaxDelta → unsupported_delta; otherwise the receipt and the effect commit
// together → accepted. An event an operator waived (Waive) answers duplicate where
// the id or seq checks would refuse it. Errors reach the caller and nothing is written (but
// for ErrCommitUnknown, below); they are never turned into an outcome: ErrInvalidInput naming id or flow (they
// break fairrelay.CheckID's rule) or seq (below 1), checked first; database
// errors and ErrBusy.
//
// ctx bounds the reads and writes; once they are done the commit runs to
// its end whatever happens to ctx (a client that hangs up mid-commit does
// not turn a committed receipt into an error), and Receive never reports
// an error for an effect it knows is applied: when the commit itself
// reports one, it reads the receipt back and answers accepted if it is
// there. When that read fails too, or finds no receipt on PostgreSQL after
// a commit that got no answer from the server (its connection lost: the
// server may still be committing), the error has
// fairrelay.ErrCommitUnknown in its chain: the effect may be applied, and
// a redelivery answers duplicate if it is.
func (in *Inbox) Receive(ctx context.Context, d Delivery) (fairrelay.Outcome, error) {
	if err := d.check(); err != nil {
		return "", err
	}
	if in.unavailable.Load() {
		return fairrelay.OutcomeRetry, nil
	}
	// database/sql (and pgx under it) commits on the context the
	// transaction began with, and rolls back when that context is done:
	// begun on ctx, a request cancelled while COMMIT was in flight reported
	// "context canceled" (answered 500) for a receipt the server had
	// committed. The statements below still run on ctx, so a request
	// cancelled before the commit changes nothing.
	tx, err := in.begin(ctx)
	if err != nil {
		return "", dbError("receive: begin transaction", in.translate(err))
	}
	defer tx.Rollback()
	out, err := in.receive(ctx, tx.Tx, d)
	if err != nil {
		return "", receiveError("receive", err, in.translate)
	}
	if out != fairrelay.OutcomeAccepted {
		return out, nil
	}
	faultpoint.Hit(faultpoint.BeforeReceiptCommit)
	if err := in.commitReceipt(ctx, tx, d, "receive"); err != nil {
		return "", err
	}
	faultpoint.Hit(faultpoint.AfterReceiptCommit)
	return out, nil
}

// commitReceipt commits tx, which wrote d's receipt (Receive, and
// ReceiveHeld for a held copy), and answers nil once the receipt is
// stored. A failed commit does not prove that nothing was written (a
// connection lost after the server committed looks the same), so the
// receipt is read back: nil when it is there; else the commit's error,
// nothing written; and when the read back fails too, nobody knows: the
// commit's error with fairrelay.ErrCommitUnknown in its chain (the read's
// error joined), so that no caller says nothing was written, and a
// delivery sent again answers duplicate if it was applied.
func (in *Inbox) commitReceipt(ctx context.Context, tx *sqlitestore.WriteTx, d Delivery, op string) error {
	commit := func() error { return tx.Commit() }
	if in.commitHook != nil {
		commit = func() error {
			err := in.commitHook(ctx, tx.Tx)
			tx.Rollback() // gives the connection back (SQLite's pool has one), for applied
			return err
		}
	}
	err := commit()
	if err == nil {
		return nil
	}
	applied, rerr := in.applied(context.WithoutCancel(ctx), d)
	switch {
	case rerr == nil && applied:
		return nil
	case rerr == nil && !in.commitMayRunOn(err):
		return dbError(op+": commit", in.translate(err))
	}
	// The code is the commit's (not the read's: a busy read must not
	// answer "busy, nothing changed, try again").
	code := fairrelay.CodeOf(dbError("", in.translate(err)))
	why := "its receipt is not there yet, which proves nothing: the connection was lost with the COMMIT sent, and the server may still be committing it"
	if rerr != nil {
		why = "reading its receipt back failed: " + in.translate(rerr).Error()
	}
	return &fairrelay.Error{Code: code, Message: op + ": commit", Err: &commitUnknown{commit: in.translate(err), read: rerr, why: why}}
}

// commitMayRunOn reports whether a commit that answered err may still
// commit after it: on PostgreSQL, when no answer of the server's came (the
// connection was lost once the COMMIT was sent, or the server is shutting
// down, SQLSTATE class 57P), so that a receipt missing right after proves
// nothing (a breaker's report: the read back found none, "nothing was
// written" was answered, and the commit completed three seconds later). A
// server's answer to COMMIT (a deferred constraint, a serialization
// failure) and a SQLite commit's error (in this process: it committed or
// not when it returned) are final.
func (in *Inbox) commitMayRunOn(err error) bool {
	if in.path != "" {
		return false
	}
	var pe *pgconn.PgError
	return !errors.As(err, &pe) || pgstore.ConnectionLost(err)
}

// commitUnknown is the error of a commit that reported an error and may
// have committed all the same: its receipt could not be read back (read,
// the read's error), or was not there yet while the commit may still run
// (read nil). errors.Is finds fairrelay.ErrCommitUnknown, the commit's
// error and the read's.
type commitUnknown struct {
	commit, read error
	why          string
}

func (e *commitUnknown) Error() string {
	return e.commit.Error() + "; whether it committed is unknown (the delivery may have been applied): " + e.why
}
func (e *commitUnknown) Unwrap() []error {
	if e.read == nil {
		return []error{fairrelay.ErrCommitUnknown, e.commit}
	}
	return []error{fairrelay.ErrCommitUnknown, e.commit, e.read}
}

// applied reports whether d's receipt is stored, with its flow, seq and
// body: the effect of d is in the projection, whatever a commit answered.
// It reads on a fresh connection, bounded to 10 seconds.
func (in *Inbox) applied(ctx context.Context, d Delivery) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, same, err := receiptOf(ctx, in.db, d)
	return same, err
}

// rowQuerier is a transaction or the database.
type rowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// receiptOf reads, in db, the receipt of d's event id: found, and same when
// it is d's — the same flow, seq and body (SPEC §3 step 2), the body
// compared by its SHA-256 (a receipt since inbox migration 003) or as it
// is (one written before). Errors: the database's.
func receiptOf(ctx context.Context, db rowQuerier, d Delivery) (found, same bool, err error) {
	var flow string
	var seq int64
	var body, sum []byte
	err = db.QueryRowContext(ctx, q["ReceiptGet"], d.EventID).Scan(&flow, &seq, &body, &sum)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, false, nil
	case err != nil:
		return false, false, fmt.Errorf("ReceiptGet: %w", err)
	}
	if flow != d.Flow || seq != d.Seq {
		return true, false, nil
	}
	if sum == nil {
		return true, bytes.Equal(body, d.Body), nil
	}
	got := sha256.Sum256(d.Body)
	return true, bytes.Equal(sum, got[:]), nil
}

// projectionOf reads, in db, flow's ledger: its last applied seq and its
// total (0 and 0 before its first event). Errors: the database's.
func projectionOf(ctx context.Context, db rowQuerier, flow string) (seq, total int64, err error) {
	err = db.QueryRowContext(ctx, q["ProjectionGet"], flow).Scan(&seq, &total)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, 0, nil
	case err != nil:
		return 0, 0, fmt.Errorf("ProjectionGet: %w", err)
	}
	return seq, total, nil
}

func (in *Inbox) receive(ctx context.Context, tx *sql.Tx, d Delivery) (fairrelay.Outcome, error) {
	if in.lock != "" {
		// Every statement below then sees the receives of this flow and
		// this id that committed before: two deliveries of one event at
		// once answer accepted and duplicate, never an error or a
		// sequence_conflict read from between the other's two writes.
		if _, err := tx.ExecContext(ctx, in.lock, d.Flow, d.EventID); err != nil {
			return "", fmt.Errorf("ReceiveLock: %w", err)
		}
	}
	switch found, same, err := receiptOf(ctx, tx, d); {
	case err != nil:
		return "", err
	case same:
		return fairrelay.OutcomeDuplicate, nil
	case found:
		return refusedUnlessWaived(ctx, tx, d, fairrelay.OutcomeIDConflict)
	}
	// A waiver holds its id as a receipt does (Waive): the id waived at
	// another flow or seq is another event's, unless this one is waived
	// too (an id reused more than once).
	switch ok, err := waivedElsewhere(ctx, tx, d); {
	case err != nil:
		return "", err
	case ok:
		return refusedUnlessWaived(ctx, tx, d, fairrelay.OutcomeIDConflict)
	}
	pseq, total, err := projectionOf(ctx, tx, d.Flow)
	if err != nil {
		return "", err
	}
	switch {
	case d.Seq <= pseq:
		return refusedUnlessWaived(ctx, tx, d, fairrelay.OutcomeSequenceConflict)
	case d.Seq > pseq+1:
		return fairrelay.OutcomeGap, nil
	}
	if in.apply != nil {
		return in.applyOwn(ctx, tx, d, total)
	}
	delta, ok, tooLarge := Delta(d.Body)
	if !ok && !tooLarge {
		return fairrelay.OutcomeInvalidBody, nil
	}
	// A delta beyond int64, over max_delta, or one that would overflow the
	// total is a capability this receiver lacks; the event is untouched.
	if tooLarge || delta > in.maxDelta.Load() || total > math.MaxInt64-delta {
		return fairrelay.OutcomeUnsupportedDelta, nil
	}
	sum := sha256.Sum256(d.Body)
	if _, err := tx.ExecContext(ctx, q["ReceiptInsert"], d.EventID, d.Flow, d.Seq, []byte{}, sum[:], time.Now().UnixMilli()); err != nil {
		return "", fmt.Errorf("ReceiptInsert: %w", err)
	}
	if _, err := tx.ExecContext(ctx, q["ProjectionUpsert"], d.Flow, d.Seq, total+delta); err != nil {
		return "", fmt.Errorf("ProjectionUpsert: %w", err)
	}
	return fairrelay.OutcomeAccepted, nil
}

// applyOwn runs Options.Apply for d, which passed the id and sequence
// checks, and on accepted writes its receipt and moves its flow's seq
// (total, the flow's projected total, unchanged).
func (in *Inbox) applyOwn(ctx context.Context, tx *sql.Tx, d Delivery, total int64) (fairrelay.Outcome, error) {
	out, err := in.callApply(ctx, tx, d)
	switch {
	case err != nil:
		return "", &applyError{err}
	case out == fairrelay.OutcomeInvalidBody, out == fairrelay.OutcomeUnsupportedDelta, out == fairrelay.OutcomeRejected,
		out == fairrelay.OutcomeRetry:
		return out, nil // the caller rolls back: only accepted commits
	case out != fairrelay.OutcomeAccepted:
		return "", &applyError{fmt.Errorf("answered %q for %s: want accepted, invalid_body, unsupported_delta, rejected or retry", out, d.EventID)}
	}
	sum := sha256.Sum256(d.Body)
	if _, err := tx.ExecContext(ctx, q["ReceiptInsert"], d.EventID, d.Flow, d.Seq, []byte{}, sum[:], time.Now().UnixMilli()); err != nil {
		if errors.Is(err, sql.ErrTxDone) {
			// Apply committed or rolled back tx itself: its writes went
			// without the receipt. Apply's misuse, not a database fault.
			return "", &applyError{fmt.Errorf("ended tx itself (it must not commit or roll back the receipt's transaction): %w", err)}
		}
		return "", fmt.Errorf("ReceiptInsert: %w", err)
	}
	if _, err := tx.ExecContext(ctx, q["ProjectionUpsert"], d.Flow, d.Seq, total); err != nil {
		return "", fmt.Errorf("ProjectionUpsert: %w", err)
	}
	return fairrelay.OutcomeAccepted, nil
}

// callApply calls Options.Apply, turning a panic into its error, with the
// panic's value and stack: a panic in a broker consumer's lane ended the
// whole process, and the message, unacked, came back and ended the next
// one (a breaker's report: one poison message stopped every flow), where
// the HTTP handler's server merely dropped the connection.
func (in *Inbox) callApply(ctx context.Context, tx *sql.Tx, d Delivery) (out fairrelay.Outcome, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("panicked on %s: %v\n%s", d.EventID, r, debug.Stack())
		}
	}()
	return in.apply(ctx, tx, d)
}

// refusedUnlessWaived answers refusal for d, or duplicate when an operator
// waived d (Waive): the event its seq was given to, with no effect.
func refusedUnlessWaived(ctx context.Context, tx *sql.Tx, d Delivery, refusal fairrelay.Outcome) (fairrelay.Outcome, error) {
	ok, err := waived(ctx, tx, d)
	switch {
	case err != nil:
		return "", err
	case ok:
		return fairrelay.OutcomeDuplicate, nil
	}
	return refusal, nil
}

// Receipt is one receipt in a snapshot.
type Receipt struct {
	ID   string `json:"id"`
	Flow string `json:"flow"`
	Seq  int64  `json:"seq"`
}

// Projection is one flow's ledger: the last seq applied and the sum of
// deltas.
type Projection struct {
	Flow  string `json:"flow"`
	Seq   int64  `json:"seq"`
	Total int64  `json:"total"`
}

// Snapshot is the inbox read in one read transaction: receipts by flow then
// seq, projection by flow.
type Snapshot struct {
	Receipts   []Receipt    `json:"receipts"`
	Projection []Projection `json:"projection"`
}

// ByFlow returns the projection keyed by flow.
func (s *Snapshot) ByFlow() map[string]Projection {
	m := make(map[string]Projection, len(s.Projection))
	for _, p := range s.Projection {
		m[p.Flow] = p
	}
	return m
}

// Receipts lists up to limit receipts in (flow, seq) order, starting after
// the receipt of flow afterFlow at seq afterSeq ("" and 0: from the first),
// in one read: for paging through an inbox of any size. Errors:
// ErrInvalidInput (field "limit" for limit < 1, "after_seq" negative or
// given without afterFlow, whose seq it is, "after_flow" not valid UTF-8 or
// holding a control character, fairrelay.CheckSearch); database errors.
func (in *Inbox) Receipts(ctx context.Context, afterFlow string, afterSeq int64, limit int) ([]Receipt, error) {
	if err := checkPage(afterFlow, afterSeq, limit); err != nil {
		return nil, err
	}
	rows, err := in.db.QueryContext(ctx, q["ReceiptPage"], afterFlow, afterSeq, limit)
	if err != nil {
		return nil, dbError("inbox receipts", in.translate(err))
	}
	defer rows.Close()
	out := []Receipt{}
	for rows.Next() {
		var r Receipt
		if err := rows.Scan(&r.ID, &r.Flow, &r.Seq); err != nil {
			return nil, dbError("inbox receipts", in.translate(err))
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, dbError("inbox receipts", in.translate(err))
	}
	return out, nil
}

// checkPage checks the paging arguments of Receipts, Held and Waivers.
func checkPage(afterFlow string, afterSeq int64, limit int) error {
	if limit < 1 {
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "limit", Message: "must be at least 1"}
	}
	if afterSeq < 0 {
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "after_seq", Message: fmt.Sprintf("must not be negative, got %d", afterSeq)}
	}
	if afterSeq != 0 && afterFlow == "" {
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "after_seq", Message: `is a seq of afterFlow: give the flow too ("" and 0 start at the first row)`}
	}
	return fairrelay.CheckSearch("after_flow", afterFlow)
}

// Projections lists up to limit flows' ledgers in flow order, starting
// after the flow afterFlow ("": from the first). Errors as Receipts.
func (in *Inbox) Projections(ctx context.Context, afterFlow string, limit int) ([]Projection, error) {
	if limit < 1 {
		return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "limit", Message: "must be at least 1"}
	}
	if err := fairrelay.CheckSearch("after_flow", afterFlow); err != nil {
		return nil, err
	}
	rows, err := in.db.QueryContext(ctx, q["ProjectionPage"], afterFlow, limit)
	if err != nil {
		return nil, dbError("inbox projection", in.translate(err))
	}
	defer rows.Close()
	out := []Projection{}
	for rows.Next() {
		var p Projection
		if err := rows.Scan(&p.Flow, &p.Seq, &p.Total); err != nil {
			return nil, dbError("inbox projection", in.translate(err))
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, dbError("inbox projection", in.translate(err))
	}
	return out, nil
}

// Snapshot reads receipts and projection in one read transaction. Errors:
// database errors.
func (in *Inbox) Snapshot(ctx context.Context) (*Snapshot, error) {
	tx, err := in.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, dbError("inbox snapshot", in.translate(err))
	}
	defer tx.Rollback()
	s := &Snapshot{Receipts: []Receipt{}, Projection: []Projection{}}
	rows, err := tx.QueryContext(ctx, q["ReceiptList"])
	if err != nil {
		return nil, dbError("inbox snapshot", in.translate(err))
	}
	for rows.Next() {
		var r Receipt
		if err := rows.Scan(&r.ID, &r.Flow, &r.Seq); err != nil {
			rows.Close()
			return nil, dbError("inbox snapshot", in.translate(err))
		}
		s.Receipts = append(s.Receipts, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, dbError("inbox snapshot", in.translate(err))
	}
	rows, err = tx.QueryContext(ctx, q["ProjectionList"])
	if err != nil {
		return nil, dbError("inbox snapshot", in.translate(err))
	}
	defer rows.Close()
	for rows.Next() {
		var p Projection
		if err := rows.Scan(&p.Flow, &p.Seq, &p.Total); err != nil {
			return nil, dbError("inbox snapshot", in.translate(err))
		}
		s.Projection = append(s.Projection, p)
	}
	if err := rows.Err(); err != nil {
		return nil, dbError("inbox snapshot", in.translate(err))
	}
	return s, nil
}
