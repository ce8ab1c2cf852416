package fairrelay_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/internal/store/pgstore"
)

// TestOpenPostgresRefusesWhatIsNotAQueue checks the PostgreSQL side of the
// guards that keep a typo from passing as an empty store: MustExist on a
// schema without a queue, a queue opened on an inbox's schema and the
// reverse, a bad schema name, and an unreachable server (a database error,
// not invalid input).
func TestOpenPostgresRefusesWhatIsNotAQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	missing := pgtest.Schema(t, "frt_missing")
	_, err := fairrelay.Open(ctx, missing, fairrelay.Config{MustExist: true})
	if fairrelay.CodeOf(err) != fairrelay.CodeInvalidInput || !strings.Contains(err.Error(), "holds no queue store") {
		t.Fatalf("MustExist on an empty schema: %v", err)
	}
	if _, err := fairrelay.Open(ctx, missing, fairrelay.Config{MustExist: true}); err == nil {
		t.Fatal("the refused open created the store")
	}

	inboxDSN := pgtest.Schema(t, "frt_inbox")
	in, err := inbox.Open(ctx, inboxDSN, inbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	in.Close()
	_, err = fairrelay.Open(ctx, inboxDSN, fairrelay.Config{})
	if fairrelay.CodeOf(err) != fairrelay.CodeNotDatabase || !strings.Contains(err.Error(), "holds a fairrelay inbox") {
		t.Fatalf("queue on an inbox schema: %v", err)
	}

	queueDSN := pgtest.Schema(t, "frt_queue")
	q, err := fairrelay.Open(ctx, queueDSN, fairrelay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	_, err = inbox.Open(ctx, queueDSN, inbox.Options{})
	if fairrelay.CodeOf(err) != fairrelay.CodeNotDatabase || !strings.Contains(err.Error(), "holds a fairrelay queue store") {
		t.Fatalf("inbox on a queue schema: %v", err)
	}

	// An application's own table named event is not a queue store: a queue
	// store that must exist is missing there (enqueue tried to make one and
	// failed in migration 001: a fresh user's report), and an inbox may be
	// made beside it.
	appDSN := pgtest.Schema(t, "frt_app")
	appSchema := pgx.Identifier{strings.SplitN(strings.SplitN(appDSN, "schema=", 2)[1], "&", 2)[0]}.Sanitize()
	pgtest.Exec(t, pgtest.URL(t), "CREATE SCHEMA "+appSchema+"; CREATE TABLE "+appSchema+".event (id serial PRIMARY KEY, name text)")
	_, err = fairrelay.Open(ctx, appDSN, fairrelay.Config{MustExist: true})
	if !errors.Is(err, fairrelay.ErrInvalidInput) || !strings.Contains(err.Error(), "holds no queue store") {
		t.Fatalf("MustExist on a schema with an application's event table: %v, want no queue store there", err)
	}
	in, err = inbox.Open(ctx, appDSN, inbox.Options{})
	if err != nil {
		t.Fatalf("an inbox beside an application's event table: %v", err)
	}
	in.Close()

	base := pgtest.URL(t)
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	_, err = fairrelay.Open(ctx, base+sep+"schema=bad-name", fairrelay.Config{})
	if fairrelay.CodeOf(err) != fairrelay.CodeInvalidInput {
		t.Fatalf("bad schema name: %v", err)
	}
	// Upper case: hand-written SQL (relay.enqueue) would fold it to
	// another schema's name; refused, naming the lower-case one.
	_, err = fairrelay.Open(ctx, base+sep+"schema=Frt_Upper", fairrelay.Config{})
	if fairrelay.CodeOf(err) != fairrelay.CodeInvalidInput || !strings.Contains(err.Error(), "schema=frt_upper") {
		t.Fatalf("upper-case schema name: %v, want invalid_input naming schema=frt_upper", err)
	}
	if _, err := inbox.Open(ctx, base+sep+"schema=Frt_Upper_Inbox", inbox.Options{}); fairrelay.CodeOf(err) != fairrelay.CodeInvalidInput || !strings.Contains(err.Error(), "schema=frt_upper_inbox") {
		t.Fatalf("inbox in a new upper-case schema: %v, want invalid_input naming schema=frt_upper_inbox", err)
	}
	// A search_path (no schema=) that names no schema that exists leaves
	// none to create a store in: said so, invalid input, not "not a
	// fairrelay database" from the migration's failure (a breaker's sweep).
	typo := fmt.Sprintf("frt_no_such_schema_%d", time.Now().UnixNano())
	if _, err := fairrelay.Open(ctx, base+sep+"search_path="+typo, fairrelay.Config{}); fairrelay.CodeOf(err) != fairrelay.CodeInvalidInput || !strings.Contains(err.Error(), "search_path ("+typo+") names no schema that exists") {
		t.Fatalf("queue on a search_path of no schema: %v, want invalid_input saying so", err)
	}
	if _, err := inbox.Open(ctx, base+sep+"search_path="+typo, inbox.Options{}); fairrelay.CodeOf(err) != fairrelay.CodeInvalidInput || !strings.Contains(err.Error(), "search_path ("+typo+") names no schema that exists") {
		t.Fatalf("inbox on a search_path of no schema: %v, want invalid_input saying so", err)
	}
	// A store an earlier build made in such a schema is still opened (a
	// second fresh user's report: every command refused it, pointing at
	// an empty lower-case schema).
	old := fmt.Sprintf("Frt_Old_%d", time.Now().UnixNano())
	pgtest.Exec(t, base, `CREATE SCHEMA `+pgx.Identifier{old}.Sanitize())
	t.Cleanup(func() { pgtest.Exec(t, base, `DROP SCHEMA `+pgx.Identifier{old}.Sanitize()+` CASCADE`) })
	oq, err := fairrelay.Open(ctx, base+sep+"schema="+old, fairrelay.Config{})
	if err != nil {
		t.Fatalf("a store in the existing schema %q: %v", old, err)
	}
	if r, err := oq.Enqueue(ctx, fairrelay.EnqueueParams{ID: "a", Flow: "f", Body: []byte(`{"delta":1}`), At: fairrelay.AtStored}); err != nil || r.Status != fairrelay.EnqueueCreated {
		t.Fatalf("enqueue in %q: %+v %v", old, r, err)
	}
	oq.Close()
	_, err = fairrelay.Open(ctx, "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2", fairrelay.Config{})
	if fairrelay.CodeOf(err) != fairrelay.CodeDatabase {
		t.Fatalf("unreachable server: %v, want a database error", err)
	}

	// A database that does not exist on the server: invalid input that
	// says so, not "not a fairrelay database" (something else is there).
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/frt_no_such_database"
	_, err = fairrelay.Open(ctx, u.String(), fairrelay.Config{})
	if fairrelay.CodeOf(err) != fairrelay.CodeInvalidInput || !strings.Contains(err.Error(), "database does not exist") || strings.Contains(err.Error(), "not a fairrelay database") {
		t.Fatalf("queue on a missing database: %v", err)
	}
	// MustExist's Go hint (Open without it creates the store) is not
	// given where Open would create no database either.
	_, err = fairrelay.Open(ctx, u.String(), fairrelay.Config{MustExist: true})
	if fe := (*fairrelay.Error)(nil); !errors.As(err, &fe) || fe.Hint != "" || !strings.Contains(err.Error(), "database does not exist") {
		t.Fatalf("MustExist queue on a missing database: %v, want no hint", err)
	}
	_, err = inbox.Open(ctx, u.String(), inbox.Options{})
	if fairrelay.CodeOf(err) != fairrelay.CodeInvalidInput || !strings.Contains(err.Error(), "database does not exist") || !strings.Contains(err.Error(), "inbox") {
		t.Fatalf("inbox on a missing database: %v", err)
	}
	// Said once, and of the inbox: it read "inbox: inbox: … (no queue
	// store there)" (a breaker's sweep).
	if strings.Contains(err.Error(), "queue store") || strings.Count(err.Error(), "inbox:") != 1 {
		t.Fatalf("inbox on a missing database: %v, want it named once, without a queue store", err)
	}
}

// TestOpenPostgresNamesRefusedSettings: a URL whose settings the server
// refuses at connection — a parameter that is neither schema nor a
// PostgreSQL setting (a misspelt schema=), a value it does not take, a
// role that does not exist — and a URL that gives a parameter twice are
// the caller's input (invalid_input naming queue or inbox), not "database
// server unavailable", which says to try again once it is back (a fresh
// user's report). Nothing is created: the schema the URL means holds
// nothing after.
func TestOpenPostgresNamesRefusedSettings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.Schema(t, "frt_refused")
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("schema")
	noSchema := strings.Replace(dsn, "schema="+schema, "shema="+schema, 1)
	role := *u
	role.User = url.User("fairrelay_no_such_role")
	for name, bad := range map[string]string{
		"misspelt schema":    noSchema,
		"bad value":          dsn + "&statement_timeout=soon",
		"fixed at start":     dsn + "&max_connections=5",
		"unknown role":       role.String(),
		"schema given twice": dsn + "&schema=" + schema + "x",
	} {
		_, err := fairrelay.Open(ctx, bad, fairrelay.Config{})
		var fe *fairrelay.Error
		if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != "queue" {
			t.Errorf("%s: queue: %v, want invalid_input naming queue", name, err)
		}
		_, err = inbox.Open(ctx, bad, inbox.Options{})
		if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != "inbox" {
			t.Errorf("%s: inbox: %v, want invalid_input naming inbox", name, err)
		}
	}
	_, err = fairrelay.Open(ctx, dsn, fairrelay.Config{MustExist: true})
	if fairrelay.CodeOf(err) != fairrelay.CodeInvalidInput || !strings.Contains(err.Error(), "holds no queue store") {
		t.Fatalf("after the refused opens, the schema: %v, want no queue store in it", err)
	}
}

