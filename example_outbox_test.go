package fairrelay_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/internal/store/pgstore"
)

// The transactional outbox on SQLite: the business write (an order) and its
// event commit together in the caller's *sql.Tx, or roll back together.
func ExampleQueue_EnqueueTx() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "fairrelay-outbox-")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "shop.db")

	q, err := fairrelay.Open(ctx, path, fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	// The application's own pool on the same file, with fairrelay's DSN:
	// BEGIN IMMEDIATE takes SQLite's write lock at BEGIN, as fairrelay's own
	// transactions do, and WAL with synchronous=FULL keeps commits durable.
	db, err := sql.Open("sqlite", fairrelay.SQLiteDSN(path))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY, total INTEGER NOT NULL)`); err != nil {
		log.Fatal(err)
	}

	placeOrder := func(id string, total int, commit bool) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			log.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, total) VALUES ($1, $2)`, id, total); err != nil {
			log.Fatal(err)
		}
		r, err := q.EnqueueTx(ctx, tx, fairrelay.EnqueueParams{
			ID: "order-placed-" + id, Flow: "customer-7", Body: fmt.Appendf(nil, `{"delta":%d}`, total),
			At: fairrelay.AtStored, // the store's tick, read in tx: a producer does not know the relay's clock
		})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: event %s, seq %d\n", id, r.Status, r.Seq)
		if commit {
			if err := tx.Commit(); err != nil {
				log.Fatal(err)
			}
		}
	}
	placeOrder("o1", 30, true)
	placeOrder("o2", 45, false) // rolled back: neither the order nor its event

	var orders int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM orders`).Scan(&orders); err != nil {
		log.Fatal(err)
	}
	s, err := q.Snapshot(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("orders: %d, events: %d (%s)\n", orders, len(s.Events), s.Events[0].ID)
	_, err = q.Event(ctx, "order-placed-o2")
	fmt.Println("order-placed-o2 not found:", errors.Is(err, fairrelay.ErrNotFound))
	// Output:
	// o1: event created, seq 1
	// o2: event created, seq 2
	// orders: 1, events: 1 (order-placed-o1)
	// order-placed-o2 not found: true
}

// The transactional outbox on PostgreSQL: the queue store lives in its own
// schema (schema=relay in the URL) of the application's database, and
// EnqueueTx runs inside the application's pgx.Tx — a *sql.Tx of pgx's stdlib
// driver works the same way. The application's tables keep their meaning:
// the queue's schema is put first on search_path only for fairrelay's own
// statements. It assumes the application's table orders (id TEXT PRIMARY
// KEY, total INT); TestEnqueueTxPostgres runs the same steps against a real
// server (this example has no Output block, so go test only compiles it).
func ExampleQueue_EnqueueTx_postgres() {
	ctx := context.Background()
	const url = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	q, err := fairrelay.Open(ctx, url+"&schema=relay", fairrelay.Config{Policy: fairrelay.DaemonPolicy()})
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// The enqueue waits for a flow another transaction holds as long as
		// this transaction's lock_timeout allows (PostgreSQL's default: no
		// limit); past it, it fails with fairrelay.ErrBusy.
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '5s'"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, total) VALUES ($1, $2)`, "o1", 30); err != nil {
			return err
		}
		// At: AtStored writes at the store's tick, whatever tick the relay
		// beside it has reached (a producer does not know the relay's clock).
		_, err := q.EnqueuePgxTx(ctx, tx, fairrelay.EnqueueParams{ID: "order-placed-o1", Flow: "customer-7", Body: []byte(`{"delta":30}`), At: fairrelay.AtStored})
		return err // nil commits both; an error rolls both back
	})
	if err != nil {
		log.Fatal(err)
	}
}

