// Package pgstore is the PostgreSQL backend of the queue store
// (github.com/jackc/pgx/v5). It keeps the SQLite backend's tables and
// answers (SPEC §4). Every write transaction first locks the clock row of
// its lanes (store.Lane), so the writers of a lane, from any number of
// processes and connections, are serialised as SQLite's one writer is; the
// lanes run side by side and share flow rows under row locks (see Tx). Read
// transactions are REPEATABLE READ READ ONLY snapshots. The SQL lives in queries.sql and
// migrations/*.sql, embedded; migrations run under an advisory lock so that
// processes starting together do not race.
//
// A store lives in one schema, chosen by the `schema=NAME` query parameter of
// its postgres:// URL (created on first use) or, without it, the
// connection's current schema.
package pgstore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jackc/puddle/v2"

	"github.com/fairrelay/fairrelay/internal/sqlfile"
	"github.com/fairrelay/fairrelay/internal/store"
)

//go:embed queries.sql
var queriesSQL string

//go:embed migrations/*.sql
var migrationsFS embed.FS

var q = sqlfile.Queries(queriesSQL)

// MigrationLock is the statement that serialises migrators (queue store and
// inbox alike) on one transaction-scoped advisory lock; the key is an
// arbitrary constant ("fairrela" in ASCII).
const MigrationLock = "SELECT pg_advisory_xact_lock(7377002342573190241)"

// migrateLock is MigrationLock for the migrations' own transactions, which
// also puts pg_temp last on their search_path (after the schema they
// migrate): a function made with SET search_path FROM CURRENT then never
// reads a caller's temporary table of a store table's name (migration
// 025).
const migrateLock = MigrationLock + "; SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_temp', true)"

// Options tune the PostgreSQL backend.
type Options struct {
	// LockTimeout bounds how long a statement waits for a row lock held by
	// another transaction (the clock row, in practice) before failing with
	// store.ErrBusy. Defaults to 5s.
	LockTimeout time.Duration
	// MaxConns is the size of the connection pool. Defaults to pgxpool's
	// default (the larger of 4 and the number of CPUs).
	MaxConns int32
	// MustExist makes Open fail with store.ErrMissing, creating nothing,
	// when the schema holds no queue store yet: for tools that inspect or
	// settle, where a mistyped schema must not pass as an empty store.
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
	// (wrapped) instead of migrating it.
	ReadOnly bool
}

// holds reports whether table exists in the connection's schema.
func holds(ctx context.Context, pool *pgxpool.Pool, table string) (bool, error) {
	var found *string
	if err := pool.QueryRow(ctx, q["TableExists"], table).Scan(&found); err != nil {
		return false, Translate(err)
	}
	return found != nil, nil
}

// queueStoreTables mark a queue store: its event table and its
// migrations' record. An event table alone is another application's (a
// fresh user's schema: enqueue, which needs a store there, tried to make
// one and failed in migration 001 instead of saying none is there).
var queueStoreTables = []string{"event", "fairrelay_migration"}

