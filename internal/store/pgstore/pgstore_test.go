package pgstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/harness/queuetest"
	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/internal/store"
	"github.com/fairrelay/fairrelay/internal/store/pgstore"
	"github.com/fairrelay/fairrelay/internal/store/storetest"
)

// TestSameAnswersAsSQLite drives a SQLite store and a PostgreSQL store with
// the same seeded random operations — enqueue (singly and in batches, new
// and repeated ids), claim (singly, in batches, with settles in the same
// transaction), settle with every kind of outcome, redrive, ticks moving on
// so leases run out and backoffs end — and requires the same answer to every
// operation and the same snapshot, quarantine list, heads and audit at the
// end (SPEC §4: the same answers). It covers what the row cache, the
// set-based writes and the quarantine index of migration 002 must not
// change.
func TestSameAnswersAsSQLite(t *testing.T) {
	t.Parallel()
	for e, entry := range []fairrelay.Entry{fairrelay.EntrySeed, fairrelay.EntryFair} {
		for seed := range uint64(3) {
			t.Run(fmt.Sprintf("%s/seed%d", entry, seed), func(t *testing.T) {
				t.Parallel()
				pol := fairrelay.ReferencePolicy()
				pol.Entry = entry
				ctx := context.Background()
				lite, err := fairrelay.Open(ctx, filepath.Join(t.TempDir(), "q.db"), fairrelay.Config{Policy: pol, Now: fixedNow})
				if err != nil {
					t.Fatal(err)
				}
				defer lite.Close()
				pg, err := fairrelay.Open(ctx, pgtest.Schema(t, "frsame"), fairrelay.Config{Policy: pol, Now: fixedNow})
				if err != nil {
					t.Fatal(err)
				}
				defer pg.Close()
				drive(t, rand.New(rand.NewPCG(seed, uint64(e))), lite, pg)
			})
		}
	}
}

// answer is what one operation returned, as JSON, errors by code.
func answer(v any, err error) string {
	if err != nil {
		return "error " + string(fairrelay.CodeOf(err))
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func drive(t *testing.T, rng *rand.Rand, lite, pg *fairrelay.Queue) {
	ctx := context.Background()
	var at int64
	var tokens []fairrelay.Token // every token ever handed out, stale ones too
	outcomes := []fairrelay.Outcome{
		fairrelay.OutcomeAccepted, fairrelay.OutcomeAccepted, fairrelay.OutcomeAccepted, fairrelay.OutcomeDuplicate,
		fairrelay.OutcomeRetry, fairrelay.OutcomeGap, fairrelay.OutcomeIDConflict, fairrelay.OutcomeUnsupportedDelta,
	}
	flow := func() string { return fmt.Sprintf("F%d", rng.IntN(12)) }
	ne := func(p fairrelay.EnqueueParams) fairrelay.NewEvent {
		return fairrelay.NewEvent{ID: p.ID, Flow: p.Flow, Body: p.Body}
	}
	event := func() fairrelay.EnqueueParams {
		n := rng.IntN(120)
		return fairrelay.EnqueueParams{ID: fmt.Sprintf("E%03d", n), Flow: flow(), Body: fmt.Appendf(nil, `{"delta":%d}`, 1+rng.IntN(2))}
	}
	settles := func() []fairrelay.Settlement {
		var ps []fairrelay.Settlement
		for range rng.IntN(3) {
			if len(tokens) > 0 {
				ps = append(ps, fairrelay.Settlement{Token: tokens[rng.IntN(len(tokens))], Outcome: outcomes[rng.IntN(len(outcomes))]})
			}
		}
		return ps
	}
	for i := range 400 {
		at += int64(rng.IntN(3))
		var op string
		var a, b string
		switch r := rng.IntN(10); {
		case r < 3:
			p := event()
			p.At = at
			op = "enqueue " + p.ID
			a, b = answer(lite.Enqueue(ctx, p)), answer(pg.Enqueue(ctx, p))
		case r < 4:
			ps := []fairrelay.NewEvent{ne(event()), ne(event()), ne(event())}
			op = "enqueue batch"
			a, b = answer(lite.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: at, Events: ps})), answer(pg.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: at, Events: ps}))
		case r < 7:
			k := 1 + rng.IntN(3)
			op = fmt.Sprintf("claim %d", k)
			ca, errA := queuetest.Claims(lite.Claim(ctx, fairrelay.ClaimParams{At: at, Limit: k}))
			cb, errB := queuetest.Claims(pg.Claim(ctx, fairrelay.ClaimParams{At: at, Limit: k}))
			a, b = answer(ca, errA), answer(cb, errB)
			for _, c := range ca {
				tokens = append(tokens, c.Token)
			}
		case r < 8:
			ps, k := settles(), rng.IntN(3)
			op = fmt.Sprintf("settle %d and claim %d", len(ps), k)
			ra, ca, errA := queuetest.SettleClaims(lite.SettleMany(ctx, fairrelay.SettleManyParams{At: at, Settles: ps, ClaimLimit: k}))
			rb, cb, errB := queuetest.SettleClaims(pg.SettleMany(ctx, fairrelay.SettleManyParams{At: at, Settles: ps, ClaimLimit: k}))
			a, b = answer([]any{ra, ca}, errA), answer([]any{rb, cb}, errB)
			for _, c := range ca {
				tokens = append(tokens, c.Token)
			}
		case r < 9:
			ps := settles()
			op = fmt.Sprintf("settle %d", len(ps))
			a, b = answer(lite.SettleMany(ctx, fairrelay.SettleManyParams{At: at, Settles: ps})), answer(pg.SettleMany(ctx, fairrelay.SettleManyParams{At: at, Settles: ps}))
		default:
			qs, err := lite.Quarantined(ctx, 5)
			if err != nil {
				t.Fatal(err)
			}
			if len(qs) == 0 {
				continue
			}
			e := qs[rng.IntN(len(qs))]
			p := fairrelay.RedriveParams{EventID: e.ID, ExpectedGeneration: e.Generation - int64(rng.IntN(2)), Reason: "fixed", Operator: "ops", At: at}
			op = "redrive " + e.ID
			a, b = answer(lite.Redrive(ctx, p)), answer(pg.Redrive(ctx, p))
		}
		if a != b {
			t.Fatalf("op %d (%s at %d): SQLite answered %s, PostgreSQL %s", i, op, at, a, b)
		}
	}
	type view struct {
		Snapshot    *fairrelay.Snapshot
		Quarantined []fairrelay.EventState
		Heads       []fairrelay.Head
		Audit       []fairrelay.AuditEntry
	}
	read := func(q *fairrelay.Queue) view {
		var v view
		var err error
		if v.Snapshot, err = q.Snapshot(ctx); err != nil {
			t.Fatal(err)
		}
		if v.Quarantined, err = q.Quarantined(ctx, 1000); err != nil {
			t.Fatal(err)
		}
		if v.Heads, err = q.Heads(ctx, "", 1000); err != nil {
			t.Fatal(err)
		}
		if v.Audit, err = q.Audit(ctx, 0, 1000); err != nil {
			t.Fatal(err)
		}
		return v
	}
	va, vb := read(lite), read(pg)
	if d := cmp.Diff(va, vb); d != "" {
		t.Fatalf("final state differs (-SQLite +PostgreSQL):\n%s", d)
	}
	if len(va.Quarantined) == 0 || len(va.Audit) == 0 {
		t.Logf("note: this seed ended with %d quarantined events and %d audit rows", len(va.Quarantined), len(va.Audit))
	}
}

