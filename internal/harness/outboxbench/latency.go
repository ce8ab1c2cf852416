package outboxbench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fairrelay/fairrelay/internal/errs"
)

// LatencyOptions configure RunLatency.
type LatencyOptions struct {
	// PG is the URL of a PostgreSQL server on this machine; "" skips
	// PostgreSQL. SQLiteDir is where the SQLite file goes; "" skips SQLite.
	PG, SQLiteDir string
	// Rates lists the producer's rates, in events per second. Defaults to
	// 2 and 500.
	Rates []float64
	// Duration is how long the producer runs at each rate, at least;
	// MinEvents is how many events it sends at each rate, at least (so a
	// slow rate runs longer). Default 5s and 200: the p99 of 200 (nearest
	// rank) is the third-worst event, where the p99 of 40 would be the
	// worst alone.
	Duration  time.Duration
	MinEvents int
	// Idle is how long the idle relay's CPU is measured. Defaults to 10s.
	Idle time.Duration
	// RelayWorkers is the relay's deliveries at once. Defaults to 8.
	RelayWorkers int
	// Flows is how many flows the producer's events rotate over. Defaults
	// to 100.
	Flows int
	// ProducerConns is how many transactions the producer has open at
	// once at most. Defaults to 4.
	ProducerConns int
	// Producer returns the command that runs Produce in another OS process
	// with these arguments (the benchmark's binary re-executed, for
	// example `fairrelay bench outbox-producer ARGS…`). Required.
	Producer func(ctx context.Context, args []string) *exec.Cmd
	// Stderr receives the producer's standard error; nil discards it.
	Stderr io.Writer
	// Progress, when set, is told what runs next.
	Progress func(string)
}

func (o *LatencyOptions) defaults() {
	if len(o.Rates) == 0 {
		o.Rates = []float64{2, 500}
	}
	if o.Duration == 0 {
		o.Duration = 5 * time.Second
	}
	if o.MinEvents == 0 {
		o.MinEvents = 200
	}
	if o.Idle == 0 {
		o.Idle = 10 * time.Second
	}
	if o.RelayWorkers == 0 {
		o.RelayWorkers = 8
	}
	if o.Flows == 0 {
		o.Flows = 100
	}
	if o.ProducerConns == 0 {
		o.ProducerConns = 4
	}
}

func (o *LatencyOptions) validate() error {
	for _, r := range o.Rates {
		if !(r > 0 && r <= 100000) {
			return fmt.Errorf("rates: %v is not in (0, 100000] events/s", r)
		}
	}
	switch {
	case o.Producer == nil:
		return errors.New("producer: missing")
	case o.Duration < 0 || o.MinEvents < 1 || o.Idle < 0:
		return errors.New("duration, events, idle: must be positive")
	case o.Flows < 1 || o.ProducerConns < 1 || o.RelayWorkers < 1:
		return errors.New("flows, producer connections, relay workers: must be positive")
	case o.PG == "" && o.SQLiteDir == "":
		return errors.New("no backend: give a PostgreSQL URL or a SQLite directory")
	}
	return nil
}

// LatencyResult is the enqueue-to-delivery latency at one rate: from the
// moment the producer (another OS process) wrote the event's body, just
// before its EnqueueTx and commit, to the moment the relay's sink received
// it, both read from the machine's wall clock.
type LatencyResult struct {
	Backend  string  `json:"backend"`
	RatePerS float64 `json:"rate_per_s"`
	// Sent is what the producer committed, AchievedPerS its rate, and
	// MaxLagMS how far behind its schedule it fell at worst (a producer
	// that cannot keep the rate sends late, and says so here).
	Sent         int     `json:"sent"`
	AchievedPerS float64 `json:"achieved_per_s"`
	MaxLagMS     float64 `json:"producer_max_lag_ms"`
	// Delivered is how many of them reached the sink within the wait after
	// the producer ended (the latencies are theirs).
	Delivered int     `json:"delivered"`
	P50MS     float64 `json:"p50_ms"`
	P90MS     float64 `json:"p90_ms"`
	P99MS     float64 `json:"p99_ms"`
	MaxMS     float64 `json:"max_ms"`
	// The same deliveries' latency from the moment the producer's commit
	// returned (its wall clock, right after COMMIT): the relay's part
	// alone, without the producer's EnqueueTx and commit (whose fsync the
	// figures above include). Slightly negative when the sink saw an
	// event before the producer's COMMIT returned to it.
	FromCommitP50MS float64 `json:"from_commit_p50_ms"`
	FromCommitP90MS float64 `json:"from_commit_p90_ms"`
	FromCommitP99MS float64 `json:"from_commit_p99_ms"`
	FromCommitMaxMS float64 `json:"from_commit_max_ms"`
	// ProducerErrors counts the producer's failed transactions.
	ProducerErrors int    `json:"producer_errors"`
	FirstError     string `json:"first_error,omitempty"`
}

