package fairrelay_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/internal/store/pgstore"
)

// TestPostgresOutboxUnderContention: many writers enqueue at once onto a
// few names, each of which may be a flow and a group (one namespace, SPEC
// §8), through every path an enqueue takes on PostgreSQL — EnqueuePgxTx in
// the caller's transaction, the SQL function's
// batches with and without groups, EnqueueMany — with ids and bodies drawn
// from small sets (so existing and conflict happen) while groups' limits
// and weights are configured beside them. Then the store must hold what
// SPEC §2, §8 and §10 say, whatever interleaving the server chose:
//
//   - every answer is true of the store: created at seq s is the event at
//     s of that flow with that body; existing is the same flow and body;
//     conflict is another flow or body; the only errors are a group
//     refused (invalid_input naming group) and busy (from SQL, the
//     server's deadlock_detected past the function's ten start-overs);
//   - every flow's events are seq 1 … its seq, with no hole;
//   - every group a flow names has its group row; a flow that is its own
//     group has no row of its name, and no flow names it (one name, one
//     place in the rotation);
//   - a group's backlog counter, where a limit is set, is its backlog;
//   - no group set a limit before the run holds more than it.
//
// Against the store before migration 012 (763cb3a) it failed in each of
// four runs: an enqueue alone in its transaction failed with
// deadlock_detected, or a limited group's counter ended one below its
// backlog, as a breaker's stress test had found; at 2 calls per
// transaction it also found a flow that was its own group beside a group
// row of its name (two places in the rotation). About 8 s.
func TestPostgresOutboxUnderContention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The server looks for a deadlock after deadlock_timeout (1 s by
	// default) of waiting; the answers do not depend on how soon, and under
	// this much contention the test would wait minutes for it.
	q, pool, schema := outboxStoreAt(t, pgtest.Schema(t, "frcont")+"&deadlock_timeout=20ms", fairrelay.DaemonPolicy())
	fn := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	names := []string{"n0", "n1", "n2", "n3", "n4"}
	bodies := [][]byte{[]byte(`{"delta":1}`), []byte(`{"delta":2}`)}
	const limited, limit = "n4", 40
	i64 := func(v int64) *int64 { return &v }
	if _, err := q.Configure(ctx, fairrelay.ConfigureParams{At: fairrelay.AtStored, Group: limited, MaxBacklog: i64(limit)}); err != nil {
		t.Fatal(err)
	}

	type answer struct {
		id, flow string
		body     []byte
		r        fairrelay.EnqueueResult
	}
	var (
		mu      sync.Mutex
		answers []answer
		busy    = map[string]int{}
		failed  []string
	)
	record := func(as ...answer) {
		mu.Lock()
		answers = append(answers, as...)
		mu.Unlock()
	}
	// allowed reports whether err is an answer the contract allows here,
	// counting busy; anything else is a failure of the test. An enqueue
	// alone in its transaction is never busy: it starts over inside itself
	// until it answers (migration 012; before it, such calls failed here
	// with deadlock_detected). Configure may be: it holds off a group's
	// writers while it counts. (Two calls in one transaction can meet
	// another such transaction in a deadlock over the locks of their first
	// calls, which no start-over inside a call releases: docs/outbox.md.)
	allowed := func(what string, err error) bool {
		mayBeBusy := what == "Configure"
		var pe *pgconn.PgError
		switch {
		case fairrelay.CodeOf(err) == fairrelay.CodeInvalidInput:
			var fe *fairrelay.Error
			if errors.As(err, &fe) && fe.Field == "group" {
				return true
			}
		case mayBeBusy && (fairrelay.CodeOf(err) == fairrelay.CodeBusy || errors.As(err, &pe) && pe.Code == "40P01"):
			// Busy, or from SQL the server's deadlock_detected: the
			// function started over ten times.
			mu.Lock()
			busy[what]++
			mu.Unlock()
			return true
		case errors.As(err, &pe) && pe.Code == "FR002" && pe.Detail == "group":
			return true
		}
		mu.Lock()
		failed = append(failed, fmt.Sprintf("%s: %v", what, err))
		mu.Unlock()
		return false
	}

	const writers, ops = 16, 400
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			pick := func() (id, flow, group string, body []byte) {
				id = fmt.Sprintf("e%d", rng.IntN(1000))
				flow = names[rng.IntN(len(names))]
				if rng.IntN(2) == 0 {
					group = names[rng.IntN(len(names))]
				}
				return id, flow, group, bodies[rng.IntN(len(bodies))]
			}
			for range ops {
				switch k := rng.IntN(10); {
				case k < 4: // the outbox: EnqueuePgxTx in the caller's transaction
					id, flow, group, body := pick()
					var r fairrelay.EnqueueResult
					err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						var err error
						r, err = q.EnqueuePgxTx(ctx, tx, fairrelay.EnqueueParams{ID: id, Flow: flow, Group: group, Body: body, At: fairrelay.AtStored})
						return err
					})
					if err == nil {
						record(answer{id, flow, body, r})
					} else {
						allowed("EnqueuePgxTx", err)
					}
				case k < 7: // the SQL function's batch, as another language calls it
					n := 2 + rng.IntN(3)
					ids, flows, groups := make([]string, n), make([]string, n), make([]*string, n)
					bs := make([][]byte, n)
					grouped := rng.IntN(2) == 0
					for i := range n {
						var g string
						ids[i], flows[i], g, bs[i] = pick()
						if grouped && g != "" {
							groups[i] = &g
						}
					}
					var got []answer
					err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						got = got[:0]
						var rows pgx.Rows
						var err error
						if grouped {
							rows, err = tx.Query(ctx, "SELECT status, seq, coalesce(\"limit\", '') FROM "+fn("enqueue_many")+"($1, $2, $3, p_groups => $4)", ids, flows, bs, groups)
						} else {
							rows, err = tx.Query(ctx, "SELECT status, seq, coalesce(\"limit\", '') FROM "+fn("enqueue_many")+"($1, $2, $3)", ids, flows, bs)
						}
						if err != nil {
							return err
						}
						i := 0
						for rows.Next() {
							var st, lim string
							var seq *int64
							if err := rows.Scan(&st, &seq, &lim); err != nil {
								return err
							}
							r := fairrelay.EnqueueResult{Status: fairrelay.EnqueueStatus(st), Limit: lim}
							if seq != nil {
								r.Seq = *seq
							}
							got = append(got, answer{ids[i], flows[i], bs[i], r})
							i++
						}
						return rows.Err()
					})
					if err == nil {
						record(got...)
					} else {
						allowed("enqueue_many", err)
					}
				case k < 9: // EnqueueMany, the library's batch in its own transaction
					n := 2 + rng.IntN(3)
					evs := make([]fairrelay.NewEvent, n)
					for i := range n {
						id, flow, group, body := pick()
						evs[i] = fairrelay.NewEvent{ID: id, Flow: flow, Group: group, Body: body}
					}
					rs, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: fairrelay.AtStored, Events: evs})
					if err != nil {
						allowed("EnqueueMany", err)
						continue
					}
					for i, r := range rs {
						record(answer{evs[i].ID, evs[i].Flow, evs[i].Body, r})
					}
				default: // a group's weight, or a first or larger limit
					g := names[rng.IntN(len(names)-1)] // not the limited one
					p := fairrelay.ConfigureParams{At: fairrelay.AtStored, Group: g, Weight: i64(1 + rng.Int64N(5))}
					if rng.IntN(2) == 0 {
						p.MaxBacklog = i64(1000 + rng.Int64N(1000))
					}
					if _, err := q.Configure(ctx, p); err != nil {
						allowed("Configure", err)
					}
				}
			}
		})
	}
	wg.Wait()
	for _, f := range failed {
		t.Error(f)
	}
	t.Logf("%d answers; calls busy: %v", len(answers), busy)

	// Every answer is true of the store.
	type stored struct {
		flow string
		seq  int64
		body []byte
	}
	events := map[string]stored{}
	rows, err := pool.Query(ctx, "SELECT event_id, flow_id, seq, body FROM "+fn("event"))
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var s stored
		if err := rows.Scan(&id, &s.flow, &s.seq, &s.body); err != nil {
			t.Fatal(err)
		}
		events[id] = s
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	counts := map[fairrelay.EnqueueStatus]int{}
	for _, a := range answers {
		counts[a.r.Status]++
		s, ok := events[a.id]
		same := ok && s.flow == a.flow && string(s.body) == string(a.body)
		switch a.r.Status {
		case fairrelay.EnqueueCreated:
			if !same || s.seq != a.r.Seq {
				t.Errorf("%s onto %s answered created at seq %d; the store holds %+v (found %v)", a.id, a.flow, a.r.Seq, s, ok)
			}
		case fairrelay.EnqueueExisting:
			if !same {
				t.Errorf("%s onto %s answered existing; the store holds %+v (found %v)", a.id, a.flow, s, ok)
			}
		case fairrelay.EnqueueConflict:
			if !ok || same {
				t.Errorf("%s onto %s answered conflict; the store holds %+v (found %v)", a.id, a.flow, s, ok)
			}
		case fairrelay.EnqueueFull:
			// Checked below through the limited group's backlog.
		default:
			t.Errorf("%s onto %s: answer %+v", a.id, a.flow, a.r)
		}
	}
	t.Logf("answers: %v", counts)

	// The store's own invariants, read on the server.
	checks := []struct{ what, query string }{
		{"flows whose events are not seq 1 … seq", `SELECT f.flow_id FROM flow f LEFT JOIN event e ON e.flow_id = f.flow_id
			GROUP BY f.flow_id, f.seq HAVING count(e.*) <> f.seq OR coalesce(min(e.seq), 0) <> 1 OR coalesce(max(e.seq), 0) <> f.seq`},
		{"groups named by a flow without their row", `SELECT DISTINCT f.group_id FROM flow f
			WHERE f.group_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM grp g WHERE g.group_id = f.group_id)`},
		{"flows that are their own group beside a group row of their name", `SELECT f.flow_id FROM flow f
			WHERE f.group_id IS NULL AND EXISTS (SELECT 1 FROM grp g WHERE g.group_id = f.flow_id)`},
		{"flows that are their own group and named by another flow", `SELECT f.flow_id FROM flow f
			WHERE f.group_id IS NULL AND EXISTS (SELECT 1 FROM flow o WHERE o.group_id = f.flow_id)`},
		{"limited groups whose counter is not their backlog", `SELECT l.group_id || ' counter ' || l.enqueued || ' backlog ' ||
			(SELECT count(*) FROM event e JOIN flow f ON f.flow_id = e.flow_id WHERE coalesce(f.group_id, f.flow_id) = l.group_id)
			FROM grp_limit l WHERE l.max_backlog > 0 AND l.enqueued <>
			(SELECT count(*) FROM event e JOIN flow f ON f.flow_id = e.flow_id WHERE coalesce(f.group_id, f.flow_id) = l.group_id)`},
		{"the group limited before the run over its limit", fmt.Sprintf(`SELECT '%[1]s: ' || count(*) FROM event e JOIN flow f ON f.flow_id = e.flow_id
			WHERE coalesce(f.group_id, f.flow_id) = '%[1]s' HAVING count(*) > %[2]d`, limited, limit)},
	}
	for _, c := range checks {
		var bad []string
		rows, err := pool.Query(ctx, c.query)
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			bad = append(bad, s)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if len(bad) > 0 {
			t.Errorf("%s: %v", c.what, bad)
		}
	}
	if counts[fairrelay.EnqueueCreated] == 0 || counts[fairrelay.EnqueueExisting]+counts[fairrelay.EnqueueConflict] == 0 {
		t.Errorf("the workload did not reach both new and repeated ids: %v", counts)
	}
}

