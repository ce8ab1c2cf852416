package fairrelay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/harness/queuetest"
	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/internal/store/pgstore"
)

// TestPostgresOutboxDoesNotStallTheRelay is the point of the PostgreSQL
// backend's lanes (store.Lane): a business transaction that has enqueued an
// event and not committed yet holds the enqueue lane and the row of the
// flow it appends to, nothing else, so the relay keeps claiming and
// settling the other flows meanwhile (before the lanes, every write waited
// for the caller's commit). The flow appended to waits: its claims skip it
// and its settles wait for the row. Each step runs under a deadline; a
// dispatch that waited for the caller would miss it.
func TestPostgresOutboxDoesNotStallTheRelay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, pool, first := outboxFixture(t, "frlane", 0)

	// The caller's transaction appends A2 behind the inflight A1 and stays
	// open.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if r, err := q.EnqueuePgxTx(ctx, tx, fairrelay.EnqueueParams{ID: "A2", Flow: "A", Body: []byte(`{"delta":2}`), At: fairrelay.AtStored}); err != nil || r.Seq != 2 {
		t.Fatalf("EnqueueTx A2: %+v %v", r, err)
	}

	deadline := func() context.Context {
		c, cancel := context.WithTimeout(ctx, 20*time.Second)
		t.Cleanup(cancel)
		return c
	}
	// Meanwhile the relay settles B1 and claims and settles C1.
	if r, err := q.Settle(deadline(), fairrelay.SettleParams{Token: first[1].Token, Outcome: fairrelay.OutcomeAccepted, At: 0}); err != nil || r.Status != fairrelay.SettleAcked {
		t.Fatalf("settle B1 while an enqueue is open: %+v %v", r, err)
	}
	cs, err := queuetest.Claims(q.Claim(deadline(), fairrelay.ClaimParams{At: 0, Limit: 3}))
	if err != nil || len(cs) != 1 || cs[0].Token.EventID != "C1" {
		t.Fatalf("claim while an enqueue is open: %+v %v", cs, err)
	}
	if r, err := q.Settle(deadline(), fairrelay.SettleParams{Token: cs[0].Token, Outcome: fairrelay.OutcomeAccepted, At: 0}); err != nil || r.Status != fairrelay.SettleAcked {
		t.Fatalf("settle C1 while an enqueue is open: %+v %v", r, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// A1 settles, and A2 is A's head.
	if r, err := q.Settle(deadline(), fairrelay.SettleParams{Token: first[0].Token, Outcome: fairrelay.OutcomeAccepted, At: 0}); err != nil || r.Status != fairrelay.SettleAcked {
		t.Fatalf("settle A1 after the commit: %+v %v", r, err)
	}
	cs, err = queuetest.Claims(q.Claim(deadline(), fairrelay.ClaimParams{At: 0, Limit: 3}))
	if err != nil || len(cs) != 1 || cs[0].Token.EventID != "A2" || cs[0].Seq != 2 {
		t.Fatalf("claim after the commit: %+v %v", cs, err)
	}
}

// TestPostgresEnqueueDoesNotWaitForAClaim holds a claim transaction open
// (the claim lane's lock and the claimed flow's row lock) through the store
// seam and requires an enqueue to another flow, and an enqueue appending to
// a flow the claim did not lock, to commit meanwhile.
func TestPostgresEnqueueDoesNotWaitForAClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.Schema(t, "frlane2")
	q, err := fairrelay.Open(ctx, dsn, fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "B1", Flow: "B", Body: []byte(`{"delta":1}`)}); err != nil {
		t.Fatal(err)
	}
	url, schema, err := pgstore.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// What a claim transaction holds until its commit: the claim lane's
	// advisory lock and clock row (migration 003), and its flows' rows.
	if _, err := conn.Exec(ctx, "SET search_path = "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	hold, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(ctx)
	for _, s := range []string{
		`SELECT pg_advisory_xact_lock(1718186354, hashtext(current_schema()))`,
		`SELECT 1 FROM clock WHERE id = 1 FOR UPDATE`,
		`SELECT 1 FROM flow WHERE flow_id = 'B' FOR NO KEY UPDATE`,
	} {
		if _, err := hold.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if r, err := q.EnqueueMany(c, fairrelay.EnqueueManyParams{At: fairrelay.AtStored, Events: []fairrelay.NewEvent{
		{ID: "A1", Flow: "A", Body: []byte(`{"delta":1}`)},
		{ID: "C1", Flow: "C", Body: []byte(`{"delta":1}`)},
	}}); err != nil || len(r) != 2 || r[0].Status != fairrelay.EnqueueCreated {
		t.Fatalf("enqueue while a claim is open: %+v %v", r, err)
	}
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	cs, err := queuetest.Claims(q.Claim(ctx, fairrelay.ClaimParams{At: 0, Limit: 3}))
	if err != nil || len(cs) != 3 {
		t.Fatalf("claim after: %+v %v", cs, err)
	}
}

// TestPostgresSettleWaitingForAFlowHoldsUpNoOtherSettle: a settle whose
// flow's row is held by an open outbox transaction waits for it — without
// holding the settle lane, so the settles of other flows, and the claims of
// SettleAndClaim, go on. (Found by review: the settle used to wait while
// holding its lane, and every other settle queued behind it.)
func TestPostgresSettleWaitingForAFlowHoldsUpNoOtherSettle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, pool, first := outboxFixture(t, "frlane3", time.Minute)
	tx := holdFlowA(t, q, pool, "A2")

	// The settle of A1 waits for A's row.
	settledA := make(chan error, 1)
	go func() {
		r, err := q.Settle(ctx, fairrelay.SettleParams{Token: first[0].Token, Outcome: fairrelay.OutcomeAccepted, At: 0})
		if err == nil && r.Status != fairrelay.SettleAcked {
			err = fmt.Errorf("answered %s", r.Status)
		}
		settledA <- err
	}()
	// Wait until the server shows it waiting for the open transaction.
	waitUntilBlocked(t, pool, tx, settledA, "the settle of A1")
	settlesGoOnWhile(t, q, first, "A1's settle")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-settledA; err != nil {
		t.Fatalf("settle A1 after the commit: %v", err)
	}
}