// IdleResult is the CPU an idle relay used: the relay's process (the
// target's figure) and, on PostgreSQL, the server's processes serving the
// relay's connections.
type IdleResult struct {
	Backend         string  `json:"backend"`
	Seconds         float64 `json:"seconds"`
	RelayCPUPercent float64 `json:"relay_cpu_percent_of_one_core"`
	// ServerCPUPercent is nil when not measured (SQLite has no server).
	ServerCPUPercent *float64 `json:"server_cpu_percent_of_one_core,omitempty"`
	Note             string   `json:"note,omitempty"`
}

// RunLatency runs, per backend, a relay with a no-op sink on a fresh store:
// first idle for opts.Idle (after a second to settle), then for each rate
// a producer process that commits business transactions with EnqueueTx at
// that rate while the relay delivers them.
func RunLatency(ctx context.Context, opts LatencyOptions) ([]LatencyResult, []IdleResult, error) {
	opts.defaults()
	if err := opts.validate(); err != nil {
		return nil, nil, err
	}
	var lat []LatencyResult
	var idle []IdleResult
	for _, backend := range []string{BackendPostgres, BackendSQLite} {
		if (backend == BackendPostgres && opts.PG == "") || (backend == BackendSQLite && opts.SQLiteDir == "") {
			continue
		}
		l, i, err := runLatencyBackend(ctx, backend, opts)
		lat = append(lat, l...)
		if i != nil {
			idle = append(idle, *i)
		}
		if err != nil {
			return lat, idle, fmt.Errorf("%s: %w", backend, err)
		}
	}
	return lat, idle, nil
}