// TestEnqueueTxPostgres is the PostgreSQL outbox on a real server: a
// business row and its event commit together through a pgx.Tx and through
// a *sql.Tx, a rollback leaves neither, and the business table (in the
// connection's own schema) keeps its meaning around fairrelay's statements
// although the queue store lives in another schema.
func TestEnqueueTxPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	queueDSN := pgtest.Schema(t, "frox_q")
	appDSN := pgtest.Schema(t, "frox_app")
	q, err := fairrelay.Open(ctx, queueDSN, fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	// The application's schema: create it and its table (and an "event"
	// table of its own, which fairrelay's statements must not touch).
	appURL, appSchema, err := pgstore.ParseDSN(appDSN)
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, appDSN, `CREATE SCHEMA `+pgx.Identifier{appSchema}.Sanitize()+`;
CREATE TABLE orders (id TEXT PRIMARY KEY, total INT NOT NULL); CREATE TABLE event (note TEXT)`)
	cfg, err := pgxpool.ParseConfig(appURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = appSchema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()

	enqueue := func(tx any, id string) {
		t.Helper()
		p := fairrelay.EnqueueParams{ID: "placed-" + id, Flow: "c7", Body: []byte(`{"delta":1}`)}
		var r fairrelay.EnqueueResult
		var err error
		switch tx := tx.(type) {
		case pgx.Tx:
			r, err = q.EnqueuePgxTx(ctx, tx, p)
		case *sql.Tx:
			r, err = q.EnqueueTx(ctx, tx, p)
		}
		if err != nil || r.Status != fairrelay.EnqueueCreated {
			t.Fatalf("EnqueueTx %s: %+v %v", id, r, err)
		}
	}
	// pgx.Tx, committed.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders VALUES ('o1', 30)`); err != nil {
			return err
		}
		enqueue(tx, "o1")
		// The caller's unqualified names still resolve in its own schema.
		_, err := tx.Exec(ctx, `INSERT INTO event (note) VALUES ('the app''s own table')`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// pgx.Tx, rolled back.
	errRollback := errors.New("roll back")
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders VALUES ('o2', 45)`); err != nil {
			return err
		}
		enqueue(tx, "o2")
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		t.Fatal(err)
	}
	// *sql.Tx, committed and rolled back.
	for _, c := range []struct {
		id     string
		commit bool
	}{{"o3", true}, {"o4", false}} {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders VALUES ($1, 1)`, c.id); err != nil {
			t.Fatal(err)
		}
		enqueue(tx, c.id)
		if c.commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
	}

	var orders []string
	rows, err := pool.Query(ctx, `SELECT id FROM orders ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	if orders, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	s, err := q.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	for _, e := range s.Events {
		events = append(events, fmt.Sprintf("%s@%d", e.ID, e.Seq))
	}
	if fmt.Sprint(orders) != "[o1 o3]" || fmt.Sprint(events) != "[placed-o1@1 placed-o3@2]" {
		t.Fatalf("orders %v, events %v: want [o1 o3] and [placed-o1@1 placed-o3@2]", orders, events)
	}
	var notes int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM event`).Scan(&notes); err != nil || notes != 1 {
		t.Fatalf("the app's own event table has %d rows (%v), want 1", notes, err)
	}
	// A nil transaction is refused, naming the field.
	_, err = q.EnqueueTx(ctx, nil, fairrelay.EnqueueParams{ID: "x", Flow: "c7", Body: []byte(`{"delta":1}`)})
	var fe *fairrelay.Error
	if !errors.As(err, &fe) || fe.Field != "tx" {
		t.Fatalf("EnqueueTx with nil: %v, want an invalid_input error naming tx", err)
	}
}

