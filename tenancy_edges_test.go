package fairrelay_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/harness/conformance"
	"github.com/fairrelay/fairrelay/internal/store/sqlitestore"
)

// TestPruneShrinksANewSQLiteFile: a store created by Open keeps free pages
// for incremental vacuum (auto_vacuum=INCREMENTAL), and a prune of most of
// its events hands their pages back to the file system (SPEC §8 retention;
// issue 16: "the file must actually shrink or be reused"). The sizes are
// read after a TRUNCATE checkpoint, so the WAL holds nothing.
func TestPruneShrinksANewSQLiteFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "q.db")
	q, err := fairrelay.Open(ctx, path, fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if mode := pragmaInt(t, path, "auto_vacuum"); mode != 2 {
		t.Fatalf("auto_vacuum of a new store = %d, want 2 (incremental)", mode)
	}
	const n = 3000
	fillAcked(t, q, n)
	before := checkpointedSize(t, path)
	if deleted := pruneAll(t, ctx, q); deleted != n {
		t.Fatalf("prune deleted %d events, want %d", deleted, n)
	}
	after := checkpointedSize(t, path)
	t.Logf("file %d bytes before the prune, %d after", before, after)
	if after*2 > before {
		t.Errorf("the file went from %d to %d bytes after pruning every event: the pages were not freed", before, after)
	}
}

// A store created before incremental vacuum (auto_vacuum=NONE) keeps the
// pages a prune frees for its new rows: the prune ends (the vacuum's steps
// stop when one frees nothing, instead of trying again forever) and the
// free pages stay in the file.
func TestPruneOfAStoreWithoutIncrementalVacuumEnds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "q.db")
	q, err := fairrelay.Open(ctx, path, fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("PRAGMA auto_vacuum = NONE; VACUUM"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if mode := pragmaInt(t, path, "auto_vacuum"); mode != 0 {
		t.Fatalf("auto_vacuum after the conversion = %d, want 0", mode)
	}
	if q, err = fairrelay.Open(ctx, path, fairrelay.Config{Policy: fairrelay.ReferencePolicy()}); err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	const n = 3000
	fillAcked(t, q, n)
	if deleted := pruneAll(t, ctx, q); deleted != n {
		t.Fatalf("prune deleted %d events, want %d", deleted, n)
	}
	if free := pragmaInt(t, path, "freelist_count"); free < 256 {
		t.Errorf("freelist_count after pruning every event = %d, want the freed pages kept (at least 256)", free)
	}
}

// fillAcked enqueues n events of 2 KB over 100 flows into q at tick 1 and
// acks them all at tick 2.
func fillAcked(t *testing.T, q *fairrelay.Queue, n int) {
	t.Helper()
	ctx := context.Background()
	body := []byte(`"` + strings.Repeat("x", 2000) + `"`)
	for i := 0; i < n; i += 500 {
		var evs []fairrelay.NewEvent
		for j := i; j < min(i+500, n); j++ {
			evs = append(evs, fairrelay.NewEvent{ID: fmt.Sprintf("e%05d", j), Flow: fmt.Sprintf("f%03d", j%100), Body: body})
		}
		if _, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: 1, Events: evs}); err != nil {
			t.Fatal(err)
		}
	}
	if acked := ackAll(t, q, 2); acked != n {
		t.Fatalf("acked %d, want %d", acked, n)
	}
}

