package pgstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/internal/queuetest"
	"github.com/fairrelay/fairrelay/internal/store"
	"github.com/fairrelay/fairrelay/internal/store/pgstore"
	"github.com/fairrelay/fairrelay/internal/store/sqlitestore"
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
				lite, err := fairrelay.Open(ctx, filepath.Join(t.TempDir(), "q.db"), fairrelay.Config{Policy: pol})
				if err != nil {
					t.Fatal(err)
				}
				defer lite.Close()
				pg, err := fairrelay.Open(ctx, pgtest.Schema(t, "frsame"), fairrelay.Config{Policy: pol})
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

// TestTxAgreesWithSQLite drives the store seam itself — one write
// transaction, the questions in an order the protocol does not use today —
// on SQLite and on PostgreSQL and requires the same answer to every
// question: the row cache, the cached picks of runnable flows and the
// collected writes must answer as the server would.
func TestTxAgreesWithSQLite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lite, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "q.db"), sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer lite.Close()
	pg, err := pgstore.Open(ctx, pgtest.Schema(t, "frtx"), pgstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	txs := make([]store.Tx, 2)
	for i, s := range []store.Store{lite, pg} {
		if txs[i], err = s.Begin(ctx, store.LaneClaim|store.LaneSettle); err != nil {
			t.Fatal(err)
		}
		defer txs[i].Rollback(ctx)
	}
	step := func(name string, f func(tx store.Tx) (any, error)) {
		t.Helper()
		a, errA := f(txs[0])
		b, errB := f(txs[1])
		if d := cmp.Diff(answer(a, errA), answer(b, errB)); d != "" {
			t.Fatalf("%s (-SQLite +PostgreSQL):\n%s", name, d)
		}
	}
	step("clock", func(tx store.Tx) (any, error) { return tx.ClockGet(ctx) })
	for i := range 12 {
		f := store.FlowRow{Flow: fmt.Sprintf("F%02d", i), Ord: int64(i + 1), Seq: 1, Served: int64(i % 4), HeadSeq: 1, Runnable: i%5 != 0}
		e := store.EventRow{ID: fmt.Sprintf("E%02d", i), Flow: f.Flow, Seq: 1, Body: []byte(`{"delta":1}`), State: store.StateReady}
		step("insert "+f.Flow, func(tx store.Tx) (any, error) {
			if err := tx.FlowInsert(ctx, f); err != nil {
				return nil, err
			}
			return nil, tx.EventInsert(ctx, e)
		})
	}
	pick := func(order store.Order, limit int) {
		step(fmt.Sprintf("pick %d", limit), func(tx store.Tx) (any, error) { return tx.FlowPickRunnable(ctx, order, limit) })
	}
	update := func(flow string, f func(*store.FlowRow)) {
		step("update "+flow, func(tx store.Tx) (any, error) {
			r, err := tx.FlowGet(ctx, flow)
			if err != nil || r == nil {
				return r, err
			}
			f(r)
			return r, tx.FlowUpdate(ctx, *r)
		})
	}
	for _, order := range []store.Order{store.OrderFlowID, store.OrderCreation} {
		pick(order, 1)
		// Take the first runnable flow out, as a claim does, three times.
		for range 3 {
			var first string
			step("first", func(tx store.Tx) (any, error) {
				fs, err := tx.FlowPickRunnable(ctx, order, 1)
				if len(fs) > 0 {
					first = fs[0].Flow
				}
				return fs, err
			})
			update(first, func(r *store.FlowRow) { r.Runnable, r.Served = false, r.Served+100 })
			pick(order, 2)
		}
		// A flow outside the prefix becomes runnable with the smallest served;
		// one inside it changes its served; a non-runnable one changes.
		update("F00", func(r *store.FlowRow) { r.Runnable, r.Served = true, -1 })
		pick(order, 3)
		update("F07", func(r *store.FlowRow) { r.Served = 50 })
		pick(order, 12)
		update("F05", func(r *store.FlowRow) { w := int64(9); r.WaitUntil = &w })
		pick(order, 12)
		// One inside the prefix, not first, stops being runnable.
		update("F08", func(r *store.FlowRow) { r.Runnable = false })
		pick(order, 12)
		update("F08", func(r *store.FlowRow) { r.Runnable = true })
		// A flow becomes runnable with the served of another (a tie), and
		// one sorting after a prefix that does not hold every runnable flow.
		update("F04", func(r *store.FlowRow) { r.Runnable = false })
		pick(order, 2)
		update("F04", func(r *store.FlowRow) { r.Runnable, r.Served = true, 50 })
		pick(order, 12)
		update("F09", func(r *store.FlowRow) { r.Runnable = false })
		pick(order, 1)
		update("F09", func(r *store.FlowRow) { r.Runnable, r.Served = true, 1000 })
		pick(order, 1)
		pick(order, 12)
	}
	step("due", func(tx store.Tx) (any, error) { return tx.FlowListDue(ctx, 9, 10) })
	step("event by seq", func(tx store.Tx) (any, error) { return tx.EventGetBySeq(ctx, "F03", 1) })
	step("update event", func(tx store.Tx) (any, error) {
		e, err := tx.EventGet(ctx, "E03")
		if err != nil {
			return nil, err
		}
		// Quarantined as settle does it: the event, and its flow parked.
		e.State, e.Generation, e.Reason = store.StateQuarantined, 1, "id_conflict"
		if err := tx.EventUpdate(ctx, *e); err != nil {
			return nil, err
		}
		f, err := tx.FlowGet(ctx, "F03")
		if err != nil {
			return nil, err
		}
		f.Runnable, f.WaitUntil = false, nil
		return nil, tx.FlowUpdate(ctx, *f)
	})
	step("event again", func(tx store.Tx) (any, error) { return tx.EventGet(ctx, "E03") })
	step("quarantined", func(tx store.Tx) (any, error) {
		return tx.EventList(ctx, store.StateQuarantined, "", 0, 10)
	})
	step("absent", func(tx store.Tx) (any, error) { return tx.EventGet(ctx, "nope") })
	step("all events", func(tx store.Tx) (any, error) { return tx.EventList(ctx, "", "", 0, 100) })
	step("all flows", func(tx store.Tx) (any, error) { return tx.FlowList(ctx, "", 100) })
}
