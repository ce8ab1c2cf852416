// Command bench compares fairrelay's PostgreSQL backend with River
// (github.com/riverqueue/river) on the same PostgreSQL server, in one run:
//
//   - River: insert N no-op jobs (InsertManyFast, in batches) while a client
//     works them; the clock stops when the last job is recorded completed
//     (Client.Stop waits for the completer).
//   - fairrelay, unordered: enqueue N events, each its own flow
//     (EnqueueBatch, same batches), while workers claim, hand each event to a
//     no-op sink and settle it accepted (SettleAndClaim: a worker settles its
//     last events and claims the next in one transaction; with -split, in
//     two, SettleBatch then ClaimBatch); the clock stops at the last ack.
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
)

func main() {
	var o options
	flag.StringVar(&o.url, "pg", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL URL (loopback)")
	flag.IntVar(&o.n, "n", 20000, "jobs / events per workload")
	flag.IntVar(&o.batch, "batch", 1000, "jobs / events per insert batch")
	flag.IntVar(&o.flows, "flows", 100, "flows of the ordered workload")
	flag.IntVar(&o.riverWorkers, "river-workers", 100, "River: MaxWorkers of the default queue")
	flag.IntVar(&o.workers, "workers", 1, "fairrelay: claiming goroutines (one pool connection each)")
	flag.IntVar(&o.claim, "claim", 100, "fairrelay: heads per claim (SettleAndClaim)")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds; each workload reports its median")
	flag.BoolVar(&o.split, "split", false, "fairrelay: settle and claim in two transactions (SettleBatch, ClaimBatch) instead of one (SettleAndClaim)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
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
	if !strings.HasPrefix(o.url, "postgres://") && !strings.HasPrefix(o.url, "postgresql://") {
		fmt.Fprintf(os.Stderr, "bench: -pg: want a postgres:// URL of a server on this machine, got %q\n", o.url)
		os.Exit(2)
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
	split                                                 bool
}

func run(ctx context.Context, o options) error {
	fmt.Printf("bench: n=%d batch=%d rounds=%d; River MaxWorkers=%d; fairrelay workers=%d claim batch=%d; ordered flows=%d; GOMAXPROCS=%d\n",
		o.n, o.batch, o.rounds, o.riverWorkers, o.workers, o.claim, o.flows, runtime.GOMAXPROCS(0))
	if err := startMeter(ctx, o.url); err != nil {
		fmt.Fprintln(os.Stderr, "bench: no CPU figures:", err)
	}
	workloads := []struct {
		name string
		run  func() (measure, error)
	}{
		{"River (insert → work, no-op job)", func() (measure, error) { return benchRiver(ctx, o) }},
		{"fairrelay unordered (every event its own flow)", func() (measure, error) {
			return benchFairrelay(ctx, o, func(i int) string { return fmt.Sprintf("e%07d", i) })
		}},
		{fmt.Sprintf("fairrelay ordered (%d flows)", o.flows), func() (measure, error) {
			return benchFairrelay(ctx, o, func(i int) string { return fmt.Sprintf("f%03d", i%o.flows) })
		}},
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
	river := float64(o.n) / median(times[0]).Seconds()
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
		fmt.Printf("| %s | %d | %.2f | %.0f | %.2f | %s |\n", w.name, o.n, m.Seconds(), rate, rate/river, cpu)
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
		return measure{}, errors.New("River did not work the jobs within 10 minutes")
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
	name, drop, err := schema(ctx, o.url, "bench_fr")
	if err != nil {
		return measure{}, err
	}
	defer drop()
	sep := "?"
	if strings.Contains(o.url, "?") {
		sep = "&"
	}
	dsn := fmt.Sprintf("%s%sschema=%s&pool_max_conns=%d", o.url, sep, name, o.workers+1)
	q, err := fairrelay.Open(ctx, dsn, fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		return measure{}, err
	}
	defer q.Close()
	body := []byte(`{"delta":1}`)

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
		for i := 0; i < o.n; i += o.batch {
			ps := make([]fairrelay.EnqueueParams, 0, o.batch)
			for j := i; j < min(i+o.batch, o.n); j++ {
				ps = append(ps, fairrelay.EnqueueParams{ID: fmt.Sprintf("e%07d", j), Flow: flowOf(j), Body: body})
			}
			if _, err := q.EnqueueBatch(ctx, 0, ps); err != nil {
				fail(err)
				return
			}
		}
	}()
	for range o.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A worker's loop step settles what it delivered and claims the
			// next heads: in one transaction (SettleAndClaim), or with
			// -split in two (SettleBatch, then ClaimBatch), as the relay's
			// workers do. Everything at tick 0: a no-op sink answers at
			// once, so no lease runs out.
			var ps []fairrelay.SettleParams
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
						rs, err = q.SettleBatch(ctx, 0, ps)
						if err == nil {
							var done bool
							if done, err = settled(rs); done || err != nil {
								fail(err)
								return
							}
						}
					}
					if err == nil && k > 0 {
						cs, err = q.ClaimBatch(ctx, 0, k)
					}
				} else {
					rs, cs, err = q.SettleAndClaim(ctx, 0, ps, k)
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
					ps = append(ps, fairrelay.SettleParams{Token: c.Token, Outcome: fairrelay.OutcomeAccepted})
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
