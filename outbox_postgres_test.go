package fairrelay_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/jsontext"
	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/internal/store/pgstore"
)

// outboxStore opens a fresh PostgreSQL queue store under pol and a pool on
// its database (search_path: the store's schema), both closed when the
// test ends.
func outboxStore(t testing.TB, prefix string, pol fairrelay.Policy) (*fairrelay.Queue, *pgxpool.Pool, string) {
	t.Helper()
	return outboxStoreAt(t, pgtest.Schema(t, prefix), pol)
}

// outboxStoreAt is outboxStore on dsn, a URL of pgtest.Schema's.
func outboxStoreAt(t testing.TB, dsn string, pol fairrelay.Policy) (*fairrelay.Queue, *pgxpool.Pool, string) {
	t.Helper()
	q, err := fairrelay.Open(t.Context(), dsn, fairrelay.Config{Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	cfg, schema, err := pgstore.PoolConfig(dsn, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Enough for a test's open transactions and its checks beside them.
	cfg.MaxConns = max(cfg.MaxConns, 12)
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return q, pool, schema
}

// waitBlockedBy waits until another server process waits for a lock that
// tx holds, failing after 10 s.
func waitBlockedBy(t *testing.T, pool *pgxpool.Pool, tx pgx.Tx) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); waitsFor(t, pool, tx) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the second transaction did not wait for the first within 10s")
		}
		time.Sleep(time.Millisecond) // polling a condition, with a deadline
	}
}

func ev(id, flow, body string) fairrelay.NewEvent {
	return fairrelay.NewEvent{ID: id, Flow: flow, Body: []byte(body)}
}