// HoldsQueueStore reports whether db's current schema holds a queue store
// (queueStoreTables). The inbox uses it to refuse a queue store's schema.
func HoldsQueueStore(ctx context.Context, db *sql.DB) (bool, error) {
	for _, table := range queueStoreTables {
		if ok, err := HoldsTable(ctx, db, table); err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// HoldsTable reports whether table exists in db's current schema.
func HoldsTable(ctx context.Context, db *sql.DB, table string) (bool, error) {
	var found sql.NullString
	if err := db.QueryRowContext(ctx, q["TableExists"], table).Scan(&found); err != nil {
		return false, Translate(err)
	}
	return found.Valid, nil
}

// Store is the PostgreSQL queue store: one pgx connection pool whose
// connections have the store's schema on their search_path.
type Store struct {
	pool    *pgxpool.Pool
	schema  string
	entry   string
	buffers bufferPool
	// migrated: the migrations Open applied (Migrated).
	migrated []int
	// enqueueSQL calls the schema's enqueue_many, qualified: it runs in the
	// caller's transaction whatever its search_path. enqueueTxSQL is the
	// same call for a caller's transaction, run only when the transaction
	// is on this store's database ($9) and its schema is this store's
	// ($10, the schema's oid, read at Open): a one-time filter, checked
	// before the function runs, so that a transaction on another database
	// holding a schema of the same name gets no row and nothing written.
	enqueueSQL, enqueueTxSQL string
	// database and schemaOID identify the store's schema (Open).
	database  string
	schemaOID uint32

	// watches are the change watches of Changes; Close ends them.
	watches store.Watches
}

var _ store.Store = (*Store)(nil)

// schemaName is what a schema=NAME parameter may hold: a plain identifier of
// at most 63 bytes (PostgreSQL's limit), so that no name is ever truncated
// or needs more than quoting. A new schema must be lower case too
// (CreateSchema).
var schemaName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// encodeHint is how a URL's user information holds any character.
const encodeHint = "a user name or password holding one of : / ? # [ ] @ % or a space is written percent-encoded in a URL (%40 for @, %23 for #, %2F for /, %25 for %), or the password goes in PGPASSWORD or ~/.pgpass instead"

// ParseDSN splits a postgres:// or postgresql:// URL into the connection
// string pgx receives and the schema named by its `schema` query parameter
// ("" when absent). Errors: a URL that does not parse, a schema that is not
// an identifier of letters, digits and underscores (at most 63 bytes).
func ParseDSN(dsn string) (conn string, schema string, err error) {
	u, err := url.Parse(dsn)
	if err != nil {
		// Neither the URL nor url.Parse's words, which quote a piece of
		// it: a password holding '#' or '/' failed as `invalid port
		// ":hunter" after host`, most of the password in the message.
		what := "it does not parse"
		switch msg := err.Error(); {
		case strings.Contains(msg, "invalid URL escape"):
			what = "a '%' is not followed by two hex digits"
		case strings.Contains(msg, "invalid port"):
			what = "what follows a ':' after the host is not a port number"
		case strings.Contains(msg, "invalid character") || strings.Contains(msg, "control character"):
			what = "it holds a character a URL cannot"
		}
		return "", "", fmt.Errorf("not a URL: %s; %s", what, encodeHint)
	}
	if strings.Contains(dsn, "#") {
		// A fragment means nothing to PostgreSQL: it is a password's '#'
		// not encoded, which made what came before it a port
		// (postgres://u:123#x@h/db connected to host u, port 123).
		return "", "", fmt.Errorf("not a URL: it holds a '#', which a PostgreSQL URL has no use for; %s", encodeHint)
	}
	// ParseQuery, not Query: Query drops a pair holding a semicolon without
	// a word, so "schema=relay;x" opened (or made) a store in public (a
	// breaker's report).
	v, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return "", "", fmt.Errorf("query: %v", err)
	}
	for k, vs := range v {
		// One value each: of a repeated schema= the first won, silently,
		// and a URL built by appending &schema=… to one that had it opened
		// another store (a fresh user's report).
		if len(vs) > 1 {
			return "", "", fmt.Errorf("parameter %q given %d times: give it once", k, len(vs))
		}
	}
	schema = v.Get("schema")
	if v.Has("schema") && !schemaName.MatchString(schema) {
		return "", "", fmt.Errorf("schema %q: want letters, digits and underscores, at most 63 bytes, not starting with a digit", schema)
	}
	if l := strings.ToLower(schema); l == "information_schema" || strings.HasPrefix(l, "pg_") {
		// The server's own: a store made in information_schema worked,
		// and pg_dump leaves that schema out of every backup (a
		// breaker's report); pg_* is refused by the server, less clearly.
		return "", "", fmt.Errorf("schema %q is one of PostgreSQL's own (information_schema, pg_*), which backups leave out: name a schema of your own", schema)
	}
	// The other pairs go to pgx as they were written: encoding them anew
	// turned a space into "+", which pgx (as libpq) keeps, so that
	// options=-c%20statement_timeout%3D5s reached the server as
	// "-c+statement_timeout=5s" (a breaker's report).
	var keep []string
	for _, pair := range strings.Split(u.RawQuery, "&") {
		k, _, _ := strings.Cut(pair, "=")
		if key, err := url.QueryUnescape(k); err == nil && key == "schema" || pair == "" {
			continue
		}
		keep = append(keep, pair)
	}
	u.RawQuery = strings.Join(keep, "&")
	return u.String(), schema, nil
}

// DefaultApplicationName is the application_name of the store's
// connections when the URL gives none (pg_stat_activity, the server's log).
const DefaultApplicationName = "fairrelay"

// hasParam reports whether params holds name in any case (PostgreSQL's
// parameter names ignore case).
func hasParam(params map[string]string, name string) bool {
	for k := range params {
		if strings.EqualFold(k, name) {
			return true
		}
	}
	return false
}

// PoolConfig parses dsn (see ParseDSN) into a pgxpool configuration whose
// connections put the schema first on their search_path, wait at most
// lockTimeout for a row lock, and are named DefaultApplicationName unless
// the URL's application_name names them. It also returns the schema ("" when the URL
// names none). Errors: ParseDSN's and pgx's, and a URL that sets
// lock_timeout, or search_path beside schema=, which the store sets.
func PoolConfig(dsn string, lockTimeout time.Duration) (*pgxpool.Config, string, error) {
	return poolConfig(dsn, lockTimeout, false)
}

// poolConfig is PoolConfig; with idleTimeout (the queue store's) its SET
// also sets idle_in_transaction_session_timeout to IdleInTransactionTimeout
// unless the URL sets it: one round trip on connect for all three.
func poolConfig(dsn string, lockTimeout time.Duration, idleTimeout bool) (*pgxpool.Config, string, error) {
	conn, schema, err := ParseDSN(dsn)
	if err != nil {
		return nil, "", err
	}
	cfg, err := pgxpool.ParseConfig(conn)
	if err != nil {
		return nil, "", err
	}
	// Settings the store makes itself: one in the URL too would be
	// replaced without a word (a fresh user's lock_timeout=2s became the
	// busy timeout's 5 s), or, spelt in another case, race it connection
	// by connection (pgx keeps both keys in a map; PostgreSQL's names
	// ignore case: a breaker's SEARCH_PATH= put one store of six in
	// another schema). The options parameter's -c settings count too.
	if err := refuseOwnSettings(cfg.ConnConfig.RuntimeParams, schema != ""); err != nil {
		return nil, "", err
	}
	if !hasParam(cfg.ConnConfig.RuntimeParams, "application_name") {
		// Named in pg_stat_activity and the server's logs: the connections
		// had no name (an operator's report). The URL's own wins.
		cfg.ConnConfig.RuntimeParams["application_name"] = DefaultApplicationName
	}
	// The schema and the lock timeout by a SET on each new connection, not
	// as startup parameters: PgBouncer refuses a startup parameter it does
	// not track ("unsupported startup parameter: lock_timeout"), so no
	// store could be opened through it, and told to ignore them it drops
	// them without a word. A SET is a session's own, which PgBouncer's
	// session pooling keeps with the client (docs/operations.md). On
	// pgconn's config, so that every connection made from it has them: the
	// pool's, a relay's listening connection, the inbox's database/sql
	// ones.
	var sets []string
	if schema != "" {
		// An identifier, not a string: search_path takes a string as one
		// schema's name, quotes and all.
		sets = append(sets, "SET search_path = "+pgx.Identifier{schema}.Sanitize())
	}
	if lockTimeout > 0 {
		sets = append(sets, "SET lock_timeout = "+strconv.FormatInt(store.BusyMillis(lockTimeout), 10))
	}
	if idleTimeout && !urlSets(cfg.ConnConfig.RuntimeParams, "idle_in_transaction_session_timeout") {
		// PgBouncer refuses a startup parameter it is not told to ignore,
		// and ignoring it would drop the timeout without a word
		// (helper-171).
		sets = append(sets, fmt.Sprintf("SET idle_in_transaction_session_timeout = %d", IdleInTransactionTimeout.Milliseconds()))
	}
	if len(sets) > 0 {
		sql := strings.Join(sets, "; ")
		cfg.ConnConfig.AfterConnect = func(ctx context.Context, c *pgconn.PgConn) error {
			_, err := c.Exec(ctx, sql).ReadAll()
			return err
		}
	}
	return cfg, schema, nil
}

// IdleInTransactionTimeout is idle_in_transaction_session_timeout on the
// queue store's connections (not the inbox's, whose transactions run the
// receiver's Apply), unless the URL sets it (a parameter, or a -c setting
// of options; 0 turns it off): the server ends a session of the store that
// sits inside a transaction, between statements, that long. The store's
// own transactions run statement after statement (their longest pause, 40
// ms, is a configure's wait for the flow table), so only a process that
// stopped mid-transaction — SIGSTOP, a paused VM, a host gone without
// closing its connection — is ended; until then its locks (a writer lane's,
// the clock row, flow rows) held every other relay and the producers'
// enqueues onto its flows, for as long as it stayed stopped: its leases
// could not run out where nobody could claim (a fresh user's report). Its
// transaction rolls back, and the process, when it resumes, finds its
// connection closed and goes on (a store error the relay rides out). It is
// set by a SET on each new connection, not as a startup parameter.
const IdleInTransactionTimeout = 10 * time.Second

// urlSets reports whether a URL's runtime parameters set name: as a
// parameter in any case, or as a -c (or --NAME=) setting of options.
func urlSets(params map[string]string, name string) bool {
	for key, value := range params {
		opts := strings.ReplaceAll(strings.ToLower(value), "-", "_")
		if strings.EqualFold(key, name) || strings.EqualFold(key, "options") && strings.Contains(opts, name) {
			return true
		}
	}
	return false
}

// refuseOwnSettings refuses, in a URL's runtime parameters, the settings
// the store makes itself: lock_timeout always, search_path when the URL
// names a schema; as a parameter in any case or as a -c (or --NAME=)
// setting of options.
func refuseOwnSettings(params map[string]string, schema bool) error {
	own := []struct{ name, why string }{
		{"lock_timeout", "the store sets it from its busy timeout (fairrelay.Config.BusyTimeout, 5 s unless set)"},
	}
	if schema {
		own = append(own, struct{ name, why string }{"search_path", "the store sets it from schema="})
	}
	// -c lock_timeout=2s, --lock-timeout=2s: dashes and case aside.
	for _, o := range own {
		if urlSets(params, o.name) {
			return fmt.Errorf("%s: %s; leave it out of the URL", o.name, o.why)
		}
	}
	return nil
}

// CreateSchema creates schema if it does not exist, under MigrationLock so
// that concurrent first users do not collide; an existing schema is found
// without taking the lock. schema must come from
// ParseDSN (a checked identifier). A schema named with upper case is used
// when it exists but never created (store.ErrMissing, naming the lower-case
// spelling): PostgreSQL folds an unquoted name to lower case, so SQL written
// by hand (SELECT * FROM Relay.enqueue(…)) would name another schema (a
// fresh user's report); refusing it outright locked out the stores earlier
// builds made in such schemas (a second fresh user's report).
func CreateSchema(ctx context.Context, db *sql.DB, schema string) error {
	if schema == "" {
		return nil
	}
	// The lookup first, under no lock: MigrationLock is one key for every
	// schema of the database, so an open of an existing store that took
	// it waited for any other store's migrations, and with a short busy
	// timeout failed busy (CI: a 1 ms lock_timeout beside parallel tests'
	// migrations).
	var exists bool
	if err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&exists); err != nil {
		return Translate(err)
	}
	if exists {
		return nil
	}
	if lower := strings.ToLower(schema); lower != schema {
		return store.Missing("schema %q does not exist, and a new store's schema is lower case (schema=%s): PostgreSQL folds unquoted names to lower case, so SQL that calls the store's functions by hand would name another schema", schema, lower)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return Translate(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, MigrationLock); err != nil {
		return Translate(err)
	}
	// An identifier cannot be a bind parameter; schema is a checked
	// identifier, quoted by pgx.
	if _, err := tx.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return Translate(fmt.Errorf("create schema %s: %w", schema, err))
	}
	return Translate(tx.Commit())
}

