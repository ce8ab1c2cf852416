// Package outboxbench measures fairrelay as the outbox of an application
// (issue 14): the business transactions that enqueue with EnqueueTx against
// the same transactions writing one row to a plain outbox table (RunTxn),
// the enqueue-to-delivery latency of events committed by another OS process
// and the CPU of an idle relay (RunLatency). `fairrelay bench outbox` prints
// what they return; the Watermill comparison (bench/watermill, a module of
// its own) reuses the adapters (adapt.go) and the order check.
//
// Every figure is a rate or a latency on a shared machine: compare the
// figures of one run with each other (ratios), not with another run's.
package outboxbench

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fairrelay/fairrelay/internal/store/pgstore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite" // database/sql driver "sqlite", the library's own
)

// The business tables of the benchmarks' application: an order per
// transaction, and for the plain variant the outbox row it writes instead
// of EnqueueTx (the cheapest outbox there is: one insert, no ordering).
const (
	pgBusinessDDL = `CREATE TABLE orders (id TEXT PRIMARY KEY, flow TEXT NOT NULL, total BIGINT NOT NULL);
CREATE TABLE outbox (id BIGSERIAL PRIMARY KEY, flow TEXT NOT NULL, body BYTEA NOT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT now())`
	sqliteBusinessDDL = `CREATE TABLE orders (id TEXT PRIMARY KEY, flow TEXT NOT NULL, total INTEGER NOT NULL);
CREATE TABLE outbox (id INTEGER PRIMARY KEY, flow TEXT NOT NULL, body BLOB NOT NULL, created_at INTEGER NOT NULL DEFAULT (unixepoch()))`
	insertOrder  = `INSERT INTO orders (id, flow, total) VALUES ($1, $2, $3)`
	insertOutbox = `INSERT INTO outbox (flow, body) VALUES ($1, $2)`
)

// PGEnvVar names the environment variable that points the benchmarks at a
// PostgreSQL server, as it does the tests (internal/pgtest).
const PGEnvVar = "FAIRRELAY_PG_URL"

// DefaultPG returns $FAIRRELAY_PG_URL, else the tests' server on loopback.
func DefaultPG() string {
	if u := os.Getenv(PGEnvVar); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// Backend names, as the reports print them.
const (
	BackendPostgres = "postgres"
	BackendSQLite   = "sqlite"
)

// RandomName returns prefix_ and 10 random hex digits: a schema, table or
// application name nobody else uses on a shared server.
func RandomName(prefix string) string {
	var b [5]byte
	rand.Read(b[:])
	return prefix + "_" + hex.EncodeToString(b[:])
}

// WithParams returns the URL u with the query parameters kv (name, value,
// name, value …) set.
func WithParams(u string, kv ...string) (string, error) {
	p, err := url.Parse(u)
	if err != nil {
		// Not url.Parse's words: they quote the URL, password and all
		// (bench timefair --pg printed one; a breaker's report).
		// pgstore.ParseDSN says what is wrong without quoting it.
		if _, _, perr := pgstore.ParseDSN(u); perr != nil {
			return "", fmt.Errorf("PostgreSQL URL: %w", perr)
		}
		return "", errors.New("PostgreSQL URL: not a URL")
	}
	q := p.Query()
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	// A space as %20: PostgreSQL (libpq, pgx) keeps "+" as a plus, so
	// options=-c%20name%3Dvalue came out as -c+name=value and the server
	// refused the connection.
	p.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	return p.String(), nil
}

// PgExec runs sql (one or more statements) on a connection of its own.
func PgExec(ctx context.Context, url, sql string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// DropSchema drops schema and everything in it, whatever ctx says (it is
// cleanup), reporting a failure on stderr.
func DropSchema(ctx context.Context, url, schema string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := PgExec(ctx, url, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		fmt.Fprintf(os.Stderr, "outboxbench: drop schema %s: %v\n", schema, err)
	}
}

// pgBusiness creates a fresh schema holding the business tables and
// returns the URL whose connections work in it (search_path) and a
// function that drops it.
func pgBusiness(ctx context.Context, base string) (appURL string, drop func(), err error) {
	schema := RandomName("bench_obapp")
	if err := PgExec(ctx, base, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()+"; SET search_path = "+
		pgx.Identifier{schema}.Sanitize()+"; "+pgBusinessDDL); err != nil {
		DropSchema(ctx, base, schema)
		return "", nil, err
	}
	drop = func() { DropSchema(ctx, base, schema) }
	if appURL, err = WithParams(base, "search_path", schema); err != nil {
		drop()
		return "", nil, err
	}
	return appURL, drop, nil
}

// pgQueue returns the DSN of a fresh queue schema (created by the first
// open), the application name its connections carry (so the server's
// processes serving them can be found), and a function that drops it.
func pgQueue(ctx context.Context, base string) (dsn, appName string, drop func(), err error) {
	schema := RandomName("bench_obq")
	appName = RandomName("fairrelay_bench")
	if dsn, err = WithParams(base, "schema", schema, "application_name", appName); err != nil {
		return "", "", nil, err
	}
	return dsn, appName, func() { DropSchema(ctx, base, schema) }, nil
}

// sqliteBusiness creates the business tables in the SQLite file at path
// (creating the file when needed).
func sqliteBusiness(ctx context.Context, path string) error {
	db, err := sql.Open("sqlite", SQLiteDSN(path))
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, sqliteBusinessDDL)
	return err
}

// removeSQLite removes a SQLite database file and its WAL and shared-memory
// files.
func removeSQLite(path string) {
	for _, suffix := range []string{"", "-wal", "-shm", "-journal"} {
		if err := os.Remove(path + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(os.Stderr, "outboxbench: %v\n", err)
		}
	}
}

// app is the application side of a benchmark: a pool on the business
// database and, unless it writes the plain outbox table, the queue store
// it enqueues to.
type app interface {
	// order runs one business transaction: insert the order id on flow,
	// write its event (EnqueueTx, or one row of the plain outbox table)
	// with the body body() returns at that moment, keep the transaction
	// open for work, commit.
	order(ctx context.Context, id, flow string, body func() []byte, work time.Duration) error
	// outbox is the queue store it enqueues to; nil for the plain table.
	outbox() *Outbox
	close()
}

// pgApp is an application on PostgreSQL: a pgx pool whose connections
// work in the business schema, and pgx transactions.
type pgApp struct {
	pool *pgxpool.Pool
	ob   *Outbox // nil: the plain outbox table
}

func openPgApp(ctx context.Context, appURL string, ob *Outbox, conns int, tracer pgx.QueryTracer) (*pgApp, error) {
	cfg, err := pgxpool.ParseConfig(appURL)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(conns)
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &pgApp{pool: pool, ob: ob}, nil
}

func (a *pgApp) order(ctx context.Context, id, flow string, body func() []byte, work time.Duration) error {
	tx, err := a.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, insertOrder, id, flow, 4200); err != nil {
		return err
	}
	if a.ob != nil {
		err = a.ob.EnqueuePgx(ctx, tx, "order-"+id, flow, body())
	} else {
		_, err = tx.Exec(ctx, insertOutbox, flow, body())
	}
	if err != nil {
		return err
	}
	sleep(ctx, work)
	return tx.Commit(ctx)
}

