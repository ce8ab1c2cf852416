package fairrelay_test

import (
	"context"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/harness/queuetest"
)

// TestPostgresPruneHeldLeavesOutItsWait: PruneResult.Held counts the time
// the prune held the store, not its wait for another transaction on the
// admin lane (a breaker's report: a prune queued behind a configure or
// another relay's prune reported that wait as time dispatch could wait
// behind). The prune here waits for a transaction holding the lane's clock
// row; Held must fit in what the call took after that transaction ended.
func TestPostgresPruneHeldLeavesOutItsWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, pool := postgresQueue(t, "frheld", 0)
	if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "A1", Flow: "A", Body: []byte(`{"delta":1}`), At: 0}); err != nil {
		t.Fatal(err)
	}
	cs, err := queuetest.Claims(q.Claim(ctx, fairrelay.ClaimParams{At: 0, Limit: 1}))
	if err != nil || len(cs) != 1 {
		t.Fatalf("claim: %+v %v", cs, err)
	}
	if r, err := q.Settle(ctx, fairrelay.SettleParams{Token: cs[0].Token, Outcome: fairrelay.OutcomeAccepted, At: 0}); err != nil || r.Status != fairrelay.SettleAcked {
		t.Fatalf("settle: %+v %v", r, err)
	}

	tx := beginTx(t, pool)
	me := backendPID(t, tx)
	if _, err := tx.Exec(ctx, "SELECT tick FROM clock WHERE id = 2 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		res fairrelay.PruneResult
		err error
		at  time.Time
	}
	done := make(chan answer, 1)
	go func() {
		res, err := q.Prune(ctx, fairrelay.PruneParams{At: 1, AckedBefore: 1})
		done <- answer{res, err, time.Now()}
	}()
	waitBlockedOn(t, pool, me, done) // the prune waits for this transaction
	released := time.Now()
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil || a.res.Events != 1 {
		t.Fatalf("prune: %+v %v, want A1 pruned", a.res, a.err)
	}
	if after := a.at.Sub(released); a.res.Held <= 0 || a.res.Held > after {
		t.Errorf("Held %v, but the call went on only %v after the lane was free: its wait was counted", a.res.Held, after)
	}
}