// Migrate creates the schema when missing, applies the migrations in dir of
// fsys under MigrationLock, and checks that table, which the migrations
// create, is now visible: a schema already holding another fairrelay store
// (a queue store and an inbox share the migration table's version numbers)
// fails with store.ErrNotDatabase instead of half-working.
func Migrate(ctx context.Context, db *sql.DB, schema string, fsys embed.FS, dir, table string) ([]int, error) {
	if err := CreateSchema(ctx, db, schema); err != nil {
		return nil, err
	}
	migs, err := sqlfile.Migrations(fsys, dir)
	if err != nil {
		return nil, err
	}
	v, err := sqlfile.Apply(ctx, db, migs, migrateLock)
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42P07" { // duplicate_table
			where := "schema " + schema
			if schema == "" {
				where = "the connection's default schema (search_path; usually public: the URL has no schema=NAME)"
			}
			return v, fmt.Errorf("%w; %s already holds a table of that name that is not fairrelay's: give the store a schema of its own (schema=NAME in the URL)", err, where)
		}
		return v, Translate(err)
	}
	var found sql.NullString
	if err := db.QueryRowContext(ctx, q["TableExists"], table).Scan(&found); err != nil {
		return v, Translate(err)
	}
	if !found.Valid {
		return v, fmt.Errorf("%w: table %s is missing although the migrations are recorded: the schema holds another fairrelay store; give each store its own schema", store.ErrNotDatabase, table)
	}
	return v, nil
}

