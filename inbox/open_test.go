package inbox_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/internal/sqlitetest"
)

// A PostgreSQL URL or schema name that does not parse is the caller's
// input, invalid_input naming inbox, as a queue store answers for its own
// (a breaker: ?schema=a-b was a database error for the inbox), and nothing
// is contacted.
func TestOpenRefusesABadPostgresURLAsInput(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{
		"postgres://postgres@127.0.0.1:5432/test?schema=brk1-dash",
		"postgres://postgres@127.0.0.1:5432/test?schema=1abc",
		"postgres://postgres@127.0.0.1:5432/test?connect_timeout=soon",
	} {
		in, err := inbox.Open(t.Context(), dsn, inbox.Options{})
		if in != nil {
			in.Close()
		}
		var fe *fairrelay.Error
		if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != "inbox" {
			t.Errorf("%s: %v, want invalid_input naming inbox", dsn, err)
		}
	}
}

// Options.ReadOnly (inspect --inbox) reads a current inbox and refuses one
// an older fairrelay made — invalid_input naming inbox, with the migration
// it lacks — without migrating it; an inbox a newer fairrelay migrated is
// invalid_input naming inbox too (it was a database error), as for a
// queue store. Both backends.
func TestReadOnlyOpenMigratesNothing(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			dsn := filepath.Join(t.TempDir(), "inbox.db")
			table := inbox.MigrationTable
			exec := func(stmt string) { sqlitetest.Exec(t, dsn, stmt) }
			versions := func() (n int) {
				sqlitetest.QueryRow(t, dsn, `SELECT count(*) FROM `+table, &n)
				return n
			}
			if backend == "postgres" {
				dsn, table = pgtest.Schema(t, "frinro"), "fairrelay_migration"
				exec = func(stmt string) { pgtest.Exec(t, dsn, stmt) }
				versions = func() (n int) {
					pgtest.QueryRow(t, dsn, `SELECT count(*) FROM fairrelay_migration`, &n)
					return n
				}
			}
			in, err := inbox.Open(ctx, dsn, inbox.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := in.Receive(ctx, inbox.Delivery{EventID: "A1", Flow: "A", Seq: 1, Body: []byte(`{"delta":1}`)}); err != nil {
				t.Fatal(err)
			}
			in.Close()
			in, err = inbox.Open(ctx, dsn, inbox.Options{ReadOnly: true})
			if err != nil {
				t.Fatalf("read-only open of a current inbox: %v", err)
			}
			receipts, err := in.Receipts(ctx, "", 0, 10)
			in.Close()
			if err != nil || len(receipts) != 1 {
				t.Fatalf("read-only open read %v, %v; want A1's receipt", receipts, err)
			}
			refused := func(what string, opts inbox.Options, want string) {
				t.Helper()
				before := versions()
				in, err := inbox.Open(ctx, dsn, opts)
				if in != nil {
					in.Close()
				}
				var fe *fairrelay.Error
				if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != "inbox" || !strings.Contains(err.Error(), want) {
					t.Fatalf("open of %s: %v, want invalid_input naming inbox and saying %q", what, err, want)
				}
				if after := versions(); after != before {
					t.Errorf("open of %s changed the recorded migrations from %d to %d", what, before, after)
				}
			}
			// Migration 002: the held table.
			exec(`DROP TABLE held; DELETE FROM ` + table + ` WHERE version = 2`)
			refused("an inbox one migration behind", inbox.Options{ReadOnly: true}, "lacks migration 2")
			exec(`INSERT INTO ` + table + ` (version, applied_at) VALUES (999, 'later')`)
			refused("an inbox a newer fairrelay migrated", inbox.Options{}, "migration 999")
		})
	}
}

// A SQLite inbox whose file is removed or replaced under a running
// receiver refuses every write with an error, rather than applying to a
// file nobody sees: a broker consumer acked such messages, and their
// effects were gone at its next start (a breaker's report). The error is a
// database error, which the consumer redelivers and the HTTP receiver
// answers 503.
func TestWritesRefuseARemovedOrReplacedFile(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	for _, how := range []string{"removed", "replaced"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, "inbox.db")
			in, err := inbox.Open(ctx, path, inbox.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			d := inbox.Delivery{EventID: "A1", Flow: "A", Seq: 1, Body: []byte(`{"delta":1}`)}
			if out, err := in.Receive(ctx, d); err != nil || out != fairrelay.OutcomeAccepted {
				t.Fatalf("A1: %s %v", out, err)
			}
			for _, suffix := range []string{"", "-wal", "-shm"} {
				if err := os.Rename(path+suffix, filepath.Join(dir, "moved.db"+suffix)); err != nil && !errors.Is(err, os.ErrNotExist) {
					t.Fatal(err)
				}
			}
			if how == "replaced" {
				other, err := inbox.Open(ctx, path, inbox.Options{})
				if err != nil {
					t.Fatal(err)
				}
				other.Close()
			}
			if err := in.Ping(ctx); err == nil || !strings.Contains(err.Error(), "removed or replaced") {
				t.Errorf("Ping (readiness) on a %s file: %v, want an error saying so", how, err)
			}
			for name, write := range map[string]func() error{
				"receive": func() error {
					_, err := in.Receive(ctx, inbox.Delivery{EventID: "A2", Flow: "A", Seq: 2, Body: []byte(`{"delta":1}`)})
					return err
				},
				"hold": func() error {
					_, err := in.Hold(ctx, inbox.Delivery{EventID: "A4", Flow: "A", Seq: 4, Body: []byte(`{"delta":1}`)}, fairrelay.OutcomeGap)
					return err
				},
			} {
				err := write()
				var fe *fairrelay.Error
				if !errors.As(err, &fe) || fe.Code != fairrelay.CodeDatabase || !strings.Contains(err.Error(), "removed or replaced") {
					t.Errorf("%s on a %s file: %v, want a database error saying the file was removed or replaced", name, how, err)
				}
			}
		})
	}
}