// TestPostgresNewFlowsOfALimitedGroupDoNotDeadlock: calls that each make a
// new flow of one group with a backlog limit wait for each other in turn
// and all answer created. Each held the group's limit row FOR SHARE and
// then upgraded it to check the limit, so two of them deadlocked every
// time (a breaker's run: 51 of 120 such enqueues failed with
// deadlock_detected, one took 103 s); before migration 015 this test's
// calls failed with busy. Without a limit the same calls never wait for
// each other (SPEC §10).
func TestPostgresNewFlowsOfALimitedGroupDoNotDeadlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// deadlock_timeout as in TestPostgresOutboxUnderContention: a deadlock
	// is found in milliseconds, not after a second each.
	q, _, _ := outboxStoreAt(t, pgtest.Schema(t, "frglim"), fairrelay.DaemonPolicy())
	limit := int64(1000)
	if _, err := q.Configure(ctx, fairrelay.ConfigureParams{At: fairrelay.AtStored, Group: "G", MaxBacklog: &limit}); err != nil {
		t.Fatal(err)
	}
	const workers, flows, batch = 6, 10, 5
	errs := make(chan error, workers*flows)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// As the CLI's bulk enqueue sends them: batches, each of new
			// flows of the group, one call apiece.
			for b := range flows / batch {
				var evs []fairrelay.NewEvent
				for f := range batch {
					id := fmt.Sprintf("w%d-b%d-f%d", w, b, f)
					evs = append(evs, fairrelay.NewEvent{ID: id, Flow: id, Group: "G", Body: []byte(`{"delta":1}`)})
				}
				rs, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{Events: evs, At: fairrelay.AtStored})
				for i, r := range rs {
					if err == nil && r.Status != fairrelay.EnqueueCreated {
						err = fmt.Errorf("%s answered %s", evs[i].ID, r.Status)
					}
				}
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		if n++; n <= 3 {
			t.Errorf("enqueue of a new flow in the limited group: %v", err)
		}
	}
	if n > 0 {
		t.Fatalf("%d of %d batches failed", n, workers*flows/batch)
	}
	s, err := q.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Events) != workers*flows {
		t.Errorf("%d events stored, want %d", len(s.Events), workers*flows)
	}
}

