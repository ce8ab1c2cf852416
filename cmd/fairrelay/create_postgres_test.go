package main

import (
	"context"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

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
	exists := func() bool {
		t.Helper()
		conn, err := pgx.Connect(t.Context(), pgtest.URL(t))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		var n int
		if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, schema).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	const want = "holds no queue store (create it with fairrelay migrate)"
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
		if code != exitFailed || out != "" || !strings.Contains(errOut, "invalid_input: queue: ") || !strings.Contains(errOut, want) {
			t.Errorf("%s on a schema without a store: exit %d, stdout %q, stderr %q: want invalid_input naming queue, %q", c.name, code, out, errOut, want)
		}
		if exists() {
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
