// Command watermill compares fairrelay's outbox with Watermill's SQL
// Pub/Sub (github.com/ThreeDotsLabs/watermill-sql/v4) on the same
// PostgreSQL server, end to end, in one run (issue 14):
//
//   - the application: -publishers goroutines, each running business
//     transactions one after the other until -n are committed. A
//     transaction picks one of -flows accounts at random, updates its row
//     (UPDATE … SET version = version + 1 RETURNING version) and publishes
//     one event {"flow", "version"} inside the same transaction, then
//     commits. The account row's lock orders the transactions of one flow:
//     version order is commit order.
//   - Watermill: the publisher on the transaction (sql.TxFromPgx), the
//     "exactly once, guaranteed order" setup of watermill-sql —
//     DefaultPostgreSQLSchema with DefaultPostgreSQLOffsetsAdapter — one
//     topic, the flow in the payload (a per-flow key), one subscriber
//     (consumer group "bench") acking each message as it checks it.
//   - fairrelay: EnqueueTx to the account's flow inside the transaction,
//     and the relay daemon (package relay, -relay-workers deliveries at
//     once, the daemon's policy) delivering to an in-process sink that
//     checks the order and accepts.
//
// Both consumers check, per flow, that versions arrive in increasing
// order: an event that arrives after a later version of its flow is an
// order violation (reported per 10 000 events); a version seen twice is a
// duplicate. The clock runs from the first publish to the last event
// received; the workloads take turns for -rounds rounds and each reports
// its median.
//
// It lives in the bench module, beside the River comparison, so that the
// main module does not depend on Watermill:
//
//	cd bench && go run ./watermill -rounds 3
//
// Every workload runs in fresh schemas, dropped at the end.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fairrelay/fairrelay/internal/harness/outboxbench"
)

func main() {
	var o options
	flag.StringVar(&o.url, "pg", outboxbench.DefaultPG(), "PostgreSQL URL (a server on this machine)")
	flag.IntVar(&o.n, "n", 10000, "events (business transactions) per workload")
	flag.IntVar(&o.publishers, "publishers", 8, "publisher goroutines, each running one business transaction at a time")
	flag.IntVar(&o.flows, "flows", 100, "flows (accounts)")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds; each workload reports its median")
	flag.IntVar(&o.relayWorkers, "relay-workers", 100, "fairrelay: the relay's deliveries at once")
	flag.DurationVar(&o.poll, "poll", 10*time.Millisecond, "Watermill: the subscriber's PollInterval (its wait after finding nothing; its default is 1s)")
	flag.IntVar(&o.batch, "batch", 0, "Watermill: SubscribeBatchSize (0: its default, 100)")
	flag.StringVar(&o.only, "only", "", "run only these workloads, comma-separated: watermill, fairrelay (the default: both), and the ceilings with no consumer (ceiling.go): watermill-publish, fairrelay-publish, bare-publish, lock-insert-publish, plain-publish; and the probe lease-floor (floor.go)")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up on a workload whose events have not all arrived by then")
	flag.Parse()
	if !strings.HasPrefix(o.url, "postgres://") && !strings.HasPrefix(o.url, "postgresql://") {
		fmt.Fprintf(os.Stderr, "watermill: -pg: want a postgres:// URL of a server on this machine, got %q\n", o.url)
		os.Exit(2)
	}
	if _, err := run(context.Background(), o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "watermill:", err)
		os.Exit(1)
	}
}

type options struct {
	url                                               string
	n, publishers, flows, rounds, relayWorkers, batch int
	poll, timeout                                     time.Duration
	only                                              string
}

// workload is one system's run of the application, by its -only key.
type workload struct {
	key, name string
	run       func() (measure, error)
	ceiling   bool // no consumer: nothing received, no order to check
}

// summary is one workload's medians over the rounds.
type summary struct {
	key, name             string
	ceiling               bool
	elapsed, publish      time.Duration // end to end; until the last commit
	violations, dups      int           // of the median round (by elapsed)
	perS, publishPerS     float64
	violationsPer10k      float64
	ratio                 float64 // perS ÷ Watermill's; 0 without Watermill
	worstViolationsPer10k float64 // the largest over the rounds, per 10 000
}