// pruneAll prunes every event acked before tick 3, 1 000 a call, and
// returns how many it deleted.
func pruneAll(t *testing.T, ctx context.Context, q *fairrelay.Queue) int64 {
	t.Helper()
	deleted := int64(0)
	for {
		res, err := q.Prune(ctx, fairrelay.PruneParams{At: 3, AckedBefore: 3, IDsBefore: 3, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		deleted += res.Events
		if !res.More {
			return deleted
		}
	}
}

// pragmaInt reads an integer pragma of the SQLite file at path on a
// connection of its own.
func pragmaInt(t *testing.T, path, name string) int {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v int
	if err := db.QueryRow("PRAGMA " + name).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// checkpointedSize empties the WAL of the file at path into it and returns
// the file's size (sqlitestore.TruncateLog: it waits out the open store's
// checkpointer, up to 30 s).
func checkpointedSize(t *testing.T, path string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sqlitestore.TruncateLog(ctx, path); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// An empty EnqueueMany writes nothing, not even the tick, on every backend
// alike (SQLite moved its tick, PostgreSQL did not), and still answers the
// clock's checks: clock_regressed behind the stored tick.
func TestEmptyEnqueueManyWritesNothing(t *testing.T) {
	eachReferenceQueue(t, func(t *testing.T, q *fairrelay.Queue) {
		ctx := context.Background()
		if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "A1", Flow: "A", Body: []byte(`{"delta":1}`), At: 3}); err != nil {
			t.Fatal(err)
		}
		rs, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: 5})
		if err != nil || len(rs) != 0 {
			t.Fatalf("empty batch at 5: %v, %v", rs, err)
		}
		if c, err := q.Clock(ctx); err != nil || c.Tick != 3 {
			t.Errorf("tick after an empty batch: %+v, %v; want 3", c, err)
		}
		if _, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: 2}); fairrelay.CodeOf(err) != fairrelay.CodeClockRegressed {
			t.Errorf("empty batch at 2: %v, want clock_regressed", err)
		}
	})
}

// In one batch, a flow that answered full answers full again for its later
// events, naming the first limit (store, group, flow: SPEC §8's order) that
// applies at that event: here flow D is full by its flow limit, then the
// store fills, and D's next event answers store. PostgreSQL answered flow,
// repeating D's first answer (found by the property test).
func TestFullInABatchNamesTheLimitInOrder(t *testing.T) {
	eachReferenceQueue(t, func(t *testing.T, q *fairrelay.Queue) {
		ctx := context.Background()
		body := []byte(`{"delta":1}`)
		if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "D1", Flow: "D", Body: body, At: 1}); err != nil {
			t.Fatal(err)
		}
		one, two := int64(1), int64(2)
		if _, err := q.Configure(ctx, fairrelay.ConfigureParams{At: 1, MaxBacklog: &two, MaxFlowBacklog: &one}); err != nil {
			t.Fatal(err)
		}
		rs, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: 2, Events: []fairrelay.NewEvent{
			{ID: "D2", Flow: "D", Body: body}, {ID: "N1", Flow: "N", Body: body}, {ID: "B1", Flow: "B", Body: body}, {ID: "D3", Flow: "D", Body: body}}})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range rs {
			got = append(got, string(r.Status)+":"+r.Limit)
		}
		if want := "full:flow created: full:store full:store"; strings.Join(got, " ") != want {
			t.Errorf("answers %v, want %s", got, want)
		}
	})
}

// In one batch, an event that would have made a flow in a full group is
// refused, and a later event that names the same flow in another group
// (or in none, so its own) is weighed by that group's limits, as if the
// two had been enqueued one after the other: the refused event made no
// flow, so nothing of the flow is overtaken. A later event naming the full
// group again is refused with it. PostgreSQL kept every flow refused in
// the call, made or not, and answered full for the second event too
// (SPEC §8; a breaker's report).
func TestFullInABatchHoldsOnlyTheGroupItWasRefusedIn(t *testing.T) {
	eachReferenceQueue(t, func(t *testing.T, q *fairrelay.Queue) {
		ctx := context.Background()
		body := []byte(`{"delta":1}`)
		one := int64(1)
		if _, err := q.Configure(ctx, fairrelay.ConfigureParams{At: 1, Group: "g1", MaxBacklog: &one}); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "a", Flow: "F1", Group: "g1", Body: body, At: 1}); err != nil {
			t.Fatal(err)
		}
		for i, c := range []struct {
			later string // the group of the flow's later event
			want  string
		}{
			{"A", "full:group created:"},
			{"", "full:group created:"},
			{"g1", "full:group full:group"},
		} {
			flow := fmt.Sprintf("D%d", i)
			rs, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: int64(2 + i), Events: []fairrelay.NewEvent{
				{ID: flow + "b", Flow: flow, Group: "g1", Body: body}, {ID: flow + "c", Flow: flow, Group: c.later, Body: body}}})
			if err != nil {
				t.Fatalf("later event in group %q: %v", c.later, err)
			}
			var got []string
			for _, r := range rs {
				got = append(got, string(r.Status)+":"+r.Limit)
			}
			if strings.Join(got, " ") != c.want {
				t.Errorf("later event in group %q: answers %v, want %s", c.later, got, c.want)
			}
		}
	})
}

