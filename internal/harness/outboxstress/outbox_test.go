package outboxstress

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/internal/store/pgstore"
	"github.com/fairrelay/fairrelay/relay"
	"github.com/fairrelay/fairrelay/sink"
)

// The test binary is its own producer process: with childEnv set, TestMain
// runs produce on the stores the environment names instead of the tests,
// and prints one outcome per event as a JSON line.
const (
	childEnv   = "FAIRRELAY_OUTBOXSTRESS_CHILD"
	queueEnv   = "FAIRRELAY_OUTBOXSTRESS_QUEUE" // the queue store's URL
	appEnv     = "FAIRRELAY_OUTBOXSTRESS_APP"   // the application's schema
	workersEnv = "FAIRRELAY_OUTBOXSTRESS_WORKERS"
	forEnv     = "FAIRRELAY_OUTBOXSTRESS_FOR" // how long to produce, ms
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "" {
		os.Exit(m.Run())
	}
	if err := childProduce(context.Background(), os.Getenv(childEnv)); err != nil {
		fmt.Fprintln(os.Stderr, "outboxstress child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// flows are the flows the producers write to: few, so that transactions
// meet on them all the time. hold is the flow of the transaction held open
// for 5 s, written before it and, by a transaction that waits for it,
// during it; probe is written only while it is held.
var flows = []string{"F0", "F1", "F2", "F3", "F4", "F5", "F6", "F7"}

const (
	hold  = "hold"
	probe = "probe"
)

// outcome is what became of one enqueued event: N is its flow's ledger
// counter in the same transaction, so a flow's committed events carry
// N = 1, 2, 3 … in commit order (the ledger row is locked until commit, and
// a rollback takes its increment back).
type outcome struct {
	ID        string `json:"id"`
	Flow      string `json:"flow"`
	N         int64  `json:"n"`
	Committed bool   `json:"committed"`
}

// enqueueFunc writes one event inside tx and fails unless it was created.
type enqueueFunc func(ctx context.Context, tx pgx.Tx, id, flow string, body []byte) error

// produce runs business transactions on conn until ctx is done: each bumps
// the ledger row of one to three flows (in flow order) and enqueues an
// event to each, carrying the counter, then commits (70 %), rolls back
// (20 %) or stays open 0.3-2 s — holding its flows — and then commits or
// (one in three) rolls back. Every event's outcome goes to emit.
func produce(ctx context.Context, conn *pgx.Conn, rng *rand.Rand, prefix string, enqueue enqueueFunc, emit func(outcome)) error {
	bg := context.WithoutCancel(ctx) // a transaction under way ends as it chose
	for i := 0; ctx.Err() == nil; i++ {
		picked := slices.Clone(flows)
		rng.Shuffle(len(picked), func(a, b int) { picked[a], picked[b] = picked[b], picked[a] })
		picked = picked[:1+rng.IntN(3)]
		slices.Sort(picked)
		tx, err := conn.Begin(bg)
		if err != nil {
			return err
		}
		var evs []outcome
		for j, f := range picked {
			var n int64
			if err := tx.QueryRow(bg, "UPDATE ledger SET n = n + 1 WHERE flow = $1 RETURNING n", f).Scan(&n); err != nil {
				tx.Rollback(bg)
				return fmt.Errorf("ledger %s: %w", f, err)
			}
			id := fmt.Sprintf("%s-%d-%d", prefix, i, j)
			if err := enqueue(bg, tx, id, f, fmt.Appendf(nil, `{"flow":%q,"n":%d}`, f, n)); err != nil {
				tx.Rollback(bg)
				return fmt.Errorf("enqueue %s: %w", id, err)
			}
			evs = append(evs, outcome{ID: id, Flow: f, N: n})
		}
		commit := true
		switch r := rng.IntN(20); {
		case r < 4:
			commit = false
		case r < 5:
			// The application's slow work, inside the transaction: the
			// scenario under test, not a wait for something.
			time.Sleep(300*time.Millisecond + time.Duration(rng.Int64N(int64(1700*time.Millisecond))))
			commit = rng.IntN(3) != 0
		}
		if commit {
			err = tx.Commit(bg)
		} else {
			err = tx.Rollback(bg)
		}
		if err != nil {
			return fmt.Errorf("end of transaction %s-%d (commit %v): %w", prefix, i, commit, err)
		}
		for _, e := range evs {
			e.Committed = commit
			emit(e)
		}
	}
	return nil
}

// connect opens a connection on the schema of dsn.
func connect(ctx context.Context, dsn string) (*pgx.Conn, error) {
	cfg, _, err := pgstore.PoolConfig(dsn, 0)
	if err != nil {
		return nil, err
	}
	return pgx.ConnectConfig(ctx, cfg.ConnConfig)
}

// childProduce runs FAIRRELAY_OUTBOXSTRESS_WORKERS producers for
// FAIRRELAY_OUTBOXSTRESS_FOR ms, each on a connection of its own, calling
// the queue schema's SQL function enqueue directly — as a program in
// another language would — and prints every outcome.
func childProduce(ctx context.Context, prefix string) error {
	workers, err := strconv.Atoi(os.Getenv(workersEnv))
	if err != nil {
		return err
	}
	ms, err := strconv.Atoi(os.Getenv(forEnv))
	if err != nil {
		return err
	}
	_, schema, err := pgstore.ParseDSN(os.Getenv(queueEnv))
	if err != nil {
		return err
	}
	call := "SELECT status FROM " + pgx.Identifier{schema, "enqueue"}.Sanitize() + "($1, $2, $3)"
	enqueue := func(ctx context.Context, tx pgx.Tx, id, flow string, body []byte) error {
		var status string
		if err := tx.QueryRow(ctx, call, id, flow, body).Scan(&status); err != nil {
			return err
		}
		if status != "created" {
			return fmt.Errorf("%s, want created", status)
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(ms)*time.Millisecond)
	defer cancel()
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	var mu sync.Mutex
	emit := func(o outcome) {
		b, _ := json.Marshal(o)
		mu.Lock()
		out.Write(append(b, '\n'))
		mu.Unlock()
	}
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			conn, err := connect(ctx, os.Getenv(appEnv))
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close(context.Background())
			errs <- produce(ctx, conn, rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(w))), fmt.Sprintf("%s.%d", prefix, w), enqueue, emit)
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

// receiver is the relays' sink: it checks each flow's deliveries against
// the ledger counter their bodies carry, which must go 1, 2, 3 … (commit
// order, nothing twice, nothing skipped) and equal their seq.
type receiver struct {
	mu         sync.Mutex
	last       map[string]int64 // flow → N of its last delivery
	times      map[string]int   // id → deliveries
	violations []string
	at         map[string]time.Time // id → its (first) delivery
	// gates hold the delivery of an event until release is closed.
	gates map[string]gate
}

// gate holds a delivery: arrived is closed when it starts, and it goes on
// once release is closed.
type gate struct {
	arrived, release chan struct{}
	once             *sync.Once
}

func (r *receiver) Deliver(ctx context.Context, d sink.Delivery) (sink.Result, error) {
	if g, ok := r.gates[d.EventID]; ok {
		g.once.Do(func() { close(g.arrived) })
		select {
		case <-g.release:
		case <-ctx.Done():
			return sink.Result{}, ctx.Err()
		}
	}
	var b struct {
		Flow string `json:"flow"`
		N    int64  `json:"n"`
	}
	if err := json.Unmarshal(d.Body, &b); err != nil {
		return sink.Result{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.times[d.EventID]++; r.times[d.EventID] > 1 {
		r.violations = append(r.violations, fmt.Sprintf("%s delivered %d times", d.EventID, r.times[d.EventID]))
		return sink.Result{Outcome: fairrelay.OutcomeDuplicate}, nil
	}
	r.at[d.EventID] = time.Now()
	switch {
	case b.Flow != d.Flow:
		r.violations = append(r.violations, fmt.Sprintf("%s delivered on flow %s, written to %s", d.EventID, d.Flow, b.Flow))
	case b.N != r.last[d.Flow]+1:
		r.violations = append(r.violations, fmt.Sprintf("flow %s: %s (commit %d) after commit %d", d.Flow, d.EventID, b.N, r.last[d.Flow]))
	case d.Seq != b.N:
		r.violations = append(r.violations, fmt.Sprintf("flow %s: %s has seq %d, commit %d", d.Flow, d.EventID, d.Seq, b.N))
	}
	r.last[d.Flow] = max(r.last[d.Flow], b.N)
	return sink.Result{Outcome: fairrelay.OutcomeAccepted}, nil
}

// deliveredAt reports when id was delivered, if it was.
func (r *receiver) deliveredAt(id string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.at[id]
	return t, ok
}

func (r *receiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.at)
}

// Random concurrent outbox transactions while two relays dispatch (issue
// 14; SPEC §10): four producer goroutines here (EnqueuePgxTx) and two child
// processes of three each (the SQL function, as any language calls it)
// run business transactions for 6 s on eight flows — committing, rolling
// back, staying open for seconds — and meanwhile one transaction here holds
// flow "hold" open for 5 s, with another waiting behind it. At the end:
//   - every committed event was delivered exactly once, and each flow's in
//     commit order (the ledger counter each carries goes 1, 2, 3 … and
//     equals its seq);
//   - no rolled-back event exists in the store, and every stored event is
//     acked;
//   - while "hold" was held, an event committed on another flow was
//     delivered: an open transaction delays only its own flows.
func TestRandomOutboxTransactionsWhileTwoRelaysDispatch(t *testing.T) {
	t.Parallel()
	const produceFor = 6 * time.Second
	ctx := t.Context()
	qdsn := pgtest.Schema(t, "oxs_q")
	adsn := pgtest.Schema(t, "oxs_app")
	_, appSchema, err := pgstore.ParseDSN(adsn)
	if err != nil {
		t.Fatal(err)
	}
	app := pgx.Identifier{appSchema}.Sanitize()
	pgtest.Exec(t, pgtest.URL(t), "CREATE SCHEMA "+app+"; CREATE TABLE "+app+".ledger (flow TEXT PRIMARY KEY, n BIGINT NOT NULL);"+
		"INSERT INTO "+app+".ledger SELECT f, 0 FROM unnest(ARRAY['F0','F1','F2','F3','F4','F5','F6','F7','hold','probe']) AS f")

	pol := fairrelay.DaemonPolicy()
	pol.Lease = 60_000 // no lease runs out in this test: a second delivery would be a fault
	// The delivery of the event before the held one waits until the hold
	// is open: its answer is then settled while the flow is held.
	holdGate := gate{arrived: make(chan struct{}), release: make(chan struct{}), once: &sync.Once{}}
	rcv := &receiver{last: map[string]int64{}, times: map[string]int{}, at: map[string]time.Time{},
		gates: map[string]gate{"hold-before": holdGate}}
	var q *fairrelay.Queue
	for i := range 2 {
		qi, err := fairrelay.Open(ctx, qdsn, fairrelay.Config{Policy: pol})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { qi.Close() })
		if i == 0 {
			q = qi
		}
		r, err := relay.New(ctx, relay.Config{Queue: qi, Sink: rcv, Workers: 8})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(runCtx) }()
		t.Cleanup(func() {
			stop()
			if err := <-done; err != nil {
				t.Errorf("relay %d: %v", i, err)
			}
		})
	}

	var (
		mu       sync.Mutex
		outcomes []outcome
		wg       sync.WaitGroup
		errs     = make(chan error, 16)
	)
	emit := func(o outcome) {
		mu.Lock()
		outcomes = append(outcomes, o)
		mu.Unlock()
	}
	// The producer processes.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for c := range 2 {
		cmd := exec.CommandContext(ctx, exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=p"+strconv.Itoa(c), queueEnv+"="+qdsn, appEnv+"="+adsn,
			workersEnv+"=3", forEnv+"="+strconv.FormatInt(produceFor.Milliseconds(), 10))
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				var o outcome
				if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
					errs <- fmt.Errorf("child %d: %q: %w", c, sc.Text(), err)
					continue
				}
				emit(o)
			}
			if err := cmd.Wait(); err != nil {
				errs <- fmt.Errorf("child %d: %w", c, err)
			}
		})
	}
	// The producer goroutines.
	produceCtx, stopProducing := context.WithTimeout(ctx, produceFor)
	defer stopProducing()
	enqueue := func(ctx context.Context, tx pgx.Tx, id, flow string, body []byte) error {
		r, err := q.EnqueuePgxTx(ctx, tx, fairrelay.EnqueueParams{ID: id, Flow: flow, Body: body, At: fairrelay.AtStored})
		if err == nil && r.Status != fairrelay.EnqueueCreated {
			err = fmt.Errorf("%s, want created", r.Status)
		}
		return err
	}
	for w := range 4 {
		conn := pgtest.Connect(t, adsn)
		t.Cleanup(func() { conn.Close(context.Background()) })
		wg.Go(func() {
			if err := produce(produceCtx, conn, rand.New(rand.NewPCG(uint64(w), 14)), "g"+strconv.Itoa(w), enqueue, emit); err != nil {
				errs <- fmt.Errorf("producer %d: %w", w, err)
			}
		})
	}

	// The transaction held open for 5 s on "hold", while a relay delivers
	// the event before it; meanwhile an event is committed on "probe" and
	// must be delivered.
	holdConn, probeConn := pgtest.Connect(t, adsn), pgtest.Connect(t, adsn)
	t.Cleanup(func() { holdConn.Close(context.Background()); probeConn.Close(context.Background()) })
	// oneEvent opens a transaction on conn that writes one event of flow
	// and leaves it open.
	oneEvent := func(conn *pgx.Conn, id, flow string) (pgx.Tx, outcome, error) {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return nil, outcome{}, err
		}
		var n int64
		if err := tx.QueryRow(ctx, "UPDATE ledger SET n = n + 1 WHERE flow = $1 RETURNING n", flow).Scan(&n); err != nil {
			return nil, outcome{}, err
		}
		if err := enqueue(ctx, tx, id, flow, fmt.Appendf(nil, `{"flow":%q,"n":%d}`, flow, n)); err != nil {
			return nil, outcome{}, err
		}
		return tx, outcome{ID: id, Flow: flow, N: n, Committed: true}, nil
	}
	committed := func(tx pgx.Tx, o outcome, err error) {
		t.Helper()
		if err == nil {
			err = tx.Commit(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		emit(o)
	}
	committed(oneEvent(holdConn, "hold-before", hold))
	select {
	case <-holdGate.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("hold-before was not delivered within 10s of its commit")
	}
	holdTx, held, err := oneEvent(holdConn, "held", hold)
	if err != nil {
		t.Fatal(err)
	}
	opened := time.Now()
	close(holdGate.release)
	// A transaction onto the held flow waits for it (its ledger row and its
	// flow's row), and commits after it: its event comes after in the flow.
	afterConn := pgtest.Connect(t, adsn)
	t.Cleanup(func() { afterConn.Close(context.Background()) })
	wg.Go(func() {
		tx, after, err := oneEvent(afterConn, "hold-after", hold)
		if err == nil {
			err = tx.Commit(ctx)
		}
		if err != nil {
			errs <- fmt.Errorf("the transaction behind the held one: %w", err)
			return
		}
		emit(after)
	})
	committed(oneEvent(probeConn, "probed", probe))
	var probeAt time.Time
	for ok := false; !ok; {
		if probeAt, ok = rcv.deliveredAt("probed"); !ok && time.Since(opened) > 4500*time.Millisecond {
			t.Fatal("the probe event was not delivered within 4.5 s while a transaction held flow hold open: it held up another flow")
		}
		time.Sleep(time.Millisecond) // polling a condition, with a deadline
	}
	// The application's 5 s of work inside the transaction (the scenario).
	time.Sleep(5*time.Second - time.Since(opened))
	if _, ok := rcv.deliveredAt("held"); ok {
		t.Fatal("the held event was delivered before its transaction committed")
	}
	if err := holdTx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	emit(held)
	t.Logf("flow hold held open for %v; the probe on another flow was delivered %v after it opened", time.Since(opened).Round(time.Millisecond), probeAt.Sub(opened).Round(time.Millisecond))

	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	var done, rolledBack []string
	perFlow := map[string]int64{}
	for _, o := range outcomes {
		if o.Committed {
			done = append(done, o.ID)
			perFlow[o.Flow]++
		} else {
			rolledBack = append(rolledBack, o.ID)
		}
	}
	// Everything committed is delivered, within 30 s.
	for deadline := time.Now().Add(30 * time.Second); rcv.count() < len(done); {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d committed events delivered within 30 s of the last commit", rcv.count(), len(done))
		}
		time.Sleep(time.Millisecond) // polling a condition, with a deadline
	}
	rcv.mu.Lock()
	for _, v := range rcv.violations {
		t.Error(v)
	}
	for _, id := range done {
		if n := rcv.times[id]; n != 1 {
			t.Errorf("committed event %s delivered %d times, want once", id, n)
		}
	}
	for _, id := range rolledBack {
		if n := rcv.times[id]; n != 0 {
			t.Errorf("rolled-back event %s delivered %d times", id, n)
		}
	}
	for f, n := range perFlow {
		if rcv.last[f] != n {
			t.Errorf("flow %s: last delivery is commit %d of %d", f, rcv.last[f], n)
		}
	}
	rcv.mu.Unlock()
	// The store holds the committed events, all acked, and nothing else.
	var stored, ghosts int
	_, qSchema, _ := pgstore.ParseDSN(qdsn)
	conn := pgtest.Connect(t, qdsn)
	defer conn.Close(context.Background())
	event := pgx.Identifier{qSchema, "event"}.Sanitize()
	if err := conn.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+event+"), (SELECT count(*) FROM "+event+" WHERE event_id = ANY($1))",
		rolledBack).Scan(&stored, &ghosts); err != nil {
		t.Fatal(err)
	}
	if stored != len(done) || ghosts != 0 {
		t.Errorf("the store holds %d events, %d of them rolled back; want the %d committed ones", stored, ghosts, len(done))
	}
	// And each delivery's settle commits (the sink answered before it).
	for deadline := time.Now().Add(30 * time.Second); ; {
		heads, err := q.Heads(ctx, "", 100)
		if err != nil {
			t.Fatal(err)
		}
		var left []fairrelay.Head
		for _, h := range heads {
			if h.Head != nil {
				left = append(left, h)
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("flows with a head 30 s after the last delivery, want every event acked: %+v", left)
		}
		time.Sleep(time.Millisecond) // polling a condition, with a deadline
	}
	t.Logf("%d events committed (%d flows), %d rolled back, each delivered once in commit order", len(done), len(perFlow), len(rolledBack))
}