// Two transactions enqueue the same id at once (SPEC §10, issue 14): the
// first holds its uncommitted event while the second waits for it (checked
// on the server, pg_blocking_pids), then commits or rolls back. The second
// answers existing (same flow and body), conflict (another flow or body) or
// created (the first rolled back) — never an error, never a second row, and
// no hole in the flow. The second is one event (EnqueuePgxTx) or a batch of
// its own transaction (EnqueueMany, whose set-based path meets the first's
// rows and goes on event by event), or a batch of the SQL function called
// inside a caller's transaction. The flows named may exist before (each
// with one committed event, "before-FLOW"): then one event takes the SQL
// function's common path (migration 009), which waits for the first on the
// flow's row or on the id itself.
func TestPostgresSameIDAtOnce(t *testing.T) {
	t.Parallel()
	type second int
	const (
		single second = iota // EnqueuePgxTx in a caller's transaction
		many                 // EnqueueMany, a transaction of its own
	)
	cases := []struct {
		name   string
		before []string             // flows that exist before, each with one event
		first  []fairrelay.NewEvent // in one caller's transaction
		commit bool
		how    second
		second []fairrelay.NewEvent
		want   []string // the second's answers, "status seq"
		events []string // every stored event at the end, "id flow seq"
	}{
		{"same content", nil, []fairrelay.NewEvent{ev("X", "F", `{"delta":1}`)}, true,
			single, []fairrelay.NewEvent{ev("X", "F", `{"delta":1}`)}, []string{"existing 1"}, []string{"X F 1"}},
		{"another body", nil, []fairrelay.NewEvent{ev("X", "F", `{"delta":1}`)}, true,
			single, []fairrelay.NewEvent{ev("X", "F", `{"delta":2}`)}, []string{"conflict 0"}, []string{"X F 1"}},
		{"another flow", nil, []fairrelay.NewEvent{ev("X", "F", `{"delta":1}`)}, true,
			single, []fairrelay.NewEvent{ev("X", "G", `{"delta":1}`)}, []string{"conflict 0"}, []string{"X F 1"}},
		{"first rolled back", nil, []fairrelay.NewEvent{ev("X", "F", `{"delta":1}`)}, false,
			single, []fairrelay.NewEvent{ev("X", "F", `{"delta":2}`)}, []string{"created 1"}, []string{"X F 1"}},
		{"flow existed: same content", []string{"F"}, []fairrelay.NewEvent{ev("X", "F", `{"delta":1}`)}, true,
			single, []fairrelay.NewEvent{ev("X", "F", `{"delta":1}`)}, []string{"existing 2"}, []string{"X F 2"}},
		{"flow existed: another body", []string{"F"}, []fairrelay.NewEvent{ev("X", "F", `{"delta":1}`)}, true,
			single, []fairrelay.NewEvent{ev("X", "F", `{"delta":2}`)}, []string{"conflict 0"}, []string{"X F 2"}},
		{"flows existed: another flow", []string{"F", "G"}, []fairrelay.NewEvent{ev("X", "F", `{"delta":1}`)}, true,
			single, []fairrelay.NewEvent{ev("X", "G", `{"delta":1}`)}, []string{"conflict 0"}, []string{"X F 2"}},
		{"flows existed: another flow, first rolled back", []string{"F", "G"}, []fairrelay.NewEvent{ev("X", "F", `{"delta":1}`)}, false,
			single, []fairrelay.NewEvent{ev("X", "G", `{"delta":1}`)}, []string{"created 2"}, []string{"X G 2"}},
		{"flow existed: first rolled back", []string{"F"}, []fairrelay.NewEvent{ev("X", "F", `{"delta":1}`)}, false,
			single, []fairrelay.NewEvent{ev("X", "F", `{"delta":2}`)}, []string{"created 2"}, []string{"X F 2"}},
		{"batch: same content, new flows", nil, []fairrelay.NewEvent{ev("X1", "F", "1"), ev("X2", "F", "2")}, true,
			many, []fairrelay.NewEvent{ev("X2", "F", "2"), ev("X3", "G", "3"), ev("X4", "F", "4")},
			[]string{"existing 2", "created 1", "created 3"}, []string{"X1 F 1", "X2 F 2", "X4 F 3", "X3 G 1"}},
		{"batch: conflicts", nil, []fairrelay.NewEvent{ev("X1", "F", "1"), ev("X2", "G", "2")}, true,
			many, []fairrelay.NewEvent{ev("X2", "G", "other"), ev("X1", "G", "1"), ev("X5", "H", "5")},
			[]string{"conflict 0", "conflict 0", "created 1"}, []string{"X1 F 1", "X2 G 1", "X5 H 1"}},
		{"batch: first rolled back", nil, []fairrelay.NewEvent{ev("X1", "F", "1"), ev("X2", "F", "2")}, false,
			many, []fairrelay.NewEvent{ev("X2", "F", "2"), ev("X1", "F", "1")},
			[]string{"created 1", "created 2"}, []string{"X2 F 1", "X1 F 2"}},
		// The second names a new flow in a new group: its conflict leaves
		// neither behind (a breaker's report: a flow of seq 0 and its group
		// stayed, and took a turn ahead of flows created after them).
		{"another flow, new group", nil, []fairrelay.NewEvent{ev("X", "F", `{"delta":1}`)}, true,
			single, []fairrelay.NewEvent{{ID: "X", Flow: "G", Group: "T", Body: []byte(`{"delta":1}`)}}, []string{"conflict 0"}, []string{"X F 1"}},
		{"batch: another flow, new group, then a new flow", nil, []fairrelay.NewEvent{ev("X", "F", "1")}, true,
			many, []fairrelay.NewEvent{{ID: "X", Flow: "G", Group: "T", Body: []byte("1")}, ev("Y", "H", "2")},
			[]string{"conflict 0", "created 1"}, []string{"X F 1", "Y H 1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			q, pool, schema := outboxStore(t, "frsame_id", fairrelay.DaemonPolicy())
			// An event committed before, so that flow F exists in some
			// cases and not in others: here it is another flow.
			if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "before", Flow: "B", Body: []byte("0"), At: fairrelay.AtStored}); err != nil {
				t.Fatal(err)
			}
			for _, f := range c.before {
				if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "before-" + f, Flow: f, Body: []byte("0"), At: fairrelay.AtStored}); err != nil {
					t.Fatal(err)
				}
			}
			first, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer first.Rollback(ctx)
			// The first transaction: the schema's SQL function, as any
			// language calls it, with the whole batch in one call.
			ids, flows, bodies := []string{}, []string{}, [][]byte{}
			for _, e := range c.first {
				ids, flows, bodies = append(ids, e.ID), append(flows, e.Flow), append(bodies, e.Body)
			}
			rows, err := first.Query(ctx, "SELECT status FROM "+pgx.Identifier{schema, "enqueue_many"}.Sanitize()+"($1, $2, $3)", ids, flows, bodies)
			if err != nil {
				t.Fatal(err)
			}
			statuses, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil || slices.ContainsFunc(statuses, func(s string) bool { return s != "created" }) {
				t.Fatalf("first transaction: %v %v, want all created", statuses, err)
			}
			type answer struct {
				rs  []fairrelay.EnqueueResult
				err error
			}
			done := make(chan answer, 1)
			go func() {
				switch c.how {
				case single:
					var a answer
					a.err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						r, err := q.EnqueuePgxTx(ctx, tx, fairrelay.EnqueueParams{ID: c.second[0].ID, Flow: c.second[0].Flow, Group: c.second[0].Group, Body: c.second[0].Body, At: fairrelay.AtStored})
						a.rs = []fairrelay.EnqueueResult{r}
						return err
					})
					done <- a
				case many:
					rs, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: fairrelay.AtStored, Events: c.second})
					done <- answer{rs, err}
				}
			}()
			waitBlockedBy(t, pool, first)
			if c.commit {
				err = first.Commit(ctx)
			} else {
				err = first.Rollback(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			var a answer
			select {
			case a = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("the second transaction did not end within 20s of the first")
			}
			if a.err != nil {
				t.Fatalf("second transaction: %v (code %s), want answers %v", a.err, fairrelay.CodeOf(a.err), c.want)
			}
			var got []string
			for _, r := range a.rs {
				got = append(got, fmt.Sprintf("%s %d", r.Status, r.Seq))
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("second transaction answered %v, want %v", got, c.want)
			}
			s, err := q.Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var stored []string
			for _, e := range s.Events {
				if !strings.HasPrefix(e.ID, "before") {
					stored = append(stored, fmt.Sprintf("%s %s %d", e.ID, e.Flow, e.Seq))
				}
			}
			if !slices.Equal(stored, c.events) {
				t.Errorf("stored events %v, want %v", stored, c.events)
			}
			// A conflict or existing answer changes nothing (SPEC §2): every
			// flow has an event, and every group is a flow's.
			withEvents, flowGroups := map[string]bool{}, map[string]bool{}
			for _, e := range s.Events {
				withEvents[e.Flow] = true
			}
			for _, f := range s.Flows {
				if !withEvents[f.Flow] {
					t.Errorf("flow %s (seq %d) has no event: made by an answer that changed nothing", f.Flow, f.Seq)
				}
				flowGroups[cmp.Or(f.Group, f.Flow)] = true
			}
			for _, g := range s.Groups {
				if !flowGroups[g.Group] {
					t.Errorf("group %s has no flow: made by an answer that changed nothing", g.Group)
				}
			}
		})
	}
}

