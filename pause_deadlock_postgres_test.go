package fairrelay_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fairrelay/fairrelay"
)

// TestPostgresPauseOfANewFlowRunsAgainAfterADeadlock: a pause locks the flow
// it names before its settle lane; a flow committed after that lock but
// before the lane is locked only by the pause's later read, with the lane
// held, and a settle that holds the flow and waits for the lane closes a
// cycle (a breaker saw Pause fail with busy: deadlock detected beside two
// relays). The deadlock detector ends the pause here (the other side waits
// 60 s before it looks); it kept nothing, and it answers paused, with one
// audit row, once it ran again.
func TestPostgresPauseOfANewFlowRunsAgainAfterADeadlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, pool := postgresQueue(t, "frpausedl", 0)
	const lane = "SELECT pg_advisory_xact_lock(1718186353 + 3, hashtext(current_schema()))" // the settle lane (ClockLock)
	begin := func() (pgx.Tx, int32) {
		t.Helper()
		tx := beginTx(t, pool)
		return tx, backendPID(t, tx)
	}
	// A holds the lane; B has made flow F and not committed.
	a, aPid := begin()
	if _, err := a.Exec(ctx, lane); err != nil {
		t.Fatal(err)
	}
	b, _ := begin()
	if _, err := q.EnqueuePgxTx(ctx, b, fairrelay.EnqueueParams{ID: "F1", Flow: "F", Body: []byte(`{"delta":1}`), At: fairrelay.AtStored}); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		res fairrelay.ActionResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := q.Pause(ctx, fairrelay.FlowActionParams{Flow: "F", Reason: "maintenance", Operator: "ana", At: fairrelay.AtStored})
		done <- answer{res, err}
	}()
	waitBlockedOn(t, pool, aPid, done) // the pause has locked no F (not visible) and waits for the lane
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// C holds F, as a settle does, and then waits for the lane too.
	c, cPid := begin()
	setDeadlockTimeout(t, c, "60s")
	if _, err := c.Exec(ctx, "SELECT 1 FROM flow WHERE flow_id = 'F' FOR NO KEY UPDATE"); err != nil {
		t.Fatal(err)
	}
	cLane := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, lane)
		cLane <- err
	}()
	waitBlockedOn[answer](t, pool, aPid, nil, cPid)
	// A lets the lane go: the pause takes it, waits for F, and the cycle
	// closes; the detector ends the pause, and C gets the lane.
	if err := a.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-cLane; err != nil {
		t.Fatalf("C's lane: %v (the pause should have been the deadlock's victim)", err)
	}
	if err := c.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got := <-done
	if got.err != nil || got.res.Status != fairrelay.ActionPaused {
		t.Fatalf("pause of F: %+v %v, want paused", got.res, got.err)
	}
	audit, err := q.Audit(ctx, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range audit {
		if r.Action == "pause" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("audit: %+v, want one pause row", audit)
	}
}

// waitBlockedOn returns once a backend waits for holder's locks: any
// backend, or each of pids when given. An answer on done first fails the
// test (the waiter did not wait).
func waitBlockedOn[T any](t *testing.T, pool *pgxpool.Pool, holder int32, done <-chan T, pids ...int32) {
	t.Helper()
	if pids == nil {
		pids = []int32{} // an empty array, not NULL
	}
	for {
		var n int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE $1 = ANY(pg_blocking_pids(pid)) AND (cardinality($2::int[]) = 0 OR pid = ANY($2::int[]))`, holder, pids).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 && (len(pids) == 0 || n == len(pids)) {
			return
		}
		select {
		case v := <-done:
			t.Fatalf("answered before waiting: %+v", v)
		default:
		}
	}
}

// backendPID returns the server process id of tx's connection.
func backendPID(t *testing.T, tx pgx.Tx) int32 {
	t.Helper()
	var pid int32
	if err := tx.QueryRow(t.Context(), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}
