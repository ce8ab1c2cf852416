package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/harness/outboxbench"
	"github.com/fairrelay/fairrelay/internal/store/sqlitestore"
)

// PruneOptions configure RunPrune (issue 16: the cost of retention on a
// large store).
type PruneOptions struct {
	// Backends to measure: "sqlite", "postgres" (default both).
	Backends []string
	// Events is how many acked events the store holds before the prune
	// (default 1 000 000), spread over Flows flows (default 1 000), each
	// with a body of BodyBytes bytes (default 256).
	Events, Flows, BodyBytes int
	// Batch is the prune's Limit per transaction, as the relay's
	// PruneBatch (default 20).
	Batch int
	// Tombstones: every pruned event leaves a tombstone (its id younger
	// than retain_ids); otherwise none does.
	Tombstones bool
	// Baseline is how long the dispatch loop is measured alone before the
	// prune (default 5 s).
	Baseline time.Duration
	// Pause, when positive, makes the prune stop for Pause after every
	// Pause of pruning, and the dispatch steps taken wholly inside those
	// pauses are summarised apart (PruneReport.DispatchPaused): dispatch
	// without the prune, measured in the same run, under the same load
	// of the machine and for about as long as dispatch beside the prune,
	// so that the two tails compare (a maximum over 5 s of baseline and
	// one over minutes of prune do not). 0: the prune runs back to back.
	Pause time.Duration
	// Refill, after the prune (and PostgreSQL's VACUUM), enqueues and acks
	// Events new events and measures the size again: whether the freed
	// space is reused.
	Refill bool
	// Dir holds the SQLite file; PgURL is the server (a fresh schema is
	// created and dropped).
	Dir, PgURL string
	// OnProgress, when set, hears what the run is doing.
	OnProgress func(backend, phase string, done, total int)

	idPrefix string // of the event ids fillAcked writes
}

// PruneReport is one backend's figures. Times in milliseconds, sizes in
// bytes.
type PruneReport struct {
	Backend string `json:"backend"`
	Events  int    `json:"events"`
	Batch   int    `json:"batch"`
	// Pruned and PrunedTombstones count what the prune deleted;
	// Transactions how many Prune calls it took, Seconds their sum.
	Pruned       int64   `json:"pruned"`
	Tombstones   int64   `json:"tombstones"`
	Transactions int     `json:"transactions"`
	Seconds      float64 `json:"seconds"`
	// LongestMs and P99Ms: the prune calls' durations (on SQLite a call
	// also waits, holding nothing, for a checkpoint beside the writers).
	LongestMs float64 `json:"longest_prune_txn_ms"`
	P99Ms     float64 `json:"p99_prune_txn_ms"`
	// LongestHeldMs and P99HeldMs: how long the calls held the store's
	// writer in one write (fairrelay.PruneResult.Held), what a dispatch
	// step can wait behind.
	LongestHeldMs float64 `json:"longest_prune_write_ms"`
	P99HeldMs     float64 `json:"p99_prune_write_ms"`
	// Dispatch: one worker's claim+settle step (SettleMany, one event)
	// alone, then while the prune runs.
	DispatchAlone  Latency `json:"dispatch_alone"`
	DispatchDuring Latency `json:"dispatch_during"`
	// DispatchPaused: the steps taken wholly inside the prune's pauses
	// (PruneOptions.Pause; empty without). A step that overlapped any
	// prune call counts in DispatchDuring.
	DispatchPaused Latency `json:"dispatch_paused,omitzero"`
	// Sizes: SQLite the file plus its WAL; PostgreSQL the schema's tables
	// with their indexes and TOAST. After is right after the prune,
	// Vacuumed after a plain VACUUM (PostgreSQL only; SQLite's prune runs
	// its incremental vacuum itself).
	SizeBefore   int64 `json:"size_before"`
	SizeAfter    int64 `json:"size_after"`
	SizeVacuumed int64 `json:"size_vacuumed,omitempty"`
	// SizeRefilled is the size after Refill (0 without it).
	SizeRefilled int64 `json:"size_refilled,omitempty"`
	// StealPct is the share of the machine's CPU time its hypervisor took
	// (Linux's steal) while the prune ran, its pauses included, in
	// percent; -1 where the steal counter cannot be read (steal.go).
	StealPct float64 `json:"steal_pct"`
	// The figures again over the prune calls and dispatch steps during
	// which the steal counter (/proc/stat, ticks of 10 ms over every CPU)
	// did not move: what the prune and dispatch took while no CPU of the
	// machine was stopped by its hypervisor for as long as a tick, the
	// stops that end the longest of both (steal.go). A stop shorter than
	// a tick can still be in them. CallsNoSteal counts those prune calls.
	// Zero where the counter cannot be read.
	CallsNoSteal          int     `json:"prune_calls_no_steal,omitempty"`
	LongestHeldNoStealMs  float64 `json:"longest_prune_write_no_steal_ms,omitempty"`
	P99HeldNoStealMs      float64 `json:"p99_prune_write_no_steal_ms,omitempty"`
	DispatchDuringNoSteal Latency `json:"dispatch_during_no_steal,omitzero"`
	DispatchPausedNoSteal Latency `json:"dispatch_paused_no_steal,omitzero"`
}