// Opening a queue store or an inbox that exists and is migrated takes no
// lock that other stores' migrations hold: the migration lock is one key
// for every schema of the database, so an open waiting on it waited for any
// other store's migrations, and with a short busy timeout failed busy (CI:
// a 1 ms busy timeout beside parallel tests' migrations).
func TestOpeningAMigratedStoreWaitsForNoOtherMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	queueDSN, inboxDSN := pgtest.Schema(t, "frt_nolockq"), pgtest.Schema(t, "frt_nolocki")
	q, err := fairrelay.Open(ctx, queueDSN, fairrelay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	in, err := inbox.Open(ctx, inboxDSN, inbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	in.Close()

	// Another store's migration under way: its transaction holds the lock.
	conn := pgtest.Connect(t, pgtest.URL(t))
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, pgstore.MigrationLock); err != nil {
		t.Fatal(err)
	}
	q, err = fairrelay.Open(ctx, queueDSN, fairrelay.Config{BusyTimeout: time.Millisecond})
	if err != nil {
		t.Errorf("open a migrated queue store while another store migrates, BusyTimeout 1ms: %v", err)
	} else {
		q.Close()
	}
	in, err = inbox.Open(ctx, inboxDSN, inbox.Options{BusyTimeout: time.Millisecond})
	if err != nil {
		t.Errorf("open a migrated inbox while another store migrates, BusyTimeout 1ms: %v", err)
	} else {
		in.Close()
	}
}

