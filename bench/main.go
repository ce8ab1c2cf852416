// Command bench compares fairrelay's PostgreSQL backend with River
// (github.com/riverqueue/river) on the same PostgreSQL server, in one run:
//
//   - River: insert N no-op jobs (InsertManyFast, in batches) while a client
//     with -river-workers workers works them; the clock stops when the last
//     job is recorded completed (Client.Stop waits for the completer).
//   - fairrelay, unordered: enqueue N events, each its own flow
//     (EnqueueMany through Relay.Do, same batches), while the relay daemon
//     (package relay, what `fairrelay relay` runs) with -relay-workers
//     deliveries at once claims them, hands each to a no-op sink and
//     settles it accepted; the clock stops at the last ack. With -loop,
//     instead of the relay, -workers goroutines each settle their last
//     events and claim -claim more in one transaction (SettleMany with ClaimLimit; with
//     -split in two, SettleMany then Claim), all at tick 0.
//   - fairrelay, ordered: the same with the N events spread over 100 flows,
//     delivered in order within each flow.
//
// The workloads take turns for -rounds rounds; the table gives each one's
// median and fairrelay's throughput as a ratio of River's. River has no
// per-flow ordering, so both fairrelay rows are compared with River's one
// figure.
//
// It is a separate module so that the main module does not depend on River:
//
//	cd bench && go run . -pg 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
//
// Every workload runs in a fresh schema, dropped at the end.
package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/relay"
	"github.com/fairrelay/fairrelay/sink"
)

