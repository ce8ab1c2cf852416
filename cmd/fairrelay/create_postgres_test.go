package main

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fairrelay/fairrelay/internal/harness/brokertest"
	"github.com/fairrelay/fairrelay/internal/pgtest"
)

// On PostgreSQL, enqueue and relay refuse a schema that holds no queue
// store instead of creating one (a fresh user's report: enqueue with a URL
// without schema= built a whole store in public, among the application's
// tables, and a misspelt schema= silently made a store no relay reads).
// Nothing is created; after fairrelay migrate, the same enqueue works.
func TestPostgresWriteCommandsDoNotCreateAStore(t *testing.T) {
	t.Parallel()
	dsn := pgtest.Schema(t, "frnocreate")
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("schema")
	// Said once: it read "no queue store there: schema … holds no queue
	// store" (a fresh user's report).
	want := "invalid_input: queue: schema " + schema + " holds no queue store (create it with fairrelay migrate)"
	for _, c := range []struct {
		name  string
		stdin string
		args  []string
	}{
		{"enqueue", "", []string{"enqueue", "--queue", dsn, "--id", "a", "--flow", "f", "--delta", "1"}},
		{"bulk enqueue", `{"id":"a","flow":"f","delta":1}` + "\n", []string{"enqueue", "--queue", dsn}},
		{"relay", "", []string{"relay", "--queue", dsn, "--sink", "http://127.0.0.1:1/"}},
	} {
		out, errOut, code := cli(t, c.stdin, c.args...)
		if code != exitFailed || out != "" || !strings.Contains(errOut, want) {
			t.Errorf("%s on a schema without a store: exit %d, stdout %q, stderr %q: want invalid_input naming queue, %q", c.name, code, out, errOut, want)
		}
		if schemaExists(t, schema) {
			t.Fatalf("%s created schema %s", c.name, schema)
		}
	}
	mout, errOut, code := cli(t, "", "migrate", "--queue", dsn)
	if code != exitApplied || errOut != "" {
		t.Fatalf("migrate: exit %d, stderr %q: want exit 0 and nothing on stderr (schema= named)", code, errOut)
	}
	// Every migration applied, the first included: a new schema's store.
	if !strings.HasSuffix(mout, ": created (migrations 1–"+strconv.Itoa(len(pgMigrations(t)))+")\n") {
		t.Errorf("migrate of a new schema: %q, want created with every migration", mout)
	}
	if mout, _, _ := cli(t, "", "migrate", "--queue", dsn); !strings.HasSuffix(mout, ": up to date (nothing to apply)\n") {
		t.Errorf("migrate again: %q, want up to date", mout)
	}
	out, errOut, code := cli(t, "", "enqueue", "--queue", dsn, "--id", "a", "--flow", "f", "--delta", "1")
	if code != exitApplied || out != `{"seq":1,"status":"created"}`+"\n" || errOut != "" {
		t.Errorf("enqueue after migrate: exit %d, %q, stderr %q", code, out, errOut)
	}
}

// pgMigrations lists the PostgreSQL queue store's embedded migrations.
func pgMigrations(t *testing.T) []string {
	t.Helper()
	m, err := filepath.Glob("../../internal/store/pgstore/migrations/*.sql")
	if err != nil || len(m) == 0 {
		t.Fatalf("migrations: %v %v", m, err)
	}
	return m
}

// TestPostgresUpperCaseSchemaHintsTheLowerCase: an upper-case schema that
// does not exist is never created (PostgreSQL folds unquoted names), and
// every command that refuses it says which name to use: enqueue's hint led
// to migrate, which refused the same name (a fresh user's report), and the
// inbox's refusal spoke of a queue store.
func TestPostgresUpperCaseSchemaHintsTheLowerCase(t *testing.T) {
	t.Parallel()
	dsn := pgtest.Schema(t, "frupper")
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	lower := u.Query().Get("schema")
	upper := strings.Replace(dsn, "schema="+lower, "schema=Up"+lower, 1)
	want := "schema=up" + lower
	for _, c := range []struct {
		name string
		args []string
	}{
		{"enqueue", []string{"enqueue", "--queue", upper, "--id", "a", "--flow", "f", "--delta", "1"}},
		{"migrate", []string{"migrate", "--queue", upper}},
		{"receive", []string{"receive", "--inbox", upper, "--addr", "127.0.0.1:0"}},
	} {
		_, errOut, code := cli(t, "", c.args...)
		if code != exitFailed || !strings.Contains(errOut, want) {
			t.Errorf("%s on a missing upper-case schema: exit %d, %q: want the lower-case name %s", c.name, code, errOut, want)
		}
		if c.name == "receive" && strings.Contains(errOut, "queue store") {
			t.Errorf("receive's refusal speaks of a queue store: %q", errOut)
		}
	}
}