// Open connects to the PostgreSQL database named by dsn (a postgres:// URL,
// optionally with schema=NAME), creates the schema if missing and applies
// the migrations. Errors: a bad URL or schema name; the server unreachable
// (wraps store.ErrServer); the database missing (wraps store.ErrMissing);
// the schema holding another store (wraps store.ErrNotDatabase); lock
// waits over the timeout (wraps store.ErrBusy).
//
// A connection that fails while Open runs — a network reset, the server
// crashing or shutting down (57P01–57P03) — wraps store.ErrServer too,
// whichever step it failed in: a daemon waits that out, while anything
// unclassified counts as the caller's input (a breaker's report: a relay
// exited 2 with invalid_input on a connection reset mid-open).
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	s, err := open(ctx, dsn, opts)
	if err != nil && !errors.Is(err, store.ErrServer) && ConnectionLost(err) {
		return nil, fmt.Errorf("%w: the connection failed while the store was opened: %w", store.ErrServer, err)
	}
	return s, err
}

// ConnectionLost reports whether err is a connection's failure rather than
// the server's answer to a statement: a network error, the connection
// closed or ended mid-message, or the server shutting down or refusing
// connections for now (SQLSTATE class 57P: admin_shutdown, crash_shutdown,
// cannot_connect_now). Whether the statement ran is then unknown.
func ConnectionLost(err error) bool {
	var (
		ne net.Error
		ce *pgconn.ConnectError
		pe *pgconn.PgError
	)
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "57P")
	}
	return errors.As(err, &ne) || errors.As(err, &ce) || errors.Is(err, io.ErrUnexpectedEOF) || pgconn.SafeToRetry(err)
}