// TestPostgresFirstGroupLimitBesideAnOpenOutbox: a configure that sets a
// group's first backlog limit waits for an outbox transaction holding one
// of the group's flows, and that transaction can still make a new flow of
// the group; the limit then counts all of them. The configure locked the
// group's limit row and then waited for the flow, while the transaction's
// new flow waited for the limit row: a deadlock, which failed one of them.
// It now locks the group's flows first, as an enqueue does.
func TestPostgresFirstGroupLimitBesideAnOpenOutbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, pool, _ := outboxStoreAt(t, pgtest.Schema(t, "frcfglim"), fairrelay.DaemonPolicy())
	body := []byte(`{"delta":1}`)
	if r, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "e1", Flow: "F1", Group: "G", Body: body, At: fairrelay.AtStored}); err != nil || r.Status != fairrelay.EnqueueCreated {
		t.Fatalf("enqueue e1: %+v %v", r, err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if r, err := q.EnqueuePgxTx(ctx, tx, fairrelay.EnqueueParams{ID: "e2", Flow: "F1", Body: body, At: fairrelay.AtStored}); err != nil || r.Status != fairrelay.EnqueueCreated {
		t.Fatalf("enqueue e2 in the open transaction: %+v %v", r, err)
	}
	limit := int64(3)
	done := make(chan error, 1)
	go func() {
		_, err := q.Configure(ctx, fairrelay.ConfigureParams{At: fairrelay.AtStored, Group: "G", MaxBacklog: &limit})
		done <- err
	}()
	waitUntilBlocked(t, pool, tx, done, "the configure")
	if r, err := q.EnqueuePgxTx(ctx, tx, fairrelay.EnqueueParams{ID: "e3", Flow: "F2", Group: "G", Body: body, At: fairrelay.AtStored}); err != nil || r.Status != fairrelay.EnqueueCreated {
		t.Fatalf("enqueue e3 onto a new flow of the group, beside the configure: %+v %v", r, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("configure: %v", err)
	}
	// The limit counted e1, e2 and e3: the group is full.
	r, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "e4", Flow: "F3", Group: "G", Body: body, At: fairrelay.AtStored})
	if err != nil || r.Status != fairrelay.EnqueueFull || r.Limit != fairrelay.LimitGroup {
		t.Errorf("enqueue e4 into the group of 3 events, limited to 3: %+v %v, want full (group)", r, err)
	}
}