// migrate of a PostgreSQL store whose URL names no schema= says on stderr
// where the store went: the connection's current schema, among the
// application's tables (a fresh user filled public in silence), named.
// Here the URL's search_path picks a schema of the test's, not public.
func TestMigrateWithoutSchemaSaysWhereTheStoreWent(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(pgtest.Schema(t, "frnoschema"))
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("schema")
	pgtest.Exec(t, pgtest.URL(t), "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	dsn := pgtest.URL(t) + "&search_path=" + schema
	if !strings.Contains(pgtest.URL(t), "?") {
		dsn = pgtest.URL(t) + "?search_path=" + schema
	}
	const note = "was made in"
	want := "fairrelay: the queue store was made in schema " + pgx.Identifier{schema}.Sanitize() + ", the connection's current schema"
	_, errOut, code := cli(t, "", "migrate", "--queue", dsn)
	if code != exitApplied || !strings.Contains(errOut, want) {
		t.Errorf("migrate without schema=: exit %d, stderr %q: want a note naming the schema the store went into, %q", code, errOut, want)
	}
	if _, errOut, _ := cli(t, "", "migrate", "--queue", dsn); strings.Contains(errOut, note) {
		t.Errorf("migrate again: stderr %q: the note is for a store just made", errOut)
	}
}

// On PostgreSQL, every command that opens an inbox refuses a schema that
// holds none, as the queue commands refuse a schema without a queue store,
// and creates nothing, no schema and no table: receive made a new, empty
// inbox for a misspelt schema= (a fresh user's report), which answers gap
// for every flow a relay delivers. fairrelay migrate --inbox makes it;
// then the same commands open it.
func TestPostgresInboxCommandsDoNotCreateAnInbox(t *testing.T) {
	t.Parallel()
	dsn := pgtest.Schema(t, "frnoinbox")
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("schema")
	dir := t.TempDir()
	queue := filepath.Join(dir, "q.db")
	if out, errOut, code := cli(t, "", "migrate", "--queue", queue); code != exitApplied {
		t.Fatalf("migrate --queue: exit %d: %s%s", code, out, errOut)
	}
	from := brokertest.NATS(t) + "?stream=" + brokertest.Name("FRNOINBOX_") + "&durable=ledger"
	want := "schema " + schema + " holds no inbox store (create it with fairrelay migrate --inbox URL)"
	for _, c := range []struct {
		name string
		args []string
	}{
		{"receive --addr", []string{"receive", "--inbox", dsn, "--addr", "127.0.0.1:0"}},
		{"receive --from", []string{"receive", "--inbox", dsn, "--from", from}},
		{"inspect --inbox", []string{"inspect", "--inbox", dsn}},
		{"console --inbox", []string{"console", "--queue", queue, "--inbox", dsn, "--addr", "127.0.0.1:0"}},
		{"waive", []string{"waive", "--inbox", dsn, "--id", "A1", "--flow", "A", "--seq", "1", "--reason", "test", "--unchecked"}},
		{"prune --inbox", []string{"prune", "--inbox", dsn, "--superseded-held"}},
	} {
		// Bounded: a daemon that took the schema would run until stopped.
		out, errOut, code := cliBounded(t, 30*time.Second, c.args...)
		if code != exitFailed || out != "" || !strings.Contains(errOut, "invalid_input: inbox: ") || !strings.Contains(errOut, want) {
			t.Errorf("%s on a schema without an inbox: exit %d, stdout %q, stderr %q: want exit 2, invalid_input naming inbox, %q", c.name, code, out, errOut, want)
		}
		if schemaExists(t, schema) {
			t.Fatalf("%s created schema %s", c.name, schema)
		}
	}
	if out, errOut, code := cli(t, "", "migrate", "--inbox", dsn); code != exitApplied || !strings.HasPrefix(out, "inbox ") || !strings.Contains(out, ": created (migrations 1–") {
		t.Fatalf("migrate --inbox: exit %d, %q, stderr %q: want the inbox created", code, out, errOut)
	}
	if out, errOut, code := cli(t, "", "inspect", "--inbox", dsn, "--json"); code != exitApplied || out != "" {
		t.Errorf("inspect --inbox after migrate: exit %d, %q, stderr %q: want an empty inbox read", code, out, errOut)
	}
}

// cliBounded is cli with no standard input, for a command that might not
// end by itself (a daemon that started): killed after limit, and the test
// failed.
func cliBounded(t *testing.T, limit time.Duration, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), "FAIRRELAY_TEST_AS_CLI=1")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Errorf("%v still ran after %s (killed): stdout %q, stderr %q", args, limit, o.String(), e.String())
		return o.String(), e.String(), -1
	}
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

