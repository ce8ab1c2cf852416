// Package sqlitestore is the embedded SQLite backend of the queue store
// (modernc.org/sqlite, pure Go). It follows SPEC §4: WAL,
// synchronous=FULL, a busy timeout, every write in one BEGIN IMMEDIATE
// transaction. The SQL lives in queries.sql and migrations/*.sql, embedded.
// SQLite has one writer at a time, so every lane shares the file's write
// lock and a transaction's reads and writes run statement by statement, in
// process: nothing is gained by sending them together.
package sqlitestore

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/fairrelay/fairrelay/internal/errs"
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
	// Entry is the entry rule ("seed" or "fair") the store is opened under:
	// recorded when the store has none yet, else it must match
	// (*store.EntryMismatchError). Defaults to "fair".
	Entry string
	// AdoptEntry opens a store that records a rule under that rule,
	// whatever Entry says; a store without one records Entry.
	AdoptEntry bool
	// ReadOnly makes Open write nothing, for commands that only read: the
	// store must exist (as MustExist) and be fully migrated, with its entry
	// rule recorded; otherwise Open fails with sqlfile.ErrOlderSchema
	// (wrapped) instead of migrating it. No checkpointer runs.
	ReadOnly bool
}

// Store is the SQLite queue store. It holds two pools on the same file: a
// write pool of one connection whose transactions begin IMMEDIATE, and a read
// pool for snapshots.
type Store struct {
	path string
	// migrated: the migrations Open applied (Migrated).
	migrated []int
	// file identifies the file at path when the store was opened
	// (beginWrite).
	file os.FileInfo
	// pruneLogFrames is how long the log may be when a prune transaction
	// begins (checkpointBeside); pruneLogFrames unless a test lowers it.
	pruneLogFrames int64
	// afterCheckpointBeside, when set (tests), runs in checkpointBeside
	// between the checkpoints on a read connection and the flush.
	afterCheckpointBeside func()
	// beforeApart, when set (tests), runs before a prune takes apart.
	beforeApart func()
	// pruneHold bounds a batched prune transaction's deletes (Prune);
	// pruneHold unless a test changes it.
	pruneHold time.Duration
	// afterPruneCommit, nil but in tests, runs after a prune's commit,
	// before the vacuum that follows it.
	afterPruneCommit func()
	// busy is how long a write waits for another process's writer
	// (Options.BusyTimeout; beginImmediate).
	busy time.Duration
	// lockBusy, when set (tests), is called each time beginImmediate
	// found another connection holding the writer and is about to wait.
	lockBusy func()
	write    *sql.DB
	read     *sql.DB
	entry    string
	// stmts holds every query of queries.sql prepared on the write pool's one
	// connection, so a write transaction never parses SQL again (parsing
	// was a third of a claim's CPU).
	stmts map[string]*sql.Stmt

	// watches are the change watches of Changes; Close ends them.
	watches store.Watches
	// commits counts the commits of this store's write connection, so
	// that a change watch tells them from other processes' (changes.go).
	commits atomic.Int64

	// apart keeps this process's checkpoints (the checkpointer's and
	// checkpointBeside's) and its prune transactions apart (lazyWrite),
	// so that a prune's commit never writes the log while a checkpoint
	// flushes the disk (checkpointer.go).
	apart sync.Mutex
	// stopCheckpoints ends the checkpointer (checkpointer.go); Close
	// calls it.
	stopCheckpoints func()
}

var _ store.Store = (*Store)(nil)

// DSN returns the modernc.org/sqlite data source name that fairrelay uses for
// path: WAL, synchronous=FULL, the busy timeout, and BEGIN IMMEDIATE for
// transactions when immediate is true. Open your own *sql.DB with it to call
// EnqueueTx inside your transaction.
func DSN(path string, busy time.Duration, immediate bool) string {
	v := url.Values{}
	v.Add("_pragma", busyPragma(busy))
	v.Add("_pragma", "journal_mode(WAL)")
	v.Add("_pragma", "synchronous(FULL)")
	v.Add("_pragma", "foreign_keys(ON)")
	if immediate {
		v.Add("_txlock", "immediate")
	}
	return fileURI(path, v.Encode())
}

// busyPragma is the busy_timeout pragma of a DSN for busy, in whole
// milliseconds rounded up (store.BusyMillis).
func busyPragma(busy time.Duration) string {
	return "busy_timeout(" + strconv.FormatInt(store.BusyMillis(busy), 10) + ")"
}

// fileURI is the file: URI of path with query. A path that begins with two
// slashes would read as file://AUTHORITY/… (a breaker: "//tmp/q.db" failed
// with "invalid uri authority"); POSIX takes "//x" as "/x", and so does
// this.
func fileURI(path, query string) string {
	if strings.HasPrefix(path, "//") {
		path = "/" + strings.TrimLeft(path, "/")
	}
	u := url.URL{Scheme: "file", Opaque: (&url.URL{Path: path}).EscapedPath(), RawQuery: query}
	return u.String()
}

// CreateFile makes path an empty file when nothing is there (SQLite takes an
// empty file for an empty database), so that a store's connections can all
// open it with ExistingOnly: none of them, opened later as a pool or a
// watch opens them, can make the file again once it was removed or
// renamed underneath the process (a breaker's report: the watch of
// Changes re-created a removed store as an empty database and then
// reported itself healthy).
func CreateFile(path string) error {
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		return nil // there (a file this process may not write, too): left as it is
	}
	// Not O_EXCL: a symbolic link to a file not made yet is followed, as
	// SQLite follows it, and a file another process made meanwhile is
	// opened, not truncated.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// EnsureWAL puts the database at path, which exists, in WAL mode before the