func open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = store.DefaultBusyTimeout
	}
	cfg, schema, err := poolConfig(dsn, opts.LockTimeout, true)
	if err != nil {
		return nil, err
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		if err := Translate(err); errors.Is(err, store.ErrNotDatabase) || errors.Is(err, store.ErrBusy) || errors.Is(err, store.ErrMissing) ||
			errors.Is(err, store.ErrRefusedSettings) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", store.ErrServer, err)
	}
	opts.MustExist = opts.MustExist || opts.ReadOnly
	hasQueue := true
	for _, table := range queueStoreTables {
		if hasQueue, err = holds(ctx, pool, table); err != nil || !hasQueue {
			break
		}
	}
	if err != nil {
		pool.Close()
		return nil, err
	}
	if !hasQueue {
		hasInbox, err := holds(ctx, pool, "receipt")
		if err != nil {
			pool.Close()
			return nil, err
		}
		where := "schema " + schema
		if schema == "" {
			where = "the connection's current schema"
			// A search_path that names no existing schema leaves none to
			// create the store in: the migration failed "no schema has
			// been selected to create in", reported as not a fairrelay
			// database (a breaker's sweep).
			var cur *string
			var path string
			if err := pool.QueryRow(ctx, NoSchemaQuery).Scan(&cur, &path); err != nil {
				pool.Close()
				return nil, Translate(fmt.Errorf("current schema: %w", err))
			}
			if cur == nil {
				pool.Close()
				return nil, NoSchemaError(path)
			}
			where = CurrentSchemaWhere(*cur)
		}
		switch {
		case hasInbox:
			pool.Close()
			return nil, store.OtherKind("%s holds a fairrelay inbox, not a queue store", where)
		case opts.MustExist:
			pool.Close()
			how := "create it with fairrelay migrate"
			if lower := strings.ToLower(schema); lower != schema {
				// migrate creates no upper-case schema (CreateSchema): send
				// the user to the name it would create (a fresh user's
				// report: the hint led to migrate's refusal).
				how = fmt.Sprintf("a new store's schema is lower case: use schema=%s, and create it with fairrelay migrate", lower)
			}
			return nil, store.Missing("%s holds no queue store (%s)", where, how)
		}
	}
	s := &Store{pool: pool, schema: schema}
	if opts.Entry == "" {
		opts.Entry = "fair"
	}
	// The entry rule before anything writes (SPEC §7: opening under the
	// other rule changes nothing): a store of an older version would
	// otherwise be migrated first, and the older relays still using it
	// refuse a store migrated by a newer fairrelay. No settings table yet
	// (an older or new store): settle below records or checks the rule.
	if !opts.AdoptEntry {
		var stored *string
		if err := pool.QueryRow(ctx, q["SettingsGet"]).Scan(&stored); err == nil && stored != nil && *stored != opts.Entry {
			pool.Close()
			return nil, &store.EntryMismatchError{Stored: *stored, Asked: opts.Entry}
		}
	}
	if opts.ReadOnly {
		if err := s.checkCurrent(ctx); err != nil {
			pool.Close()
			return nil, err
		}
	} else if s.migrated, err = s.Migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	if err := pool.QueryRow(ctx, q["CurrentSchema"]).Scan(&s.schema); err != nil {
		pool.Close()
		return nil, Translate(fmt.Errorf("current schema: %w", err))
	}
	if err := s.settle(ctx, opts.Entry, opts.AdoptEntry, opts.ReadOnly); err != nil {
		pool.Close()
		return nil, err
	}
	if !opts.ReadOnly {
		if err := s.ensureIndexes(ctx); err != nil {
			pool.Close()
			return nil, err
		}
	}
	s.enqueueSQL = "SELECT status, seq, tick, \"limit\" FROM " + pgx.Identifier{s.schema, "enqueue_many"}.Sanitize() + "($1, $2, $3, $4, $5, $6, $7, $8)"
	// The schema's name as to_regnamespace reads it: quoted (the name is
	// an identifier of letters, digits and underscores, so no quote or
	// backslash is in it).
	nsName := "'" + pgx.Identifier{s.schema}.Sanitize() + "'"
	if err := pool.QueryRow(ctx, "SELECT current_database()::text, to_regnamespace("+nsName+")::oid").Scan(&s.database, &s.schemaOID); err != nil {
		pool.Close()
		return nil, Translate(fmt.Errorf("the store's database and schema: %w", err))
	}
	s.enqueueTxSQL = s.enqueueSQL + " WHERE current_database() = $9 AND to_regnamespace(" + nsName + ")::oid = $10"
	return s, nil
}

