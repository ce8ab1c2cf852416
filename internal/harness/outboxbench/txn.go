package outboxbench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// Flow layouts of the concurrent transactions.
const (
	// FlowsDistinct: each of the N concurrent transactions enqueues to a
	// flow of its own (worker w always to customer-w), so no two
	// transactions open at once share a flow.
	FlowsDistinct = "distinct"
	// FlowsOne: every transaction enqueues to the same flow.
	FlowsOne = "one"
)

// TxnOptions configure RunTxn.
type TxnOptions struct {
	// PG is the URL of a PostgreSQL server on this machine; "" skips
	// PostgreSQL. Every run works in fresh schemas, dropped at its end.
	PG string
	// SQLiteDir is where the SQLite files go; "" skips SQLite. Every run
	// has a fresh file, removed at its end.
	SQLiteDir string
	// Txns lists the numbers of concurrent business transactions.
	// Defaults to 1, 8, 32.
	Txns []int
	// Work lists how long each transaction stays open after its enqueue,
	// before its commit. Defaults to 0 and 20ms.
	Work []time.Duration
	// Flows lists the flow layouts (FlowsDistinct, FlowsOne). Defaults to
	// both.
	Flows []string
	// Duration is how long each rate is measured, at least. Defaults to
	// 3s.
	Duration time.Duration
	// MinTxns is how many transactions each rate counts, at least: when
	// fewer committed within Duration (a loaded machine, or Work longer
	// than Duration), the measurement goes on until MinTxns have, and the
	// rate is taken over the longer time. A failed transaction past
	// Duration ends it all the same. Defaults to 1, so that a cell never
	// reads 0 for want of time.
	MinTxns int
	// Warmup runs the transactions before the measured time, uncounted
	// (connections, prepared statements, the first rows). Defaults to a
	// fifth of Duration, at most 500ms.
	Warmup time.Duration
	// WithRelay runs a relay (RelayWorkers deliveries at once, a no-op
	// sink) on the queue store during the EnqueueTx variant, as in
	// production; the plain variant has no consumer either way.
	WithRelay    bool
	RelayWorkers int
	// Progress, when set, is told what runs next.
	Progress func(string)
}

func (o *TxnOptions) defaults() {
	if len(o.Txns) == 0 {
		o.Txns = []int{1, 8, 32}
	}
	if len(o.Work) == 0 {
		o.Work = []time.Duration{0, 20 * time.Millisecond}
	}
	if len(o.Flows) == 0 {
		o.Flows = []string{FlowsDistinct, FlowsOne}
	}
	if o.Duration == 0 {
		o.Duration = 3 * time.Second
	}
	if o.Warmup == 0 {
		o.Warmup = min(o.Duration/5, 500*time.Millisecond)
	}
	if o.MinTxns == 0 {
		o.MinTxns = 1
	}
	if o.RelayWorkers == 0 {
		o.RelayWorkers = 8
	}
}

func (o *TxnOptions) validate() error {
	for _, n := range o.Txns {
		if n < 1 || n > 64 {
			return fmt.Errorf("txns: %d is not 1 to 64", n)
		}
	}
	for _, w := range o.Work {
		if w < 0 {
			return fmt.Errorf("work: %v is negative", w)
		}
	}
	for _, f := range o.Flows {
		if f != FlowsDistinct && f != FlowsOne {
			return fmt.Errorf("flows: %q is neither %s nor %s", f, FlowsDistinct, FlowsOne)
		}
	}
	if o.Duration <= 0 || o.Warmup < 0 {
		return errors.New("duration: must be positive (and the warm-up not negative)")
	}
	if o.MinTxns < 0 {
		return fmt.Errorf("min-txns: %d is negative", o.MinTxns)
	}
	if o.PG == "" && o.SQLiteDir == "" {
		return errors.New("no backend: give a PostgreSQL URL or a SQLite directory")
	}
	return nil
}