// store's connections open it: each of those asks for WAL mode as it opens
// (DSN's journal_mode pragma), and on a new file that switch takes the
// file's lock in a way SQLite does not wait for — the busy timeout is not
// consulted — so of several processes opening one new store at once, some
// failed at once with "database is locked" (a breaker's report: 8 of 40
// opens of a new inbox by four processes started together). Here the
// switch is tried again on SQLITE_BUSY, every few milliseconds, for up to
// busy; then the store's connections find WAL mode set, which takes no such
// lock. A file that keeps another mode (a file system without shared
// memory) is left to the connections, as before. Errors: ErrBusy past busy,
// and the database's own, translated.
func EnsureWAL(ctx context.Context, path string, busy time.Duration) error {
	db, err := sql.Open("sqlite", ExistingOnly(fileURI(path, url.Values{"_pragma": {busyPragma(busy)}}.Encode())))
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	deadline := time.Now().Add(busy)
	for wait := time.Millisecond; ; wait = min(2*wait, 20*time.Millisecond) {
		var mode string
		err := db.QueryRowContext(ctx, "PRAGMA journal_mode = WAL").Scan(&mode)
		if err == nil {
			return nil
		}
		err = Translate(fmt.Errorf("set WAL mode: %w", err))
		if !errors.Is(err, store.ErrBusy) || time.Now().Add(wait).After(deadline) {
			return err
		}
		// Waiting for another process's lock, as SQLite's busy handler
		// would have.
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// ExistingOnly is dsn (a file: URI of DSN or writeDSN) opening the file
// only if it exists, for reading and writing (mode=rw): SQLITE_CANTOPEN
// when it does not, where the default mode would create it.
func ExistingOnly(dsn string) string { return dsn + "&mode=rw" }

// ReadOnlyDSN is the data source name of a read-only connection to path
// that sets no pragma but the busy timeout: it changes nothing in the file
// (not its journal mode, not an empty file's size, and it does not
// checkpoint a log it finds when it closes).
func ReadOnlyDSN(path string, busy time.Duration) string {
	v := url.Values{}
	v.Add("mode", "ro")
	v.Add("_pragma", busyPragma(busy))
	return fileURI(path, v.Encode())
}

// HasTables reports, on a read-only connection (ReadOnlyDSN), whether the
// SQLite database at path holds any table of its own (sqlite_ internals
// aside), and whether mark is among them: a database with tables and no
// mark is another application's data; one with mark is a fairrelay store of
// mark's kind (mark is its migration table), complete or still being made
// by another process, its migrations committing one by one; an empty
// database (or one a process has begun a store in, its first migration not
// yet committed) holds none. Errors: the database's, translated (a file
// that is not a database among them).
func HasTables(ctx context.Context, path string, busy time.Duration, mark string) (tables, marked bool, err error) {
	db, err := sql.Open("sqlite", ReadOnlyDSN(path, busy))
	if err != nil {
		return false, false, err
	}
	defer db.Close()
	var n, m int
	if err := db.QueryRowContext(ctx, `SELECT count(*), count(*) FILTER (WHERE name = $1) FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\_%' ESCAPE '\'`, mark).Scan(&n, &m); err != nil {
		return false, false, Translate(fmt.Errorf("read schema: %w", err))
	}
	return n > 0, m > 0, nil
}

// Probe checks, on a read-only connection (ReadOnlyDSN), that the existing
// file at path is a fairrelay store of the kind whose schema holds table:
// not one holding foreign (the mark of the other kind, described by
// foreignWhat), and holding table (else missingWhy). For opens that must
// not create a store: a file that is not one is refused before any
// connection that would switch it to WAL mode or write its first page.
// Errors: store.ErrNotDatabase (wrapped) for another kind of store or a
// file that is not a database; store.ErrMissing (wrapped) for a database
// without table; the database's, translated.
func Probe(ctx context.Context, path string, busy time.Duration, table, foreign, foreignWhat, missingWhy string) error {
	db, err := sql.Open("sqlite", ReadOnlyDSN(path, busy))
	if err != nil {
		return err
	}
	defer db.Close()
	if err := RefuseForeign(ctx, db, foreign, foreignWhat); err != nil {
		return err
	}
	return RequireTable(ctx, db, table, missingWhy)
}

// Open opens (creating if missing) the queue store at path and applies the
// migrations. Errors: the directory is missing; the file is not a SQLite
// database (wraps store.ErrNotDatabase); the database is busy (wraps
// store.ErrBusy); a missing file under MustExist (wraps store.ErrMissing);
// a store of the other entry rule (*store.EntryMismatchError).
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if opts.BusyTimeout <= 0 {
		opts.BusyTimeout = store.DefaultBusyTimeout
	}
	if opts.Entry == "" {
		opts.Entry = "fair"
	}
	if path == "" {
		return nil, errors.New("path is empty")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if st, err := os.Stat(filepath.Dir(abs)); err != nil {
		return nil, fmt.Errorf("directory %s does not exist", filepath.Dir(abs))
	} else if !st.IsDir() {
		return nil, fmt.Errorf("%s is a file, not a directory", filepath.Dir(abs))
	}
	if st, err := os.Stat(abs); err == nil && st.IsDir() {
		// SQLite's own answer, "disk I/O error", does not say what is
		// wrong (a breaker's sweep).
		return nil, fmt.Errorf("%s is a directory, not a store's file", abs)
	}
	opts.MustExist = opts.MustExist || opts.ReadOnly
	if opts.MustExist {
		if _, err := os.Stat(abs); err != nil {
			return nil, fmt.Errorf("%w: %s does not exist (create it with fairrelay migrate or enqueue)", store.ErrMissing, abs)
		}
		// A file that exists but holds no store (empty, or another
		// application's database) is missing too, and is refused before
		// the connections below, which would switch it to WAL mode (or
		// give an empty file its first page): a command that must not
		// create a store changes nothing in it (as on PostgreSQL).
		if err := Probe(ctx, abs, opts.BusyTimeout, "fairrelay_migration", "fairrelay_inbox_migration", "a fairrelay inbox, not a queue store",
			abs+" holds no fairrelay tables (create the store in it with fairrelay migrate)"); err != nil {
			return nil, err
		}
	}
	if !opts.MustExist {
		if err := CreateFile(abs); err != nil {
			return nil, err
		}
	}
	if !opts.ReadOnly {
		if err := EnsureWAL(ctx, abs, opts.BusyTimeout); err != nil {
			return nil, err
		}
	}
	wdsn, rdsn := ExistingOnly(writeDSN(abs, opts.BusyTimeout)), ExistingOnly(DSN(abs, opts.BusyTimeout, false))
	if opts.ReadOnly {
		wdsn, rdsn = ReadOnlyDSN(abs, opts.BusyTimeout), ReadOnlyDSN(abs, opts.BusyTimeout)
	}
	w, err := sql.Open("sqlite", wdsn)
	if err != nil {
		return nil, err
	}
	// One writer connection per process: SQLite has one writer anyway, and
	// queuing in the pool is cheaper than spinning on SQLITE_BUSY.
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	r, err := sql.Open("sqlite", rdsn)
	if err != nil {
		w.Close()
		return nil, err
	}
	r.SetMaxOpenConns(4)
	s := &Store{path: abs, write: w, read: r, pruneLogFrames: pruneLogFrames, pruneHold: pruneHold, busy: opts.BusyTimeout}
	if !opts.MustExist { // else Probe checked it
		if err := RefuseForeign(ctx, r, "fairrelay_inbox_migration", "a fairrelay inbox, not a queue store"); err != nil {
			s.Close()
			return nil, err
		}
	}
	// The entry rule before anything writes (SPEC §7: opening under the
	// other rule changes nothing): a store of an older version would
	// otherwise be migrated first, and the older relays still using it
	// refuse a store migrated by a newer fairrelay.
	if !opts.AdoptEntry {
		var stored sql.NullString
		// No settings table or column yet (an older store): settle below
		// records or checks the rule once the store is migrated.
		if err := r.QueryRowContext(ctx, q["SettingsGet"]).Scan(&stored); err == nil && stored.Valid && stored.String != opts.Entry {
			s.Close()
			return nil, &store.EntryMismatchError{Stored: stored.String, Asked: opts.Entry}
		}
	}
	if opts.ReadOnly {
		if err := s.checkCurrent(ctx, opts.Entry, opts.AdoptEntry); err != nil {
			s.Close()
			return nil, err
		}
		if err := s.prepare(ctx); err != nil {
			s.Close()
			return nil, err
		}
		return s, nil
	}
	if err := s.incrementalVacuum(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if s.migrated, err = s.Migrate(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.settle(ctx, opts.Entry, opts.AdoptEntry); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.ensureIndexes(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.prepare(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if s.file, err = os.Stat(abs); err != nil {
		s.Close()
		return nil, err
	}
	s.stopCheckpoints = startCheckpointer(r, &s.commits, &s.apart, nil)
	return s, nil
}

// checkCurrent is Open's check under ReadOnly, which writes nothing: every
// migration applied and the entry rule recorded (sqlfile.ErrOlderSchema,
// wrapped, otherwise), the rule matching entry unless adopt.
func (s *Store) checkCurrent(ctx context.Context, entry string, adopt bool) error {
	migs, err := sqlfile.Migrations(migrationsFS, "migrations")
	if err != nil {
		return err
	}
	if err := sqlfile.Check(ctx, s.read, "fairrelay_migration", migs); err != nil {
		return Translate(err)
	}
	var stored sql.NullString
	if err := s.read.QueryRowContext(ctx, q["SettingsGet"]).Scan(&stored); err != nil {
		return Translate(fmt.Errorf("read settings: %w", err))
	}
	return s.adoptStored(stored, entry, adopt)
}

// adoptStored sets s.entry from the rule the store records (stored), which
// must be entry unless adopt; a store that records none is older than this
// build (sqlfile.ErrOlderSchema, wrapped).
func (s *Store) adoptStored(stored sql.NullString, entry string, adopt bool) error {
	if !stored.Valid {
		return fmt.Errorf("%w: it records no entry rule yet; run fairrelay migrate on it first (this command writes nothing)", sqlfile.ErrOlderSchema)
	}
	if adopt {
		entry = stored.String
	}
	if stored.String != entry {
		return &store.EntryMismatchError{Stored: stored.String, Asked: entry}
	}
	s.entry = entry
	return nil
}

// otherIndex names the runnable index a store of the given entry rule does
// not use.
var otherIndex = map[string]string{"seed": "flow_runnable_fair", "fair": "flow_runnable_seed"}

// settle records the entry rule when the store has none yet, dropping the
// runnable index the rule does not use (keeping both cost ~15-20 % per
// claim step at 100 000 flows), or checks it against the stored one.
func (s *Store) settle(ctx context.Context, entry string, adopt bool) error {
	if _, ok := otherIndex[entry]; !ok {
		return fmt.Errorf("entry rule %q: want seed or fair", entry)
	}
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return Translate(fmt.Errorf("begin transaction: %w", err))
	}
	defer tx.Rollback()
	var stored sql.NullString
	if err := tx.QueryRowContext(ctx, q["SettingsGet"]).Scan(&stored); err != nil {
		return Translate(fmt.Errorf("read settings: %w", err))
	}
	if stored.Valid {
		return s.adoptStored(stored, entry, adopt)
	}
	if _, err := tx.ExecContext(ctx, q["SettingsSetEntry"], entry); err != nil {
		return Translate(fmt.Errorf("record the entry rule: %w", err))
	}
	// An index name cannot be a bind parameter; it comes from otherIndex.
	if _, err := tx.ExecContext(ctx, "DROP INDEX IF EXISTS "+otherIndex[entry]); err != nil {
		return Translate(fmt.Errorf("drop the unused runnable index: %w", err))
	}
	if err := tx.Commit(); err != nil {
		return Translate(fmt.Errorf("record the entry rule: %w", err))
	}
	s.entry = entry
	return nil
}

// incrementalVacuum makes a new, empty file keep free pages for incremental
// vacuum (auto_vacuum=INCREMENTAL), so that Prune can hand the pages of
// deleted events back to the file system. SQLite fixes the mode when the
// first table is created: a store created by an older fairrelay keeps
// reusing freed pages for new rows instead (VACUUM converts it; see
// docs/operations.md).
func (s *Store) incrementalVacuum(ctx context.Context) error {
	var tables int
	if err := s.write.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master`).Scan(&tables); err != nil {
		return Translate(fmt.Errorf("read schema: %w", err))
	}
	if tables > 0 {
		return nil
	}
	// The connection has already written the file's first page (WAL
	// mode), so the new mode takes effect only through a VACUUM — cheap
	// on a file with no tables.
	if _, err := s.write.ExecContext(ctx, "PRAGMA auto_vacuum = INCREMENTAL"); err != nil {
		return Translate(fmt.Errorf("auto_vacuum: %w", err))
	}
	if _, err := s.write.ExecContext(ctx, "VACUUM"); err != nil {
		return Translate(fmt.Errorf("vacuum: %w", err))
	}
	return nil
}

// dispatchIndexes are the indexes of the dispatch order under each entry
// rule (SPEC §2 step 3, §7, §8): the runnable index of flows that are their
// own group, the member index of each group's runnable flows, and the group
// runnable index. A store keeps only its rule's (keeping both pairs cost
// ~15-20 % per claim step at 100 000 flows).
var dispatchIndexes = map[string][]string{
	"seed": {
		"flow_runnable_seed ON flow (served, flow_id) WHERE runnable = 1 AND group_id IS NULL",
		"flow_member_seed ON flow (group_id, served, flow_id) WHERE runnable = 1 AND group_id IS NOT NULL",
		"grp_runnable_seed ON grp (served, group_id) WHERE runnable_flows > 0",
	},
	"fair": {
		"flow_runnable_fair ON flow (served, ord) WHERE runnable = 1 AND group_id IS NULL",
		"flow_member_fair ON flow (group_id, served, ord) WHERE runnable = 1 AND group_id IS NOT NULL",
		"grp_runnable_fair ON grp (served, ord) WHERE runnable_flows > 0",
	},
}

// ensureIndexes creates the dispatch indexes of the store's entry rule that
// it lacks (a new store, or one migration 004 rebuilt them for), in one
// write transaction; an open of a store that has them writes nothing.
func (s *Store) ensureIndexes(ctx context.Context) error {
	var missing []string
	for _, def := range dispatchIndexes[s.entry] {
		name, _, _ := strings.Cut(def, " ")
		var n int
		if err := s.read.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = ?`, name).Scan(&n); err != nil {
			return Translate(fmt.Errorf("read schema: %w", err))
		}
		if n == 0 {
			missing = append(missing, def)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return Translate(fmt.Errorf("begin transaction: %w", err))
	}
	defer tx.Rollback()
	for _, def := range missing {
		// The definitions are constants of this file, not input.
		if _, err := tx.ExecContext(ctx, "CREATE INDEX IF NOT EXISTS "+def); err != nil {
			return Translate(fmt.Errorf("create index: %w", err))
		}
	}
	return Translate(tx.Commit())
}

// prepare prepares every query on the write connection; it runs after the
// migrations, since a statement can only name tables that exist. The pick
// of the other entry rule names an index the store no longer has.
func (s *Store) prepare(ctx context.Context) error {
	s.stmts = make(map[string]*sql.Stmt, len(q))
	other := map[string]string{"seed": "Fair", "fair": "Seed"}[s.entry]
	for name, text := range q {
		if name == "FlowPick"+other || name == "Members"+other || name == "GroupPick"+other || name == "GroupPickFirst"+other {
			continue
		}
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

// Entry is the entry rule the store records.
func (s *Store) Entry() string { return s.entry }

// ConcurrentWriters reports false: SQLite has one writer at a time.
func (s *Store) ConcurrentWriters() bool { return false }

// Close ends the change watches (Changes), closes the prepared statements
// and both pools.
func (s *Store) Close() error {
	if s.stopCheckpoints != nil {
		s.stopCheckpoints()
	}
	s.watches.Close()
	var closeErrs []error
	for _, st := range s.stmts {
		closeErrs = append(closeErrs, st.Close())
	}
	return errs.Join(append(closeErrs, s.write.Close(), s.read.Close())...)
}

// Migrated returns the versions of the migrations Open applied, in order
// (nil: none).
func (s *Store) Migrated() []int { return s.migrated }

// Migrate applies the embedded migrations that the file lacks, each in its
// own IMMEDIATE transaction, and returns the versions applied.
func (s *Store) Migrate(ctx context.Context) ([]int, error) {
	migs, err := sqlfile.Migrations(migrationsFS, "migrations")
	if err != nil {
		return nil, err
	}
	v, err := sqlfile.Apply(ctx, s.write, migs, "")
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
		return store.OtherKind("the file holds %s", what)
	}
	return nil
}

// RequireTable fails with store.ErrMissing and the message why unless the
// schema of db has the table: the check of Options.MustExist on a file
// that exists. Errors: a read of the schema fails (translated).
func RequireTable(ctx context.Context, db *sql.DB, table, why string) error {
	var n int
	err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = $1`, table).Scan(&n)
	if err != nil {
		return Translate(fmt.Errorf("read schema: %w", err))
	}
	if n == 0 {
		return fmt.Errorf("%w: %s", store.ErrMissing, why)
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
	if store.IsClosedDB(err) {
		return fmt.Errorf("%w: %w", store.ErrClosed, err)
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return fmt.Errorf("%w: %w", store.ErrBusy, err)
		case sqlite3.SQLITE_NOTADB:
			return fmt.Errorf("%w: %w", store.ErrNotDatabase, err)
		case sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR:
			// Not the caller's input: an open on a full disk was
			// invalid_input and a daemon exited at start (an SRE's
			// drill).
			return fmt.Errorf("%w: %w", store.ErrStorage, err)
		case sqlite3.SQLITE_ERROR:
			// A table of the store gone since it was opened (dropped by
			// hand): the database no longer holds the store, as
			// PostgreSQL's undefined_table says (pgstore.Translate), so
			// that a receiver's readiness and answers say not_a_database
			// on both backends.
			if strings.Contains(se.Error(), "no such table") {
				return fmt.Errorf("%w: %w", store.ErrNotDatabase, err)
			}
		}
	}
	return err
}

// ErrFileReplaced is returned (wrapped) by every write of a store whose
// file was removed or replaced since the store was opened: the process would
// go on writing to a file no other process sees (an unlinked inode), and
// what it wrote would be gone at its next start — a relay's settles, an
// inbox's receipts and effects, acked meanwhile. Restart the process.
var ErrFileReplaced = errors.New("the store's file was removed or replaced since it was opened")

// CheckFile returns ErrFileReplaced (wrapped, naming path) unless the file
// at path is still the one identified by file (os.SameFile); nil when file
// is nil (a store opened before its file existed checks nothing).
func CheckFile(path string, file os.FileInfo) error {
	if file == nil {
		return nil
	}
	now, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %s no longer exists; restart the process", ErrFileReplaced, path)
	}
	if err != nil {
		return err
	}
	if !os.SameFile(file, now) {
		return fmt.Errorf("%w: %s is another file now; restart the process", ErrFileReplaced, path)
	}
	return nil
}

// Begin starts an IMMEDIATE transaction on the write connection. SQLite has
// one writer: every lane shares it.
func (s *Store) Begin(ctx context.Context, _ store.Lane) (store.Tx, error) {
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return nil, Translate(fmt.Errorf("begin transaction: %w", err))
	}
	return &Tx{conn: conn{q: tx, prepared: s.stmts, tx: tx.Tx, stored: map[string]string{}}, tx: tx, entry: s.entry, commits: &s.commits}, nil
}

// BeginRead starts a deferred read transaction on the read pool; SQLite's WAL
// gives it a stable view from its first read.
func (s *Store) BeginRead(ctx context.Context) (store.ReadTx, error) {
	tx, err := s.read.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, Translate(fmt.Errorf("begin read transaction: %w", err))
	}
	return &ReadTx{conn: conn{q: tx}, tx: tx}, nil
}

type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// conn runs the named queries on one transaction: through the statements
// prepared on the write connection when it has them (the store's own write
// transactions), as text otherwise (read and caller transactions: the
// statements belong to the write pool, and database/sql refuses them in a
// transaction of another pool).
type conn struct {
	q        querier
	tx       *sql.Tx
	prepared map[string]*sql.Stmt
	bound    map[string]*sql.Stmt // prepared statements bound to tx, by name
	// stored holds the group_id (NULL as "") of every flow row a write
	// transaction read or wrote, as the store holds it now, so that
	// updateFlow leaves an unchanged group_id out of the UPDATE; nil
	// elsewhere (every update then sets it).
	stored map[string]string
}

// read records the group of a flow row the store handed out.
func (c *conn) read(fc *flowCols) {
	if c.stored != nil {
		if _, ok := c.stored[fc.f.Flow]; !ok {
			c.stored[fc.f.Flow] = fc.groupID.String
		}
	}
}

func (c *conn) prep(ctx context.Context, name string) *sql.Stmt {
	if st, ok := c.bound[name]; ok {
		return st
	}
	p, ok := c.prepared[name]
	if !ok {
		return nil
	}
	st := c.tx.StmtContext(ctx, p)
	if c.bound == nil {
		c.bound = make(map[string]*sql.Stmt)
	}
	c.bound[name] = st
	return st
}

func (c *conn) exec(ctx context.Context, name string, args ...any) error {
	var err error
	if st := c.prep(ctx, name); st != nil {
		_, err = st.ExecContext(ctx, args...)
	} else {
		_, err = c.q.ExecContext(ctx, q[name], args...)
	}
	if err != nil {
		return Translate(fmt.Errorf("%s: %w", name, err))
	}
	return nil
}

func (c *conn) query(ctx context.Context, name string, args ...any) (*sql.Rows, error) {
	var rows *sql.Rows
	var err error
	if st := c.prep(ctx, name); st != nil {
		rows, err = st.QueryContext(ctx, args...)
	} else {
		rows, err = c.q.QueryContext(ctx, q[name], args...)
	}
	if err != nil {
		return nil, Translate(fmt.Errorf("%s: %w", name, err))
	}
	return rows, nil
}

func (c *conn) queryRow(ctx context.Context, name string, args ...any) *sql.Row {
	if st := c.prep(ctx, name); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return c.q.QueryRowContext(ctx, q[name], args...)
}

// each runs the named query and calls fn for every row.
func (c *conn) each(ctx context.Context, name string, fn func(scanner) error, args ...any) error {
	rows, err := c.query(ctx, name, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return Translate(fmt.Errorf("%s: %w", name, err))
		}
	}
	if err := rows.Err(); err != nil {
		return Translate(fmt.Errorf("%s: %w", name, err))
	}
	return nil
}

// clockRow is the clock row: the clock, the flow counter (the last ord,
// which groups share), and the store's backlog counters (enqueued - acked
// is the number of events not acked).
type clockRow struct {
	store.Clock
	flows, enqueued, acked int64
}

// clock reads the clock row.
func (c *conn) clock(ctx context.Context) (clockRow, error) {
	var cl clockRow
	if err := c.queryRow(ctx, "ClockGet").Scan(&cl.Tick, &cl.Ticket, &cl.flows, &cl.enqueued, &cl.acked); err != nil {
		return cl, Translate(fmt.Errorf("ClockGet: %w", err))
	}
	return cl, nil
}

// setClock writes the clock row.
func (c *conn) setClock(ctx context.Context, cl clockRow) error {
	return c.exec(ctx, "ClockSet", cl.Tick, cl.Ticket, cl.flows, cl.enqueued, cl.acked)
}

// groupCols are scan targets for a group row with its counters.
type groupCols struct {
	g                store.GroupRow
	enqueued, ackedN int64
}

func (gc *groupCols) dest() []any {
	return []any{&gc.g.Group, &gc.g.Ord, &gc.g.Served, &gc.g.Weight, &gc.g.Credit, &gc.g.RunnableFlows, &gc.g.MaxBacklog, &gc.enqueued, &gc.ackedN}
}

// group reads one group row and its backlog counters; nil when missing.
func (c *conn) group(ctx context.Context, name string) (*groupCols, error) {
	var gc groupCols
	err := c.queryRow(ctx, "GroupGet", name).Scan(gc.dest()...)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, Translate(fmt.Errorf("GroupGet: %w", err))
	}
	return &gc, nil
}

// groups lists group rows of a query.
func (c *conn) groups(ctx context.Context, name string, args ...any) ([]store.GroupRow, error) {
	var out []store.GroupRow
	err := c.each(ctx, name, func(r scanner) error {
		var gc groupCols
		if err := r.Scan(gc.dest()...); err != nil {
			return err
		}
		out = append(out, gc.g)
		return nil
	}, args...)
	return out, err
}

type scanner interface{ Scan(dest ...any) error }

// flowCols are scan targets for a flow row.
type flowCols struct {
	f                          store.FlowRow
	runnable, paused           int64
	wait, pausedAt             sql.NullInt64
	pausedBy, pausedR, groupID sql.NullString
}

func (fc *flowCols) dest() []any {
	return []any{&fc.f.Flow, &fc.f.Ord, &fc.f.Seq, &fc.f.Served, &fc.f.HeadSeq, &fc.runnable, &fc.wait,
		&fc.paused, &fc.pausedBy, &fc.pausedR, &fc.pausedAt, &fc.groupID}
}

func (fc *flowCols) row() store.FlowRow {
	f := fc.f
	f.Runnable, f.Paused = fc.runnable != 0, fc.paused != 0
	if fc.wait.Valid {
		v := fc.wait.Int64
		f.WaitUntil = &v
	}
	f.PausedBy, f.PausedReason, f.PausedAt = fc.pausedBy.String, fc.pausedR.String, fc.pausedAt.Int64
	f.Group = fc.groupID.String
	return f
}

// updateFlow writes every column of f but its id and ord; group_id only
// when the store may hold another value (FlowUpdateKeepGroup).
func (c *conn) updateFlow(ctx context.Context, f *store.FlowRow) error {
	if g, ok := c.stored[f.Flow]; ok && g == f.Group {
		return c.exec(ctx, "FlowUpdateKeepGroup", f.Seq, f.Served, f.HeadSeq, boolInt(f.Runnable), f.WaitUntil,
			boolInt(f.Paused), nullString(f.PausedBy), nullString(f.PausedReason), pausedAt(*f), f.Flow)
	}
	if err := c.exec(ctx, "FlowUpdate", f.Seq, f.Served, f.HeadSeq, boolInt(f.Runnable), f.WaitUntil,
		boolInt(f.Paused), nullString(f.PausedBy), nullString(f.PausedReason), pausedAt(*f), nullString(f.Group), f.Flow); err != nil {
		return err
	}
	if c.stored != nil {
		c.stored[f.Flow] = f.Group
	}
	return nil
}

// eventCols are scan targets for an event row; nullable for the outer join
// of a flow's head.
type eventCols struct {
	id, flow, state, reason, claimedBy                           sql.NullString
	seq, gen, att, life, next, lease, enqueued, claimed, ackedAt sql.NullInt64
	body                                                         []byte
}

func (ec *eventCols) dest() []any {
	return []any{&ec.id, &ec.flow, &ec.seq, &ec.body, &ec.state, &ec.gen, &ec.att, &ec.life, &ec.reason, &ec.next, &ec.lease, &ec.enqueued,
		&ec.claimed, &ec.ackedAt, &ec.claimedBy}
}

// row returns the event, nil when the outer join found none.
func (ec *eventCols) row() *store.EventRow {
	if !ec.id.Valid {
		return nil
	}
	e := &store.EventRow{
		ID: ec.id.String, Flow: ec.flow.String, Seq: ec.seq.Int64, Body: ec.body, State: ec.state.String,
		Generation: ec.gen.Int64, Attempts: ec.att.Int64, LifetimeAttempts: ec.life.Int64, Reason: ec.reason.String,
		NextAt: ec.next.Int64, LeaseUntil: ec.lease.Int64, EnqueuedAt: ec.enqueued.Int64, ClaimedWall: ec.claimed.Int64,
		ClaimedBy: ec.claimedBy.String,
	}
	if ec.ackedAt.Valid {
		v := ec.ackedAt.Int64
		e.AckedAt = &v
	}
	return e
}

// flowHeads runs a query of flows joined with their heads.
func (c *conn) flowHeads(ctx context.Context, name string, args ...any) ([]store.FlowHead, error) {
	var out []store.FlowHead
	err := c.each(ctx, name, func(r scanner) error {
		var fc flowCols
		var ec eventCols
		if err := r.Scan(append(fc.dest(), ec.dest()...)...); err != nil {
			return err
		}
		c.read(&fc)
		out = append(out, store.FlowHead{Flow: fc.row(), Head: ec.row()})
		return nil
	}, args...)
	return out, err
}

func (c *conn) flowGet(ctx context.Context, flow string) (*store.FlowRow, error) {
	var fc flowCols
	err := c.queryRow(ctx, "FlowGet", flow).Scan(fc.dest()...)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, Translate(fmt.Errorf("FlowGet: %w", err))
	}
	c.read(&fc)
	f := fc.row()
	return &f, nil
}

func (c *conn) event(ctx context.Context, name string, args ...any) (*store.EventRow, error) {
	var ec eventCols
	err := c.queryRow(ctx, name, args...).Scan(ec.dest()...)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, Translate(fmt.Errorf("%s: %w", name, err))
	}
	return ec.row(), nil
}

// pausedAt is the paused_at column of f: NULL unless paused.
func pausedAt(f store.FlowRow) any {
	if !f.Paused {
		return nil
	}
	return f.PausedAt
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// Tx is a write transaction on the SQLite store.
type Tx struct {
	conn
	tx    *WriteTx
	entry string
	done  bool
	cl    clockRow // the clock row as read

	// commits is the store's count of its own commits (Store.commits).
	commits *atomic.Int64
}

// Read answers rs statement by statement.
func (t *Tx) Read(ctx context.Context, rs store.ReadSet) (*store.ReadResult, error) {
	cl, err := t.clock(ctx)
	if err != nil {
		return nil, err
	}
	t.cl = cl
	out := &store.ReadResult{Clock: cl.Clock}
	if len(rs.Events) > 0 {
		out.Events, out.Flows = map[string]*store.EventRow{}, map[string]*store.FlowRow{}
		for _, id := range rs.Events {
			e, err := t.event(ctx, "EventGet", id)
			if err != nil {
				return nil, err
			}
			if e == nil {
				continue
			}
			out.Events[id] = e
			if _, ok := out.Flows[e.Flow]; !ok {
				f, err := t.flowGet(ctx, e.Flow)
				if err != nil {
					return nil, err
				}
				if f != nil {
					out.Flows[e.Flow] = f
				}
			}
			if rs.Next {
				n, err := t.event(ctx, "EventGetBySeq", e.Flow, e.Seq+1)
				if err != nil {
					return nil, err
				}
				if n != nil {
					if out.Next == nil {
						out.Next = map[string]*store.EventRow{}
					}
					out.Next[id] = n
				}
			}
		}
	}
	for _, name := range rs.Flows {
		f, err := t.flowGet(ctx, name)
		if err != nil {
			return nil, err
		}
		if f == nil {
			continue
		}
		if out.Flows == nil {
			out.Flows, out.Events = map[string]*store.FlowRow{}, map[string]*store.EventRow{}
		}
		out.Flows[name] = f
		if f.HeadSeq <= f.Seq {
			h, err := t.event(ctx, "EventGetBySeq", name, f.HeadSeq)
			if err != nil {
				return nil, err
			}
			if h != nil {
				out.Events[h.ID] = h
			}
		}
	}
	if rs.PickLimit > 0 {
		name := "FlowPickFair"
		if rs.Order == store.OrderFlowID {
			name = "FlowPickSeed"
		}
		if out.Picks, err = t.flowHeads(ctx, name, rs.PickLimit); err != nil {
			return nil, err
		}
	}
	if rs.DueLimit > 0 {
		at := max(rs.At, cl.Tick)
		after := store.FlowKey{WaitUntil: -1 << 63}
		if rs.DueAfter != nil {
			after = *rs.DueAfter
		}
		if out.Due, err = t.flowHeads(ctx, "FlowDue", at, after.WaitUntil, after.Flow, rs.DueLimit); err != nil {
			return nil, err
		}
	}
	if rs.GroupPickLimit > 0 {
		name := "GroupPickFirstFair"
		if rs.Order == store.OrderFlowID {
			name = "GroupPickFirstSeed"
		}
		err := t.each(ctx, name, func(r scanner) error {
			var gc groupCols
			var fc flowCols
			var ec eventCols
			if err := r.Scan(append(append(gc.dest(), fc.dest()...), ec.dest()...)...); err != nil {
				return err
			}
			t.read(&fc)
			out.GroupPicks = append(out.GroupPicks, store.GroupPick{Group: gc.g, First: store.FlowHead{Flow: fc.row(), Head: ec.row()}})
			return nil
		}, rs.GroupPickLimit)
		if err != nil {
			return nil, err
		}
	}
	// The groups asked for, and those of the due member flows.
	names := rs.Groups
	for _, d := range out.Due {
		if d.Flow.Group != "" {
			names = append(names, d.Flow.Group)
		}
	}
	if out.Groups, err = t.groupsByName(ctx, names); err != nil {
		return nil, err
	}
	return out, nil
}

// groupsByName reads the rows of the named groups that exist; nil when none
// does. Several names are read in one statement (GroupGetMany), as long as
// JSON carries every name unchanged.
func (t *Tx) groupsByName(ctx context.Context, names []string) (map[string]*store.GroupRow, error) {
	var out map[string]*store.GroupRow
	add := func(g store.GroupRow) {
		if out == nil {
			out = map[string]*store.GroupRow{}
		}
		out[g.Group] = &g
	}
	if len(names) > 1 && jsonSafe(names) {
		list, err := json.Marshal(names)
		if err != nil {
			return nil, err
		}
		err = t.each(ctx, "GroupGetMany", func(r scanner) error {
			var gc groupCols
			if err := r.Scan(gc.dest()...); err != nil {
				return err
			}
			add(gc.g)
			return nil
		}, string(list))
		return out, err
	}
	for _, name := range names {
		if _, ok := out[name]; ok {
			continue
		}
		gc, err := t.group(ctx, name)
		if err != nil {
			return nil, err
		}
		if gc != nil {
			add(gc.g)
		}
	}
	return out, nil
}

// jsonSafe reports whether every name survives a JSON array and SQLite's
// json_each unchanged: valid UTF-8 without NUL.
func jsonSafe(names []string) bool {
	for _, n := range names {
		if !utf8.ValidString(n) || strings.IndexByte(n, 0) >= 0 {
			return false
		}
	}
	return true
}

// Members reads a group's runnable member flows in order, with heads.
func (t *Tx) Members(ctx context.Context, group string, order store.Order, limit int) ([]store.FlowHead, error) {
	name := "MembersFair"
	if order == store.OrderFlowID {
		name = "MembersSeed"
	}
	return t.flowHeads(ctx, name, group, limit)
}

// Write applies ws row by row.
func (t *Tx) Write(ctx context.Context, ws *store.WriteSet) error {
	for i := range ws.Flows {
		if err := t.updateFlow(ctx, &ws.Flows[i]); err != nil {
			return err
		}
	}
	// A group both changed and acked is one UPDATE of its row (a batch
	// settles the flows of the groups its claims took, and files them
	// again): its acks go with its first write.
	var written map[string]bool
	if len(ws.Groups) > 0 && len(ws.AckedGroups) > 0 {
		written = make(map[string]bool, len(ws.Groups))
	}
	for _, g := range ws.Groups {
		var acked int64
		if n, ok := ws.AckedGroups[g.Group]; ok && !written[g.Group] {
			acked, written[g.Group] = n, true
		}
		if err := t.exec(ctx, "GroupTurn", g.Turn, g.Served, g.Credit, g.RunnableDelta, g.Group, acked); err != nil {
			return err
		}
	}
	for name, n := range ws.AckedGroups {
		if written[name] {
			continue
		}
		if err := t.exec(ctx, "GroupAcked", n, name); err != nil {
			return err
		}
	}
	for _, e := range ws.Events {
		if err := t.exec(ctx, "EventUpdate", e.State, e.Generation, e.Attempts, e.LifetimeAttempts, nullString(e.Reason), e.NextAt, e.LeaseUntil,
			e.ClaimedWall, e.AckedAt, e.ClaimedBy, e.ID); err != nil {
			return err
		}
	}
	for _, a := range ws.Audit {
		if err := t.exec(ctx, "AuditInsert", a.EventID, a.Flow, a.Action, a.Reason, a.Operator, a.PreviousReason, a.Generation, a.At, a.Wall); err != nil {
			return err
		}
	}
	for _, a := range ws.Attempts {
		if err := t.exec(ctx, "AttemptInsert", a.EventID, a.Generation, a.Flow, a.LeaseUntil, a.ClaimedWall, a.SettledAt, a.SettledWall,
			a.Outcome, a.Status, a.Detail, a.DurationMs, a.Relay); err != nil {
			return err
		}
	}
	cl := t.cl
	cl.Clock = ws.Clock
	cl.acked += ws.Acked
	return t.setClock(ctx, cl)
}

// Commit commits the transaction.
func (t *Tx) Commit(ctx context.Context) error {
	if err := t.tx.Commit(); err != nil {
		return Translate(err)
	}
	t.commits.Add(1)
	t.done = true
	return nil
}

// Rollback ends the transaction unless it committed.
func (t *Tx) Rollback(ctx context.Context) error {
	if t.done {
		return nil
	}
	err := t.tx.Rollback()
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return Translate(err)
}

// ReadTx is a read transaction on the SQLite store.
type ReadTx struct {
	conn
	tx *sql.Tx
}

// Clock reads the stored clock.
func (t *ReadTx) Clock(ctx context.Context) (store.Clock, error) {
	c, err := t.clock(ctx)
	return c.Clock, err
}

// Backlog counts the events not acked.
func (t *ReadTx) Backlog(ctx context.Context) (int64, error) {
	c, err := t.clock(ctx)
	return c.enqueued - c.acked, err
}

// Settings reads the store-wide limits.
func (t *ReadTx) Settings(ctx context.Context) (store.Settings, error) {
	return t.settings(ctx)
}

func (c *conn) settings(ctx context.Context) (store.Settings, error) {
	var s store.Settings
	if err := c.queryRow(ctx, "SettingsLimits").Scan(&s.MaxBacklog, &s.MaxFlowBacklog); err != nil {
		return s, Translate(fmt.Errorf("SettingsLimits: %w", err))
	}
	return s, nil
}

// GroupPick lists the first groups of the group runnable index.
func (t *ReadTx) GroupPick(ctx context.Context, order store.Order, limit int) ([]store.GroupRow, error) {
	name := "GroupPickFair"
	if order == store.OrderFlowID {
		name = "GroupPickSeed"
	}
	return t.groups(ctx, name, limit)
}

// GroupList lists group rows by name, with flow counts and backlogs.
func (t *ReadTx) GroupList(ctx context.Context, after string, limit int) ([]store.GroupInfo, error) {
	var out []store.GroupInfo
	err := t.each(ctx, "GroupList", func(r scanner) error {
		var gc groupCols
		var flows, slots int64
		if err := r.Scan(append(gc.dest(), &flows, &slots)...); err != nil {
			return err
		}
		out = append(out, store.GroupInfo{GroupRow: gc.g, Flows: flows, Backlog: gc.enqueued - gc.ackedN, MaxSlots: slots})
		return nil
	}, after, limit)
	if err != nil || len(out) == 0 {
		return out, err
	}
	n, err := t.groupQuarantined(ctx, out[0].Group, out[len(out)-1].Group)
	for i := range out {
		out[i].Quarantined = n[out[i].Group]
	}
	return out, err
}

// groupQuarantined counts the quarantined heads of the groups from first
// to last, by group.
func (t *ReadTx) groupQuarantined(ctx context.Context, first, last string) (map[string]int64, error) {
	n := map[string]int64{}
	err := t.each(ctx, "GroupQuarantined", func(r scanner) error {
		var g string
		var c int64
		if err := r.Scan(&g, &c); err != nil {
			return err
		}
		n[g] = c
		return nil
	}, first, last)
	return n, err
}

// GroupSettings lists the groups whose weight, backlog limit or slot cap
// is set, by name, from the group rows alone.
func (t *ReadTx) GroupSettings(ctx context.Context, after string, limit int) ([]store.GroupSetting, error) {
	var out []store.GroupSetting
	err := t.each(ctx, "GroupSettings", func(r scanner) error {
		var g store.GroupSetting
		if err := r.Scan(&g.Group, &g.Weight, &g.MaxBacklog, &g.MaxSlots); err != nil {
			return err
		}
		out = append(out, g)
		return nil
	}, after, limit)
	return out, err
}

// FlowList lists flows by flow id after the given one.
func (t *ReadTx) FlowList(ctx context.Context, after string, limit int) ([]store.FlowRow, error) {
	return t.flows(ctx, "FlowList", after, limit)
}

func (t *ReadTx) flows(ctx context.Context, name string, args ...any) ([]store.FlowRow, error) {
	var out []store.FlowRow
	err := t.each(ctx, name, func(r scanner) error {
		var fc flowCols
		if err := r.Scan(fc.dest()...); err != nil {
			return err
		}
		out = append(out, fc.row())
		return nil
	}, args...)
	return out, err
}

// FlowPick lists the first runnable flows in order, with their heads.
func (t *ReadTx) FlowPick(ctx context.Context, order store.Order, limit int) ([]store.FlowHead, error) {
	name := "FlowPickFair"
	if order == store.OrderFlowID {
		name = "FlowPickSeed"
	}
	return t.flowHeads(ctx, name, limit)
}

// NextWait reads the smallest wait_until.
func (t *ReadTx) NextWait(ctx context.Context) (int64, bool, error) {
	var w sql.NullInt64
	if err := t.queryRow(ctx, "FlowNextWait").Scan(&w); err != nil {
		return 0, false, Translate(fmt.Errorf("FlowNextWait: %w", err))
	}
	return w.Int64, w.Valid, nil
}

// EventGet reads one event.
func (t *ReadTx) EventGet(ctx context.Context, id string) (*store.EventRow, error) {
	return t.event(ctx, "EventGet", id)
}

// Tombstone reads the tombstone of a pruned event's id.
func (t *ReadTx) Tombstone(ctx context.Context, id string) (*store.TombstoneRow, error) {
	var ts store.TombstoneRow
	err := t.queryRow(ctx, "TombstoneRead", id).Scan(&ts.Flow, &ts.Seq, &ts.AckedAt)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, Translate(fmt.Errorf("TombstoneRead: %w", err))
	}
	return &ts, nil
}

// Heads reads the head events of flows that have one.
func (t *ReadTx) Heads(ctx context.Context, flows []store.FlowRow) (map[string]*store.EventRow, error) {
	out := map[string]*store.EventRow{}
	for _, f := range flows {
		if f.HeadSeq > f.Seq {
			continue
		}
		e, err := t.event(ctx, "EventGetBySeq", f.Flow, f.HeadSeq)
		if err != nil {
			return nil, err
		}
		if e != nil {
			out[f.Flow] = e
		}
	}
	return out, nil
}

// EventList lists events by flow then seq.
func (t *ReadTx) EventList(ctx context.Context, afterFlow string, afterSeq int64, limit int) ([]store.EventRow, error) {
	return t.events(ctx, "EventList", afterFlow, afterSeq, limit)
}

// QuarantinedList lists quarantined events by flow.
func (t *ReadTx) QuarantinedList(ctx context.Context, afterFlow string, f store.QuarantinedFilter, limit int) ([]store.EventRow, error) {
	if end := store.PrefixEnd(f.Prefix); end != "" {
		return t.events(ctx, "QuarantinedRange", afterFlow, limit, f.Flow, f.Reason, f.Prefix, end, f.Group)
	}
	return t.events(ctx, "QuarantinedList", afterFlow, limit, f.Flow, f.Reason, f.Prefix, f.Group)
}

// FlowSearch lists the flows whose id starts with prefix, after the given
// one.
func (t *ReadTx) FlowSearch(ctx context.Context, prefix, after string, limit int) ([]store.FlowRow, error) {
	if end := store.PrefixEnd(prefix); end != "" {
		return t.flows(ctx, "FlowSearch", prefix, end, after, limit)
	}
	return t.flows(ctx, "FlowSearchOpen", prefix, after, limit)
}

// PausedList lists the paused flows after the given one.
func (t *ReadTx) PausedList(ctx context.Context, after string, limit int) ([]store.FlowRow, error) {
	return t.flows(ctx, "PausedList", after, limit)
}

// FlowTotals counts the flows (clock.flows counts the groups' places in
// the rotation too, so it is not the number of flows) and reads the
// backlog's counter.
func (t *ReadTx) FlowTotals(ctx context.Context) (flows, backlog int64, err error) {
	if err := t.queryRow(ctx, "FlowCount").Scan(&flows); err != nil {
		return 0, 0, Translate(fmt.Errorf("FlowCount: %w", err))
	}
	backlog, err = t.Backlog(ctx)
	return flows, backlog, err
}

// Counts counts the inflight and quarantined heads and the paused flows,
// each up to max.
func (t *ReadTx) Counts(ctx context.Context, max int) (store.Counts, error) {
	var c store.Counts
	if err := t.queryRow(ctx, "Counts", max).Scan(&c.Inflight, &c.Quarantined, &c.Paused); err != nil {
		return c, Translate(fmt.Errorf("Counts: %w", err))
	}
	return c, nil
}

// OldestWaiting reads the event not acked that was enqueued first.
func (t *ReadTx) OldestWaiting(ctx context.Context) (*store.EventRow, error) {
	return t.event(ctx, "OldestWaiting")
}

// SettledSince lists the attempts settled since sinceWall, newest first.
func (t *ReadTx) SettledSince(ctx context.Context, sinceWall int64, limit int) ([]store.AttemptRow, error) {
	return t.attempts(ctx, "SettledSince", sinceWall, limit)
}

func (t *ReadTx) events(ctx context.Context, name string, args ...any) ([]store.EventRow, error) {
	var out []store.EventRow
	err := t.each(ctx, name, func(r scanner) error {
		var ec eventCols
		if err := r.Scan(ec.dest()...); err != nil {
			return err
		}
		out = append(out, *ec.row())
		return nil
	}, args...)
	return out, err
}

// AuditList lists audit rows after the given row number.
func (t *ReadTx) AuditList(ctx context.Context, after int64, limit int) ([]store.AuditRow, error) {
	var out []store.AuditRow
	err := t.each(ctx, "AuditList", func(r scanner) error {
		var a store.AuditRow
		var id, op, prev sql.NullString
		var gen sql.NullInt64
		if err := r.Scan(&a.No, &id, &a.Flow, &a.Action, &a.Reason, &op, &prev, &gen, &a.At, &a.Wall); err != nil {
			return err
		}
		a.EventID, a.Operator, a.PreviousReason = nullable(id), nullable(op), nullable(prev)
		if gen.Valid {
			a.Generation = &gen.Int64
		}
		out = append(out, a)
		return nil
	}, after, limit)
	return out, err
}

// Attempts lists an event's attempts by generation.
func (t *ReadTx) Attempts(ctx context.Context, eventID string) ([]store.AttemptRow, error) {
	return t.attempts(ctx, "AttemptList", eventID)
}

func (t *ReadTx) attempts(ctx context.Context, name string, args ...any) ([]store.AttemptRow, error) {
	var out []store.AttemptRow
	err := t.each(ctx, name, func(r scanner) error {
		var a store.AttemptRow
		var settled, settledWall sql.NullInt64
		if err := r.Scan(&a.EventID, &a.Generation, &a.Flow, &a.LeaseUntil, &a.ClaimedWall, &settled, &settledWall,
			&a.Outcome, &a.Status, &a.Detail, &a.DurationMs, &a.Relay); err != nil {
			return err
		}
		if settled.Valid {
			a.SettledAt = &settled.Int64
		}
		if settledWall.Valid {
			a.SettledWall = &settledWall.Int64
		}
		out = append(out, a)
		return nil
	}, args...)
	return out, err
}

// nullable is s as a pointer: nil for NULL.
func nullable(s sql.NullString) *string {
	if !s.Valid {
		return nil
	}
	return &s.String
}

// Rollback ends the read transaction.
func (t *ReadTx) Rollback(ctx context.Context) error {
	err := t.tx.Rollback()
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return Translate(err)
}