// otherIndex names the runnable index a store of the given entry rule does
// not use.
var otherIndex = map[string]string{"seed": "flow_runnable_fair", "fair": "flow_runnable_seed"}

// settle records the entry rule when the store has none yet, dropping the
// runnable index the rule does not use (keeping both cost ~15-20 % per
// claim step at 100 000 flows), or checks it against the stored one.
func (s *Store) settle(ctx context.Context, entry string, adopt, readOnly bool) error {
	if _, ok := otherIndex[entry]; !ok {
		return fmt.Errorf("entry rule %q: want seed or fair", entry)
	}
	var stored *string
	if err := s.pool.QueryRow(ctx, q["SettingsGet"]).Scan(&stored); err != nil {
		return Translate(fmt.Errorf("read settings: %w", err))
	}
	if stored == nil && readOnly {
		return fmt.Errorf("%w: it records no entry rule yet; run fairrelay migrate on it first (this command writes nothing)", sqlfile.ErrOlderSchema)
	}
	if stored == nil {
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, MigrationLock); err != nil {
				return err
			}
			tag, err := tx.Exec(ctx, q["SettingsSetEntry"], entry)
			if err != nil || tag.RowsAffected() == 0 {
				return err // another process recorded a rule first: read it below
			}
			// An index name cannot be a bind parameter; it comes from
			// otherIndex.
			_, err = tx.Exec(ctx, "DROP INDEX IF EXISTS "+otherIndex[entry])
			return err
		})
		if err != nil {
			return Translate(fmt.Errorf("record the entry rule: %w", err))
		}
		if err := s.pool.QueryRow(ctx, q["SettingsGet"]).Scan(&stored); err != nil {
			return Translate(fmt.Errorf("read settings: %w", err))
		}
	}
	if stored != nil && adopt {
		entry = *stored
	}
	if stored == nil || *stored != entry {
		have := "no"
		if stored != nil {
			have = *stored
		}
		return &store.EntryMismatchError{Stored: have, Asked: entry}
	}
	s.entry = entry
	return nil
}

// dispatchIndexes are the indexes of the dispatch order under each entry
// rule (SPEC §2 step 3, §7, §8): the runnable index of flows that are their
// own group, the member index of each group's runnable flows, and the group
// runnable index. A store keeps only its rule's (keeping both pairs cost
// ~15-20 % per claim step at 100 000 flows).
var dispatchIndexes = map[string][]string{
	"seed": {
		"flow_runnable_seed ON flow (served, flow_id) WHERE runnable AND group_id IS NULL",
		"flow_member_seed ON flow (group_id, served, flow_id) WHERE runnable AND group_id IS NOT NULL",
		"grp_runnable_seed ON grp (served, group_id) WHERE runnable_flows > 0",
	},
	"fair": {
		"flow_runnable_fair ON flow (served, ord) WHERE runnable AND group_id IS NULL",
		"flow_member_fair ON flow (group_id, served, ord) WHERE runnable AND group_id IS NOT NULL",
		"grp_runnable_fair ON grp (served, ord) WHERE runnable_flows > 0",
	},
}