func run(ctx context.Context, o options, w io.Writer) ([]summary, error) {
	if o.n < 1 || o.publishers < 1 || o.flows < 1 || o.rounds < 1 || o.relayWorkers < 1 {
		return nil, errors.New("-n, -publishers, -flows, -rounds and -relay-workers must be positive")
	}
	all := []workload{
		{"watermill", "Watermill SQL (DefaultPostgreSQLSchema + DefaultPostgreSQLOffsetsAdapter)", func() (measure, error) { return benchWatermill(ctx, o) }, false},
		{"fairrelay", "fairrelay (EnqueueTx + the relay)", func() (measure, error) { return benchFairrelay(ctx, o) }, false},
	}
	workloads := all
	all = append(all, ceilingWorkloads(ctx, o)...)
	if o.only != "" {
		workloads = nil
		for _, k := range strings.Split(o.only, ",") {
			i := slices.IndexFunc(all, func(w workload) bool { return w.key == strings.TrimSpace(k) })
			if i < 0 {
				keys := make([]string, len(all))
				for j, w := range all {
					keys[j] = w.key
				}
				return nil, fmt.Errorf("-only: unknown workload %q (want one of %s)", k, strings.Join(keys, ", "))
			}
			workloads = append(workloads, all[i])
		}
	}
	wmBatch := o.batch
	if wmBatch == 0 {
		wmBatch = 100
	}
	fmt.Fprintf(w, "watermill: n=%d publishers=%d flows=%d rounds=%d; %s; Watermill: one topic, PollInterval %v, SubscribeBatchSize %d; fairrelay relay Workers=%d; GOMAXPROCS=%d\n",
		o.n, o.publishers, o.flows, o.rounds, versions(), o.poll, wmBatch, o.relayWorkers, runtime.GOMAXPROCS(0))
	fmt.Fprintf(w, "machine: %s\n", strings.Join(outboxbench.Describe(ctx, o.url), "; "))
	ms := make([][]measure, len(workloads))
	for r := range o.rounds {
		// Take turns, the first one alternating, so that a change in the
		// machine's load hits both alike.
		order := make([]int, len(workloads))
		for i := range order {
			order[i] = i
		}
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, i := range order {
			m, err := workloads[i].run()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", workloads[i].key, err)
			}
			ms[i] = append(ms[i], m)
			if workloads[i].ceiling {
				fmt.Fprintf(w, "round %d: %-19s %7.2f s to the last commit (%6.0f commits/s), no consumer\n",
					r+1, workloads[i].key, m.publish.Seconds(), float64(o.n)/m.publish.Seconds())
				continue
			}
			fmt.Fprintf(w, "round %d: %-19s %7.2f s end to end (%6.0f events/s), commits done at %6.2f s; %d order violations, %d duplicates\n",
				r+1, workloads[i].key, m.elapsed.Seconds(), float64(o.n)/m.elapsed.Seconds(), m.publish.Seconds(), m.violations, m.dups)
		}
	}
	var out []summary
	wm := 0.0
	for i, wl := range workloads {
		sorted := slices.SortedFunc(slices.Values(ms[i]), func(a, b measure) int { return cmp.Compare(a.elapsed, b.elapsed) })
		med := sorted[len(sorted)/2]
		pubs := slices.SortedFunc(slices.Values(ms[i]), func(a, b measure) int { return cmp.Compare(a.publish, b.publish) })
		s := summary{key: wl.key, name: wl.name, ceiling: wl.ceiling, elapsed: med.elapsed, publish: pubs[len(pubs)/2].publish,
			violations: med.violations, dups: med.dups}
		s.perS = float64(o.n) / s.elapsed.Seconds()
		s.publishPerS = float64(o.n) / s.publish.Seconds()
		s.violationsPer10k = float64(med.violations) * 10000 / float64(o.n)
		for _, m := range ms[i] {
			s.worstViolationsPer10k = max(s.worstViolationsPer10k, float64(m.violations)*10000/float64(o.n))
		}
		if wl.key == "watermill" {
			wm = s.perS
		}
		out = append(out, s)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| system | events | median s end to end | events/s end to end | × Watermill | commits/s (publishers alone) | order violations per 10 000 (median round; worst) | duplicates |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|")
	for i := range out {
		s := &out[i]
		ratio := "–"
		if wm > 0 {
			s.ratio = s.perS / wm
			ratio = fmt.Sprintf("%.2f", s.ratio)
		}
		order, dups := fmt.Sprintf("%.1f; %.1f", s.violationsPer10k, s.worstViolationsPer10k), fmt.Sprint(s.dups)
		if s.ceiling {
			order, dups = "–", "–"
		}
		fmt.Fprintf(w, "| %s | %d | %.2f | %.0f | %s | %.0f | %s | %s |\n",
			s.name, o.n, s.elapsed.Seconds(), s.perS, ratio, s.publishPerS, order, dups)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Target (issue 14, after the store's rewrite): fairrelay ≥ 1 × Watermill's events/s, with 0 order violations.")
	return out, nil
}

// versions names the Watermill modules this binary was built with.
func versions() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "versions unknown"
	}
	var vs []string
	for _, d := range bi.Deps {
		if strings.HasPrefix(d.Path, "github.com/ThreeDotsLabs/watermill") || d.Path == "github.com/jackc/pgx/v5" {
			vs = append(vs, strings.TrimPrefix(d.Path, "github.com/")+" "+d.Version)
		}
	}
	slices.Sort(vs)
	return strings.Join(vs, ", ")
}

