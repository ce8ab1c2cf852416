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

// ackAll claims and acks every head at tick at, 100 claims a transaction
// (each SettleMany acks the claims of the one before), until none is left,
// and returns how many it acked.
func ackAll(t *testing.T, q *fairrelay.Queue, at int64) int {
	t.Helper()
	var held []fairrelay.Settlement
	acked := 0
	for {
		res, err := q.SettleMany(context.Background(), fairrelay.SettleManyParams{At: at, Settles: held, ClaimLimit: 100})
		if err != nil {
			t.Fatal(err)
		}
		acked += len(res.Results)
		if len(res.Claims) == 0 {
			return acked
		}
		held = held[:0]
		for _, c := range res.Claims {
			held = append(held, fairrelay.Settlement{Token: c.Token, Outcome: fairrelay.OutcomeAccepted})
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
// (PostgreSQL) are dated by the migration's epoch: its wall time less
// their age in ticks, so that a tick that jumps after the upgrade does not
// forget them (a breaker's report: left undated, they were left to the
// ticks alone, and a jump forgot every id pruned in the month before the
// upgrade); no row is rewritten by the migration. On SQLite a tombstone an
// older build writes after the migration takes its event's claim time.
// Both backends.
func TestTombstonesWrittenBeforeMigrationAreDated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, b := range []struct {
		name, undo string
		exec       func(t testing.TB, dsn, sql string)
		queryRow   func(t testing.TB, dsn, query string, dest ...any)
	}{
		{"sqlite", `DROP TRIGGER tombstone_dated; DROP TABLE tombstone_epoch; ALTER TABLE tombstone DROP COLUMN claimed_wall; DELETE FROM fairrelay_migration WHERE version = 7`,
			sqlitetest.Exec, sqlitetest.QueryRow},
		{"postgres", `DROP TABLE tombstone_epoch; ALTER TABLE tombstone DROP COLUMN claimed_wall; DELETE FROM fairrelay_migration WHERE version = 36`,
			pgtest.Exec, pgtest.QueryRow},
	} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			dsn := filepath.Join(t.TempDir(), "q.db")
			if b.name == "postgres" {
				dsn = pgtest.Schema(t, "frtombwall")
			}
			var shift atomic.Int64 // the queue's wall clock runs ahead of time.Now by this many ms
			open := func() *fairrelay.Queue {
				q, err := fairrelay.Open(ctx, dsn, fairrelay.Config{Policy: fairrelay.ReferencePolicy(),
					Now: func() time.Time { return time.Now().Add(time.Duration(shift.Load()) * time.Millisecond) }})
				if err != nil {
					t.Fatal(err)
				}
				return q
			}
			q := open()
			enqueueAt(t, q, 1, []fairrelay.EnqueueParams{{ID: "A1", Flow: "A"}})
			ackAll(t, q, 5)
			if r, err := q.Prune(ctx, fairrelay.PruneParams{At: 10, AckedBefore: 10}); err != nil || r.Events != 1 {
				t.Fatalf("prune: %+v %v", r, err)
			}
			// The clock moves on to 5 000 and the store goes back to before
			// the migration, with A1's tombstone.
			if _, err := q.Claim(ctx, fairrelay.ClaimParams{At: 5000}); err != nil {
				t.Fatal(err)
			}
			q.Close()
			b.exec(t, dsn, b.undo)
			q = open() // migrates: A1's tombstone is 4 995 ticks old at its epoch
			defer q.Close()
			prune := func(want fairrelay.PruneResult) {
				t.Helper()
				r, err := q.Prune(ctx, fairrelay.PruneParams{At: 6000, AckedBefore: 6000, IDsBefore: 6000, IDsMinAge: time.Hour, AckedMinAge: time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				if got := (fairrelay.PruneResult{Tombstones: r.Tombstones, WallKept: r.WallKept}); got != want {
					t.Errorf("prune: %+v, want %+v", got, want)
				}
			}
			// Due by its tick, dated seconds ago by the epoch: kept.
			prune(fairrelay.PruneResult{WallKept: 1})
			if r, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "A1", Flow: "A", Body: []byte(`{"delta":1}`), At: 6000}); err != nil || r.Status != fairrelay.EnqueueExisting {
				t.Fatalf("A1 again: %+v %v, want existing", r, err)
			}
			// Two hours later by the wall clock: forgotten.
			shift.Store((2 * time.Hour).Milliseconds())
			prune(fairrelay.PruneResult{Tombstones: 1})
			if b.name != "sqlite" {
				return
			}
			// An older build's tombstone names no claimed_wall: it takes its
			// event's, written by the claim.
			enqueueAt(t, q, 6000, []fairrelay.EnqueueParams{{ID: "B1", Flow: "B"}})
			ackAll(t, q, 6001)
			var claimed, dated int64
			b.queryRow(t, dsn, `SELECT claimed_wall FROM event WHERE event_id = 'B1'`, &claimed)
			b.exec(t, dsn, `INSERT INTO tombstone (event_id, flow_id, seq, body_sha256, acked_at) VALUES ('B1', 'B', 1, x'00', 6001)`)
			b.queryRow(t, dsn, `SELECT claimed_wall FROM tombstone WHERE event_id = 'B1'`, &dated)
			if claimed == 0 || dated != claimed {
				t.Errorf("a tombstone written without claimed_wall dated %d, want its event's claim time %d", dated, claimed)
			}
		})
	}
}