// eachReferenceQueue runs test, in parallel, on a fresh store of every
// backend under the reference policy (referenceQueue), each a subtest
// named by its backend.
func eachReferenceQueue(t *testing.T, test func(t *testing.T, q *fairrelay.Queue)) {
	t.Parallel()
	for _, b := range conformance.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			test(t, referenceQueue(t, b))
		})
	}
}

// referenceQueue opens a fresh store of b under the reference policy,
// closed when the test ends.
func referenceQueue(t *testing.T, b conformance.Backend) *fairrelay.Queue {
	t.Helper()
	path, _ := b.New(t)
	q, err := fairrelay.Open(context.Background(), path, fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

// A library prune whose horizon lies further ahead of its tick than the
// policy's MaxTickJump is invalid input naming the horizon, and deletes
// nothing: wall-clock milliseconds given for acked_before (or ids_before)
// deleted every tombstone, so that ids sent again became new events (the
// CLI refused it; the library and the relay's callers did not). The
// prune's tick + 1 is allowed (it prunes everything acked so far), and so
// is any horizon under Floor (a daemon's own clock).
func TestPruneRefusesAHorizonTooFarAhead(t *testing.T) {
	t.Parallel()
	for _, b := range conformance.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			path, _ := b.New(t)
			pol := fairrelay.DaemonPolicy()
			q, err := fairrelay.Open(ctx, path, fairrelay.Config{Policy: pol})
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "E1", Flow: "F", Body: []byte(`{"delta":1}`), At: 100}); err != nil {
				t.Fatal(err)
			}
			c, err := q.Claim(ctx, fairrelay.ClaimParams{At: 100})
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Claims) != 1 {
				t.Fatalf("claim: %+v", c)
			}
			if _, err := q.Settle(ctx, fairrelay.SettleParams{Token: c.Claims[0].Token, Outcome: fairrelay.OutcomeAccepted, At: 100}); err != nil {
				t.Fatal(err)
			}
			wall := time.Now().UnixMilli()
			for _, tc := range []struct {
				p     fairrelay.PruneParams
				field string
			}{
				{fairrelay.PruneParams{At: fairrelay.AtStored, AckedBefore: wall}, "acked_before"},
				{fairrelay.PruneParams{At: fairrelay.AtStored, AckedBefore: wall, IDsBefore: wall}, "acked_before"},
				{fairrelay.PruneParams{At: 200, AckedBefore: 201 + pol.MaxTickJump, IDsBefore: 0}, "acked_before"},
			} {
				_, err := q.Prune(ctx, tc.p)
				var fe *fairrelay.Error
				if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != tc.field {
					t.Errorf("Prune(%+v): %v, want invalid_input naming %s", tc.p, err, tc.field)
				}
			}
			if ev, err := q.Event(ctx, "E1"); err != nil || ev.State != fairrelay.StateAcked {
				t.Fatalf("after the refused prunes E1 is %+v, %v; want it kept, acked", ev, err)
			}
			if clk, err := q.Clock(ctx); err != nil || clk.Tick != 100 {
				t.Errorf("after the refused prunes the clock is %+v, %v; want tick 100", clk, err)
			}
			// At the prune's tick + 1 (here the --at tick's), and under
			// Floor: allowed.
			if r, err := q.Prune(ctx, fairrelay.PruneParams{At: 200, AckedBefore: 200 + pol.MaxTickJump, IDsBefore: 0}); err != nil || r.Events != 1 {
				t.Fatalf("prune within max_tick_jump of its tick: %+v, %v; want E1 deleted", r, err)
			}
			if _, err := q.Prune(ctx, fairrelay.PruneParams{At: 300, Floor: true, AckedBefore: wall, IDsBefore: wall}); err != nil {
				t.Errorf("prune under Floor with a far horizon: %v, want it run", err)
			}
		})
	}
}