func main() {
	var o options
	flag.StringVar(&o.url, "pg", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL URL (loopback)")
	flag.IntVar(&o.n, "n", 20000, "jobs / events per workload")
	flag.IntVar(&o.batch, "batch", 1000, "jobs / events per insert batch")
	flag.IntVar(&o.flows, "flows", 100, "flows of the ordered workload")
	flag.IntVar(&o.riverWorkers, "river-workers", 100, "River: MaxWorkers of the default queue")
	flag.IntVar(&o.workers, "workers", 1, "fairrelay -loop: claiming goroutines (one pool connection each)")
	flag.IntVar(&o.claim, "claim", 100, "fairrelay -loop: heads per claim")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds; each workload reports its median")
	flag.IntVar(&o.relayWorkers, "relay-workers", 100, "fairrelay: the relay's Workers (deliveries at once)")
	flag.BoolVar(&o.loop, "loop", false, "fairrelay: instead of the relay, -workers goroutines each settling and claiming -claim heads at a time (SettleMany with ClaimLimit, or with -split SettleMany then Claim)")
	flag.BoolVar(&o.split, "split", false, "fairrelay -loop: settle and claim in two transactions (SettleMany, then Claim) instead of one (SettleMany with ClaimLimit)")
	flag.StringVar(&o.only, "only", "", "run only these workloads, comma-separated: river, unordered, ordered (default: all three)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	memprofile := flag.String("memprofile", "", "write an allocation profile of the whole run to this file")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if o.split && !o.loop {
		fmt.Fprintln(os.Stderr, "bench: -split: applies to -loop only")
		os.Exit(2)
	}
	if !strings.HasPrefix(o.url, "postgres://") && !strings.HasPrefix(o.url, "postgresql://") {
		fmt.Fprintf(os.Stderr, "bench: -pg: want a postgres:// URL of a server on this machine, got %q\n", o.url)
		os.Exit(2)
	}
	if *memprofile != "" {
		defer func() {
			f, err := os.Create(*memprofile)
			if err == nil {
				err = pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "bench: -memprofile:", err)
			}
		}()
	}
	if err := run(context.Background(), o); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type options struct {
	url                                                   string
	n, batch, flows, riverWorkers, workers, claim, rounds int
	split, loop                                           bool
	relayWorkers                                          int
	only                                                  string
}

func run(ctx context.Context, o options) error {
	side := fmt.Sprintf("fairrelay relay Workers=%d", o.relayWorkers)
	if o.loop {
		side = fmt.Sprintf("fairrelay loop: %d workers × %d heads, split %v", o.workers, o.claim, o.split)
	}
	fmt.Printf("bench: n=%d batch=%d rounds=%d; River MaxWorkers=%d; %s; ordered flows=%d; GOMAXPROCS=%d\n",
		o.n, o.batch, o.rounds, o.riverWorkers, side, o.flows, runtime.GOMAXPROCS(0))
	if err := startMeter(ctx, o.url); err != nil {
		fmt.Fprintln(os.Stderr, "bench: no CPU figures:", err)
	}
	type workload struct {
		key, name string
		run       func() (measure, error)
	}
	all := []workload{
		{"river", "River (insert → work, no-op job)", func() (measure, error) { return benchRiver(ctx, o) }},
		{"unordered", "fairrelay unordered (every event its own flow)", func() (measure, error) {
			return benchFairrelay(ctx, o, func(i int) string { return fmt.Sprintf("e%07d", i) })
		}},
		{"ordered", fmt.Sprintf("fairrelay ordered (%d flows)", o.flows), func() (measure, error) {
			return benchFairrelay(ctx, o, func(i int) string { return fmt.Sprintf("f%03d", i%o.flows) })
		}},
	}
	workloads := all
	if o.only != "" {
		workloads = nil
		for _, k := range strings.Split(o.only, ",") {
			i := slices.IndexFunc(all, func(w workload) bool { return w.key == strings.TrimSpace(k) })
			if i < 0 {
				return fmt.Errorf("-only: unknown workload %q (want river, unordered or ordered)", k)
			}
			workloads = append(workloads, all[i])
		}
	}
	// The workloads take turns, round after round, so that a change in the
	// machine's load during the run hits them alike; each reports its median.
	times := make([][]time.Duration, len(workloads))
	cpus := make([][]float64, len(workloads))
	for r := range o.rounds {
		for i, w := range workloads {
			m, err := w.run()
			if err != nil {
				return fmt.Errorf("%s: %w", w.name, err)
			}
			times[i] = append(times[i], m.elapsed)
			cpus[i] = append(cpus[i], m.cpu)
			fmt.Printf("round %d: %-48s %6.2f s %8.0f items/s %6.0f µs CPU/item\n", r+1, w.name, m.elapsed.Seconds(), float64(o.n)/m.elapsed.Seconds(), m.cpu/float64(o.n)*1e6)
		}
	}
	river := 0.0 // River's items/s, when it ran
	if workloads[0].key == "river" {
		river = float64(o.n) / median(times[0]).Seconds()
	}
	fmt.Println()
	fmt.Println("| workload | items | median seconds | items/s | × River | CPU µs/item (client + server) |")
	fmt.Println("|---|---:|---:|---:|---:|---:|")
	for i, w := range workloads {
		m := median(times[i])
		rate := float64(o.n) / m.Seconds()
		cpu := "–"
		if meter != nil {
			cpu = fmt.Sprintf("%.0f", median(cpus[i])/float64(o.n)*1e6)
		}
		ratio := "–"
		if river > 0 {
			ratio = fmt.Sprintf("%.2f", rate/river)
		}
		fmt.Printf("| %s | %d | %.2f | %.0f | %s | %s |\n", w.name, o.n, m.Seconds(), rate, ratio, cpu)
	}
	return nil
}

// median returns the median of xs (the upper one for an even count).
func median[T cmp.Ordered](xs []T) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// measure is one timed run of a workload: wall time, and the CPU time the
// machine spent on it, this process and the PostgreSQL server together
// (seconds; 0 without a meter).
type measure struct {
	elapsed time.Duration
	cpu     float64
}

// schema returns a fresh schema name and a function that drops it.
func schema(ctx context.Context, url, prefix string) (string, func(), error) {
	var b [5]byte
	rand.Read(b[:])
	name := prefix + "_" + hex.EncodeToString(b[:])
	drop := func() {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: drop schema:", err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			fmt.Fprintln(os.Stderr, "bench: drop schema:", err)
		}
	}
	return name, drop, nil
}

// enqueueAll hands the workload's o.n events (ids e0000000…, flows by
// flowOf) to enqueue in batches of o.batch, in order, stopping at the first
// error.
func enqueueAll(o options, flowOf func(i int) string, enqueue func([]fairrelay.NewEvent) error) error {
	body := []byte(`{"delta":1}`)
	for i := 0; i < o.n; i += o.batch {
		ps := make([]fairrelay.NewEvent, 0, o.batch)
		for j := i; j < min(i+o.batch, o.n); j++ {
			ps = append(ps, fairrelay.NewEvent{ID: fmt.Sprintf("e%07d", j), Flow: flowOf(j), Body: body})
		}
		if err := enqueue(ps); err != nil {
			return err
		}
	}
	return nil
}

// openQueue opens a fairrelay queue in a fresh schema of the server at url
// with a pool of conns connections; close closes it and drops the schema.
func openQueue(ctx context.Context, url string, pol fairrelay.Policy, conns int) (q *fairrelay.Queue, close func(), err error) {
	name, drop, err := schema(ctx, url, "bench_fr")
	if err != nil {
		return nil, nil, err
	}
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	dsn := fmt.Sprintf("%s%sschema=%s&pool_max_conns=%d", url, sep, name, conns)
	if q, err = fairrelay.Open(ctx, dsn, fairrelay.Config{Policy: pol}); err != nil {
		drop()
		return nil, nil, err
	}
	return q, func() { q.Close(); drop() }, nil
}