// measure is one timed run of a workload.
type measure struct {
	elapsed    time.Duration // from the first publish to the last event received
	publish    time.Duration // from the first publish to the last commit
	violations int
	dups       int
}

// checker is the consumer's order check, per flow.
type checker struct {
	mu         sync.Mutex
	n          int
	last       map[string]int64 // the highest version received, per flow
	seen       map[string]bool  // flow/version
	received   int
	violations int
	dups       int
	lastAt     time.Time
	done       chan struct{}
}

func newChecker(n int) *checker {
	return &checker{n: n, last: map[string]int64{}, seen: map[string]bool{}, done: make(chan struct{})}
}

// payload is an event's body: the account (flow) and its version after the
// transaction's update.
type payload struct {
	Flow    string `json:"flow"`
	Version int64  `json:"version"`
}

// observe checks one received event's body.
func (c *checker) observe(body []byte, at time.Time) error {
	var p payload
	if err := json.Unmarshal(body, &p); err != nil {
		return fmt.Errorf("event body %q: %w", body, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	key := fmt.Sprintf("%s/%d", p.Flow, p.Version)
	if c.seen[key] {
		c.dups++
		return nil
	}
	c.seen[key] = true
	if p.Version < c.last[p.Flow] {
		c.violations++ // a later version of its flow came first
	} else {
		c.last[p.Flow] = p.Version
	}
	c.received++
	if c.received == c.n {
		c.lastAt = at
		close(c.done)
	}
	return nil
}

// measure is the run's figures once every event arrived.
func (c *checker) measure(start, last time.Time, publish time.Duration) measure {
	c.mu.Lock()
	defer c.mu.Unlock()
	return measure{elapsed: last.Sub(start), publish: publish, violations: c.violations, dups: c.dups}
}

// wait waits for all n events; it returns the time the last came.
func (c *checker) wait(ctx context.Context, timeout time.Duration, failed <-chan error) (time.Time, error) {
	select {
	case <-c.done:
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.lastAt, nil
	case err := <-failed:
		return time.Time{}, err
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	case <-time.After(timeout):
		c.mu.Lock()
		defer c.mu.Unlock()
		return time.Time{}, fmt.Errorf("%d of %d events received within %v", c.received, c.n, timeout)
	}
}

// business creates a fresh schema with the accounts table (flows rows,
// acct-0 …) and returns a pool whose connections work in it, and a cleanup.
func business(ctx context.Context, o options) (*pgxpool.Pool, func(), error) {
	schema := outboxbench.RandomName("bench_wm")
	sch := pgx.Identifier{schema}.Sanitize()
	if err := outboxbench.PgExec(ctx, o.url, fmt.Sprintf(`CREATE SCHEMA %s; SET search_path = %s;
CREATE TABLE accounts (id TEXT PRIMARY KEY, balance BIGINT NOT NULL DEFAULT 0, version BIGINT NOT NULL DEFAULT 0);
INSERT INTO accounts (id) SELECT 'acct-' || g FROM generate_series(0, %d) g`, sch, sch, o.flows-1)); err != nil {
		outboxbench.DropSchema(ctx, o.url, schema)
		return nil, nil, err
	}
	appURL, err := outboxbench.WithParams(o.url, "search_path", schema)
	if err == nil {
		var cfg *pgxpool.Config
		if cfg, err = pgxpool.ParseConfig(appURL); err == nil {
			cfg.MaxConns = int32(o.publishers + 2)
			var pool *pgxpool.Pool
			if pool, err = pgxpool.NewWithConfig(ctx, cfg); err == nil {
				return pool, func() { pool.Close(); outboxbench.DropSchema(ctx, o.url, schema) }, nil
			}
		}
	}
	outboxbench.DropSchema(ctx, o.url, schema)
	return nil, nil, err
}

// publishAll runs the publishers until o.n transactions have committed:
// each updates a random account's row and publishes its event inside the
// same transaction. It returns when the last commit is done. A
// transaction that fails is retried (up to 5 times).
func publishAll(ctx context.Context, o options, pool *pgxpool.Pool, publish func(ctx context.Context, tx pgx.Tx, flow string, version int64, body []byte) error) error {
	var next atomic.Int64
	errs := make(chan error, o.publishers)
	for p := range o.publishers {
		go func() {
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(p)))
			for next.Add(1) <= int64(o.n) {
				flow := fmt.Sprintf("acct-%d", rng.IntN(o.flows))
				var err error
				for range 5 {
					err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						var v int64
						if err := tx.QueryRow(ctx, `UPDATE accounts SET balance = balance + 1, version = version + 1 WHERE id = $1 RETURNING version`, flow).Scan(&v); err != nil {
							return err
						}
						body, err := json.Marshal(payload{Flow: flow, Version: v})
						if err != nil {
							return err
						}
						return publish(ctx, tx, flow, v, body)
					})
					if err == nil || ctx.Err() != nil {
						break
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	var first error
	for range o.publishers {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

const topic = "bench_events"

func benchWatermill(ctx context.Context, o options) (measure, error) {
	pool, cleanup, err := business(ctx, o)
	if err != nil {
		return measure{}, err
	}
	defer cleanup()
	sub, err := watermillSubscriber(pool, o)
	if err != nil {
		return measure{}, err
	}
	defer sub.Close()
	subCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	msgs, err := sub.Subscribe(subCtx, topic) // creates the tables, then consumes
	if err != nil {
		return measure{}, err
	}
	check := newChecker(o.n)
	failed := make(chan error, 2)
	go func() {
		for m := range msgs {
			if err := check.observe(m.Payload, time.Now()); err != nil {
				select {
				case failed <- err:
				default:
				}
			}
			m.Ack()
		}
	}()

	start := time.Now()
	published := publishing(ctx, o, pool, start, failed, watermillPublish(o))
	last, err := check.wait(ctx, o.timeout, failed)
	if err != nil {
		return measure{}, err
	}
	return check.measure(start, last, <-published), nil
}

// watermillSubscriber is the subscriber of the "exactly once, guaranteed
// order" setup, its tables made on first use.
func watermillSubscriber(pool *pgxpool.Pool, o options) (*wsql.Subscriber, error) {
	return wsql.NewSubscriber(wsql.BeginnerFromPgx(pool), wsql.SubscriberConfig{
		ConsumerGroup:    "bench",
		SchemaAdapter:    wsql.DefaultPostgreSQLSchema{SubscribeBatchSize: o.batch},
		OffsetsAdapter:   wsql.DefaultPostgreSQLOffsetsAdapter{},
		InitializeSchema: true,
		PollInterval:     o.poll,
	}, watermill.NopLogger{})
}

// watermillPublish publishes one event inside the business transaction:
// a publisher per transaction, watermill-sql's way of publishing inside
// the caller's transaction, the flow in the metadata.
func watermillPublish(o options) func(ctx context.Context, tx pgx.Tx, flow string, _ int64, body []byte) error {
	schema := wsql.DefaultPostgreSQLSchema{SubscribeBatchSize: o.batch}
	return func(ctx context.Context, tx pgx.Tx, flow string, _ int64, body []byte) error {
		pub, err := wsql.NewPublisher(wsql.TxFromPgx(tx), wsql.PublisherConfig{SchemaAdapter: schema}, watermill.NopLogger{})
		if err != nil {
			return err
		}
		msg := message.NewMessage(watermill.NewUUID(), body)
		msg.Metadata.Set("flow", flow)
		msg.SetContext(ctx)
		return pub.Publish(topic, msg)
	}
}

// businessAndQueue is business and a fairrelay store in a fresh schema of
// its own; cleanup closes both and drops their schemas.
func businessAndQueue(ctx context.Context, o options) (pool *pgxpool.Pool, ob *outboxbench.Outbox, schema string, cleanup func(), err error) {
	pool, dropBusiness, err := business(ctx, o)
	if err != nil {
		return nil, nil, "", nil, err
	}
	schema = outboxbench.RandomName("bench_wmq")
	dsn, err := outboxbench.WithParams(o.url, "schema", schema)
	if err == nil {
		ob, err = outboxbench.OpenOutbox(ctx, dsn)
	}
	if err != nil {
		outboxbench.DropSchema(ctx, o.url, schema)
		dropBusiness()
		return nil, nil, "", nil, err
	}
	return pool, ob, schema, func() { ob.Close(); outboxbench.DropSchema(ctx, o.url, schema); dropBusiness() }, nil
}

func benchFairrelay(ctx context.Context, o options) (measure, error) {
	pool, ob, _, cleanup, err := businessAndQueue(ctx, o)
	if err != nil {
		return measure{}, err
	}
	defer cleanup()
	check := newChecker(o.n)
	failed := make(chan error, 2)
	stop, err := ob.StartRelay(ctx, outboxbench.RelayOptions{Workers: o.relayWorkers, Deliver: func(d outboxbench.Delivered) {
		if err := check.observe(d.Body, d.At); err != nil {
			select {
			case failed <- err:
			default:
			}
		}
	}})
	if err != nil {
		return measure{}, err
	}
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()

	start := time.Now()
	published := publishing(ctx, o, pool, start, failed, func(ctx context.Context, tx pgx.Tx, flow string, version int64, body []byte) error {
		return ob.EnqueuePgx(ctx, tx, fmt.Sprintf("%s-%d", flow, version), flow, body)
	})
	last, err := check.wait(ctx, o.timeout, failed)
	if err != nil {
		return measure{}, err
	}
	m := check.measure(start, last, <-published)
	stopped = true
	if err := stop(); err != nil {
		return measure{}, fmt.Errorf("relay: %w", err)
	}
	return m, nil
}

// publishing runs publishAll in a goroutine; the channel it returns gets
// the time from start to the last commit (a failure goes to failed).
func publishing(ctx context.Context, o options, pool *pgxpool.Pool, start time.Time, failed chan<- error,
	publish func(ctx context.Context, tx pgx.Tx, flow string, version int64, body []byte) error) <-chan time.Duration {
	done := make(chan time.Duration, 1)
	go func() {
		err := publishAll(ctx, o, pool, publish)
		done <- time.Since(start)
		if err != nil {
			select {
			case failed <- err:
			default:
			}
		}
	}()
	return done
}