// Latency summarises step durations in milliseconds.
type Latency struct {
	Steps int     `json:"steps"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
}

func (o *PruneOptions) defaults() {
	if len(o.Backends) == 0 {
		o.Backends = []string{"sqlite", "postgres"}
	}
	if o.Events == 0 {
		o.Events = 1_000_000
	}
	if o.Flows == 0 {
		o.Flows = 1000
	}
	if o.BodyBytes == 0 {
		o.BodyBytes = 256
	}
	if o.Batch == 0 {
		o.Batch = 20
	}
	if o.Baseline == 0 {
		o.Baseline = 5 * time.Second
	}
}

func (o *PruneOptions) validate() error {
	for _, b := range o.Backends {
		if b != "sqlite" && b != "postgres" {
			return fmt.Errorf("backends: %q is neither sqlite nor postgres", b)
		}
	}
	switch {
	case o.Events < 1:
		return fmt.Errorf("events: must be at least 1, got %d", o.Events)
	case o.Flows < 1 || o.Flows > o.Events:
		return fmt.Errorf("flows: must be in [1, events=%d], got %d", o.Events, o.Flows)
	case o.BodyBytes < 1 || o.BodyBytes > 1<<20:
		return fmt.Errorf("body-bytes: must be in [1, 1048576], got %d", o.BodyBytes)
	case o.Batch < 1:
		return fmt.Errorf("batch: must be at least 1, got %d", o.Batch)
	case o.Baseline < 0:
		return fmt.Errorf("baseline: must not be negative, got %s", o.Baseline)
	case o.Pause < 0:
		return fmt.Errorf("pause: must not be negative, got %s", o.Pause)
	case slices.Contains(o.Backends, "postgres") && o.PgURL == "":
		return errors.New("pg: a PostgreSQL URL is needed for the postgres backend")
	case slices.Contains(o.Backends, "sqlite") && o.Dir == "":
		return errors.New("dir: a directory is needed for the sqlite backend")
	}
	return nil
}

// The ticks of the run: the events are enqueued at loadTick and acked at
// ackTick; the dispatch loop and the prune write at liveTick, and the
// prune deletes what was acked before pruneBefore.
const (
	loadTick    = 0
	ackTick     = 1
	pruneBefore = 2
	liveTick    = 10
)

// RunPrune measures, per backend, a prune of opts.Events acked events in
// transactions of opts.Batch events while one worker dispatches other
// flows: the longest prune transaction, the dispatch step's latency alone
// and during the prune, and the store's size before and after. Errors:
// bad options (naming the field), any queue or database error.
func RunPrune(ctx context.Context, opts PruneOptions) ([]PruneReport, error) {
	opts.defaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	var out []PruneReport
	for _, b := range opts.Backends {
		r, err := runPrune(ctx, b, opts)
		if err != nil {
			return out, fmt.Errorf("%s: %w", b, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func runPrune(ctx context.Context, backend string, o PruneOptions) (PruneReport, error) {
	rep := PruneReport{Backend: backend, Events: o.Events, Batch: o.Batch}
	var dsn string
	var size func() (int64, error)
	var vacuum func() error
	if backend == "sqlite" {
		dsn = filepath.Join(o.Dir, "bench-prune.db")
		removeDB(dsn)
		defer removeDB(dsn)
		size = func() (int64, error) { return sqliteSize(ctx, dsn) }
	} else {
		schema := outboxbench.RandomName("bench_prune")
		var err error
		if dsn, err = outboxbench.WithParams(o.PgURL, "schema", schema); err != nil {
			return rep, err
		}
		defer outboxbench.DropSchema(ctx, o.PgURL, schema)
		size = func() (int64, error) { return pgSchemaSize(ctx, o.PgURL, schema) }
		vacuum = func() error {
			return pgVacuum(ctx, o.PgURL, schema)
		}
	}
	q, err := fairrelay.Open(ctx, dsn, fairrelay.Config{Policy: fairrelay.DaemonPolicy()})
	if err != nil {
		return rep, err
	}
	defer q.Close()
	progress := func(phase string, done, total int) {
		if o.OnProgress != nil {
			o.OnProgress(backend, phase, done, total)
		}
	}
	if err := fillAcked(ctx, q, o, progress); err != nil {
		return rep, err
	}
	if rep.SizeBefore, err = size(); err != nil {
		return rep, err
	}
	progress("dispatch alone", 0, 0)
	stop := make(chan struct{})
	time.AfterFunc(o.Baseline, func() { close(stop) })
	alone, err := dispatchLoop(ctx, q, stop, nil, nil)
	if err != nil {
		return rep, err
	}
	rep.DispatchAlone = alone.during
	// The prune, beside the dispatch loop. phase counts the prune's starts
	// and stops: odd while it runs (see PruneOptions.Pause).
	var phase atomic.Int64
	phase.Add(1)
	// The machine's steal counter (steal.go): dw watches the dispatch
	// steps, pw the prune calls, total the whole prune.
	dw, closeDW := newStealWatch()
	defer closeDW()
	pw, closePW := newStealWatch()
	defer closePW()
	total, closeTotal := newStealWatch()
	defer closeTotal()
	var stealAt0 int64
	if total != nil {
		if stealAt0, err = total.read(); err != nil {
			return rep, fmt.Errorf("steal counter: %w", err)
		}
	}
	began := time.Now()
	stop = make(chan struct{})
	var wg sync.WaitGroup
	var derr error
	var dispatched dispatchResult
	wg.Go(func() { dispatched, derr = dispatchLoop(ctx, q, stop, &phase, dw) })
	ids := int64(pruneBefore)
	if o.Tombstones {
		ids = 0
	}
	var txns, held, heldNoSteal []time.Duration
	var pruning time.Duration // of the prune's calls, its pauses left out
	window := time.Now()
	pw.mark()
	for {
		if o.Pause > 0 && time.Since(window) >= o.Pause {
			phase.Add(1)
			select {
			case <-time.After(o.Pause):
			case <-ctx.Done():
			}
			phase.Add(1)
			window = time.Now()
			pw.mark()
		}
		t0 := time.Now()
		res, err := q.Prune(ctx, fairrelay.PruneParams{At: liveTick, Floor: true, AckedBefore: pruneBefore, IDsBefore: ids, Limit: o.Batch})
		if err != nil {
			close(stop)
			wg.Wait()
			return rep, err
		}
		txns = append(txns, time.Since(t0))
		held = append(held, res.Held)
		if pw != nil && !pw.stolen() {
			heldNoSteal = append(heldNoSteal, res.Held)
		}
		pruning += time.Since(t0)
		rep.Pruned += res.Events
		rep.Tombstones += res.Tombstones
		progress("prune", int(rep.Pruned), o.Events)
		if !res.More {
			break
		}
	}
	rep.Seconds = pruning.Seconds()
	rep.StealPct = -1
	if total != nil {
		elapsed := time.Since(began)
		stealAt1, err := total.read()
		if err != nil {
			close(stop)
			wg.Wait()
			return rep, fmt.Errorf("steal counter: %w", err)
		}
		// Ticks of 10 ms (Linux's USER_HZ, 100) summed over the CPUs.
		rep.StealPct = 100 * float64(stealAt1-stealAt0) * 0.01 / (elapsed.Seconds() * float64(runtime.NumCPU()))
	}
	close(stop)
	wg.Wait()
	if derr != nil {
		return rep, derr
	}
	for _, w := range []*stealWatch{pw, dw} {
		if w != nil && w.err != nil {
			return rep, fmt.Errorf("steal counter: %w", w.err)
		}
	}
	rep.DispatchDuring, rep.DispatchPaused = dispatched.during, dispatched.paused
	if pw != nil {
		rep.CallsNoSteal = len(heldNoSteal)
		lat := summarise(heldNoSteal)
		rep.LongestHeldNoStealMs, rep.P99HeldNoStealMs = lat.Max, lat.P99
		rep.DispatchDuringNoSteal, rep.DispatchPausedNoSteal = dispatched.duringNoSteal, dispatched.pausedNoSteal
	}
	rep.Transactions = len(txns)
	lat := summarise(txns)
	rep.LongestMs, rep.P99Ms = lat.Max, lat.P99
	lat = summarise(held)
	rep.LongestHeldMs, rep.P99HeldMs = lat.Max, lat.P99
	if rep.SizeAfter, err = size(); err != nil {
		return rep, err
	}
	if vacuum != nil {
		if err := vacuum(); err != nil {
			return rep, err
		}
		if rep.SizeVacuumed, err = size(); err != nil {
			return rep, err
		}
	}
	if o.Refill {
		o.idPrefix = "r"
		if err := fillAcked(ctx, q, o, progress); err != nil {
			return rep, err
		}
		if rep.SizeRefilled, err = size(); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// fillAcked enqueues o.Events events over o.Flows flows and acks them all.
func fillAcked(ctx context.Context, q *fairrelay.Queue, o PruneOptions, progress func(string, int, int)) error {
	body := []byte(`{"pad":"` + strings.Repeat("x", max(o.BodyBytes-10, 0)) + `"}`)[:o.BodyBytes]
	if o.BodyBytes < 11 {
		body = []byte(strings.Repeat("x", o.BodyBytes))
	}
	ps := make([]fairrelay.NewEvent, 0, loadChunk)
	seq := make([]int, o.Flows)
	for i := range o.Events {
		f := i % o.Flows
		seq[f]++
		ps = append(ps, fairrelay.NewEvent{ID: o.idPrefix + EventID(f, seq[f]), Flow: FlowID(f), Body: body})
		if len(ps) == loadChunk || i == o.Events-1 {
			if _, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: loadTick, Floor: true, Events: ps}); err != nil {
				return fmt.Errorf("load: %w", err)
			}
			ps = ps[:0]
			progress("enqueue", i+1, o.Events)
		}
	}
	acked := 0
	var held []fairrelay.Settlement
	for {
		res, err := q.SettleMany(ctx, fairrelay.SettleManyParams{At: ackTick, Floor: true, Settles: held, ClaimLimit: 512})
		if err != nil {
			return fmt.Errorf("ack: %w", err)
		}
		acked += len(res.Results)
		progress("ack", acked, o.Events)
		if len(res.Claims) == 0 {
			break
		}
		held = held[:0]
		for _, c := range res.Claims {
			held = append(held, fairrelay.Settlement{Token: c.Token, Outcome: fairrelay.OutcomeAccepted})
		}
	}
	// A refill also acks what the dispatch loop left of its live flows.
	if acked < o.Events {
		return fmt.Errorf("ack: acked %d events, want %d", acked, o.Events)
	}
	return nil
}

// dispatchLoop runs one worker until stop closes: each step is a
// SettleMany that settles the event claimed by the step before and claims
// one more, on ten live flows refilled 1 000 events at a time. With phase
// nil every step counts in the first summary; otherwise a step that began
// and ended in one even phase (the prune paused) counts in the second, and
// every other in the first. With w, the steps during which the machine's
// steal counter did not move are summarised apart as well (steal.go).
func dispatchLoop(ctx context.Context, q *fairrelay.Queue, stop <-chan struct{}, phase *atomic.Int64, w *stealWatch) (dispatchResult, error) {
	var steps, paused, stepsNoSteal, pausedNoSteal []time.Duration
	var held []fairrelay.Settlement
	next := 0
	refill := func() error {
		ps := make([]fairrelay.NewEvent, 0, 1000)
		for range 1000 {
			next++
			ps = append(ps, fairrelay.NewEvent{ID: fmt.Sprintf("live.%09d", next), Flow: fmt.Sprintf("live%02d", next%10), Body: []byte(`{"live":1}`)})
		}
		_, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: liveTick, Floor: true, Events: ps})
		return err
	}
	w.mark()
	for {
		select {
		case <-stop:
			if len(held) > 0 {
				if _, err := q.SettleMany(ctx, fairrelay.SettleManyParams{At: liveTick, Floor: true, Settles: held}); err != nil {
					return dispatchResult{}, err
				}
			}
			return dispatchResult{summarise(steps), summarise(paused), summarise(stepsNoSteal), summarise(pausedNoSteal)}, nil
		default:
		}
		var p0 int64
		if phase != nil {
			p0 = phase.Load()
		}
		t0 := time.Now()
		res, err := q.SettleMany(ctx, fairrelay.SettleManyParams{At: liveTick, Floor: true, Settles: held, ClaimLimit: 1})
		if err != nil {
			return dispatchResult{}, fmt.Errorf("dispatch: %w", err)
		}
		d := time.Since(t0)
		noSteal := w != nil && !w.stolen()
		if phase != nil && p0%2 == 0 && phase.Load() == p0 {
			paused = append(paused, d)
			if noSteal {
				pausedNoSteal = append(pausedNoSteal, d)
			}
		} else {
			steps = append(steps, d)
			if noSteal {
				stepsNoSteal = append(stepsNoSteal, d)
			}
		}
		held = held[:0]
		for _, c := range res.Claims {
			held = append(held, fairrelay.Settlement{Token: c.Token, Outcome: fairrelay.OutcomeAccepted})
		}
		if len(res.Claims) == 0 {
			if err := refill(); err != nil {
				return dispatchResult{}, fmt.Errorf("dispatch: refill: %w", err)
			}
			w.mark() // the next step's interval starts after the refill
		}
	}
}

// dispatchResult is what dispatchLoop measured: the steps beside the
// prune (or all of them without phase) and in its pauses, and the same
// without the steps the hypervisor's steal met (empty without a
// stealWatch).
type dispatchResult struct {
	during, paused, duringNoSteal, pausedNoSteal Latency
}

// summarise returns the p50, p99 and maximum of ds in milliseconds.
func summarise(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	at := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return Latency{Steps: len(s), P50: ms(at(0.50)), P99: ms(at(0.99)), P999: ms(at(0.999)), Max: ms(s[len(s)-1])}
}

// sqliteSize checkpoints the WAL of the SQLite file at path into the file
// (TRUNCATE: the WAL is emptied; sqlitestore.TruncateLog, which waits out
// the open store's own checkpointer and readers, up to 30 s) and returns
// the sizes of both, so that pages a prune freed show.
func sqliteSize(ctx context.Context, path string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := sqlitestore.TruncateLog(ctx, path); err != nil {
		return 0, err
	}
	return fileSizes(path, path+"-wal")
}

// fileSizes sums the sizes of the files that exist among paths.
func fileSizes(paths ...string) (int64, error) {
	var n int64
	for _, p := range paths {
		st, err := os.Stat(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, err
		}
		n += st.Size()
	}
	return n, nil
}

// pgSchemaSize sums pg_total_relation_size over the tables of schema.
func pgSchemaSize(ctx context.Context, url, schema string) (int64, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var n int64
	err = conn.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
		FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
		WHERE s.nspname = $1 AND c.relkind = 'r'`, schema).Scan(&n)
	return n, err
}