// The seam's conformance suite on a real PostgreSQL.
func TestStoreSeam(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, entry string) (store.Store, func(string, bool) (store.Store, error)) {
		dsn := pgtest.Schema(t, "frseam")
		s, err := pgstore.Open(t.Context(), dsn, pgstore.Options{Entry: entry})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s, func(entry string, adopt bool) (store.Store, error) {
			return pgstore.Open(t.Context(), dsn, pgstore.Options{Entry: entry, AdoptEntry: adopt})
		}
	})
}

// fixedNow is the wall clock of both stores: audit rows record it, and the
// two must compare equal.
func fixedNow() time.Time { return time.UnixMilli(1_800_000_000_000) }

// A schema that already holds another application's table of a name the
// migrations create (flow) is refused with a message that says to give the
// store a schema of its own, and the first migration leaves nothing behind.
func TestOpenOnASchemaWithAForeignTable(t *testing.T) {
	t.Parallel()
	dsn := pgtest.Schema(t, "pgforeign")
	u, _ := url.Parse(dsn)
	schema := pgx.Identifier{u.Query().Get("schema")}.Sanitize()
	pgtest.Exec(t, pgtest.URL(t), "CREATE SCHEMA "+schema+"; CREATE TABLE "+schema+".flow (x int)")
	_, err := pgstore.Open(context.Background(), dsn, pgstore.Options{})
	if err == nil || !strings.Contains(err.Error(), "give the store a schema of its own") {
		t.Fatalf("open: %v; want the hint to use a schema of its own", err)
	}
	var n int
	pgtest.QueryRow(t, pgtest.URL(t), "SELECT count(*) FROM pg_tables WHERE schemaname = "+pgQuote(u.Query().Get("schema")), &n)
	if n != 1 {
		t.Errorf("%d tables in the schema after the refused open, want the foreign one only", n)
	}
}

func pgQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// The store's connections are named in pg_stat_activity: "fairrelay", or
// the URL's application_name (they had no name: an operator's report).
func TestConnectionsAreNamed(t *testing.T) {
	t.Parallel()
	dsn := pgtest.Schema(t, "pgappname")
	for _, c := range []struct{ dsn, want string }{
		{dsn, pgstore.DefaultApplicationName},
		{dsn + "&application_name=relay-3", "relay-3"},
	} {
		s, err := pgstore.Open(context.Background(), c.dsn, pgstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		var name string
		err = s.Pool().QueryRow(context.Background(), "SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()").Scan(&name)
		s.Close()
		if err != nil || name != c.want {
			t.Errorf("%s: application_name %q (%v), want %q", c.dsn, name, err, c.want)
		}
	}
}