// A connection that fails while the store is opened (a server crash, a
// network reset) is a database error, which a daemon waits out, not bad
// input: Open answered invalid_input "queue: cannot open: … connection
// reset by peer", and relay exited 2 at start (a breaker's report; receive
// waited). Both a store that exists and one that Open creates (migrate).
func TestPostgresOpenOnAConnectionCutMidwayIsADatabaseError(t *testing.T) {
	t.Parallel()
	for _, exists := range []bool{true, false} {
		dsn := pgtest.Schema(t, "fropencut")
		if exists {
			q, err := fairrelay.Open(t.Context(), dsn, fairrelay.Config{})
			if err != nil {
				t.Fatal(err)
			}
			q.Close()
		}
		proxy, via := pgtest.NewCutProxy(t, dsn)
		proxy.Arm(true)
		_, err := fairrelay.Open(t.Context(), via, fairrelay.Config{})
		if !errors.Is(err, fairrelay.ErrDatabase) || errors.Is(err, fairrelay.ErrInvalidInput) {
			t.Errorf("store exists %v: Open over a connection cut midway: %v, want ErrDatabase", exists, err)
		}
		proxy.Arm(false)
		q, err := fairrelay.Open(t.Context(), via, fairrelay.Config{})
		if err != nil {
			t.Fatalf("store exists %v: Open once the connection holds: %v", exists, err)
		}
		q.Close()
	}
}