// noopArgs is River's no-op job.
type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

// noopWorker does nothing but count its jobs, and closes done at the n-th.
type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	worked *atomic.Int64
	n      int64
	done   chan struct{}
}

func (w noopWorker) Work(context.Context, *river.Job[noopArgs]) error {
	if w.worked.Add(1) == w.n {
		close(w.done)
	}
	return nil
}

func benchRiver(ctx context.Context, o options) (measure, error) {
	name, drop, err := schema(ctx, o.url, "bench_river")
	if err != nil {
		return measure{}, err
	}
	defer drop()
	pool, err := pgxpool.New(ctx, o.url)
	if err != nil {
		return measure{}, err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		return measure{}, err
	}
	driver := riverpgxv5.New(pool)
	m, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: name})
	if err != nil {
		return measure{}, err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return measure{}, err
	}
	workers := river.NewWorkers()
	worker := noopWorker{worked: new(atomic.Int64), n: int64(o.n), done: make(chan struct{})}
	river.AddWorker(workers, worker)
	client, err := river.NewClient(driver, &river.Config{
		Schema:  name,
		Workers: workers,
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: o.riverWorkers}},
		// River's fastest fetch settings: fetch again as soon as allowed.
		FetchCooldown:     river.FetchCooldownMin,
		FetchPollInterval: 10 * time.Millisecond,
	})
	if err != nil {
		return measure{}, err
	}
	if err := client.Start(ctx); err != nil {
		return measure{}, err
	}
	stopped := false
	defer func() {
		if !stopped {
			client.Stop(ctx)
		}
	}()

	start, cpu0 := time.Now(), meter.read()
	errc := make(chan error, 1)
	go func() {
		for i := 0; i < o.n; i += o.batch {
			ps := make([]river.InsertManyParams, 0, o.batch)
			for j := i; j < min(i+o.batch, o.n); j++ {
				ps = append(ps, river.InsertManyParams{Args: noopArgs{}})
			}
			if _, err := client.InsertManyFast(ctx, ps); err != nil {
				errc <- err
				return
			}
		}
	}()
	select {
	case <-worker.done:
	case err := <-errc:
		return measure{}, err
	case <-time.After(10 * time.Minute):
		return measure{}, errors.New("the jobs were not worked by River within 10 minutes")
	}
	// Stop waits for the completer to record every job as completed: the
	// clock stops when the work is durable, as fairrelay's stops at the ack.
	stopped = true
	if err := client.Stop(ctx); err != nil {
		return measure{}, err
	}
	res := measure{time.Since(start), meter.read() - cpu0}
	var completed int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{name, "river_job"}.Sanitize()+" WHERE state = 'completed'").Scan(&completed); err != nil {
		return measure{}, err
	}
	if completed != o.n {
		return measure{}, fmt.Errorf("%d of %d River jobs completed", completed, o.n)
	}
	return res, nil
}