// TestPostgresStoreAndGroupLimitsTakeOneOrder: under a store limit and a
// group limit, an outbox transaction holding the store's limit row (it
// enqueued X1, group H) and a call making a new flow of group G (which
// waits for it) do not make a lock cycle when the first transaction then
// enqueues onto an existing flow of G. The new-flow call took G's limit
// row before the store's, the other order, and the first transaction
// waited for it: a deadlock every time, broken only by the deadlock
// detector (a breaker's run). The sessions here set deadlock_timeout to a
// minute, so that a cycle stays to be seen.
func TestPostgresStoreAndGroupLimitsTakeOneOrder(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dsn := pgtest.Schema(t, "frlimord")
	q, _, _ := outboxStoreAt(t, dsn, fairrelay.DaemonPolicy())
	cfg, _, err := pgstore.PoolConfig(dsn, 0)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["deadlock_timeout"] = "60s"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	limit := int64(1000)
	for _, g := range []string{"", "G"} {
		if _, err := q.Configure(ctx, fairrelay.ConfigureParams{At: fairrelay.AtStored, Group: g, MaxBacklog: &limit}); err != nil {
			t.Fatal(err)
		}
	}
	body := []byte(`{"delta":1}`)
	enqueue := func(tx pgx.Tx, id, flow, group string) error {
		r, err := q.EnqueuePgxTx(ctx, tx, fairrelay.EnqueueParams{ID: id, Flow: flow, Group: group, Body: body, At: fairrelay.AtStored})
		if err == nil && r.Status != fairrelay.EnqueueCreated {
			err = fmt.Errorf("%s answered %s", id, r.Status)
		}
		return err
	}
	if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "Y1", Flow: "Y", Group: "G", Body: body, At: fairrelay.AtStored}); err != nil {
		t.Fatal(err)
	}
	txA, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txA.Rollback(context.WithoutCancel(ctx))
	txB, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txB.Rollback(context.WithoutCancel(ctx))
	if err := enqueue(txA, "X1", "X", "H"); err != nil {
		t.Fatal(err)
	}
	doneB := make(chan error, 1)
	go func() { doneB <- enqueue(txB, "Z1", "Z", "G") }()
	waitUntilBlocked(t, pool, txA, doneB, "the new flow's enqueue")
	doneA := make(chan error, 1)
	go func() { doneA <- enqueue(txA, "Y2", "Y", "G") }()
	a, b := txA.Conn().PgConn().PID(), txB.Conn().PgConn().PID()
	for waiting := true; waiting; {
		select {
		case err := <-doneA:
			if err != nil {
				t.Fatalf("enqueue Y2 in the transaction holding the store's row: %v", err)
			}
			waiting = false
		default:
			var cycle bool
			if err := pool.QueryRow(ctx, `SELECT $2::int = ANY (pg_blocking_pids($1))`, a, b).Scan(&cycle); err != nil {
				t.Fatal(err)
			}
			if cycle {
				pool.Exec(context.Background(), `SELECT pg_cancel_backend($1)`, a)
				t.Fatal("the transaction holding the store's limit row waits for the new flow's call, which waits for it: a lock cycle")
			}
		}
	}
	if err := txA.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-doneB; err != nil {
		t.Fatalf("enqueue Z1 onto a new flow of G: %v", err)
	}
	if err := txB.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestPostgresFirstGroupLimitBesideANewFlow is the mirror of