func runLatencyBackend(ctx context.Context, backend string, opts LatencyOptions) ([]LatencyResult, *IdleResult, error) {
	var relayDSN, appName string
	prod := ProducerOptions{Backend: backend, Flows: opts.Flows, Conns: opts.ProducerConns}
	if backend == BackendPostgres {
		appURL, dropApp, err := pgBusiness(ctx, opts.PG)
		if err != nil {
			return nil, nil, err
		}
		defer dropApp()
		dsn, name, dropQueue, err := pgQueue(ctx, opts.PG)
		if err != nil {
			return nil, nil, err
		}
		defer dropQueue()
		relayDSN, appName = dsn, name
		if prod.Queue, err = WithParams(dsn, "application_name", "fairrelay_bench_producer"); err != nil {
			return nil, nil, err
		}
		prod.App = appURL
	} else {
		path := sqlitePath(opts.SQLiteDir, "bench-latency")
		defer removeSQLite(path)
		relayDSN, prod.Queue = path, path
	}
	ob, err := OpenOutbox(ctx, relayDSN)
	if err != nil {
		return nil, nil, err
	}
	defer ob.Close()
	if backend == BackendSQLite {
		if err := sqliteBusiness(ctx, relayDSN); err != nil {
			return nil, nil, err
		}
	}
	rec := &recorder{at: map[string]time.Time{}, lat: map[string][]time.Duration{}}
	stop, err := ob.StartRelay(ctx, RelayOptions{Workers: opts.RelayWorkers, Deliver: rec.deliver})
	if err != nil {
		return nil, nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()

	// The idle relay: a second to settle, then its CPU over opts.Idle.
	if opts.Progress != nil {
		opts.Progress(fmt.Sprintf("%s: the idle relay's CPU for %v", backend, opts.Idle))
	}
	sleep(ctx, time.Second)
	idle := &IdleResult{Backend: backend, Seconds: opts.Idle.Seconds()}
	var sm *serverMeter
	if backend == BackendPostgres {
		if sm, err = startServerMeter(ctx, opts.PG, appName); err != nil {
			idle.Note = "server CPU not measured: " + errorText(err)
		}
	}
	cpu0, t0 := selfCPU(), time.Now()
	sleep(ctx, opts.Idle)
	wall := time.Since(t0)
	idle.RelayCPUPercent = 100 * float64(selfCPU()-cpu0) / float64(wall)
	if sm != nil {
		if used, err := sm.used(); err == nil {
			v := 100 * float64(used) / float64(wall)
			idle.ServerCPUPercent = &v
		} else {
			idle.Note = "server CPU not measured: " + errorText(err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, idle, err
	}

	var out []LatencyResult
	for k, rate := range opts.Rates {
		p := prod
		p.Rate = rate
		p.Count = max(opts.MinEvents, int(math.Round(rate*opts.Duration.Seconds())))
		p.Prefix = fmt.Sprintf("L%d", k)
		if opts.Progress != nil {
			opts.Progress(fmt.Sprintf("%s: %d events at %g/s from another process", backend, p.Count, rate))
		}
		rep, release, err := runProducer(ctx, opts, p)
		if err != nil {
			return out, idle, err
		}
		// Wait for the deliveries of what was committed, then let the
		// producer go.
		deadline := time.Now().Add(30 * time.Second)
		for rec.count(p.Prefix) < rep.Sent && time.Now().Before(deadline) && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
		}
		if err := release(); err != nil {
			return out, idle, err
		}
		if rep.Sent == 0 {
			return out, idle, fmt.Errorf("the producer committed nothing: %s", rep.FirstError)
		}
		ls := rec.take(p.Prefix)
		res := LatencyResult{
			Backend: backend, RatePerS: rate, Sent: rep.Sent, AchievedPerS: float64(rep.Sent) / rep.ElapsedS,
			MaxLagMS: rep.MaxLagMS, Delivered: len(ls), ProducerErrors: rep.Errors, FirstError: rep.FirstError,
		}
		if len(ls) > 0 {
			slices.Sort(ls)
			res.P50MS, res.P90MS, res.P99MS = ms(Percentile(ls, 50)), ms(Percentile(ls, 90)), ms(Percentile(ls, 99))
			res.MaxMS = ms(ls[len(ls)-1])
		}
		if fc := rec.fromCommit(rep.Committed); len(fc) > 0 {
			slices.Sort(fc)
			res.FromCommitP50MS, res.FromCommitP90MS, res.FromCommitP99MS = ms(Percentile(fc, 50)), ms(Percentile(fc, 90)), ms(Percentile(fc, 99))
			res.FromCommitMaxMS = ms(fc[len(fc)-1])
		}
		out = append(out, res)
	}
	stopped = true
	if err := stop(); err != nil {
		return out, idle, fmt.Errorf("relay: %w", err)
	}
	if rec.bad > 0 {
		return out, idle, fmt.Errorf("%d deliveries without a send time in their body", rec.bad)
	}
	return out, idle, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Percentile returns the p-th percentile (nearest rank) of sorted, which
// must not be empty.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// recorder keeps the latency of every first delivery, by the producer run
// (the id's prefix) it belongs to, and the time of every first delivery by
// id.
type recorder struct {
	mu  sync.Mutex
	at  map[string]time.Time
	lat map[string][]time.Duration
	bad int
}

func (r *recorder) deliver(d Delivered) {
	sent, ok := sentTime(d.Body)
	run, _, _ := strings.Cut(strings.TrimPrefix(d.ID, "order-"), "-")
	r.mu.Lock()
	defer r.mu.Unlock()
	if !ok {
		r.bad++
		return
	}
	if _, seen := r.at[d.ID]; seen {
		return // a redelivery: the first one counts
	}
	r.at[d.ID] = d.At
	r.lat[run] = append(r.lat[run], d.At.Sub(sent))
}

func (r *recorder) count(run string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.lat[run])
}

// fromCommit returns, for every id of committed (unix nanoseconds of the
// moment its commit returned) that was delivered, the time from that
// moment to its first delivery.
func (r *recorder) fromCommit(committed map[string]int64) []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []time.Duration
	for id, ns := range committed {
		if at, ok := r.at[id]; ok {
			out = append(out, at.Sub(time.Unix(0, ns)))
		}
	}
	return out
}

func (r *recorder) take(run string) []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lat[run])
}

