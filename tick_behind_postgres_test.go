package fairrelay_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fairrelay/fairrelay"
)

// An enqueue at the store's tick (at NULL) reads the tick first and writes
// later; another transaction may commit, in between, a write at a later
// tick onto a row the call then depends on: the flow it appends to, a flow
// it finds made meanwhile, the id it answers existing or conflict for. The
// call must then go on at that later tick (read again), never append an
// event behind its flow's later one or answer at a tick older than the
// event it reports (SPEC §2: the store's tick is the largest of its
// writes, and a flow's events are enqueued in tick order). A breaker found
// the event-by-event path (a grouped call) appending at the old tick in 4
// of 5 stress runs; each case here stops the call at one read of the
// store's tick (a gate put into the stored_clock view of this test's
// store, on the call's connection only), commits the other transaction
// meanwhile at tick 1000, and lets the call go on. Every path of
// enqueue_many is one case: the common call, the set-based batch and the
// event-by-event path (a flow made meanwhile, an id stored meanwhile).
func TestPostgresEnqueueNeverBehindATickCommittedMeanwhile(t *testing.T) {
	t.Parallel()
	const later = 1000
	cases := []struct {
		name string
		// before: events enqueued (at tick 1) before the call.
		before []fairrelay.NewEvent
		// read: which read of the store's tick the call stops at (1: the
		// first, before the common call's statement; 2: the one after its
		// locks, on every other path).
		read int
		// ids, flows, groups: the call's events (groups nil: none named).
		ids, flows, groups []string
		// meanwhile: the other transaction's event, at tick 1000.
		meanwhile fairrelay.NewEvent
	}{
		{"common call onto a flow advanced meanwhile", []fairrelay.NewEvent{ev("c1", "C", `{"delta":1}`)}, 1,
			[]string{"c3"}, []string{"C"}, nil, ev("c2", "C", `{"delta":1}`)},
		{"grouped call, its flow made meanwhile", nil, 2,
			[]string{"x2"}, []string{"X"}, []string{"X"}, ev("x1", "X", `{"delta":1}`)},
		{"grouped call, its id stored meanwhile", nil, 2,
			[]string{"k"}, []string{"Y"}, []string{"Y"}, ev("k", "Y", `{"delta":1}`)},
		{"grouped call, its id stored meanwhile on another flow", nil, 2,
			[]string{"k"}, []string{"Y"}, []string{"Y"}, ev("k", "V", `{"delta":1}`)},
		{"batch, an id stored meanwhile on another flow", nil, 2,
			[]string{"k", "z1"}, []string{"W", "Z"}, nil, ev("k", "V", `{"delta":1}`)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			q, pool, schema := outboxStore(t, "frtickbehind", fairrelay.DaemonPolicy())
			for _, e := range tc.before {
				if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: e.ID, Flow: e.Flow, Body: e.Body, At: 1}); err != nil {
					t.Fatal(err)
				}
			}
			m := tc.meanwhile
			a := runGated(t, pool, schema, tc.read, tc.ids, tc.flows, tc.groups, func() error {
				_, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: m.ID, Flow: m.Flow, Body: m.Body, At: later})
				return err
			})
			if a.err != nil {
				t.Fatalf("the call: %v", a.err)
			}
			for i, tick := range a.tick {
				if a.committedFirst && tick < later {
					t.Errorf("event %s answered %s at tick %d, before the other transaction's write at %d that it met", tc.ids[i], a.status[i], tick, later)
				}
			}
			// Every flow's events in tick order.
			rows, err := pool.Query(ctx, "SELECT event_id, flow_id, seq, enqueued_at FROM "+pgx.Identifier{schema}.Sanitize()+".event ORDER BY flow_id, seq")
			if err != nil {
				t.Fatal(err)
			}
			type row struct {
				id, flow string
				seq, at  int64
			}
			got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
				var x row
				return x, r.Scan(&x.id, &x.flow, &x.seq, &x.at)
			})
			if err != nil {
				t.Fatal(err)
			}
			for i := 1; i < len(got); i++ {
				if got[i].flow == got[i-1].flow && got[i].at < got[i-1].at {
					t.Errorf("flow %s: event %s (seq %d) enqueued at tick %d, behind event %s (seq %d) at %d", got[i].flow,
						got[i].id, got[i].seq, got[i].at, got[i-1].id, got[i-1].seq, got[i-1].at)
				}
			}
		})
	}
}

// The same for an id whose event another transaction has inserted but not
// committed when the call inserts it: the call waits for it at its insert,
// and when it commits, at a tick past the call's, the call answers at that
// tick, not the one it read (the grouped call, event by event; a batch of
// its own on the set-based path starts over on the unique violation).
// The call's flow exists: onto a new one the call lets the flow go and
// starts over (migration 023).
func TestPostgresEnqueueWaitingForAnIDAnswersAtItsTick(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, pool, schema := outboxStore(t, "frtickwait", fairrelay.DaemonPolicy())
	const later = 1000
	if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "y1", Flow: "Y", Body: []byte(`{"delta":1}`), At: 1}); err != nil {
		t.Fatal(err)
	}
	other, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback(ctx)
	if _, err := q.EnqueuePgxTx(ctx, other, fairrelay.EnqueueParams{ID: "k", Flow: "V", Body: []byte(`{"delta":1}`), At: later}); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		status string
		tick   int64
		err    error
	}
	done := make(chan answer, 1)
	go func() {
		var a answer
		a.err = pool.QueryRow(ctx, "SELECT status, tick FROM "+pgx.Identifier{schema}.Sanitize()+".enqueue_many($1, $2, $3, NULL, false, 3600000, 1048576, $4)",
			[]string{"k"}, []string{"Y"}, [][]byte{[]byte(`{"delta":1}`)}, []string{"Y"}).Scan(&a.status, &a.tick)
		done <- a
	}()
	waitBlockedOn(t, pool, backendPID(t, other), done)
	if err := other.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil {
		t.Fatal(a.err)
	}
	if a.status != "conflict" || a.tick < later {
		t.Errorf("the call answered %s at tick %d, want conflict (the id is on another flow) at a tick of at least %d, the other transaction's", a.status, a.tick, later)
	}
}