// TestPostgresFirstGroupLimitBesideAnOpenOutbox: the open transaction
// first makes a new flow of the group (holding the group's limit row FOR
// SHARE) and then enqueues onto one of its existing flows, which the
// configure had locked FOR SHARE while it waited for the limit row: a
// deadlock, which failed the configure (a breaker's case, every time). The
// configure now never holds the flows while it waits for the limit row.
// Then the same with two existing flows, the transaction enqueueing onto
// them in ascending order around the configure, whose flows are locked in
// that order too (they were locked in the table's order: F2 before F1).
func TestPostgresFirstGroupLimitBesideANewFlow(t *testing.T) {
	t.Parallel()
	body := []byte(`{"delta":1}`)
	run := func(t *testing.T, prefix string, existing []string, first, second fairrelay.EnqueueParams, want int64) {
		ctx := context.Background()
		q, pool, _ := outboxStoreAt(t, pgtest.Schema(t, prefix), fairrelay.DaemonPolicy())
		for i, f := range existing {
			if r, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: fmt.Sprintf("x%d", i), Flow: f, Group: "G", Body: body, At: fairrelay.AtStored}); err != nil || r.Status != fairrelay.EnqueueCreated {
				t.Fatalf("enqueue onto %s: %+v %v", f, r, err)
			}
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.WithoutCancel(ctx))
		first.Body, first.At, second.Body, second.At = body, fairrelay.AtStored, body, fairrelay.AtStored
		if r, err := q.EnqueuePgxTx(ctx, tx, first); err != nil || r.Status != fairrelay.EnqueueCreated {
			t.Fatalf("enqueue %s in the open transaction: %+v %v", first.ID, r, err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := q.Configure(ctx, fairrelay.ConfigureParams{At: fairrelay.AtStored, Group: "G", MaxBacklog: &want})
			done <- err
		}()
		waitUntilBlocked(t, pool, tx, done, "the configure")
		if r, err := q.EnqueuePgxTx(ctx, tx, second); err != nil || r.Status != fairrelay.EnqueueCreated {
			t.Fatalf("enqueue %s beside the configure: %+v %v", second.ID, r, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("configure: %v", err)
		}
		// The limit counted every event: the group is full.
		r, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "last", Flow: "F9", Group: "G", Body: body, At: fairrelay.AtStored})
		if err != nil || r.Status != fairrelay.EnqueueFull || r.Limit != fairrelay.LimitGroup {
			t.Errorf("enqueue into the group of %d events, limited to %d: %+v %v, want full (group)", want, want, r, err)
		}
	}
	t.Run("a new flow, then an existing one", func(t *testing.T) {
		t.Parallel()
		run(t, "frcfgnew", []string{"F1"}, fairrelay.EnqueueParams{ID: "n1", Flow: "F0", Group: "G"}, fairrelay.EnqueueParams{ID: "n2", Flow: "F1"}, 3)
	})
	t.Run("two existing flows in ascending order", func(t *testing.T) {
		t.Parallel()
		run(t, "frcfgord", []string{"F2", "F1"}, fairrelay.EnqueueParams{ID: "n1", Flow: "F1"}, fairrelay.EnqueueParams{ID: "n2", Flow: "F2"}, 4)
	})
}
