package fairrelay_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/pgtest"
)

// A group's first backlog limit counts every event of the group, also one
// onto a flow of the group made and committed while the configure waited
// for the group's other flows (SPEC §8): the configure's lock of the
// group's flows took the flows its snapshot saw, the new flow's enqueue let
// the group's limit row go at its commit, and an open outbox transaction
// then enqueued onto the new flow without waiting, read no limit, and was
// counted by no one (a hunter's reproduction, step for step; the counter
// ended one below the backlog, as TestPostgresOutboxUnderContention once
// found in CI). Now the configure locks the flows made since, without
// waiting, once it holds the limit row, and waits for that transaction.
func TestPostgresFirstGroupLimitCountsAFlowMadeWhileItWaited(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, pool, schema := outboxStoreAt(t, pgtest.Schema(t, "frlimflow")+"&deadlock_timeout=20ms", fairrelay.DaemonPolicy())
	body := []byte(`{"delta":1}`)
	enqueue := func(id, flow string) {
		t.Helper()
		if r, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: id, Flow: flow, Group: "g", Body: body, At: fairrelay.AtStored}); err != nil || r.Status != fairrelay.EnqueueCreated {
			t.Fatalf("enqueue %s onto %s: %+v %v", id, flow, r, err)
		}
	}
	open := func(id, flow string) pgx.Tx {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tx.Rollback(context.Background()) })
		if r, err := q.EnqueuePgxTx(ctx, tx, fairrelay.EnqueueParams{ID: id, Flow: flow, Group: "g", Body: body, At: fairrelay.AtStored}); err != nil || r.Status != fairrelay.EnqueueCreated {
			t.Fatalf("enqueue %s onto %s in an open transaction: %+v %v", id, flow, r, err)
		}
		return tx
	}
	enqueue("e0", "F0") // group g, no limit
	h := open("e1", "F0")
	limit := int64(100)
	done := make(chan error, 1)
	go func() {
		_, err := q.Configure(ctx, fairrelay.ConfigureParams{At: fairrelay.AtStored, Group: "g", MaxBacklog: &limit})
		done <- err
	}()
	waitBlockedBy(t, pool, h) // the configure waits for F0
	enqueue("e2", "F1")       // a new flow of g, committed
	e := open("e3", "F1")     // did not wait: the configure does not hold F1
	if err := h.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Either the configure returns (it counted without e3: the defect) or
	// it waits for the transaction that holds F1.
	for waiting := false; !waiting; {
		select {
		case err := <-done:
			done <- err
			waiting = true
		default:
			waiting = waitsFor(t, pool, e) > 0
			if !waiting {
				time.Sleep(time.Millisecond) // polling a condition; the configure's own answer ends it too
			}
		}
	}
	if err := e.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if counter, backlog := groupCounterAndBacklog(t, pool, schema, "g"); counter != backlog || backlog != 4 {
		t.Errorf("group g's counter %d, its backlog %d: want both 4", counter, backlog)
	}
}

// groupCounterAndBacklog reads group g's backlog counter (its grp_limit
// row's enqueued, which the group's acks, none in these tests, are taken
// from) and the group's real backlog, its events.
func groupCounterAndBacklog(t *testing.T, pool *pgxpool.Pool, schema, g string) (counter, backlog int64) {
	t.Helper()
	if err := pool.QueryRow(context.Background(), `SELECT l.enqueued, (SELECT count(*) FROM `+pgx.Identifier{schema, "event"}.Sanitize()+` e JOIN `+pgx.Identifier{schema, "flow"}.Sanitize()+` f
		ON f.flow_id = e.flow_id WHERE f.group_id = $1) FROM `+pgx.Identifier{schema, "grp_limit"}.Sanitize()+` l WHERE l.group_id = $1`, g).Scan(&counter, &backlog); err != nil {
		t.Fatal(err)
	}
	return counter, backlog
}
