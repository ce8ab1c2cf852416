package pgstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/harness/queuetest"
	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/internal/store"
	"github.com/fairrelay/fairrelay/internal/store/pgstore"
)

// headState is what migration 004's columns of one flow row hold.
type headState struct {
	seq        *int64
	state      *string
	generation *int64
}

func readHeadState(t *testing.T, dsn, flow string) headState {
	t.Helper()
	var h headState
	pgtest.QueryRow(t, dsn, `SELECT head_state_seq, head_state, head_generation FROM flow WHERE flow_id = '`+flow+`'`,
		&h.seq, &h.state, &h.generation)
	return h
}

func readEventRow(t *testing.T, dsn, id string) (state string, generation int64) {
	t.Helper()
	pgtest.QueryRow(t, dsn, `SELECT own_state, generation FROM event WHERE event_id = '`+id+`'`, &state, &generation)
	return state, generation
}

// queueOfA opens a queue in a fresh schema, closed when the test ends, with
// the events ids enqueued to flow A.
func queueOfA(t *testing.T, ids ...string) (string, *fairrelay.Queue) {
	t.Helper()
	ctx := context.Background()
	dsn := pgtest.Schema(t, "frhead")
	q, err := fairrelay.Open(ctx, dsn, fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	for _, id := range ids {
		if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: id, Flow: "A", Body: []byte(`{"delta":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	return dsn, q
}

// TestClaimWritesTheFlowRowOnly: a claim keeps its head's new state on the
// flow row it writes anyway and leaves the event row as enqueued (one row
// version per claim instead of two, migration 004), and so does the ack,
// while every read answers the state as it is; the next claim of the flow
// gives the acked event its final state on its own row.
func TestClaimWritesTheFlowRowOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, q := queueOfA(t, "A1", "A2")
	c, err := queuetest.ClaimOne(ctx, q, 1)
	if err != nil || c == nil || c.Token.EventID != "A1" {
		t.Fatalf("claim: %+v %v", c, err)
	}
	if st, gen := readEventRow(t, dsn, "A1"); st != store.StateReady || gen != 0 {
		t.Fatalf("event row of A1 after the claim: %s generation %d, want it untouched (ready, 0)", st, gen)
	}
	if h := readHeadState(t, dsn, "A"); h.seq == nil || *h.seq != 1 || *h.state != store.StateInflight || *h.generation != c.Token.Generation {
		t.Fatalf("flow A's head state after the claim: %+v, want seq 1 inflight generation %d", h, c.Token.Generation)
	}
	if e, err := q.Event(ctx, "A1"); err != nil || e.State != store.StateInflight || e.Generation != c.Token.Generation {
		t.Fatalf("A1 as read: %+v %v, want inflight generation %d", e, err, c.Token.Generation)
	}

	if r, err := q.Settle(ctx, fairrelay.SettleParams{Token: c.Token, Outcome: fairrelay.OutcomeAccepted, At: 2}); err != nil || r.Status != fairrelay.SettleAcked {
		t.Fatalf("settle: %+v %v", r, err)
	}
	// The ack writes the flow row alone: A1's row still waits.
	if st, gen := readEventRow(t, dsn, "A1"); st != store.StateReady || gen != 0 {
		t.Fatalf("event row of A1 after the ack: %s generation %d, want it untouched (ready, 0)", st, gen)
	}
	if h := readHeadState(t, dsn, "A"); h.seq == nil || *h.seq != 1 || *h.state != store.StateAcked {
		t.Fatalf("flow A's head state after the ack: %+v, want seq 1 acked", h)
	}
	if e, err := q.Event(ctx, "A1"); err != nil || e.State != store.StateAcked || e.Generation != c.Token.Generation {
		t.Fatalf("A1 as read after the ack: %+v %v", e, err)
	}
	if e, err := q.Event(ctx, "A2"); err != nil || e.State != store.StateReady || e.Generation != 0 {
		t.Fatalf("A2, the new head: %+v %v", e, err)
	}

	// The claim of A2 takes the flow's head state and gives A1 its row back.
	c2, err := queuetest.ClaimOne(ctx, q, 3)
	if err != nil || c2 == nil || c2.Token.EventID != "A2" {
		t.Fatalf("claim of A2: %+v %v", c2, err)
	}
	if st, gen := readEventRow(t, dsn, "A1"); st != store.StateAcked || gen != c.Token.Generation {
		t.Fatalf("event row of A1 after A2's claim: %s generation %d, want acked, %d", st, gen, c.Token.Generation)
	}
	if h := readHeadState(t, dsn, "A"); h.seq == nil || *h.seq != 2 || *h.state != store.StateInflight {
		t.Fatalf("flow A's head state after A2's claim: %+v, want seq 2 inflight", h)
	}
	for id, want := range map[string]fairrelay.State{"A1": store.StateAcked, "A2": store.StateInflight} {
		if e, err := q.Event(ctx, id); err != nil || e.State != want {
			t.Fatalf("%s as read after A2's claim: %+v %v, want %s", id, e, err, want)
		}
	}
}

// TestEventWrittenWithoutItsFlow: a write of an event whose flow row the
// transaction does not write goes to the event row, and the flow's head
// state, which described the event, stops applying. The protocol always
// writes both today; the store must not answer a stale state if it ever
// does not.
func TestEventWrittenWithoutItsFlow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, q := queueOfA(t, "A1")
	if c, err := queuetest.ClaimOne(ctx, q, 1); err != nil || c == nil {
		t.Fatalf("claim: %+v %v", c, err)
	}
	s, err := pgstore.Open(ctx, dsn, pgstore.Options{Entry: "seed"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tx, err := s.Begin(ctx, store.LaneSettle)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	rr, err := tx.Read(ctx, store.ReadSet{At: store.AtStored, Events: []string{"A1"}})
	if err != nil {
		t.Fatal(err)
	}
	e := rr.Events["A1"]
	if e == nil || e.State != store.StateInflight {
		t.Fatalf("A1: %+v", e)
	}
	e.Attempts = 7
	if err := tx.Write(ctx, &store.WriteSet{Events: []store.EventRow{*e}, Clock: rr.Clock}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := q.Event(ctx, "A1"); err != nil || r.Attempts != 7 || r.State != store.StateInflight {
		t.Fatalf("A1 after the write: %+v %v, want 7 attempts, inflight", r, err)
	}
	if h := readHeadState(t, dsn, "A"); h.seq != nil {
		t.Fatalf("flow A's head state still set: seq %d", *h.seq)
	}
}

// TestBuildsBefore004FailOnAMigratedStore: a fairrelay built before
// migration 004 reads the event row's state column for every event it
// touches (this is its EventGet, verbatim) and checks no migration record;
// on a migrated store it must fail on that read instead of misreading the
// heads (the column is renamed).
func TestBuildsBefore004FailOnAMigratedStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, _ := queueOfA(t, "A1")
	conn := pgtest.Connect(t, dsn)
	defer conn.Close(ctx)
	var id string
	err := conn.QueryRow(ctx, `SELECT event_id, flow_id, seq, body, state, generation, attempts, lifetime_attempts, reason, next_at, lease_until, enqueued_at
FROM event WHERE event_id = $1`, "A1").Scan(&id)
	if err == nil || !strings.Contains(err.Error(), `column "state" does not exist`) {
		t.Fatalf("a pre-004 read of an event: %v, want column \"state\" does not exist", err)
	}
}

// A write collected before a second Read of the same transaction is still
// written at the commit.
func TestSecondReadKeepsCollectedWrites(t *testing.T) {
	ctx := context.Background()
	s, err := pgstore.Open(ctx, pgtest.Schema(t, "frclk2"), pgstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tx, err := s.Begin(ctx, store.LaneSettle)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Read(ctx, store.ReadSet{At: store.AtStored}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Write(ctx, &store.WriteSet{Clock: store.Clock{Tick: 42}}); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Read(ctx, store.ReadSet{At: store.AtStored, DueLimit: 1}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rd, err := s.BeginRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Rollback(ctx)
	if c, err := rd.Clock(ctx); err != nil || c.Tick != 42 {
		t.Fatalf("stored clock %+v %v, want tick 42", c, err)
	}
}