// schemaExists reports whether the test server's database holds schema.
func schemaExists(t *testing.T, schema string) bool {
	t.Helper()
	var n int
	conn, err := pgx.Connect(t.Context(), pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// receive stops (exit 2, not_a_database) when its PostgreSQL inbox's
// schema is dropped under it, within a second or so, idle or not, as it
// stops when its SQLite file is removed: it stayed up answering every
// delivery 500 (each spent an attempt of the relay's budget), exited by no
// supervisor (a fresh user's report).
func TestPostgresReceiveStopsWhenItsInboxSchemaIsDropped(t *testing.T) {
	t.Parallel()
	dsn := pgtest.Schema(t, "frinboxdrop")
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("schema")
	if out, errOut, code := cli(t, "", "migrate", "--inbox", dsn); code != exitApplied {
		t.Fatalf("migrate --inbox: exit %d: %s%s", code, out, errOut)
	}
	d := startCLI(t, "receive", "--inbox", dsn, "--addr", "127.0.0.1:0")
	if line := <-d.firstLine; !strings.Contains(string(line), "listening") {
		t.Fatalf("receive: first line %q, stderr %s", line, d.stderr())
	}
	pgtest.Exec(t, pgtest.URL(t), "DROP SCHEMA "+schema+" CASCADE")
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("receive still ran 30 s after its inbox's schema was dropped; stderr %s", d.stderr())
	}
	if d.code != exitFailed || !strings.Contains(d.stderr(), "not_a_database") {
		t.Errorf("receive after its inbox's schema was dropped: exit %d, stderr %s; want exit 2 and not_a_database", d.code, d.stderr())
	}
}

// A URL without schema= means the connection's current schema, and a
// refusal there names it: it said "the connection's current schema holds
// no inbox store", and a reader had to know PostgreSQL's search_path to
// find public (a fresh user's report). A queue store's schema given as an
// inbox said "schema  holds a fairrelay queue store", with no name at all.
func TestPostgresRefusalsNameTheCurrentSchema(t *testing.T) {
	t.Parallel()
	db := pgtest.Database(t, "frcurschema")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"enqueue", "--queue", db, "--id", "a", "--flow", "f", "--delta", "1"},
			"fairrelay: invalid_input: queue: the connection's current schema (public) holds no queue store (create it with fairrelay migrate)\n"},
		{[]string{"inspect", "--inbox", db},
			"fairrelay: invalid_input: inbox: the connection's current schema (public) holds no inbox store (create it with fairrelay migrate --inbox URL)\n"},
	} {
		out, errOut, code := cli(t, "", c.args...)
		if code != exitFailed || out != "" || errOut != c.want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q: want %q", c.args, code, out, errOut, c.want)
		}
	}
	if _, errOut, code := cli(t, "", "migrate", "--queue", db); code != 0 {
		t.Fatalf("migrate: %d %s", code, errOut)
	}
	const want = "the connection's current schema (public) holds a fairrelay queue store, not an inbox"
	if _, errOut, code := cli(t, "", "inspect", "--inbox", db); code != exitFailed || !strings.Contains(errOut, want) {
		t.Errorf("inspect --inbox on a queue store: exit %d, stderr %q: want %q", code, errOut, want)
	}
}
