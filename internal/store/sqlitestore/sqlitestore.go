// Package sqlitestore is the embedded SQLite backend of the queue store
// (modernc.org/sqlite, pure Go). It follows SPEC §4: WAL,
// synchronous=FULL, a busy timeout, every write in one BEGIN IMMEDIATE
// transaction. The SQL lives in queries.sql and migrations/*.sql, embedded.
package sqlitestore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/fairrelay/fairrelay/internal/sqlfile"
	"github.com/fairrelay/fairrelay/internal/store"
)

//go:embed queries.sql
var queriesSQL string

//go:embed migrations/*.sql
var migrationsFS embed.FS

var q = sqlfile.Queries(queriesSQL)

// Options tune the SQLite backend.
type Options struct {
	// BusyTimeout is how long a transaction waits for another process's
	// write lock before failing with store.ErrBusy. Defaults to 5s.
	BusyTimeout time.Duration
	// MustExist makes Open fail instead of creating a missing file, for
	// commands that only read or change what is there.
	MustExist bool
}

// Store is the SQLite queue store. It holds two pools on the same file: a
// write pool of one connection whose transactions begin IMMEDIATE, and a read
// pool for snapshots.
type Store struct {
	path  string
	write *sql.DB
	read  *sql.DB
	// stmts holds every query of queries.sql prepared on the write pool's one
	// connection, so a write transaction never parses SQL again (issue 4:
	// parsing was a third of claim's CPU).
	stmts map[string]*sql.Stmt
}

var _ store.Store = (*Store)(nil)

// DSN returns the modernc.org/sqlite data source name that fairrelay uses for
// path: WAL, synchronous=FULL, the busy timeout, and BEGIN IMMEDIATE for
// transactions when immediate is true. Open your own *sql.DB with it to call
// EnqueueTx inside your transaction.
func DSN(path string, busy time.Duration, immediate bool) string {
	v := url.Values{}
	v.Add("_pragma", "busy_timeout("+strconv.FormatInt(busy.Milliseconds(), 10)+")")
	v.Add("_pragma", "journal_mode(WAL)")
	v.Add("_pragma", "synchronous(FULL)")
	v.Add("_pragma", "foreign_keys(ON)")
	if immediate {
		v.Add("_txlock", "immediate")
	}
	u := url.URL{Scheme: "file", Opaque: (&url.URL{Path: path}).EscapedPath(), RawQuery: v.Encode()}
	return u.String()
}

