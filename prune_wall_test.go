package fairrelay_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/harness/conformance"
	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/internal/sqlitetest"
)

// ackAll claims and acks every head at tick at, a claim at a time, and
// returns how many it acked.
func ackAll(t *testing.T, q *fairrelay.Queue, at int64) int {
	t.Helper()
	ctx := context.Background()
	n := 0
	for {
		r, err := q.Claim(ctx, fairrelay.ClaimParams{At: at})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Claims) == 0 {
			return n
		}
		for _, c := range r.Claims {
			if s, err := q.Settle(ctx, fairrelay.SettleParams{Token: c.Token, Outcome: fairrelay.OutcomeAccepted, At: at}); err != nil || s.Status != fairrelay.SettleAcked {
				t.Fatalf("settle: %+v %v", s, err)
			}
			n++
		}
	}
}

// A relay whose wall clock was years ahead (a bad clock at boot, stepped
// back later) stamped its claims in the future. The wall-clock hold of
// retention (PruneParams.AckedMinAge) must not keep them, or every prune
// after them, until that date: a claim stamped later than the pruner's
// clock proves nothing about the tick, and the ticks alone decide it. On
// SQLite the first held event ended every pass; on PostgreSQL one batch of
// them did (a breaker's report, reproduced with relay-like settings: 0 of
// 200 events pruned a month later). Both backends.
func TestPruneIsNotStalledByAClaimFromAClockFarAhead(t *testing.T) {
	t.Parallel()
	for _, b := range conformance.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			path, _ := b.New(t)
			start := time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)
			var wall atomic.Int64
			wall.Store(start.UnixMilli())
			q, err := fairrelay.Open(ctx, path, fairrelay.Config{Policy: fairrelay.ReferencePolicy(), Now: func() time.Time { return time.UnixMilli(wall.Load()) }})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { q.Close() })
			// 20 flows (a PostgreSQL batch) of two events each, acked by
			// the relay whose clock says 2036.
			for i := range 20 {
				enqueueAt(t, q, 1, []fairrelay.EnqueueParams{{ID: fmt.Sprintf("bad%02d", i), Flow: fmt.Sprintf("f%02d", i)}, {ID: fmt.Sprintf("bad%02db", i), Flow: fmt.Sprintf("f%02d", i)}})
			}
			wall.Store(time.Date(2036, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
			if n := ackAll(t, q, 2); n != 40 {
				t.Fatalf("acked %d, want 40", n)
			}
			// 200 events acked by right clocks.
			wall.Store(start.UnixMilli())
			for i := range 100 {
				enqueueAt(t, q, int64(10+i), []fairrelay.EnqueueParams{{ID: fmt.Sprintf("ok%03d", i), Flow: fmt.Sprintf("g%03d", i)}, {ID: fmt.Sprintf("ok%03db", i), Flow: fmt.Sprintf("g%03d", i)}})
			}
			if n := ackAll(t, q, 200); n != 200 {
				t.Fatalf("acked %d, want 200", n)
			}
			// A month later by both clocks, the relay's prune: retain-acked
			// 168h and retain-ids 720h, less max_tick_jump's hour.
			day := int64(24 * time.Hour / time.Millisecond)
			wall.Store(start.Add(30 * 24 * time.Hour).UnixMilli())
			at := 30 * day
			var events, kept int64
			for range 100 {
				r, err := q.Prune(ctx, fairrelay.PruneParams{At: at, AckedBefore: at - 7*day, Limit: 20, AckedMinAge: 167 * time.Hour, IDsMinAge: 719 * time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				events, kept = events+r.Events, kept+r.WallKept
				if !r.More {
					break
				}
			}
			if events != 240 || kept != 0 {
				t.Errorf("a month later: %d events pruned, %d held by the wall clock; want all 240, none held", events, kept)
			}
		})
	}
}

// The tombstones a store held before migration 007 (SQLite) or 036
// (PostgreSQL) are dated by the migration: its wall time less their age in
// ticks, so that a tick that jumps after the upgrade does not forget them
// (a breaker's report: dated 0, they were left to the ticks alone, and a
// jump forgot every id pruned in the month before the upgrade). A
// tombstone an older build writes after the migration is dated when it
// is written. Both backends.
func TestTombstonesWrittenAroundMigrationAreDated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type backend struct {
		name     string
		dsn      string
		undo     string
		exec     func(t testing.TB, dsn, sql string)
		queryRow func(t testing.TB, dsn, query string, dest ...any)
	}
	path := filepath.Join(t.TempDir(), "q.db")
	for _, b := range []backend{
		{name: "sqlite", dsn: path,
			undo: `DROP TRIGGER tombstone_dated; ALTER TABLE tombstone DROP COLUMN claimed_wall; DELETE FROM fairrelay_migration WHERE version = 7`,
			exec: sqlitetest.Exec, queryRow: sqlitetest.QueryRow},
		{name: "postgres", undo: `ALTER TABLE tombstone DROP COLUMN claimed_wall; DELETE FROM fairrelay_migration WHERE version = 36`,
			exec: pgtest.Exec, queryRow: pgtest.QueryRow},
	} {
		t.Run(b.name, func(t *testing.T) {
			if b.name == "postgres" {
				b.dsn = pgtest.Schema(t, "frtombwall")
			}
			q, err := fairrelay.Open(ctx, b.dsn, fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
			if err != nil {
				t.Fatal(err)
			}
			enqueueAt(t, q, 1, []fairrelay.EnqueueParams{{ID: "A1", Flow: "A"}})
			ackAll(t, q, 5)
			if r, err := q.Prune(ctx, fairrelay.PruneParams{At: 10, AckedBefore: 10}); err != nil || r.Events != 1 {
				t.Fatalf("prune: %+v %v", r, err)
			}
			// The clock moves on to 5 000: A1's tombstone (acked at 5) is
			// 4 995 ticks old.
			if _, err := q.Claim(ctx, fairrelay.ClaimParams{At: 5000}); err != nil {
				t.Fatal(err)
			}
			q.Close()
			b.exec(t, b.dsn, b.undo)
			before := time.Now().UnixMilli()
			if q, err = fairrelay.Open(ctx, b.dsn, fairrelay.Config{Policy: fairrelay.ReferencePolicy()}); err != nil {
				t.Fatal(err)
			}
			after := time.Now().UnixMilli()
			defer q.Close()
			var wall int64
			b.queryRow(t, b.dsn, `SELECT claimed_wall FROM tombstone WHERE event_id = 'A1'`, &wall)
			if age := int64(5000 - 5); wall < before-age || wall > after-age {
				t.Errorf("A1's tombstone dated %d, want the migration's wall time (%d to %d) less its age, %d ticks", wall, before, after, age)
			}
			// An older build's insert names no claimed_wall.
			before = time.Now().UnixMilli()
			b.exec(t, b.dsn, `INSERT INTO tombstone (event_id, flow_id, seq, body_sha256, acked_at) VALUES ('Z1', 'Z', 1, '\x00', 7)`)
			after = time.Now().UnixMilli()
			b.queryRow(t, b.dsn, `SELECT claimed_wall FROM tombstone WHERE event_id = 'Z1'`, &wall)
			if wall < before || wall > after {
				t.Errorf("a tombstone written without claimed_wall dated %d, want its write's wall time (%d to %d)", wall, before, after)
			}
		})
	}
}