func benchFairrelay(ctx context.Context, o options, flowOf func(i int) string) (measure, error) {
	if !o.loop {
		return benchRelay(ctx, o, flowOf)
	}
	q, drop, err := openQueue(ctx, o.url, fairrelay.ReferencePolicy(), o.workers+1)
	if err != nil {
		return measure{}, err
	}
	defer drop()

	start, cpu0 := time.Now(), meter.read()
	var acked atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
	}
	deadline := start.Add(10 * time.Minute)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := enqueueAll(o, flowOf, func(ps []fairrelay.NewEvent) error {
			_, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: 0, Events: ps})
			return err
		}); err != nil {
			fail(err)
		}
	}()
	for range o.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A worker's loop step settles what it delivered and claims the
			// next heads: in one transaction (SettleMany with ClaimLimit), or with
			// -split in two (SettleMany, then Claim), as the relay's
			// workers do. Everything at tick 0: a no-op sink answers at
			// once, so no lease runs out.
			var ps []fairrelay.Settlement
			settled := func(rs []fairrelay.SettleResult) (done bool, err error) {
				for _, r := range rs {
					if r.Status != fairrelay.SettleAcked {
						return false, fmt.Errorf("settle answered %s", r.Status)
					}
				}
				ps = ps[:0]
				return acked.Add(int64(len(rs))) >= int64(o.n), nil
			}
			for time.Now().Before(deadline) {
				mu.Lock()
				stop := firstErr != nil
				mu.Unlock()
				if stop || acked.Load() >= int64(o.n) {
					return
				}
				k := o.claim
				if acked.Load()+int64(len(ps)) >= int64(o.n) {
					k = 0 // the last settle: nothing is left to claim
				}
				var rs []fairrelay.SettleResult
				var cs []fairrelay.Claim
				var err error
				if o.split {
					if len(ps) > 0 {
						var res fairrelay.SettleManyResult
						res, err = q.SettleMany(ctx, fairrelay.SettleManyParams{At: 0, Settles: ps})
						rs = res.Results
						if err == nil {
							var done bool
							if done, err = settled(rs); done || err != nil {
								fail(err)
								return
							}
						}
					}
					if err == nil && k > 0 {
						var res fairrelay.ClaimResult
						res, err = q.Claim(ctx, fairrelay.ClaimParams{At: 0, Limit: k})
						cs = res.Claims
					}
				} else {
					var res fairrelay.SettleManyResult
					res, err = q.SettleMany(ctx, fairrelay.SettleManyParams{At: 0, Settles: ps, ClaimLimit: k})
					rs, cs = res.Results, res.Claims
					if err == nil {
						var done bool
						if done, err = settled(rs); done || err != nil {
							fail(err)
							return
						}
					}
				}
				if errors.Is(err, fairrelay.ErrBusy) {
					continue // nothing changed; ps is still to settle
				}
				if err != nil {
					fail(err)
					return
				}
				for _, c := range cs {
					// The no-op sink accepts every event.
					ps = append(ps, fairrelay.Settlement{Token: c.Token, Outcome: fairrelay.OutcomeAccepted})
				}
				if len(cs) == 0 {
					// Nothing runnable yet: the enqueuer is behind, or other
					// workers hold every head. Poll again shortly.
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return measure{}, firstErr
	}
	if acked.Load() != int64(o.n) {
		return measure{}, fmt.Errorf("%d of %d events acked before the deadline", acked.Load(), o.n)
	}
	return measure{time.Since(start), meter.read() - cpu0}, nil
}

// benchRelay runs the relay daemon (package relay, what `fairrelay relay`
// runs) with -relay-workers deliveries at once and a no-op sink that
// accepts every event, under the daemon's policy, while this process
// enqueues through Relay.Do (at the relay's clock). The clock stops at the
// last ack the relay reports (OnSettle runs after its settle committed).
func benchRelay(ctx context.Context, o options, flowOf func(i int) string) (measure, error) {
	// Connections: the enqueuer, the claimer, the settler, and a spare
	// for the clock reads of a retried write.
	q, drop, err := openQueue(ctx, o.url, fairrelay.DaemonPolicy(), 4)
	if err != nil {
		return measure{}, err
	}
	defer drop()
	var acked atomic.Int64
	done := make(chan struct{})
	failed := make(chan error, 1)
	r, err := relay.New(ctx, relay.Config{
		Queue: q, Workers: o.relayWorkers, Logger: slog.New(slog.DiscardHandler),
		Sink: sink.Func(func(context.Context, sink.Delivery) (sink.Result, error) {
			return sink.Result{Outcome: fairrelay.OutcomeAccepted}, nil
		}),
		OnSettle: func(s relay.Settled) {
			if s.LeaseLost || s.Result.Status != fairrelay.SettleAcked {
				select {
				case failed <- fmt.Errorf("settle of %s: %+v", s.Claim.Token.EventID, s):
				default:
				}
				return
			}
			if acked.Add(1) == int64(o.n) {
				close(done)
			}
		},
	})
	if err != nil {
		return measure{}, err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	runErr := make(chan error, 1)

	start, cpu0 := time.Now(), meter.read()
	go func() { runErr <- r.Run(runCtx) }()
	go func() {
		if err := enqueueAll(o, flowOf, func(ps []fairrelay.NewEvent) error {
			return r.Do(ctx, func(at int64) error {
				_, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: at, Events: ps})
				return err
			})
		}); err != nil {
			select {
			case failed <- err:
			default:
			}
		}
	}()
	select {
	case <-done:
	case err := <-failed:
		return measure{}, err
	case err := <-runErr:
		return measure{}, fmt.Errorf("relay stopped: %v", err)
	case <-time.After(10 * time.Minute):
		return measure{}, fmt.Errorf("%d of %d events acked within 10 minutes", acked.Load(), o.n)
	}
	res := measure{time.Since(start), meter.read() - cpu0}
	stop()
	if err := <-runErr; err != nil {
		return measure{}, err
	}
	return res, nil
}