// ensureIndexes creates the dispatch indexes of the store's entry rule that
// it lacks (a new store, or one migration 007 rebuilt them for), under the
// migration lock; an open of a store that has them writes nothing.
func (s *Store) ensureIndexes(ctx context.Context) error {
	var missing []string
	for _, def := range dispatchIndexes[s.entry] {
		name, _, _ := strings.Cut(def, " ")
		var found *string
		if err := s.pool.QueryRow(ctx, q["TableExists"], name).Scan(&found); err != nil {
			return Translate(fmt.Errorf("read schema: %w", err))
		}
		if found == nil {
			missing = append(missing, def)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, MigrationLock); err != nil {
			return err
		}
		for _, def := range missing {
			// The definitions are constants of this file, not input.
			if _, err := tx.Exec(ctx, "CREATE INDEX IF NOT EXISTS "+def); err != nil {
				return err
			}
		}
		return nil
	})
	return Translate(err)
}

// Pool returns the connection pool, for tests that install triggers and for
// callers that open their own transactions for EnqueueTx.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Schema returns the schema the store lives in.
func (s *Store) Schema() string { return s.schema }

// Entry is the entry rule the store records.
func (s *Store) Entry() string { return s.entry }

// ConcurrentWriters reports true: each lane has its own lock and clock row
// (migration 003), and an enqueue locks only its flows (migration 005), so
// claims, settles and enqueues commit side by side.
func (s *Store) ConcurrentWriters() bool { return true }

// Close ends the change watches (Changes) and closes the pool.
func (s *Store) Close() error {
	s.watches.Close()
	s.pool.Close()
	return nil
}

// checkCurrent is Open's check under ReadOnly, which writes nothing: every
// migration applied (sqlfile.ErrOlderSchema or ErrNewerSchema, wrapped,
// otherwise).
func (s *Store) checkCurrent(ctx context.Context) error {
	migs, err := sqlfile.Migrations(migrationsFS, "migrations")
	if err != nil {
		return err
	}
	db := stdlib.OpenDBFromPool(s.pool)
	defer db.Close()
	return Translate(sqlfile.Check(ctx, db, "fairrelay_migration", migs))
}

// Migrated returns the versions of the migrations Open applied, in order
// (nil: none).
func (s *Store) Migrated() []int { return s.migrated }

// Migrate applies the embedded migrations the schema lacks, each in its own
// transaction under MigrationLock, and returns the versions applied.
func (s *Store) Migrate(ctx context.Context) ([]int, error) {
	db := stdlib.OpenDBFromPool(s.pool)
	defer db.Close()
	return Migrate(ctx, db, s.schema, migrationsFS, "migrations", "event")
}

// CurrentSchemaWhere names the connection's current schema, cur, in an
// error about a URL without schema=: "the connection's current schema
// (public)". It said no name, and a reader had to know PostgreSQL's
// search_path to find it (a fresh user's report).
func CurrentSchemaWhere(cur string) string {
	return "the connection's current schema (" + cur + ")"
}

// NoSchemaQuery reads the connection's current schema (NULL when its
// search_path names no schema that exists) and its search_path.
const NoSchemaQuery = "SELECT current_schema(), current_setting('search_path')"

// NoSchemaError is the error of a URL without schema= whose search_path
// (path) names no schema that exists: there is no schema to create a store
// in, and PostgreSQL's own answer ("no schema has been selected to create
// in") came out as "not a fairrelay database".
func NoSchemaError(path string) error {
	return fmt.Errorf("the connection's search_path (%s) names no schema that exists: give schema=NAME in the URL, which is created on first use, or create the schema first", path)
}

// missingDatabase is the error of a database the server does not have:
// it matches store.ErrMissing and store.ErrNoDatabase (errors.Is) and
// wraps the server's error.
type missingDatabase struct{ err error }

func (e missingDatabase) Error() string {
	return "the database does not exist on the server: create it first, e.g. createdb: " + e.err.Error()
}
func (e missingDatabase) Unwrap() error { return e.err }
func (e missingDatabase) Is(target error) bool {
	return target == store.ErrMissing || target == store.ErrNoDatabase
}