// TxnResult is one cell: the same business transactions, N at once, with
// the plain outbox insert and with EnqueueTx.
type TxnResult struct {
	Backend string  `json:"backend"`
	Txns    int     `json:"txns"`
	WorkMS  float64 `json:"work_ms"`
	Flows   string  `json:"flows"`
	// PlainPerS and EnqueueTxPerS are transactions committed per second.
	PlainPerS     float64 `json:"plain_txn_per_s"`
	EnqueueTxPerS float64 `json:"enqueue_tx_txn_per_s"`
	// Ratio is EnqueueTxPerS / PlainPerS.
	Ratio float64 `json:"ratio"`
	// Errors counts failed transactions (rolled back, not counted) of both
	// variants; FirstError is the first one's message.
	PlainErrors     int    `json:"plain_errors"`
	EnqueueTxErrors int    `json:"enqueue_tx_errors"`
	FirstError      string `json:"first_error,omitempty"`
}

// RunTxn measures every cell (backend × flows × work × txns) in that
// order. Within a cell the two variants run back to back, the first of
// them alternating from cell to cell, each on fresh tables and a fresh
// queue store. A variant whose every transaction failed stops the run with
// its error.
func RunTxn(ctx context.Context, opts TxnOptions) ([]TxnResult, error) {
	opts.defaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	var backends []txnBackend
	if opts.PG != "" {
		backends = append(backends, pgTxn{base: opts.PG})
	}
	if opts.SQLiteDir != "" {
		backends = append(backends, sqliteTxn{dir: opts.SQLiteDir})
	}
	var out []TxnResult
	cell := 0
	for _, b := range backends {
		for _, flows := range opts.Flows {
			for _, work := range opts.Work {
				for _, n := range opts.Txns {
					res := TxnResult{Backend: b.name(), Txns: n, WorkMS: float64(work) / float64(time.Millisecond), Flows: flows}
					variants := []bool{false, true} // EnqueueTx?
					if cell%2 == 1 {
						variants = []bool{true, false}
					}
					cell++
					for _, enqueue := range variants {
						what := "plain insert"
						if enqueue {
							what = "EnqueueTx"
						}
						if opts.Progress != nil {
							opts.Progress(fmt.Sprintf("%s: %d txns, %s flows, work %v: %s", b.name(), n, flows, work, what))
						}
						m, err := runVariant(ctx, b, enqueue, n, flows, work, opts)
						if err != nil {
							return out, fmt.Errorf("%s, %d txns, %s flows, work %v, %s: %w", b.name(), n, flows, work, what, err)
						}
						if enqueue {
							res.EnqueueTxPerS, res.EnqueueTxErrors = m.perS, m.errs
						} else {
							res.PlainPerS, res.PlainErrors = m.perS, m.errs
						}
						if res.FirstError == "" && m.firstErr != nil {
							res.FirstError = what + ": " + errorText(m.firstErr)
						}
					}
					if res.PlainPerS > 0 {
						res.Ratio = res.EnqueueTxPerS / res.PlainPerS
					}
					out = append(out, res)
				}
			}
		}
	}
	return out, nil
}

// txnBackend sets up one variant's application on fresh tables.
type txnBackend interface {
	name() string
	open(ctx context.Context, enqueue bool, conns int) (app, func(), error)
}

type pgTxn struct {
	base   string
	tracer pgx.QueryTracer // nil, or traces the application's connections
}

func (pgTxn) name() string { return BackendPostgres }

func (b pgTxn) open(ctx context.Context, enqueue bool, conns int) (app, func(), error) {
	appURL, dropApp, err := pgBusiness(ctx, b.base)
	if err != nil {
		return nil, nil, err
	}
	var ob *Outbox
	dropQueue := func() {}
	if enqueue {
		dsn, _, drop, err := pgQueue(ctx, b.base)
		if err != nil {
			dropApp()
			return nil, nil, err
		}
		if ob, err = OpenOutbox(ctx, dsn); err != nil {
			drop()
			dropApp()
			return nil, nil, err
		}
		dropQueue = func() { ob.Close(); drop() }
	}
	a, err := openPgApp(ctx, appURL, ob, conns, b.tracer)
	if err != nil {
		dropQueue()
		dropApp()
		return nil, nil, err
	}
	return a, func() { a.close(); dropQueue(); dropApp() }, nil
}

type sqliteTxn struct{ dir string }

func (sqliteTxn) name() string { return BackendSQLite }