// EnqueueTx on PostgreSQL takes a transaction on the Queue's own store
// only: a transaction on another database that holds a store in a schema
// of the same name (another service's relay, say) is invalid_input naming
// tx, through a pgx.Tx and through a *sql.Tx, and nothing is written to
// either store, although the transaction then commits.
func TestEnqueueTxPostgresRefusesAnotherDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	queueDSN := pgtest.Schema(t, "frox_db")
	_, schema, err := pgstore.ParseDSN(queueDSN)
	if err != nil {
		t.Fatal(err)
	}
	q, err := fairrelay.Open(ctx, queueDSN, fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	// Another database, with a store in a schema of the same name.
	otherDSN := pgtest.Database(t, "frox_other") + "&schema=" + schema
	other, err := fairrelay.Open(ctx, otherDSN, fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	otherURL, _, err := pgstore.ParseDSN(otherDSN)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, otherURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()

	p := fairrelay.EnqueueParams{ID: "x1", Flow: "X", Body: []byte(`{"delta":1}`), At: fairrelay.AtStored}
	refused := func(how string, err error) {
		t.Helper()
		var fe *fairrelay.Error
		if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != "tx" {
			t.Errorf("%s on another database: %v, want invalid_input naming tx", how, err)
		}
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := q.EnqueuePgxTx(ctx, tx, p)
		refused("pgx.Tx", err)
		return nil // commit
	}); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = q.EnqueueTx(ctx, tx, p)
	refused("*sql.Tx", err)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*fairrelay.Queue{"the queue": q, "the other database's store": other} {
		if snap, err := s.Snapshot(ctx); err != nil || len(snap.Events) != 0 {
			t.Errorf("%s after the refused calls: %+v %v, want no events", name, snap.Events, err)
		}
	}
	// The Queue's own database still takes the call.
	own, err := pgxpool.New(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	if err := pgx.BeginFunc(ctx, own, func(tx pgx.Tx) error {
		r, err := q.EnqueuePgxTx(ctx, tx, p)
		if err != nil || r.Status != fairrelay.EnqueueCreated {
			t.Errorf("on the Queue's own database: %+v %v, want created", r, err)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// The store's SQL functions never read the caller's temporary tables (a
// breaker: a session holding TEMP tables shaped like the store's event and
// flow tables took enqueue_many's writes, answering created, and the event
// was gone with the session): EnqueueTx and the SQL function enqueue, on a
// session that holds them, write the store's tables only.
func TestEnqueueTxPostgresIgnoresTemporaryTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	queueDSN := pgtest.Schema(t, "frox_tmp")
	_, schema, err := pgstore.ParseDSN(queueDSN)
	if err != nil {
		t.Fatal(err)
	}
	q, err := fairrelay.Open(ctx, queueDSN, fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	s := pgx.Identifier{schema}.Sanitize()
	for _, table := range []string{"event", "flow", "name_claim", "clock"} {
		if _, err := conn.Exec(ctx, "CREATE TEMP TABLE "+table+" (LIKE "+s+"."+table+" INCLUDING ALL)"); err != nil {
			t.Fatal(err)
		}
	}
	if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		r, err := q.EnqueuePgxTx(ctx, tx, fairrelay.EnqueueParams{ID: "t1", Flow: "T", Body: []byte(`{"delta":1}`), At: fairrelay.AtStored})
		if err != nil || r.Status != fairrelay.EnqueueCreated {
			t.Errorf("EnqueuePgxTx beside temporary tables: %+v %v, want created", r, err)
		}
		var status string
		if err := tx.QueryRow(ctx, "SELECT status FROM "+s+".enqueue('t2', 'T', '{\"delta\":1}'::bytea)").Scan(&status); err != nil || status != "created" {
			t.Errorf("the SQL function enqueue beside temporary tables: %q %v, want created", status, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"event", "flow", "name_claim", "clock"} {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_temp."+table).Scan(&n); err != nil || n != 0 {
			t.Errorf("temporary table %s: %d rows %v, want none", table, n, err)
		}
	}
	snap, err := q.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Events) != 2 {
		t.Errorf("the store holds %d events, want t1 and t2: %+v", len(snap.Events), snap.Events)
	}
	if c, err := q.Claim(ctx, fairrelay.ClaimParams{At: fairrelay.AtStored}); err != nil || len(c.Claims) != 1 || c.Claims[0].Token.EventID != "t1" {
		t.Errorf("claim after: %+v %v, want t1 claimed", c, err)
	}
	// Every function of the schema, those later migrations make included,
	// puts pg_temp last on its search_path.
	rows, err := conn.Query(ctx, `SELECT p.proname, coalesce(array_to_string(p.proconfig, ' '), '') FROM pg_proc p
		WHERE p.pronamespace = $1::regnamespace AND p.prokind = 'f'`, s)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var name, config string
		if err := rows.Scan(&name, &config); err != nil {
			t.Fatal(err)
		}
		n++
		if !strings.Contains(config, "search_path="+schema+", pg_temp") {
			t.Errorf("function %s runs with %q, want search_path=%s, pg_temp", name, config, schema)
		}
	}
	if err := rows.Err(); err != nil || n == 0 {
		t.Fatalf("%d functions, %v", n, err)
	}
}

// EnqueueTx given a transaction of the other backend's driver — a SQLite
// *sql.Tx to a PostgreSQL queue, a PostgreSQL one (pgx's stdlib) to a
// SQLite queue — is invalid_input naming tx, as its doc says of any
// transaction not on the Queue's store, and writes nothing (a Go API
// breaker's report: the PostgreSQL queue answered a database error, "sql:
// converting argument $1 type: unsupported type []string", which a
// monitoring rule takes for a sick database).
func TestEnqueueTxRefusesATransactionOfTheOtherBackend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pq, err := fairrelay.Open(ctx, pgtest.Schema(t, "frox_drv"), fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		t.Fatal(err)
	}
	defer pq.Close()
	path := filepath.Join(t.TempDir(), "q.db")
	sq, err := fairrelay.Open(ctx, path, fairrelay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer sq.Close()
	sdb, err := sql.Open("sqlite", fairrelay.SQLiteDSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	pdb, err := sql.Open("pgx", pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pdb.Close()
	p := fairrelay.EnqueueParams{ID: "x1", Flow: "X", Body: []byte(`{"delta":1}`), At: fairrelay.AtStored}
	for name, c := range map[string]struct {
		q  *fairrelay.Queue
		db *sql.DB
	}{
		"a SQLite *sql.Tx to a PostgreSQL queue": {pq, sdb},
		"a PostgreSQL *sql.Tx to a SQLite queue": {sq, pdb},
	} {
		tx, err := c.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.q.EnqueueTx(ctx, tx, p)
		var fe *fairrelay.Error
		if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != "tx" {
			t.Errorf("%s: %v, want invalid_input naming tx", name, err)
		}
		tx.Rollback()
	}
	for name, q := range map[string]*fairrelay.Queue{"PostgreSQL": pq, "SQLite": sq} {
		if snap, err := q.Snapshot(ctx); err != nil || len(snap.Events) != 0 {
			t.Errorf("the %s queue after the refused calls: %+v %v, want no events", name, snap.Events, err)
		}
	}
}