// Open opens (creating if missing) the queue store at path and applies the
// migrations. Errors: the directory is missing; the file is not a SQLite
// database (wraps store.ErrNotDatabase); the database is busy (wraps
// store.ErrBusy).
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if opts.BusyTimeout <= 0 {
		opts.BusyTimeout = 5 * time.Second
	}
	if path == "" {
		return nil, errors.New("path is empty")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if st, err := os.Stat(filepath.Dir(abs)); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("directory %s does not exist", filepath.Dir(abs))
	}
	if opts.MustExist {
		if _, err := os.Stat(abs); err != nil {
			return nil, fmt.Errorf("%s does not exist (create it with fairrelay migrate or enqueue)", abs)
		}
	}
	w, err := sql.Open("sqlite", DSN(abs, opts.BusyTimeout, true))
	if err != nil {
		return nil, err
	}
	// One writer connection per process: SQLite has one writer anyway, and
	// queuing in the pool is cheaper than spinning on SQLITE_BUSY.
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	r, err := sql.Open("sqlite", DSN(abs, opts.BusyTimeout, false))
	if err != nil {
		w.Close()
		return nil, err
	}
	r.SetMaxOpenConns(4)
	s := &Store{path: abs, write: w, read: r}
	if err := RefuseForeign(ctx, r, "fairrelay_inbox_migration", "a fairrelay inbox, not a queue store"); err != nil {
		s.Close()
		return nil, err
	}
	if _, err := s.Migrate(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.prepare(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// prepare prepares every query on the write connection; it runs after the
// migrations, since a statement can only name tables that exist.
func (s *Store) prepare(ctx context.Context) error {
	s.stmts = make(map[string]*sql.Stmt, len(q))
	for name, text := range q {
		st, err := s.write.PrepareContext(ctx, text)
		if err != nil {
			return Translate(fmt.Errorf("prepare %s: %w", name, err))
		}
		s.stmts[name] = st
	}
	return nil
}

// DB returns the write pool, for tests that install triggers.
func (s *Store) DB() *sql.DB { return s.write }

// Close closes the prepared statements and both pools.
func (s *Store) Close() error {
	var errs []error
	for _, st := range s.stmts {
		errs = append(errs, st.Close())
	}
	return errors.Join(append(errs, s.write.Close(), s.read.Close())...)
}

// Migrate applies the embedded migrations that the file lacks, each in its
// own IMMEDIATE transaction, and returns the versions applied.
func (s *Store) Migrate(ctx context.Context) ([]int, error) {
	return migrate(ctx, s.write, migrationsFS)
}

func migrate(ctx context.Context, db *sql.DB, fsys embed.FS) ([]int, error) {
	migs, err := sqlfile.Migrations(fsys, "migrations")
	if err != nil {
		return nil, err
	}
	v, err := sqlfile.Apply(ctx, db, migs, "")
	return v, Translate(err)
}

// RefuseForeign fails with store.ErrNotDatabase when the file holds table,
// the mark of another kind of fairrelay store (a queue given as an inbox or
// the reverse), so that opening it neither mixes the two schemas nor passes
// as an empty store.
func RefuseForeign(ctx context.Context, db *sql.DB, table, what string) error {
	var n int
	err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = $1`, table).Scan(&n)
	if err != nil {
		return Translate(fmt.Errorf("read schema: %w", err))
	}
	if n > 0 {
		return fmt.Errorf("%w: the file holds %s", store.ErrNotDatabase, what)
	}
	return nil
}

// Translate maps SQLite result codes to the store's sentinels, keeping the
// original error in the chain. It is the one place where driver errors are
// interpreted (STYLE §7).
func Translate(err error) error {
	if err == nil {
		return nil
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return fmt.Errorf("%w: %w", store.ErrBusy, err)
		case sqlite3.SQLITE_NOTADB:
			return fmt.Errorf("%w: %w", store.ErrNotDatabase, err)
		}
	}
	return err
}

// Begin starts an IMMEDIATE transaction on the write connection. SQLite has
// one writer: every lane shares it.
func (s *Store) Begin(ctx context.Context, _ store.Lane) (store.Tx, error) {
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return nil, Translate(fmt.Errorf("begin transaction: %w", err))
	}
	return &Tx{q: tx, tx: tx, prepared: s.stmts}, nil
}

// BeginRead starts a deferred read transaction on the read pool; SQLite's WAL
// gives it a stable view from its first read.
func (s *Store) BeginRead(ctx context.Context) (store.Tx, error) {
	tx, err := s.read.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, Translate(fmt.Errorf("begin read transaction: %w", err))
	}
	return &Tx{q: tx, tx: tx}, nil
}

// Wrap accepts a *sql.Tx the caller opened on the same SQLite file (use DSN
// with immediate=true for its pool, or the first write may fail busy).
func (s *Store) Wrap(ctx context.Context, tx any, _ store.Lane) (store.Tx, error) {
	t, ok := tx.(*sql.Tx)
	if !ok || t == nil {
		return nil, fmt.Errorf("the SQLite backend takes a *sql.Tx, not %T", tx)
	}
	return &Tx{q: t}, nil
}

type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Tx is a transaction on the SQLite store. tx is nil for a wrapped caller
// transaction, whose Commit and Rollback belong to the caller. prepared is
// set for write transactions only: the statements live on the write pool,
// and database/sql refuses them in a transaction of another pool.
type Tx struct {
	q        querier
	tx       *sql.Tx
	prepared map[string]*sql.Stmt
	bound    map[string]*sql.Stmt // prepared statements bound to tx, by name
}

// prep returns query name's prepared statement bound to this transaction,
// or nil when the transaction has none (read and wrapped transactions).
func (t *Tx) prep(ctx context.Context, name string) *sql.Stmt {
	if st, ok := t.bound[name]; ok {
		return st
	}
	p, ok := t.prepared[name]
	if !ok {
		return nil
	}
	// Reuses the statement already prepared on the write connection.
	st := t.tx.StmtContext(ctx, p)
	if t.bound == nil {
		t.bound = make(map[string]*sql.Stmt)
	}
	t.bound[name] = st
	return st
}

func (t *Tx) execNamed(ctx context.Context, name string, args ...any) (sql.Result, error) {
	if st := t.prep(ctx, name); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return t.q.ExecContext(ctx, q[name], args...)
}

func (t *Tx) queryNamed(ctx context.Context, name string, args ...any) (*sql.Rows, error) {
	if st := t.prep(ctx, name); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return t.q.QueryContext(ctx, q[name], args...)
}

func (t *Tx) queryRowNamed(ctx context.Context, name string, args ...any) *sql.Row {
	if st := t.prep(ctx, name); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return t.q.QueryRowContext(ctx, q[name], args...)
}

func (t *Tx) Commit(ctx context.Context) error {
	if t.tx == nil {
		return nil
	}
	return Translate(t.tx.Commit())
}

func (t *Tx) Rollback(ctx context.Context) error {
	if t.tx == nil {
		return nil
	}
	err := t.tx.Rollback()
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return Translate(err)
}

func (t *Tx) exec(ctx context.Context, name string, args ...any) error {
	_, err := t.execNamed(ctx, name, args...)
	if err != nil {
		return Translate(fmt.Errorf("%s: %w", name, err))
	}
	return nil
}

func (t *Tx) ClockGet(ctx context.Context) (store.Clock, error) {
	var c store.Clock
	err := t.queryRowNamed(ctx, "ClockGet").Scan(&c.Tick, &c.Ticket, &c.Flows)
	if err != nil {
		return c, Translate(fmt.Errorf("ClockGet: %w", err))
	}
	return c, nil
}

func (t *Tx) ClockSet(ctx context.Context, c store.Clock) error {
	return t.exec(ctx, "ClockSet", c.Tick, c.Ticket, c.Flows)
}

type scanner interface{ Scan(dest ...any) error }

func scanFlow(r scanner) (store.FlowRow, error) {
	var f store.FlowRow
	var runnable int64
	var wait sql.NullInt64
	err := r.Scan(&f.Flow, &f.Ord, &f.Seq, &f.Served, &f.HeadSeq, &runnable, &wait)
	f.Runnable = runnable != 0
	if wait.Valid {
		v := wait.Int64
		f.WaitUntil = &v
	}
	return f, err
}

func (t *Tx) FlowGet(ctx context.Context, flow string) (*store.FlowRow, error) {
	f, err := scanFlow(t.queryRowNamed(ctx, "FlowGet", flow))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, Translate(fmt.Errorf("FlowGet: %w", err))
	}
	return &f, nil
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func (t *Tx) FlowInsert(ctx context.Context, f store.FlowRow) error {
	return t.exec(ctx, "FlowInsert", f.Flow, f.Ord, f.Seq, f.Served, f.HeadSeq, boolInt(f.Runnable), f.WaitUntil)
}

func (t *Tx) FlowUpdate(ctx context.Context, f store.FlowRow) error {
	return t.exec(ctx, "FlowUpdate", f.Seq, f.Served, f.HeadSeq, boolInt(f.Runnable), f.WaitUntil, f.Flow)
}

func (t *Tx) flows(ctx context.Context, name string, args ...any) ([]store.FlowRow, error) {
	rows, err := t.queryNamed(ctx, name, args...)
	if err != nil {
		return nil, Translate(fmt.Errorf("%s: %w", name, err))
	}
	defer rows.Close()
	var out []store.FlowRow
	for rows.Next() {
		f, err := scanFlow(rows)
		if err != nil {
			return nil, Translate(fmt.Errorf("%s: %w", name, err))
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, Translate(fmt.Errorf("%s: %w", name, err))
	}
	return out, nil
}

func (t *Tx) FlowListDue(ctx context.Context, at int64, limit int) ([]store.FlowRow, error) {
	return t.flows(ctx, "FlowListDue", at, limit)
}

func (t *Tx) FlowPickRunnable(ctx context.Context, order store.Order, limit int) ([]store.FlowRow, error) {
	if order == store.OrderCreation {
		return t.flows(ctx, "FlowPickRunnableFair", limit)
	}
	return t.flows(ctx, "FlowPickRunnableSeed", limit)
}

func (t *Tx) FlowList(ctx context.Context, after string, limit int) ([]store.FlowRow, error) {
	return t.flows(ctx, "FlowList", after, limit)
}

func scanEvent(r scanner) (store.EventRow, error) {
	var e store.EventRow
	var reason sql.NullString
	err := r.Scan(&e.ID, &e.Flow, &e.Seq, &e.Body, &e.State, &e.Generation, &e.Attempts, &e.LifetimeAttempts, &reason, &e.NextAt, &e.LeaseUntil, &e.EnqueuedAt)
	e.Reason = reason.String
	return e, err
}

func (t *Tx) event(ctx context.Context, name string, args ...any) (*store.EventRow, error) {
	e, err := scanEvent(t.queryRowNamed(ctx, name, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, Translate(fmt.Errorf("%s: %w", name, err))
	}
	return &e, nil
}

func (t *Tx) EventGet(ctx context.Context, id string) (*store.EventRow, error) {
	return t.event(ctx, "EventGet", id)
}

func (t *Tx) EventGetBySeq(ctx context.Context, flow string, seq int64) (*store.EventRow, error) {
	return t.event(ctx, "EventGetBySeq", flow, seq)
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func (t *Tx) EventInsert(ctx context.Context, e store.EventRow) error {
	return t.exec(ctx, "EventInsert", e.ID, e.Flow, e.Seq, e.Body, e.State, e.Generation, e.Attempts, e.LifetimeAttempts, nullString(e.Reason), e.NextAt, e.LeaseUntil, e.EnqueuedAt)
}

func (t *Tx) EventUpdate(ctx context.Context, e store.EventRow) error {
	return t.exec(ctx, "EventUpdate", e.State, e.Generation, e.Attempts, e.LifetimeAttempts, nullString(e.Reason), e.NextAt, e.LeaseUntil, e.ID)
}

func (t *Tx) EventList(ctx context.Context, state string, afterFlow string, afterSeq int64, limit int) ([]store.EventRow, error) {
	name, args := "EventList", []any{afterFlow, afterSeq, limit}
	switch state {
	case "":
	case store.StateQuarantined:
		name = "EventListQuarantined"
	default:
		name, args = "EventListState", []any{state, afterFlow, afterSeq, limit}
	}
	rows, err := t.queryNamed(ctx, name, args...)
	if err != nil {
		return nil, Translate(fmt.Errorf("%s: %w", name, err))
	}
	defer rows.Close()
	var out []store.EventRow
	for rows.Next() {
		e, err := scanEvent(rows)
		if err != nil {
			return nil, Translate(fmt.Errorf("%s: %w", name, err))
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, Translate(fmt.Errorf("%s: %w", name, err))
	}
	return out, nil
}

func (t *Tx) AuditInsert(ctx context.Context, a store.AuditRow) error {
	return t.exec(ctx, "AuditInsert", a.EventID, a.Action, a.Reason, a.Operator, a.PreviousReason, a.Generation, a.At)
}

func (t *Tx) AuditList(ctx context.Context, after int64, limit int) ([]store.AuditRow, error) {
	rows, err := t.queryNamed(ctx, "AuditList", after, limit)
	if err != nil {
		return nil, Translate(fmt.Errorf("AuditList: %w", err))
	}
	defer rows.Close()
	var out []store.AuditRow
	for rows.Next() {
		var a store.AuditRow
		var op, prev sql.NullString
		if err := rows.Scan(&a.No, &a.EventID, &a.Action, &a.Reason, &op, &prev, &a.Generation, &a.At); err != nil {
			return nil, Translate(fmt.Errorf("AuditList: %w", err))
		}
		if op.Valid {
			a.Operator = &op.String
		}
		if prev.Valid {
			a.PreviousReason = &prev.String
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, Translate(fmt.Errorf("AuditList: %w", err))
	}
	return out, nil
}