// pgVacuum runs a plain VACUUM (no exclusive lock) on every table of
// schema.
func pgVacuum(ctx context.Context, url, schema string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT c.relname FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
		WHERE s.nspname = $1 AND c.relkind = 'r'`, schema)
	if err != nil {
		return err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, n := range names {
		if _, err := conn.Exec(ctx, "VACUUM "+pgx.Identifier{schema, n}.Sanitize()); err != nil {
			return fmt.Errorf("vacuum %s: %w", n, err)
		}
	}
	return nil
}

// WritePruneTable prints reports as a Markdown table.
func WritePruneTable(w io.Writer, reps []PruneReport) error {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprintln(tw, "| backend\t| events pruned\t| tombstones deleted\t| txns\t| s\t| longest call ms\t| p99 call ms\t| longest write ms\t| p99 write ms\t| dispatch alone p50/p99/p99.9/max ms\t| in the prune's pauses\t| during the prune\t| size before\t| after\t| after VACUUM\t| after refill\t|")
	fmt.Fprintln(tw, "|---\t|---:\t|---:\t|---:\t|---:\t|---:\t|---:\t|---:\t|---:\t|---\t|---\t|---\t|---:\t|---:\t|---:\t|---:\t|")
	mb := func(n int64) string {
		if n == 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	}
	lat := func(l Latency) string {
		if l.Steps == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f / %.2f / %.1f / %.1f (%d steps)", l.P50, l.P99, l.P999, l.Max, l.Steps)
	}
	for _, r := range reps {
		fmt.Fprintf(tw, "| %s\t| %d\t| %d\t| %d\t| %.1f\t| %.1f\t| %.1f\t| %.1f\t| %.1f\t| %s\t| %s\t| %s\t| %s\t| %s\t| %s\t| %s\t|\n",
			r.Backend, r.Pruned, r.Tombstones, r.Transactions, r.Seconds, r.LongestMs, r.P99Ms, r.LongestHeldMs, r.P99HeldMs,
			lat(r.DispatchAlone), lat(r.DispatchPaused), lat(r.DispatchDuring),
			mb(r.SizeBefore), mb(r.SizeAfter), mb(r.SizeVacuumed), mb(r.SizeRefilled))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var measured []PruneReport
	for _, r := range reps {
		if r.StealPct >= 0 && r.CallsNoSteal > 0 {
			measured = append(measured, r)
		}
	}
	if len(measured) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nWithout the hypervisor's steal: the prune calls and dispatch steps during which the machine's steal counter did not move (ticks of 10 ms):")
	fmt.Fprintln(w)
	fmt.Fprintln(tw, "| backend\t| steal % of the CPUs\t| prune calls\t| longest write ms\t| p99 write ms\t| in the prune's pauses p50/p99/p99.9/max ms\t| during the prune\t|")
	fmt.Fprintln(tw, "|---\t|---:\t|---:\t|---:\t|---:\t|---\t|---\t|")
	for _, r := range measured {
		fmt.Fprintf(tw, "| %s\t| %.1f\t| %d of %d\t| %.1f\t| %.1f\t| %s\t| %s\t|\n", r.Backend, r.StealPct, r.CallsNoSteal, r.Transactions,
			r.LongestHeldNoStealMs, r.P99HeldNoStealMs, lat(r.DispatchPausedNoSteal), lat(r.DispatchDuringNoSteal))
	}
	return tw.Flush()
}