func (a *pgApp) outbox() *Outbox { return a.ob }

func (a *pgApp) close() { a.pool.Close() }

// sqliteApp is an application on SQLite: a database/sql pool on the queue's
// file (fairrelay.SQLiteDSN: BEGIN IMMEDIATE, WAL, synchronous=FULL).
type sqliteApp struct {
	db *sql.DB
	ob *Outbox
}

func openSQLiteApp(path string, ob *Outbox, conns int) (*sqliteApp, error) {
	db, err := sql.Open("sqlite", SQLiteDSN(path))
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	return &sqliteApp{db: db, ob: ob}, nil
}

func (a *sqliteApp) order(ctx context.Context, id, flow string, body func() []byte, work time.Duration) error {
	tx, err := a.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, insertOrder, id, flow, 4200); err != nil {
		return err
	}
	if a.ob != nil {
		err = a.ob.EnqueueSQL(ctx, tx, "order-"+id, flow, body())
	} else {
		_, err = tx.ExecContext(ctx, insertOutbox, flow, body())
	}
	if err != nil {
		return err
	}
	sleep(ctx, work)
	return tx.Commit()
}

func (a *sqliteApp) outbox() *Outbox { return a.ob }

func (a *sqliteApp) close() { a.db.Close() }

// sleep is the business work after the enqueue: the transaction stays open
// (and keeps whatever locks it took) for d, as it would while the
// application calls another service or computes.
func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// orderBody is an order event's body: a realistic ~100 bytes of JSON, with
// the wall-clock time it was written when sent is set (the latency
// benchmark reads it back at the sink).
func orderBody(id, flow string, sent time.Time) []byte {
	s := fmt.Sprintf(`{"type":"order_placed","order_id":%q,"customer":%q,"total_cents":4200`, id, flow)
	if !sent.IsZero() {
		s += fmt.Sprintf(`,"sent_unix_ns":%d`, sent.UnixNano())
	}
	return []byte(s + "}")
}

// sqlitePath returns a fresh file name in dir.
func sqlitePath(dir, prefix string) string {
	return filepath.Join(dir, RandomName(prefix)+".db")
}

// errorText is err's message on one line.
func errorText(err error) string {
	if err == nil {
		return ""
	}
	return strings.Join(strings.Fields(err.Error()), " ")
}