// SQLSTATE codes that mean "nothing was changed; the caller may retry".
var busyCodes = map[string]bool{
	"40001": true, // serialization_failure
	"40P01": true, // deadlock_detected
	"55P03": true, // lock_not_available (lock_timeout)
	"53300": true, // too_many_connections
	"57P03": true, // cannot_connect_now (server starting or shutting down)
	"FR006": true, // enqueue_many: ten start-overs, each after losing a race for an id (migration 023)
}

// SQLSTATE codes that mean the server does not hold the database asked for.
// deadlockError marks a deadlock_detected error as store.ErrDeadlock
// without changing its text.
type deadlockError struct{ error }

func (e deadlockError) Is(target error) bool { return target == store.ErrDeadlock }
func (e deadlockError) Unwrap() error        { return e.error }

// refusedSettings are the SQLSTATEs of a server that refused a connection
// for its startup settings: trying again changes nothing.
var refusedSettings = map[string]bool{
	"42704": true, // undefined_object: unrecognized configuration parameter
	"22023": true, // invalid_parameter_value
	"28000": true, // invalid_authorization_specification: no such role, pg_hba
	"28P01": true, // invalid_password
	"55P02": true, // cant_change_runtime_param: a setting fixed at server start
	"42501": true, // insufficient_privilege: a setting this role may not set, or no CONNECT
}

var notDatabaseCodes = map[string]bool{
	"3F000": true, // invalid_schema_name
	"42P01": true, // undefined_table
	// undefined_column: a table of the store without a column this
	// version reads, so not the store it opened: made again under it by
	// another migrate, seen half done (a fresh user dropped and migrated a
	// schema under a running relay, which retried and went on in the new
	// store with its old clock). Open refuses a store of another version
	// before any such query.
	"42703": true,
}

// Translate maps PostgreSQL errors to the store's sentinels, keeping the
// original error in the chain. It is the one place where driver errors are
// interpreted (STYLE §7); the inbox's PostgreSQL opener uses it too.
func Translate(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, puddle.ErrClosedPool) || store.IsClosedDB(err) {
		return fmt.Errorf("%w: %w", store.ErrClosed, err)
	}
	var pe *pgconn.PgError
	var ce *pgconn.ConnectError
	if errors.As(err, &pe) {
		switch {
		case errors.As(err, &ce) && refusedSettings[pe.Code]:
			return fmt.Errorf("%w (a URL parameter that is neither schema nor a PostgreSQL setting, a value it does not take, or the user or password): %w", store.ErrRefusedSettings, err)
		case pe.Code == "FR001": // enqueue_many: clock_regressed
			var at, stored int64
			fmt.Sscanf(pe.Detail, "%d %d", &at, &stored)
			return &store.ClockRegressedError{At: at, Stored: stored}
		case pe.Code == "FR002": // enqueue_many: invalid input, the field in DETAIL
			// In a call of many events the message leads with "event
			// <i> of <n>: " (migrations 026, 028): the item.
			var item, n int
			if _, err := fmt.Sscanf(pe.Message, "event %d of %d:", &item, &n); err != nil {
				item = 0
			}
			return &store.InvalidError{Field: pe.Detail, Message: pe.Message, Item: item}
		case pe.Code == "55P03": // lock_not_available: lock_timeout ran out
			return fmt.Errorf("%w: another transaction held a row or table this call needs past the lock timeout (in a queue store: a flow, an event id or a group's limit; in an inbox: a flow's projection or a receipt); nothing was changed, try again: %w", store.ErrBusy, err)
		case pe.Code == "40P01": // deadlock_detected
			return fmt.Errorf("%w: a deadlock with another transaction; nothing was changed, try again (in a transaction of your own, roll it back and run it again): %w", store.ErrBusy, deadlockError{err})
		case busyCodes[pe.Code]:
			return fmt.Errorf("%w: %w", store.ErrBusy, err)
		case pe.Code == "3D000": // invalid_catalog_name: no such database
			// Nothing is there, not something else (store.ErrMissing),
			// whichever kind of store was asked for: ErrMissing's own
			// words, "no queue store there", are not printed (an inbox's
			// open said them).
			return missingDatabase{err}
		case notDatabaseCodes[pe.Code]:
			return fmt.Errorf("%w: %w", store.ErrNotDatabase, err)
		}
	}
	return err
}