func (b sqliteTxn) open(ctx context.Context, enqueue bool, conns int) (app, func(), error) {
	path := sqlitePath(b.dir, "bench-outbox")
	var ob *Outbox
	if enqueue {
		var err error
		if ob, err = OpenOutbox(ctx, path); err != nil {
			removeSQLite(path)
			return nil, nil, err
		}
	}
	cleanup := func() {
		if ob != nil {
			ob.Close()
		}
		removeSQLite(path)
	}
	if err := sqliteBusiness(ctx, path); err != nil {
		cleanup()
		return nil, nil, err
	}
	a, err := openSQLiteApp(path, ob, conns)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return a, func() { a.close(); cleanup() }, nil
}

type variantResult struct {
	perS     float64
	errs     int
	firstErr error
}

// runVariant runs n workers, each running business transactions one after
// the other for Warmup + Duration (longer while fewer than MinTxns were
// counted: txnMeter), and counts the commits that returned within the
// measured time.
func runVariant(ctx context.Context, b txnBackend, enqueue bool, n int, flows string, work time.Duration, opts TxnOptions) (variantResult, error) {
	a, cleanup, err := b.open(ctx, enqueue, n)
	if err != nil {
		return variantResult{}, err
	}
	defer cleanup()
	if ob := a.outbox(); ob != nil && opts.WithRelay {
		stop, err := ob.StartRelay(ctx, RelayOptions{Workers: opts.RelayWorkers})
		if err != nil {
			return variantResult{}, err
		}
		defer func() {
			if err := stop(); err != nil {
				fmt.Fprintf(os.Stderr, "outboxbench: relay: %v\n", err)
			}
		}()
	}
	start := time.Now().Add(opts.Warmup)
	m := &txnMeter{start: start, end: start.Add(opts.Duration), min: int64(opts.MinTxns)}
	var (
		failed   atomic.Int64
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			flow := fmt.Sprintf("customer-%d", w)
			if flows == FlowsOne {
				flow = "customer-all"
			}
			for i := 0; ctx.Err() == nil && m.running(time.Now()); i++ {
				id := fmt.Sprintf("w%d-%d", w, i)
				err := a.order(ctx, id, flow, func() []byte { return orderBody(id, flow, time.Time{}) }, work)
				if err != nil {
					if failed.Add(1) == 1 {
						mu.Lock()
						firstErr = err
						mu.Unlock()
					}
					m.failed(time.Now())
					time.Sleep(time.Millisecond) // no hot loop on a broken database
					continue
				}
				m.committed(time.Now())
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return variantResult{}, err
	}
	count, measured := m.result()
	res := variantResult{perS: float64(count) / measured.Seconds(), errs: int(failed.Load()), firstErr: firstErr}
	if count == 0 && firstErr != nil {
		return res, firstErr
	}
	if firstErr != nil {
		fmt.Fprintf(os.Stderr, "outboxbench: %d transactions failed, the first with: %v\n", res.errs, firstErr)
	}
	return res, nil
}

// txnMeter decides the measured time of one variant: it starts at start
// and ends at end, or, when fewer than min commits returned by then, at
// the commit that makes min (or at a failure past end), so that a rate is
// never 0 for want of time on a loaded machine.
type txnMeter struct {
	start, end time.Time
	min        int64

	mu    sync.Mutex
	count int64     // commits that returned within the measured time
	stop  time.Time // the end of the measured time; zero while it runs
}

// running reports whether the measured time goes on at now.
func (m *txnMeter) running(now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stop.IsZero() && !now.Before(m.end) && m.count >= m.min {
		m.stop = m.end
	}
	return m.stop.IsZero()
}

// committed counts a commit that returned at t, if the measured time holds
// it.
func (m *txnMeter) committed(t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case !m.stop.IsZero() || t.Before(m.start):
	case t.Before(m.end):
		m.count++
	case m.count >= m.min:
		m.stop = m.end
	default:
		if m.count++; m.count >= m.min {
			m.stop = t
		}
	}
}

// failed ends the measured time at t if it ran past end: a database that
// fails would keep it going for ever.
func (m *txnMeter) failed(t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case !m.stop.IsZero() || t.Before(m.end):
	case m.count >= m.min:
		m.stop = m.end
	default:
		m.stop = t
	}
}

// result returns the commits counted and the measured time, once every
// worker stopped.
func (m *txnMeter) result() (int64, time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.count, m.stop.Sub(m.start)
}