// Many transactions enqueue overlapping batches of the same few ids, with
// two bodies and three flows, new flows and old, at once (each transaction
// one call: EnqueueMany, or EnqueuePgxTx of one event): no transaction fails
// (no deadlock, no busy), each id is created exactly once, and every other
// answer for it is existing exactly when it named the stored flow and body.
func TestPostgresSameIDsUnderContention(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	q, pool, _ := outboxStore(t, "frsame_ids", fairrelay.DaemonPolicy())
	const workers, rounds = 8, 25
	type try struct {
		ev fairrelay.NewEvent
		r  fairrelay.EnqueueResult
	}
	var (
		mu    sync.Mutex
		tries []try
		errs  []error
		wg    sync.WaitGroup
	)
	for w := range workers {
		rng := rand.New(rand.NewPCG(uint64(w), 14))
		wg.Go(func() {
			for i := range rounds {
				// Ids and flows of this round's pool, so that every round
				// creates new flows and ids for the workers to race on.
				var batch []fairrelay.NewEvent
				for _, k := range rng.Perm(6)[:1+rng.IntN(4)] {
					batch = append(batch, fairrelay.NewEvent{ID: fmt.Sprintf("r%d-e%d", i, k),
						Flow: fmt.Sprintf("r%d-f%d", i, rng.IntN(3)), Body: fmt.Appendf(nil, "%d", rng.IntN(2))})
				}
				var rs []fairrelay.EnqueueResult
				var err error
				if len(batch) == 1 && rng.IntN(2) == 0 {
					err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						r, err := q.EnqueuePgxTx(ctx, tx, fairrelay.EnqueueParams{ID: batch[0].ID, Flow: batch[0].Flow, Body: batch[0].Body, At: fairrelay.AtStored})
						rs = []fairrelay.EnqueueResult{r}
						return err
					})
				} else {
					rs, err = q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: fairrelay.AtStored, Events: batch})
				}
				mu.Lock()
				if err != nil {
					errs = append(errs, fmt.Errorf("worker %d round %d %v: %w (code %s)", w, i, batch, err, fairrelay.CodeOf(err)))
				}
				for k := range rs {
					tries = append(tries, try{batch[k], rs[k]})
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	created := map[string]int{}
	for _, tr := range tries {
		e, err := q.Event(ctx, tr.ev.ID)
		if err != nil {
			t.Fatalf("%s: %v", tr.ev.ID, err)
		}
		same := e.Flow == tr.ev.Flow && string(e.Body) == string(tr.ev.Body)
		switch tr.r.Status {
		case fairrelay.EnqueueCreated:
			created[tr.ev.ID]++
			if !same || tr.r.Seq != e.Seq {
				t.Errorf("%s created as %+v, stored %s seq %d body %s", tr.ev.ID, tr.ev, e.Flow, e.Seq, e.Body)
			}
		case fairrelay.EnqueueExisting:
			if !same || tr.r.Seq != e.Seq {
				t.Errorf("%s existing for %+v (seq %d), stored %s seq %d body %s", tr.ev.ID, tr.ev, tr.r.Seq, e.Flow, e.Seq, e.Body)
			}
		case fairrelay.EnqueueConflict:
			if same {
				t.Errorf("%s conflict for %+v, which is what is stored", tr.ev.ID, tr.ev)
			}
		}
	}
	s, err := q.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seqs := map[string][]int64{}
	for _, e := range s.Events {
		if created[e.ID] != 1 {
			t.Errorf("%s stored, created %d times", e.ID, created[e.ID])
		}
		seqs[e.Flow] = append(seqs[e.Flow], e.Seq)
	}
	for f, ss := range seqs {
		for i, s := range ss {
			if s != int64(i+1) {
				t.Errorf("flow %s has seqs %v, want 1..%d: a hole", f, ss, len(ss))
				break
			}
		}
	}
	t.Logf("%d answers, %d events stored", len(tries), len(s.Events))
}

// answerOf renders an enqueue's answer as a caller sees it: "status seq"
// (conflict without a seq), or the error — from the SQL function by its
// SQLSTATE (FR001 clock_regressed, FR002 invalid_input with the field in
// DETAIL), from EnqueueTx by its code and field.
func answerOf(status string, seq *int64, err error) string {
	var pe *pgconn.PgError
	var fe *fairrelay.Error
	switch {
	case errors.As(err, &pe) && pe.Code == "FR001":
		return "error clock_regressed"
	case errors.As(err, &pe) && pe.Code == "FR002":
		return "error invalid_input " + pe.Detail
	case errors.As(err, &pe):
		return "error sqlstate " + pe.Code + ": " + pe.Message
	case errors.As(err, &fe) && fe.Code == fairrelay.CodeInvalidInput:
		return "error invalid_input " + fe.Field
	case err != nil:
		return "error " + string(fairrelay.CodeOf(err))
	case seq == nil || status == string(fairrelay.EnqueueConflict):
		return status
	}
	return fmt.Sprintf("%s %d", status, *seq)
}

// sqlEnqueue calls the schema's SQL function enqueue(id, flow, body, at)
// as plain SQL in a transaction of conn — as a program in any language
// does — and commits it, or rolls it back on an error.
func sqlEnqueue(ctx context.Context, conn *pgx.Conn, schema, id, flow string, body []byte, at any) string {
	var status string
	var seq *int64
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, "SELECT status, seq FROM "+pgx.Identifier{schema, "enqueue"}.Sanitize()+"($1, $2, $3, $4)",
			id, flow, body, at).Scan(&status, &seq)
	})
	return answerOf(status, seq, err)
}