// sentTime reads "sent_unix_ns" from an order body (orderBody).
func sentTime(body []byte) (time.Time, bool) {
	const key = `"sent_unix_ns":`
	i := bytes.Index(body, []byte(key))
	if i < 0 {
		return time.Time{}, false
	}
	rest := body[i+len(key):]
	j := bytes.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if j < 0 {
		j = len(rest)
	}
	ns, err := strconv.ParseInt(string(rest[:j]), 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}

// runProducer starts the producer process and reads its report, written
// once its transactions have ended. The producer then holds its connections
// open (ProducerOptions.Hold) until release closes its standard input;
// release waits for it to exit and returns its error.
func runProducer(ctx context.Context, opts LatencyOptions, p ProducerOptions) (rep ProducerReport, release func() error, err error) {
	cmd := opts.Producer(ctx, p.Args())
	cmd.Stderr = opts.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return rep, nil, fmt.Errorf("producer process: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return rep, nil, fmt.Errorf("producer process: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return rep, nil, fmt.Errorf("producer process: %w", err)
	}
	release = func() error {
		stdin.Close()
		rest, _ := io.ReadAll(stdout)
		if err := cmd.Wait(); err != nil {
			return fmt.Errorf("producer process: %w (%s)", err, strings.TrimSpace(string(rest)))
		}
		return nil
	}
	line, readErr := bufio.NewReader(stdout).ReadBytes('\n')
	if err := json.Unmarshal(line, &rep); err != nil {
		if werr := release(); werr != nil {
			return rep, nil, werr
		}
		return rep, nil, fmt.Errorf("producer process: its report %q: %w", line, errs.Join(err, readErr))
	}
	return rep, release, nil
}

// ProducerOptions configure Produce, the producer process of RunLatency.
type ProducerOptions struct {
	// Backend is BackendPostgres or BackendSQLite.
	Backend string
	// Queue is the queue store's DSN: the SQLite file (which also holds the
	// business tables), or a postgres:// URL with schema=NAME.
	Queue string
	// App is, on PostgreSQL, the URL of the business tables' database
	// (search_path=THEIR_SCHEMA); unused on SQLite.
	App string
	// Rate is events per second; Count how many to send.
	Rate  float64
	Count int
	// Flows is how many flows the events rotate over; Conns how many
	// transactions may be open at once.
	Flows, Conns int
	// Prefix starts every order id.
	Prefix string
	// Hold, when set, receives the report once every transaction has ended
	// and returns when the producer may close its connections and leave.
	// The benchmark's producer process writes the report to its standard
	// output there and waits for the parent to close its standard input,
	// which the parent does after it counted the deliveries: an
	// application keeps its process and connections, and a producer that
	// tore them down at once would put that work (its server processes'
	// exit included) beside the relay's delivery of the last events.
	Hold func(ProducerReport) error
}

// Args returns the command-line arguments that carry o to the producer
// process: --NAME VALUE for every field, the names ProducerFlags lists.
func (o ProducerOptions) Args() []string {
	return []string{
		"--backend", o.Backend, "--queue", o.Queue, "--app", o.App,
		"--rate", strconv.FormatFloat(o.Rate, 'g', -1, 64), "--count", strconv.Itoa(o.Count),
		"--flows", strconv.Itoa(o.Flows), "--conns", strconv.Itoa(o.Conns), "--prefix", o.Prefix,
	}
}

// ProducerReport is what Produce reports, as one JSON line on its standard
// output.
type ProducerReport struct {
	Sent       int     `json:"sent"`
	Errors     int     `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	ElapsedS   float64 `json:"elapsed_s"`
	MaxLagMS   float64 `json:"max_lag_ms"`
	// Committed gives, by event id, the wall-clock time (unix
	// nanoseconds) at which its transaction's commit returned.
	Committed map[string]int64 `json:"committed_unix_ns,omitempty"`
}

// Produce is the producer process: it commits o.Count business
// transactions (an order and its event by EnqueueTx, event i on flow
// customer-(i mod Flows)), the i-th due at i/Rate seconds after the start,
// at most o.Conns at once, each event's body stamped with the wall-clock
// time just before its EnqueueTx.
func Produce(ctx context.Context, o ProducerOptions) (ProducerReport, error) {
	if o.Rate <= 0 || o.Count < 1 || o.Flows < 1 || o.Conns < 1 {
		return ProducerReport{}, errors.New("producer: rate, count, flows and conns must be positive")
	}
	ob, err := OpenOutbox(ctx, o.Queue)
	if err != nil {
		return ProducerReport{}, err
	}
	defer ob.Close()
	var a app
	switch o.Backend {
	case BackendPostgres:
		a, err = openPgApp(ctx, o.App, ob, o.Conns, nil)
	case BackendSQLite:
		a, err = openSQLiteApp(o.Queue, ob, o.Conns)
	default:
		err = fmt.Errorf("backend: %q is neither %s nor %s", o.Backend, BackendPostgres, BackendSQLite)
	}
	if err != nil {
		return ProducerReport{}, err
	}
	defer a.close()
	if err := warm(ctx, a, o.Conns, o.Prefix); err != nil {
		return ProducerReport{}, err
	}

	type job struct {
		i   int
		due time.Time
	}
	jobs := make(chan job)
	var (
		mu     sync.Mutex
		rep    = ProducerReport{Committed: map[string]int64{}}
		maxLag time.Duration
		wg     sync.WaitGroup
	)
	start := time.Now()
	for range o.Conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				lag := time.Since(j.due)
				id := fmt.Sprintf("%s-%d", o.Prefix, j.i)
				flow := fmt.Sprintf("customer-%d", j.i%o.Flows)
				err := a.order(ctx, id, flow, func() []byte { return orderBody(id, flow, time.Now()) }, 0)
				committed := time.Now()
				mu.Lock()
				maxLag = max(maxLag, lag)
				if err != nil {
					rep.Errors++
					if rep.FirstError == "" {
						rep.FirstError = errorText(err)
					}
				} else {
					rep.Sent++
					rep.Committed["order-"+id] = committed.UnixNano()
				}
				mu.Unlock()
			}
		}()
	}
	for i := range o.Count {
		due := start.Add(time.Duration(float64(i) / o.Rate * float64(time.Second)))
		sleep(ctx, time.Until(due))
		if ctx.Err() != nil {
			break
		}
		jobs <- job{i, due} // waits while every connection is busy
	}
	close(jobs)
	wg.Wait()
	// n events at rate r span n/r seconds (the last is due 1/r before
	// that), so a producer on schedule achieves exactly r.
	rep.ElapsedS = max(time.Since(start).Seconds(), float64(o.Count)/o.Rate)
	rep.MaxLagMS = ms(maxLag)
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	if o.Hold != nil {
		if err := o.Hold(rep); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// warm commits warmRounds transactions on each of n connections (n at
// once) before the clock starts, so the latencies measured are not this
// process's first connections and prepared statements, nor the first calls
// of each connection to the enqueue function: PostgreSQL plans a PL/pgSQL
// statement afresh for its first five calls in a session (custom plans)
// before it settles on one, which costs a call over a millisecond more on
// this machine. Half the rounds start a flow and half append to one, the
// two ways of an enqueue. Their ids start with prefix + "w", a run of their
// own that the recorder keeps apart.
// warmRounds is how many transactions warm makes on each connection: past
// PostgreSQL's five custom plans on both ways of an enqueue.
const warmRounds = 12

func warm(ctx context.Context, a app, n int, prefix string) error {
	errs := make(chan error, n)
	for k := range n {
		go func() {
			for i := range warmRounds {
				id := fmt.Sprintf("%sw-%d-%d", prefix, k, i)
				flow := fmt.Sprintf("warm-up-%d-%d", k, i%(warmRounds/2))
				if err := a.order(ctx, id, flow, func() []byte { return orderBody(id, flow, time.Now()) }, 0); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	var first error
	for range n {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}