// TestPostgresSettleSkipsHeldFlows: with SkipHeld a settle batch
// does not wait for a flow an open outbox transaction holds. That token
// comes back Held and its event is untouched; the rest of the batch
// settles, and SettleAndClaim claims as well. Once the transaction
// commits, the same token settles.
func TestPostgresSettleSkipsHeldFlows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, pool, first := outboxFixture(t, "frlane5", time.Minute)
	tx := holdFlowA(t, q, pool, "A2")
	// A deadline well past what a skip takes: a settle that waited for the
	// open transaction would miss it.
	skip, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	settle := func(tok fairrelay.Token) fairrelay.Settlement {
		return fairrelay.Settlement{Token: tok, Outcome: fairrelay.OutcomeAccepted}
	}
	rs, err := queuetest.Settles(q.SettleMany(skip, fairrelay.SettleManyParams{At: 0, SkipHeld: true, Settles: []fairrelay.Settlement{settle(first[0].Token), settle(first[1].Token)}}))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]fairrelay.SettleResult{{Held: true}, {Status: fairrelay.SettleAcked}}, rs); d != "" {
		t.Fatalf("settle A1, B1 while A is held (-want +got):\n%s", d)
	}
	if e, err := q.Event(ctx, "A1"); err != nil || e.State != fairrelay.StateInflight || e.Generation != first[0].Token.Generation {
		t.Fatalf("A1 after a held settle: %+v %v, want inflight, unchanged", e, err)
	}
	rs, cs, err := queuetest.SettleClaims(q.SettleMany(skip, fairrelay.SettleManyParams{At: 0, SkipHeld: true, Settles: []fairrelay.Settlement{settle(first[0].Token)}, ClaimLimit: 2}))
	if err != nil || len(rs) != 1 || !rs[0].Held || len(cs) != 1 || cs[0].Token.EventID != "C1" {
		t.Fatalf("settle-and-claim while A is held: %+v %+v %v, want A1 held and C1 claimed", rs, cs, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rs, err = queuetest.Settles(q.SettleMany(skip, fairrelay.SettleManyParams{At: 0, SkipHeld: true, Settles: []fairrelay.Settlement{settle(first[0].Token)}}))
	if err != nil || len(rs) != 1 || rs[0].Status != fairrelay.SettleAcked || rs[0].Held {
		t.Fatalf("settle A1 after the commit: %+v %v", rs, err)
	}
}

// TestPostgresHeldFlowFreedBeforeThePick: SettleAndClaim under
// SkipHeld finds flow A held and puts its token aside; the
// transaction holding A (here, as another relay's claim would, with the
// claim lane) commits while the settle waits for the lane, so the pick,
// read after that wait, locks A and takes its head. (Found by review: the
// store dropped A's rows from its cache but kept A in the pick, and the
// claim dereferenced the missing row.)
func TestPostgresHeldFlowFreedBeforeThePick(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, pool := postgresQueue(t, "frlane6", 0)
	for _, id := range []string{"A1", "A2"} {
		if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: id, Flow: "A", Body: []byte(`{"delta":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	// A1 claimed (generation 1), its lease runs out, claimed again and
	// acked: A is runnable with head A2, and the first token is stale.
	old, err := queuetest.ClaimOne(ctx, q, 0)
	if err != nil || old == nil || old.Token.EventID != "A1" {
		t.Fatalf("claim: %+v %v", old, err)
	}
	again, err := queuetest.ClaimOne(ctx, q, old.LeaseUntil)
	if err != nil || again == nil || again.Token.Generation != 2 {
		t.Fatalf("claim after the lease: %+v %v", again, err)
	}
	if r, err := q.Settle(ctx, fairrelay.SettleParams{Token: again.Token, Outcome: fairrelay.OutcomeAccepted, At: old.LeaseUntil}); err != nil || r.Status != fairrelay.SettleAcked {
		t.Fatalf("settle generation 2: %+v %v", r, err)
	}
	hold, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(ctx)
	for _, stmt := range []string{
		`SELECT pg_advisory_xact_lock(1718186353 + 1, hashtext(current_schema()))`, // the claim lane (store.Lane)
		`SELECT 1 FROM flow WHERE flow_id = 'A' FOR NO KEY UPDATE`,
	} {
		if _, err := hold.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	type answer struct {
		rs  []fairrelay.SettleResult
		cs  []fairrelay.Claim
		err error
	}
	done := make(chan answer, 1)
	go func() {
		rs, cs, err := queuetest.SettleClaims(q.SettleMany(ctx, fairrelay.SettleManyParams{At: old.LeaseUntil + 1, SkipHeld: true, Settles: []fairrelay.Settlement{{Token: old.Token, Outcome: fairrelay.OutcomeAccepted}}, ClaimLimit: 1}))
		done <- answer{rs, cs, err}
	}()
	// Commit once the server shows it waiting for the lane's lock.
	for waitsFor(t, pool, hold) == 0 {
		select {
		case a := <-done:
			t.Fatalf("SettleAndClaim did not wait for the claim lane: %+v", a)
		default:
		}
	}
	if err := hold.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil || len(a.rs) != 1 || !a.rs[0].Held || len(a.cs) != 1 || a.cs[0].Token.EventID != "A2" {
		t.Fatalf("settle-and-claim: %+v, want the stale token held and A2 claimed", a)
	}
}

// TestPostgresClaimSkipsAHeadReadyLater: where lanes run side by side, a
// claim can meet a runnable head that another lane made ready at a later
// tick than the claim's (an enqueue, a redrive, a settle committed while the
// claim ran). SPEC §2 step 2 makes it eligible only from next_at on: the
// claim leaves it, and a claim at next_at takes it. The state is set up
// directly in the table, as such a race leaves it. (Found by review: 55 of
// 300 racing enqueues were claimed a tick early.)
func TestPostgresClaimSkipsAHeadReadyLater(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.Schema(t, "frlane4")
	q, err := fairrelay.Open(ctx, dsn, fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for _, id := range []string{"A1", "B1"} {
		if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: id, Flow: id[:1], Body: []byte(`{"delta":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	pgtest.Exec(t, dsn, `UPDATE event SET next_at = 100 WHERE event_id = 'A1'`)
	cs, err := queuetest.Claims(q.Claim(ctx, fairrelay.ClaimParams{At: 5, Limit: 2}))
	if err != nil || len(cs) != 1 || cs[0].Token.EventID != "B1" {
		t.Fatalf("claim at tick 5: %+v %v (A1 is ready from tick 100)", cs, err)
	}
	// At 99 A1 is still not eligible, and it does not stand in the way:
	// B1, whose lease ran out at 10, is (SPEC §2 claim: among the eligible
	// heads).
	if c, err := queuetest.ClaimOne(ctx, q, 99); err != nil || c == nil || c.Token != (fairrelay.Token{EventID: "B1", Generation: 2}) {
		t.Fatalf("claim at tick 99: %+v %v, want B1 again (its lease ran out)", c, err)
	}
	if c, err := queuetest.ClaimOne(ctx, q, 100); err != nil || c == nil || c.Token.EventID != "A1" {
		t.Fatalf("claim at tick 100: %+v %v", c, err)
	}
}

// waitsFor returns how many server processes wait for a lock that the
// transaction tx holds (pg_blocking_pids): only this test's, whatever other
// tests run on the server.
func waitsFor(t *testing.T, pool *pgxpool.Pool, tx pgx.Tx) int {
	t.Helper()
	ctx := context.Background()
	// The backend's pid as the connection learnt it at startup: tx's
	// connection may be busy with a call that waits itself.
	pid := tx.Conn().PgConn().PID()
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))`, pid).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitUntilBlocked returns once a server process waits for a lock that tx
// holds; it fails the test if the call under way (done) ends before, not
// having waited.
func waitUntilBlocked(t *testing.T, pool *pgxpool.Pool, tx pgx.Tx, done <-chan error, what string) {
	t.Helper()
	for waitsFor(t, pool, tx) == 0 {
		select {
		case err := <-done:
			t.Fatalf("%s did not wait for the open transaction: %v", what, err)
		default:
		}
	}
}

// settlesGoOnWhile checks that, while what waits for flow A, the settle of
// B1 (first[1], outboxFixture's) acks and a settle-and-claim claims C1,
// each within 20 s: neither waits behind it.
func settlesGoOnWhile(t *testing.T, q *fairrelay.Queue, first []fairrelay.Claim, what string) {
	t.Helper()
	deadline, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if r, err := q.Settle(deadline, fairrelay.SettleParams{Token: first[1].Token, Outcome: fairrelay.OutcomeAccepted, At: 0}); err != nil || r.Status != fairrelay.SettleAcked {
		t.Fatalf("settle B1 while %s waits: %+v %v", what, r, err)
	}
	if _, cs, err := queuetest.SettleClaims(q.SettleMany(deadline, fairrelay.SettleManyParams{At: 0, Settles: nil, ClaimLimit: 2})); err != nil || len(cs) != 1 || cs[0].Token.EventID != "C1" {
		t.Fatalf("settle-and-claim while %s waits: %+v %v", what, cs, err)
	}
}

// holdFlowA opens an outbox transaction on pool that enqueues id onto flow
// A and stays open, holding A's row, until the test commits it or ends
// (then it is rolled back).
func holdFlowA(t *testing.T, q *fairrelay.Queue, pool *pgxpool.Pool, id string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(ctx) })
	if r, err := q.EnqueuePgxTx(ctx, tx, fairrelay.EnqueueParams{ID: id, Flow: "A", Body: []byte(`{"delta":2}`), At: fairrelay.AtStored}); err != nil || r.Status != fairrelay.EnqueueCreated {
		t.Fatalf("the holder's enqueue of %s: %+v %v", id, r, err)
	}
	return tx
}

// outboxFixture opens a PostgreSQL queue in a fresh schema (prefix) with
// the given busy timeout (0: the default), enqueues A1, B1 and C1 on flows
// A, B and C, claims A1 and B1 (returned in that order), and opens a pool
// on the queue's schema for the test's own transactions, as an
// application's would be. Everything is closed when the test ends.
func outboxFixture(t *testing.T, prefix string, busy time.Duration) (*fairrelay.Queue, *pgxpool.Pool, []fairrelay.Claim) {
	t.Helper()
	ctx := context.Background()
	q, pool := postgresQueue(t, prefix, busy)
	for _, id := range []string{"A1", "B1", "C1"} {
		if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: id, Flow: id[:1], Body: []byte(`{"delta":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	first, err := queuetest.Claims(q.Claim(ctx, fairrelay.ClaimParams{At: 0, Limit: 2}))
	if err != nil || len(first) != 2 || first[0].Token.EventID != "A1" || first[1].Token.EventID != "B1" {
		t.Fatalf("claim: %+v %v", first, err)
	}
	return q, pool, first
}

// postgresQueue opens an empty PostgreSQL queue (the reference policy, busy
// timeout busy, 0 for the default) in a fresh schema (prefix), and a pool
// on that schema for the test's own transactions, as an application's
// would be. Both close when the test ends.
func postgresQueue(t *testing.T, prefix string, busy time.Duration) (*fairrelay.Queue, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	dsn := pgtest.Schema(t, prefix)
	// The store made first under the default busy timeout: its migrations
	// share the server's catalogs with every other test's, and under CI's
	// load a short timeout failed the Open itself (migration 013, lock
	// timeout at 200 ms), before the test began.
	made, err := fairrelay.Open(ctx, dsn, fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		t.Fatal(err)
	}
	made.Close()
	q, err := fairrelay.Open(ctx, dsn, fairrelay.Config{Policy: fairrelay.ReferencePolicy(), BusyTimeout: busy, MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	url, schema, err := pgstore.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return q, pool
}

// TestPostgresPauseWaitingForAFlowHoldsUpNoSettle: a pause (or resume) of a
// flow an open outbox transaction holds waits for that flow alone, as a
// settle does (SPEC §10: an open transaction delays only its flow). It
// took the settle lane first and then waited for the flow, so every settle
// and settle-and-claim of the store waited behind it, and a settle of that
// flow waiting for it met it in a deadlock (a breaker's report: settles of
// an unrelated flow held 2.8–4.8 s, 14 deadlocks in 25 s of pauses beside
// outbox writers).
func TestPostgresPauseWaitingForAFlowHoldsUpNoSettle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, pool, first := outboxFixture(t, "frlane6", time.Minute)
	tx := holdFlowA(t, q, pool, "A2")

	paused := make(chan error, 1)
	go func() {
		r, err := q.Pause(ctx, fairrelay.FlowActionParams{Flow: "A", Reason: "hold", Operator: "test", At: fairrelay.AtStored})
		if err == nil && r.Status != fairrelay.ActionPaused {
			err = fmt.Errorf("answered %s", r.Status)
		}
		paused <- err
	}()
	waitUntilBlocked(t, pool, tx, paused, "the pause of A")
	settlesGoOnWhile(t, q, first, "the pause of A")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-paused; err != nil {
		t.Fatalf("pause A after the commit: %v", err)
	}
}

// TestPostgresResumeSeesTheHeadAnOutboxAppended: a paused flow whose events
// are all acked gets a new event from an outbox transaction while a resume
// waits for the flow; once it commits, the resume answers resumed and the
// new event is the flow's head. The resume read the flow and its head in
// the statement that waited: the flow row as committed, the head as before
// the wait, and it failed "head seq 2 is missing: the store is
// inconsistent" (a breaker's report; SQLite answered resumed).
func TestPostgresResumeSeesTheHeadAnOutboxAppended(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, pool, first := outboxFixture(t, "frlane7", time.Minute)
	if r, err := q.Settle(ctx, fairrelay.SettleParams{Token: first[0].Token, Outcome: fairrelay.OutcomeAccepted, At: 0}); err != nil || r.Status != fairrelay.SettleAcked {
		t.Fatalf("settle A1: %+v %v", r, err)
	}
	if r, err := q.Pause(ctx, fairrelay.FlowActionParams{Flow: "A", Reason: "hold", Operator: "test", At: fairrelay.AtStored}); err != nil || r.Status != fairrelay.ActionPaused {
		t.Fatalf("pause A: %+v %v", r, err)
	}
	tx := holdFlowA(t, q, pool, "A2")
	resumed := make(chan error, 1)
	go func() {
		r, err := q.Resume(ctx, fairrelay.FlowActionParams{Flow: "A", Reason: "go", Operator: "test", At: fairrelay.AtStored})
		if err == nil && r.Status != fairrelay.ActionResumed {
			err = fmt.Errorf("answered %s", r.Status)
		}
		resumed <- err
	}()
	waitUntilBlocked(t, pool, tx, resumed, "the resume of A")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-resumed; err != nil {
		t.Fatalf("resume A after the outbox committed A2: %v", err)
	}
	cs, err := queuetest.Claims(q.Claim(ctx, fairrelay.ClaimParams{At: 1, Limit: 3}))
	if err != nil || len(cs) != 2 || cs[0].Token.EventID != "A2" && cs[1].Token.EventID != "A2" {
		t.Fatalf("claim after the resume: %+v %v, want A2 (A's new head) and C1", cs, err)
	}
}

// An enqueue that waits past the busy timeout for a flow an open outbox
// transaction holds answers busy with what happened and what to do — not
// only the server's "canceling statement due to lock timeout" (a fresh
// user's report) — and changes nothing.
func TestPostgresBusyEnqueueSaysWhatHeldIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, pool := postgresQueue(t, "frbusymsg", 200*time.Millisecond)
	if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "A1", Flow: "A", Body: []byte(`{"delta":1}`)}); err != nil {
		t.Fatal(err)
	}
	holdFlowA(t, q, pool, "A2")
	_, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "A3", Flow: "A", Body: []byte(`{"delta":3}`), At: fairrelay.AtStored})
	if fairrelay.CodeOf(err) != fairrelay.CodeBusy || !strings.Contains(err.Error(), "another transaction held a row or table this call needs") ||
		!strings.Contains(err.Error(), "nothing was changed, try again") {
		t.Fatalf("enqueue onto a held flow: %v (code %s), want busy saying another transaction held it", err, fairrelay.CodeOf(err))
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM event WHERE event_id = 'A3'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("A3 rows: %d %v, want none", n, err)
	}
}