// txEnqueue calls EnqueuePgxTx in a transaction of pool and commits it, or
// rolls it back on an error.
func txEnqueue(ctx context.Context, q *fairrelay.Queue, pool *pgxpool.Pool, p fairrelay.EnqueueParams) string {
	var r fairrelay.EnqueueResult
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		r, err = q.EnqueuePgxTx(ctx, tx, p)
		return err
	})
	return answerOf(string(r.Status), &r.Seq, err)
}

// The SQL function enqueue, called as plain SQL through pgx, answers every
// enqueue line of the shared vectors (testdata/vectors, at their ticks, in
// order, each vector on fresh stores under its entry rule) exactly as
// EnqueueTx does: created with the seq, existing with the seq, conflict,
// clock_regressed (SPEC §10: the same enqueue, with the same answers, from
// any language).
func TestPostgresSQLEnqueueAnswersAsEnqueueTx(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/vectors/*.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var mu sync.Mutex
	ran := false // a subtest reached PostgreSQL (without it each skips)
	t.Cleanup(func() {
		// The vectors must exercise every answer, or the test proves less
		// than it says.
		if !ran {
			return
		}
		for _, want := range []string{"created", "existing", "conflict", "error clock_regressed"} {
			if !seen[want] {
				t.Errorf("no enqueue line of the vectors answered %s", want)
			}
		}
	})
	for _, f := range files {
		if strings.HasSuffix(f, ".expected.jsonl") {
			continue
		}
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			pol := fairrelay.ReferencePolicy()
			if strings.HasSuffix(f, ".fair.jsonl") {
				pol.Entry = fairrelay.EntryFair
			}
			q, pool, _ := outboxStore(t, "frvec_go", pol)
			_, sqlPool, schema := outboxStore(t, "frvec_sql", pol)
			mu.Lock()
			ran = true
			mu.Unlock()
			conn, err := sqlPool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Release()
			lines, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for no, line := range bytes.Split(lines, []byte("\n")) {
				var op struct {
					Op    string          `json:"op"`
					ID    string          `json:"id"`
					Flow  string          `json:"flow"`
					Delta json.RawMessage `json:"delta"`
					Body  json.RawMessage `json:"body"`
					At    int64           `json:"at"`
				}
				if len(bytes.TrimSpace(line)) == 0 {
					continue
				}
				if err := json.Unmarshal(line, &op); err != nil {
					t.Fatalf("line %d: %v", no+1, err)
				}
				if op.Op != "enqueue" {
					continue
				}
				body := fmt.Appendf(nil, `{"delta":%s}`, op.Delta)
				if op.Body != nil {
					if body, err = jsontext.Canonical(op.Body); err != nil {
						t.Fatalf("line %d: %v", no+1, err)
					}
				}
				goAnswer := txEnqueue(ctx, q, pool, fairrelay.EnqueueParams{ID: op.ID, Flow: op.Flow, Body: body, At: op.At})
				sqlAnswer := sqlEnqueue(ctx, conn.Conn(), schema, op.ID, op.Flow, body, op.At)
				if goAnswer != sqlAnswer {
					t.Errorf("line %d (%s): EnqueueTx answered %q, the SQL function %q", no+1, line, goAnswer, sqlAnswer)
				}
				key := strings.Fields(goAnswer)[0]
				if key == "error" {
					key = goAnswer
				}
				mu.Lock()
				seen[key] = true
				mu.Unlock()
				n++
			}
			if n == 0 {
				t.Skip("no enqueue lines")
			}
		})
	}
}

// The SQL function's errors are what a caller in another language sees:
// SQLSTATE FR001 for clock_regressed, FR002 for invalid input with the
// field in DETAIL and the reason in the message — and the same errors as
// EnqueueTx's, in SPEC §2's order (the clock, then the fields), with
// nothing written.
func TestPostgresSQLEnqueueErrors(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pol := fairrelay.DaemonPolicy() // a max_tick_jump of an hour
	q, pool, _ := outboxStore(t, "frsqlerr_go", pol)
	_, sqlPool, schema := outboxStore(t, "frsqlerr_sql", pol)
	conn, err := sqlPool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// Both stores at tick 100.
	if a, b := txEnqueue(ctx, q, pool, fairrelay.EnqueueParams{ID: "A1", Flow: "A", Body: []byte("1"), At: 100}),
		sqlEnqueue(ctx, conn.Conn(), schema, "A1", "A", []byte("1"), int64(100)); a != "created 1" || b != a {
		t.Fatalf("setup: %q, %q", a, b)
	}
	big := make([]byte, pol.MaxBodyBytes+1)
	for i := range big {
		big[i] = 'x'
	}
	long := strings.Repeat("é", 101) // 202 bytes
	cases := []struct {
		name, id, flow string
		body           []byte
		at             int64
		want           string
	}{
		{"a tick below the stored one", "B1", "B", []byte("1"), 99, "error clock_regressed"},
		{"the clock before the fields", "", "B", nil, 99, "error clock_regressed"},
		{"a tick too far ahead", "B1", "B", []byte("1"), 100 + pol.MaxTickJump + 1, "error invalid_input at"},
		{"a tick beyond the range", "B1", "B", []byte("1"), fairrelay.MaxTick + 1, "error invalid_input at"},
		{"an empty id", "", "B", []byte("1"), 100, "error invalid_input id"},
		{"an id too long", long, "B", []byte("1"), 100, "error invalid_input id"},
		{"a control character in the id", "B\x07", "B", []byte("1"), 100, "error invalid_input id"},
		{"white space around the id", " B1", "B", []byte("1"), 100, "error invalid_input id"},
		{"a format character in the flow", "B1", "B\u200b", []byte("1"), 100, "error invalid_input flow"},
		{"the id before the flow", "", "", []byte("1"), 100, "error invalid_input id"},
		{"an empty body", "B1", "B", []byte{}, 100, "error invalid_input body"},
		{"a body over the limit", "B1", "B", big, 100, "error invalid_input body"},
	}
	for _, c := range cases {
		var got string
		if c.at > fairrelay.MaxTick || c.at-100 > pol.MaxTickJump {
			// enqueue(…) has no max_tick_jump argument: the caller who
			// wants one calls enqueue_many with it, as EnqueueTx does.
			var status string
			var seq *int64
			err := pgx.BeginFunc(ctx, conn.Conn(), func(tx pgx.Tx) error {
				return tx.QueryRow(ctx, "SELECT status, seq FROM "+pgx.Identifier{schema, "enqueue_many"}.Sanitize()+
					"(ARRAY[$1], ARRAY[$2], ARRAY[$3::bytea], $4, false, $5)", c.id, c.flow, c.body, c.at, pol.MaxTickJump).Scan(&status, &seq)
			})
			got = answerOf(status, seq, err)
		} else {
			got = sqlEnqueue(ctx, conn.Conn(), schema, c.id, c.flow, c.body, c.at)
		}
		goGot := txEnqueue(ctx, q, pool, fairrelay.EnqueueParams{ID: c.id, Flow: c.flow, Body: c.body, At: c.at})
		if got != c.want || goGot != c.want {
			t.Errorf("%s: the SQL function answered %q, EnqueueTx %q; want %q", c.name, got, goGot, c.want)
		}
	}
	// The message says why, for a person reading it in any language.
	err = pgx.BeginFunc(ctx, conn.Conn(), func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SELECT * FROM "+pgx.Identifier{schema, "enqueue"}.Sanitize()+"('B1', 'B', ''::bytea)")
		return err
	})
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "FR002" || pe.Detail != "body" || pe.Message != "empty" {
		t.Errorf("empty body from SQL: %v, want SQLSTATE FR002, DETAIL body, message empty", err)
	}
	err = pgx.BeginFunc(ctx, conn.Conn(), func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SELECT * FROM "+pgx.Identifier{schema, "enqueue"}.Sanitize()+"('B1', 'B', '1'::bytea, 5)")
		return err
	})
	if !errors.As(err, &pe) || pe.Code != "FR001" || pe.Detail != "5 100" || !strings.Contains(pe.Message, "store is at tick 100") {
		t.Errorf("clock_regressed from SQL: %v (detail %q), want SQLSTATE FR001, DETAIL \"5 100\"", err, pe.Detail)
	}
	// A call of many events names the bad one's position in the arrays
	// (migration 026), as the Go library's Error.Item does.
	err = pgx.BeginFunc(ctx, conn.Conn(), func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SELECT * FROM "+pgx.Identifier{schema, "enqueue_many"}.Sanitize()+
			"(ARRAY['B1', 'B2', 'B3'], ARRAY['B', 'B ', 'B'], ARRAY['1', '2', '3']::bytea[])")
		return err
	})
	if !errors.As(err, &pe) || pe.Code != "FR002" || pe.Detail != "flow" || !strings.HasPrefix(pe.Message, "event 2 of 3: ") {
		t.Errorf("a bad second event of three from SQL: %v (detail %q), want SQLSTATE FR002, DETAIL flow, a message led by \"event 2 of 3: \"", err, pe.Detail)
	}
	_, goErr := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: 100, Events: []fairrelay.NewEvent{
		{ID: "B1", Flow: "B", Body: []byte("1")}, {ID: "B2", Flow: "B ", Body: []byte("2")}, {ID: "B3", Flow: "B", Body: []byte("3")}}})
	var fe *fairrelay.Error
	if !errors.As(goErr, &fe) || fe.Field != "flow" || fe.Item != 2 || !strings.HasPrefix(fe.Message, "event 2 of 3: ") {
		t.Errorf("EnqueueMany's error %v: want field flow, item 2, a message led by \"event 2 of 3: \" as the SQL function's", goErr)
	}
	// Nothing was written by any of them.
	for _, s := range []*fairrelay.Queue{q} {
		snap, err := s.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(snap.Events) != 1 || snap.Clock.Tick != 100 {
			t.Errorf("after the refused enqueues: %d events at tick %d, want A1 alone at tick 100", len(snap.Events), snap.Clock.Tick)
		}
	}
}

// The SQL function checks an explicit tick against a jump of an hour
// (3 600 000 ticks) unless the caller passes p_max_tick_jump (migration
// 018): an at in epoch milliseconds, or a typo, would move the store's
// clock decades ahead, and the relay's retention would then prune every
// acked event and tombstone at once. Refused, it writes nothing; at the
// bound it is created; p_max_tick_jump => 0 sets no limit; the Go library
// keeps its policy's (ReferencePolicy: none).
func TestPostgresSQLEnqueueChecksTheTickJump(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	q, pool, schema := outboxStore(t, "frtickjump_", fairrelay.ReferencePolicy())
	fn := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	body := []byte(`{"delta":1}`)
	var status string
	err := pool.QueryRow(ctx, `SELECT status FROM `+fn("enqueue")+`('a1', 'F', $1, 3600001)`, body).Scan(&status)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "FR002" || pe.Detail != "at" {
		t.Fatalf("enqueue at 3 600 001 on a store at 0: %q %v, want SQLSTATE FR002, DETAIL at", status, err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+fn("event")).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d events after the refusal (%v), want 0", n, err)
	}
	if err := pool.QueryRow(ctx, `SELECT status FROM `+fn("enqueue")+`('a1', 'F', $1, 3600000)`, body).Scan(&status); err != nil || status != "created" {
		t.Fatalf("enqueue at 3 600 000: %q %v, want created", status, err)
	}
	if err := pool.QueryRow(ctx, `SELECT status FROM `+fn("enqueue_many")+`(ARRAY['a2'], ARRAY['F'], ARRAY[$1::bytea], 100000000000, p_max_tick_jump => 0)`, body).Scan(&status); err != nil || status != "created" {
		t.Fatalf("enqueue_many far ahead with p_max_tick_jump 0: %q %v, want created", status, err)
	}
	r, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "a3", Flow: "F", Body: body, At: 300000000000})
	if err != nil || r.Status != fairrelay.EnqueueCreated {
		t.Fatalf("Go enqueue far ahead under the reference policy: %+v %v, want created", r, err)
	}
}

// An enqueue that waits for a row another transaction holds reads the
// store's tick again once it holds its rows (migration 019; SPEC §2, §10):
// a breaker's enqueue at tick 500 waited for a transaction that enqueued
// onto its flow at 1000, then was created at 500, behind it in the flow.
// Now an explicit tick below the committed one is clock_regressed and
// writes nothing, and a call at the stored tick (at NULL) runs at the new
// one. Each path that may wait: one event onto a held flow (the common
// call skips it and goes the general way), a batch, and calls under a
// store limit, which wait for the store's limit row on other flows.
func TestPostgresEnqueueReadsTheTickAfterItsLocks(t *testing.T) {
	t.Parallel()
	body := []byte(`{"delta":1}`)
	type call struct {
		name, sql string
		args      []any
	}
	cases := []struct {
		name      string
		limit     bool   // a store max_backlog, so calls take its row
		holder    string // the flow the first transaction enqueues onto, at 1000
		second    call
		wantTick  int64 // 0: want clock_regressed
		wantEvent string
		wantAs    string // the answer when not clock_regressed ("": created)
	}{
		{"one event onto the held flow, at 500", false, "A",
			call{"enqueue", `SELECT status, tick FROM %s('a2', 'A', $1, 500)`, nil}, 0, "", ""},
		{"one event onto the held flow, at the stored tick", false, "A",
			call{"enqueue", `SELECT status, tick FROM %s('a2', 'A', $1)`, nil}, 1000, "a2", ""},
		{"a batch with the held flow, at 500", false, "A",
			call{"enqueue_many", `SELECT status, tick FROM %s(ARRAY['a2', 'b2'], ARRAY['B', 'A'], ARRAY[$1, $1]::bytea[], 500)`, nil}, 0, "", ""},
		{"a batch with the held flow, at the stored tick", false, "A",
			call{"enqueue_many", `SELECT status, tick FROM %s(ARRAY['a2', 'b2'], ARRAY['B', 'A'], ARRAY[$1, $1]::bytea[])`, nil}, 1000, "b2", ""},
		{"another flow under a store limit, at 500", true, "A",
			call{"enqueue", `SELECT status, tick FROM %s('b2', 'B', $1, 500)`, nil}, 0, "", ""},
		{"another flow under a store limit, at the stored tick", true, "A",
			call{"enqueue", `SELECT status, tick FROM %s('b2', 'B', $1)`, nil}, 1000, "b2", ""},
		// The common call onto a free flow, waiting for the other's insert
		// of the same id: its answer, conflict, comes after the clock's.
		{"the same id onto a free flow, at 500", false, "A",
			call{"enqueue", `SELECT status, tick FROM %s('h1', 'B', $1, 500)`, nil}, 0, "", ""},
		{"the same id onto a free flow, at the stored tick", false, "A",
			call{"enqueue", `SELECT status, tick FROM %s('h1', 'B', $1)`, nil}, 1000, "", "conflict"},
		// A call naming a group goes event by event (enqueue_events): onto
		// a flow the other transaction is making, it waits for the flow's
		// name (lock_name), then finds the flow made at 1000.
		{"a grouped event onto a flow the other makes, at 500", false, "N",
			call{"enqueue_many", `SELECT status, tick FROM %s(ARRAY['a2'], ARRAY['N'], ARRAY[$1]::bytea[], 500, p_groups => ARRAY['N'])`, nil}, 0, "", ""},
		{"a grouped event onto a flow the other makes, at the stored tick", false, "N",
			call{"enqueue_many", `SELECT status, tick FROM %s(ARRAY['a2'], ARRAY['N'], ARRAY[$1]::bytea[], p_groups => ARRAY['N'])`, nil}, 1000, "a2", ""},
		{"a grouped batch with a flow the other makes, at 500", false, "N",
			call{"enqueue_many", `SELECT status, tick FROM %s(ARRAY['a2', 'b2'], ARRAY['B', 'N'], ARRAY[$1, $1]::bytea[], 500, p_groups => ARRAY['B', 'N'])`, nil}, 0, "", ""},
		{"a grouped batch with a flow the other makes, at the stored tick", false, "N",
			call{"enqueue_many", `SELECT status, tick FROM %s(ARRAY['a2', 'b2'], ARRAY['B', 'N'], ARRAY[$1, $1]::bytea[], p_groups => ARRAY['B', 'N'])`, nil}, 1000, "b2", ""},
		{"a batch onto a flow the other makes, at 500", false, "N",
			call{"enqueue_many", `SELECT status, tick FROM %s(ARRAY['a2', 'b2'], ARRAY['B', 'N'], ARRAY[$1, $1]::bytea[], 500)`, nil}, 0, "", ""},
		{"a batch onto a flow the other makes, at the stored tick", false, "N",
			call{"enqueue_many", `SELECT status, tick FROM %s(ARRAY['a2', 'b2'], ARRAY['B', 'N'], ARRAY[$1, $1]::bytea[])`, nil}, 1000, "b2", ""},
		{"one event onto a flow the other makes, at 500", false, "N",
			call{"enqueue", `SELECT status, tick FROM %s('a2', 'N', $1, 500)`, nil}, 0, "", ""},
		{"one event onto a flow the other makes, at the stored tick", false, "N",
			call{"enqueue", `SELECT status, tick FROM %s('a2', 'N', $1)`, nil}, 1000, "a2", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			q, pool, schema := outboxStore(t, "frtickafter_", fairrelay.DaemonPolicy())
			for _, f := range []string{"A", "B"} {
				if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: f + "0", Flow: f, Body: body, At: 10}); err != nil {
					t.Fatal(err)
				}
			}
			if c.limit {
				mb := int64(1000)
				if _, err := q.Configure(ctx, fairrelay.ConfigureParams{MaxBacklog: &mb, At: 10}); err != nil {
					t.Fatal(err)
				}
			}
			first, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer first.Rollback(context.Background())
			if _, err := q.EnqueuePgxTx(ctx, first, fairrelay.EnqueueParams{ID: "h1", Flow: c.holder, Body: body, At: 1000}); err != nil {
				t.Fatal(err)
			}
			type answer struct {
				status []string
				ticks  []int64
				err    error
			}
			done := make(chan answer, 1)
			go func() {
				var a answer
				rows, err := pool.Query(context.Background(), fmt.Sprintf(c.second.sql, pgx.Identifier{schema, c.second.name}.Sanitize()), body)
				if err == nil {
					for rows.Next() {
						var s string
						var tk int64
						if err = rows.Scan(&s, &tk); err != nil {
							break
						}
						a.status, a.ticks = append(a.status, s), append(a.ticks, tk)
					}
					rows.Close()
					err = cmp.Or(err, rows.Err())
				}
				a.err = err
				done <- a
			}()
			waitBlockedBy(t, pool, first)
			if err := first.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			a := <-done
			if c.wantTick == 0 {
				var pe *pgconn.PgError
				if !errors.As(a.err, &pe) || pe.Code != "FR001" {
					t.Fatalf("second call: %v %v, want SQLSTATE FR001 (clock_regressed)", a.status, a.err)
				}
			} else {
				if a.err != nil || len(a.status) == 0 {
					t.Fatalf("second call: %v %v", a.status, a.err)
				}
				want := cmp.Or(c.wantAs, "created")
				for i, s := range a.status {
					if s != want || a.ticks[i] != c.wantTick {
						t.Errorf("second call, event %d: %s at tick %d, want %s at %d", i+1, s, a.ticks[i], want, c.wantTick)
					}
				}
			}
			// Per flow, the ticks of the events follow their seqs.
			rows, err := pool.Query(ctx, `SELECT event_id, flow_id, enqueued_at FROM `+pgx.Identifier{schema, "event"}.Sanitize()+` ORDER BY flow_id, seq`)
			if err != nil {
				t.Fatal(err)
			}
			last := map[string]int64{}
			seen := map[string]bool{}
			for rows.Next() {
				var id, flow string
				var at int64
				if err := rows.Scan(&id, &flow, &at); err != nil {
					t.Fatal(err)
				}
				if at < last[flow] {
					t.Errorf("flow %s: %s enqueued at %d after an event at %d", flow, id, at, last[flow])
				}
				last[flow], seen[id] = at, true
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if c.wantTick == 0 && (seen["a2"] || seen["b2"]) {
				t.Errorf("the refused call wrote an event: %v", seen)
			}
			if c.wantEvent != "" && !seen[c.wantEvent] {
				t.Errorf("%s not stored", c.wantEvent)
			}
		})
	}
}

// Every function in the store's schema says whether it is for callers
// (migration 020; a fresh user listing them with \df+ saw the internal
// ones beside enqueue and enqueue_many with nothing to tell them apart):
// enqueue and enqueue_many are "fairrelay outbox:", the rest "fairrelay
// internal:". A function added later without its comment fails here.
func TestPostgresSchemaFunctionsSayWhoCallsThem(t *testing.T) {
	t.Parallel()
	_, pool, schema := outboxStore(t, "frfncomment_", fairrelay.DaemonPolicy())
	rows, err := pool.Query(t.Context(), `SELECT p.proname, coalesce(obj_description(p.oid, 'pg_proc'), '')
		FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 ORDER BY 1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var name, comment string
		if err := rows.Scan(&name, &comment); err != nil {
			t.Fatal(err)
		}
		n++
		want := "fairrelay internal:"
		if name == "enqueue" || name == "enqueue_many" {
			want = "fairrelay outbox:"
		}
		if !strings.HasPrefix(comment, want) {
			t.Errorf("function %s: comment %q, want it to start with %q", name, comment, want)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 6 {
		t.Errorf("%d functions in the schema, want at least 6", n)
	}
}

// enqueue_many's own arguments are checked too, each named in DETAIL (a
// breaker's report, migration 024): a NULL or negative body limit had
// turned the limit off or blamed the body, a NULL or negative tick jump
// set no limit, a NULL floor passed as false, arrays not indexed from 1
// failed with the database's errors, and arrays of different lengths named
// ids whatever differed. Nothing is written by any of them; NULL arrays
// stay an empty batch.
func TestPostgresSQLEnqueueArguments(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	q, pool, schema := outboxStore(t, "frsqlargs", fairrelay.DaemonPolicy())
	fn := pgx.Identifier{schema, "enqueue_many"}.Sanitize()
	big := "convert_to(repeat('x', 2000000), 'UTF8')"
	cases := []struct{ name, call, detail string }{
		{"a NULL body limit", fn + "(ARRAY['a1'], ARRAY['A'], ARRAY[" + big + "], p_max_body_bytes => NULL)", "p_max_body_bytes"},
		{"a negative body limit", fn + "(ARRAY['a1'], ARRAY['A'], ARRAY['1'::bytea], p_max_body_bytes => -5)", "p_max_body_bytes"},
		{"a NULL tick jump", fn + "(ARRAY['a1'], ARRAY['A'], ARRAY['1'::bytea], p_at => 5000000, p_max_tick_jump => NULL)", "p_max_tick_jump"},
		{"a negative tick jump", fn + "(ARRAY['a1'], ARRAY['A'], ARRAY['1'::bytea], p_max_tick_jump => -1)", "p_max_tick_jump"},
		{"a NULL floor", fn + "(ARRAY['a1'], ARRAY['A'], ARRAY['1'::bytea], p_floor => NULL)", "p_floor"},
		{"ids indexed from 5", fn + "('[5:5]={a1}'::text[], '[5:5]={A}'::text[], '[5:5]={1}'::bytea[])", "ids"},
		{"flows indexed from 0", fn + "(ARRAY['a1'], '[0:0]={A}'::text[], ARRAY['1'::bytea])", "flows"},
		{"two-dimensional bodies", fn + "(ARRAY['a1','b1'], ARRAY['A','B'], '{{1},{2}}'::bytea[])", "bodies"},
		{"fewer flows", fn + "(ARRAY['a1','b1'], ARRAY['A'], ARRAY['1'::bytea, '2'::bytea])", "flows"},
		{"more bodies", fn + "(ARRAY['a1'], ARRAY['A'], ARRAY['1'::bytea, '2'::bytea])", "bodies"},
		{"fewer groups", fn + "(ARRAY['a1','b1'], ARRAY['A','B'], ARRAY['1'::bytea, '2'::bytea], p_groups => ARRAY['g'])", "groups"},
	}
	for _, c := range cases {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "SELECT * FROM "+c.call)
			return err
		})
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "FR002" || pe.Detail != c.detail {
			t.Errorf("%s: %v, want SQLSTATE FR002 with DETAIL %s", c.name, err, c.detail)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+fn+"(NULL, NULL, NULL)").Scan(&n); err != nil || n != 0 {
		t.Errorf("NULL arrays: %d rows, %v; want an empty batch", n, err)
	}
	snap, err := q.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Events) != 0 {
		t.Errorf("events after the refused calls: %+v, want none", snap.Events)
	}
}