// A store name of another scheme, or a SQLite URL form, is invalid_input
// naming inbox with what to write instead, and creates nothing: each was
// taken for a relative file path (a fresh user's postgress:// typo).
func TestOpenRefusesAForeignScheme(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for _, c := range []struct{ dsn, want string }{
		{"postgress://postgres@127.0.0.1:5432/test", "unknown scheme postgress://"},
		{"Postgres://postgres@127.0.0.1:5432/test", "lower case: postgres://"},
		{"sqlite:hand/x.db", "give the SQLite file's path itself"},
		{"file:x.db", "give the SQLite file's path itself"},
		{"i\x00.db", "holds a NUL byte at byte 1"}, // a breaker: no reason given
	} {
		in, err := inbox.Open(t.Context(), c.dsn, inbox.Options{})
		if in != nil {
			in.Close()
		}
		var fe *fairrelay.Error
		if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != "inbox" || !strings.Contains(fe.Message, c.want) {
			t.Errorf("%s: %v, want invalid_input naming inbox saying %q", c.dsn, err, c.want)
		}
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("refused opens left %v", left)
	}
}

// Ping, the receiver's readiness, fails once the database answers but no
// longer holds the inbox (its tables dropped: a PostgreSQL schema dropped or
// restored elsewhere, a failover target without it), where every delivery
// fails with not_a_database. A connection check alone answered ready while
// the receiver answered every request 500 (an SRE's drill).
func TestPingFailsWithoutTheInboxTables(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			dsn := filepath.Join(t.TempDir(), "inbox.db")
			if backend == "postgres" {
				dsn = pgtest.Schema(t, "frinping")
			}
			in, err := inbox.Open(ctx, dsn, inbox.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			if err := in.Ping(ctx); err != nil {
				t.Fatalf("Ping of a new inbox: %v", err)
			}
			if _, err := in.DB().ExecContext(ctx, "DROP TABLE receipt"); err != nil {
				t.Fatal(err)
			}
			err = in.Ping(ctx)
			if !errors.Is(err, fairrelay.ErrNotDatabase) {
				t.Errorf("Ping with the receipts gone: %v, want not_a_database", err)
			}
			_, rerr := in.Receive(ctx, inbox.Delivery{EventID: "A1", Flow: "A", Seq: 1, Body: []byte(`{"delta":1}`)})
			if !errors.Is(rerr, fairrelay.ErrNotDatabase) {
				t.Errorf("Receive with the receipts gone: %v, want not_a_database as Ping", rerr)
			}
		})
	}
}

// Options.MustExist refuses a PostgreSQL schema that holds no inbox —
// invalid_input naming inbox, in a queue store's words, pointing at
// fairrelay migrate --inbox (receive passes it: a misspelt schema= made an
// empty inbox) and at the lower-case name for an upper-case one — and
// creates no schema; without it, Open creates the inbox, as fairrelay.Open
// creates a queue store.
func TestMustExistRefusesAPostgresSchemaWithoutAnInbox(t *testing.T) {
	t.Parallel()
	dsn := pgtest.Schema(t, "frinmust")
	schema := dsn[strings.LastIndex(dsn, "schema=")+len("schema="):]
	exists := func(name string) bool {
		var n int
		pgtest.QueryRow(t, pgtest.URL(t), "SELECT count(*) FROM pg_namespace WHERE nspname = '"+name+"'", &n)
		return n > 0
	}
	upper := strings.Replace(dsn, "schema="+schema, "schema=Up"+schema, 1)
	for _, c := range []struct{ dsn, want string }{
		{dsn, "schema " + schema + " holds no inbox store (create it with fairrelay migrate --inbox URL)"},
		{upper, "use schema=up" + schema + ", and create it with fairrelay migrate --inbox URL"},
	} {
		in, err := inbox.Open(t.Context(), c.dsn, inbox.Options{MustExist: true})
		if in != nil {
			in.Close()
		}
		var fe *fairrelay.Error
		if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != "inbox" || !strings.Contains(err.Error(), c.want) {
			t.Errorf("MustExist on %s: %v, want invalid_input naming inbox, %q", c.dsn, err, c.want)
		}
	}
	if exists(schema) || exists("up"+schema) {
		t.Fatal("a refused open created a schema")
	}
	in, err := inbox.Open(t.Context(), dsn, inbox.Options{})
	if err != nil {
		t.Fatalf("open without MustExist: %v, want the inbox created", err)
	}
	in.Close()
	if in, err = inbox.Open(t.Context(), dsn, inbox.Options{MustExist: true}); err != nil {
		t.Fatalf("MustExist once made: %v", err)
	}
	in.Close()
}
