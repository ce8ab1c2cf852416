package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/errs"
	"github.com/fairrelay/fairrelay/internal/harness/outboxbench"
	"github.com/fairrelay/fairrelay/relay"
	"github.com/fairrelay/fairrelay/sink/webhook"
)

// TimeFairOptions configure RunTimeFair: the case of issue 19 (SPEC §11,
// fair by worker time).
type TimeFairOptions struct {
	// Dir holds the SQLite queue stores of the one-relay runs; it must
	// exist.
	Dir string
	// PostgresURL is the server of the runs with more than one relay (a
	// fresh schema each, dropped at the end). Required when Relays lists
	// a count above 1.
	PostgresURL string
	// Relays lists the relay counts to measure. Defaults to 1, 2, 4. The
	// Slots are split evenly between the relays (8 slots: 8, 2 × 4,
	// 4 × 2), so that every run has the same slots.
	Relays []int
	// Slots is the delivery slots of all the relays together. Defaults to
	// 8; a multiple of every relay count.
	Slots int
	// SlowFlows and FastFlows are the flows, each its own group, whose
	// receiver takes SlowLatency and answers at once. Default 20 and 20.
	SlowFlows, FastFlows int
	// SlowLatency defaults to 2s.
	SlowLatency time.Duration
	// Warmup and Measure are the two parts of the run beside the slow
	// flows: deliveries are counted over Measure, after Warmup (every slow
	// group enters once at the floor, SPEC §11). Default 10s and 30s. The
	// other runs (the fast flows alone, the weights) warm up for 2s and
	// measure Measure/3.
	Warmup, Measure time.Duration
	// WeightLatency is the latency of the weighted run's groups (weights
	// 1, 2 and 5). Defaults to 50ms.
	WeightLatency time.Duration
	// Quantum is the relays' Config.Quantum (0: its default). A quantum
	// far longer than the run (1h) leaves no group out of a claim: the
	// slots go by claims, as before SPEC §11, for comparison.
	Quantum time.Duration
	// OnPhase, when set, is told the name of each run as it starts.
	OnPhase func(name string)
}

// TimeFairRow is one relay count's measurements.
type TimeFairRow struct {
	Relays int    `json:"relays"`
	Store  string `json:"store"`
	// FastAlone and FastBeside are the fast flows' deliveries per second,
	// alone and beside the slow flows; FastRatio is the second over the
	// first (target: at least 0.5).
	FastAlone  float64 `json:"fast_alone_per_s"`
	FastBeside float64 `json:"fast_beside_per_s"`
	FastRatio  float64 `json:"fast_ratio"`
	// Slow is the slow flows' deliveries per second beside the fast ones;
	// SlowFair is their fair share, half the slots over SlowLatency;
	// SlowRatio the first over the second (target: at least 0.8).
	Slow      float64 `json:"slow_per_s"`
	SlowFair  float64 `json:"slow_fair_per_s"`
	SlowRatio float64 `json:"slow_ratio"`
	// SlowSlots and FastSlots are the slots each side held on average
	// beside the other (slot time over the window, the relays' own
	// accounts: relay.Relay.GroupTimes).
	SlowSlots float64 `json:"slow_slots"`
	FastSlots float64 `json:"fast_slots"`
	// WeightShares are the slot-time shares of three groups of weights 1,
	// 2 and 5 at equal latency (targets 0.125, 0.25, 0.625);
	// WeightsWorst is the largest relative error (target: at most 0.2).
	WeightShares [3]float64 `json:"weight_shares"`
	WeightsWorst float64    `json:"weights_worst_error"`
}

// TimeFairReport is what RunTimeFair measured.
type TimeFairReport struct {
	Slots       int           `json:"slots"`
	SlowFlows   int           `json:"slow_flows"`
	FastFlows   int           `json:"fast_flows"`
	SlowLatency time.Duration `json:"slow_latency_ns"`
	Rows        []TimeFairRow `json:"rows"`
}

func (o TimeFairOptions) withDefaults() TimeFairOptions {
	if len(o.Relays) == 0 {
		o.Relays = []int{1, 2, 4}
	}
	orDefault(&o.Slots, 8)
	orDefault(&o.SlowFlows, 20)
	orDefault(&o.FastFlows, 20)
	orDefault(&o.SlowLatency, 2*time.Second)
	orDefault(&o.Warmup, 10*time.Second)
	orDefault(&o.Measure, 30*time.Second)
	orDefault(&o.WeightLatency, 50*time.Millisecond)
	if o.OnPhase == nil {
		o.OnPhase = func(string) {}
	}
	return o
}

// orDefault sets *p to v when it is the zero value.
func orDefault[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

// RunTimeFair measures, for each relay count, the fast flows alone, the
// fast flows beside the slow ones, and three weighted groups, each on a
// fresh store (SQLite for one relay, PostgreSQL for more), delivering to a
// receiver on loopback that sleeps its flows' latency. Errors: a bad
// option (ErrInvalidInput naming it), the store's, the receiver's.
func RunTimeFair(ctx context.Context, opts TimeFairOptions) (*TimeFairReport, error) {
	opts = opts.withDefaults()
	for _, n := range opts.Relays {
		switch {
		case n < 1 || opts.Slots%n != 0:
			return nil, fairrelay.InvalidInput("relays", "each must divide the slots (%d), got %d", opts.Slots, n)
		case n > 1 && opts.PostgresURL == "":
			return nil, fairrelay.InvalidInput("pg", "%d relays need a PostgreSQL server", n)
		}
	}
	rc, err := newLatencyReceiver(map[string]time.Duration{"slow": opts.SlowLatency, "w1": opts.WeightLatency, "w2": opts.WeightLatency, "w5": opts.WeightLatency})
	if err != nil {
		return nil, err
	}
	defer rc.close()
	rep := &TimeFairReport{Slots: opts.Slots, SlowFlows: opts.SlowFlows, FastFlows: opts.FastFlows, SlowLatency: opts.SlowLatency}
	short := opts.Measure / 3
	for _, n := range opts.Relays {
		row := TimeFairRow{Relays: n, Store: "sqlite"}
		if n > 1 {
			row.Store = "postgres"
		}
		// Enough for 3000 fast deliveries a second, the longest run.
		fast := []flowSet{{class: "fast", flows: opts.FastFlows, events: int(3000*(max(opts.Warmup, 2*time.Second)+opts.Measure).Seconds()) / opts.FastFlows}}
		opts.OnPhase(fmt.Sprintf("%d relay(s): fast flows alone", n))
		alone, err := timeFairRun(ctx, opts, rc, n, fast, nil, 2*time.Second, short)
		if err != nil {
			return nil, err
		}
		opts.OnPhase(fmt.Sprintf("%d relay(s): fast flows beside slow ones", n))
		slowEvents := int((opts.Warmup+opts.Measure)/opts.SlowLatency) + 2
		beside, err := timeFairRun(ctx, opts, rc, n, append(fast, flowSet{class: "slow", flows: opts.SlowFlows, events: slowEvents}), nil, opts.Warmup, opts.Measure)
		if err != nil {
			return nil, err
		}
		opts.OnPhase(fmt.Sprintf("%d relay(s): weights 1:2:5", n))
		perFlow := int(float64(opts.Slots) * (2*time.Second + short).Seconds() / opts.WeightLatency.Seconds())
		weighted, err := timeFairRun(ctx, opts, rc, n, []flowSet{
			{class: "w1", flows: 8, events: perFlow / 8, group: "w1"},
			{class: "w2", flows: 8, events: perFlow / 4, group: "w2"},
			{class: "w5", flows: 16, events: perFlow / 3, group: "w5"},
		}, map[string]int64{"w1": 1, "w2": 2, "w5": 5}, 2*time.Second, short)
		if err != nil {
			return nil, err
		}
		row.FastAlone = alone.rate["fast"]
		row.FastBeside, row.Slow = beside.rate["fast"], beside.rate["slow"]
		row.FastRatio = ratio(row.FastBeside, row.FastAlone)
		row.SlowFair = float64(opts.Slots) / 2 / opts.SlowLatency.Seconds()
		row.SlowRatio = ratio(row.Slow, row.SlowFair)
		row.SlowSlots, row.FastSlots = beside.slots["slow"], beside.slots["fast"]
		var total float64
		for _, c := range []string{"w1", "w2", "w5"} {
			total += weighted.slots[c]
		}
		for i, c := range []string{"w1", "w2", "w5"} {
			want := []float64{1.0 / 8, 2.0 / 8, 5.0 / 8}[i]
			row.WeightShares[i] = ratio(weighted.slots[c], total)
			row.WeightsWorst = max(row.WeightsWorst, abs(row.WeightShares[i]-want)/want)
		}
		rep.Rows = append(rep.Rows, row)
	}
	return rep, nil
}

func abs(x float64) float64 { return max(x, -x) }

// ratio is a / b, or 0 when b is 0 (nothing was measured).
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// flowSet is flows flows of one class (named CLASS/N), events events each,
// in group (their own when "").
type flowSet struct {
	class  string
	flows  int
	events int
	group  string
}

// runResult is one run's measurements by class: deliveries per second and
// slots held on average.
type runResult struct {
	rate, slots map[string]float64
}

// timeFairRun runs relays relays on a fresh store loaded with sets, for
// warmup, then measures for window.
func timeFairRun(ctx context.Context, opts TimeFairOptions, rc *latencyReceiver, relays int, sets []flowSet,
	weights map[string]int64, warmup, window time.Duration) (*runResult, error) {
	dsn := filepath.Join(opts.Dir, outboxbench.RandomName("timefair")+".db")
	if relays == 1 {
		defer func() {
			for _, suffix := range []string{"", "-wal", "-shm"} {
				_ = os.Remove(dsn + suffix)
			}
		}()
	} else {
		schema := outboxbench.RandomName("bench_timefair")
		var err error
		if dsn, err = outboxbench.WithParams(opts.PostgresURL, "schema", schema); err != nil {
			return nil, err
		}
		defer outboxbench.DropSchema(ctx, opts.PostgresURL, schema)
	}
	pol := fairrelay.DaemonPolicy()
	var qs []*fairrelay.Queue
	defer func() {
		for _, q := range qs {
			q.Close()
		}
	}()
	for range relays {
		q, err := fairrelay.Open(ctx, dsn, fairrelay.Config{Policy: pol})
		if err != nil {
			return nil, err
		}
		qs = append(qs, q)
	}
	for g, w := range weights {
		if _, err := qs[0].Configure(ctx, fairrelay.ConfigureParams{At: fairrelay.AtStored, Group: g, Weight: &w}); err != nil {
			return nil, err
		}
	}
	if err := loadFlows(ctx, qs[0], sets); err != nil {
		return nil, err
	}
	rc.reset()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var rs []*relay.Relay
	runErrs := make(chan error, relays)
	for _, q := range qs {
		s, err := webhook.New(webhook.Options{URL: rc.url, Unsigned: true, MaxConnsPerHost: 2 * opts.Slots})
		if err != nil {
			return nil, err
		}
		defer s.Close()
		r, err := relay.New(ctx, relay.Config{Queue: q, Sink: s, Workers: opts.Slots / relays, DeliveryTimeout: opts.SlowLatency + 5*time.Second,
			Quantum: opts.Quantum, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return nil, err
		}
		rs = append(rs, r)
		go func() { runErrs <- r.Run(runCtx) }()
	}
	if err := pauseFor(ctx, warmup); err != nil {
		return nil, err
	}
	n0, s0, t0 := rc.counts(), slotTimes(rs), time.Now()
	if err := pauseFor(ctx, window); err != nil {
		return nil, err
	}
	n1, s1, d := rc.counts(), slotTimes(rs), time.Since(t0)
	stop()
	var runErr error
	for range rs {
		runErr = errs.Join(runErr, <-runErrs)
	}
	if runErr != nil {
		return nil, runErr
	}
	out := &runResult{rate: map[string]float64{}, slots: map[string]float64{}}
	for c, n := range n1 {
		out.rate[c] = float64(n-n0[c]) / d.Seconds()
	}
	for c, st := range s1 {
		out.slots[c] = float64(st-s0[c]) / float64(d)
	}
	return out, nil
}

func pauseFor(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// slotTimes sums the relays' slot time by class, the deliveries under way
// included.
func slotTimes(rs []*relay.Relay) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, r := range rs {
		for _, g := range r.GroupTimes() {
			out[classOf(g.Group)] += g.SlotTime + g.Holding
		}
	}
	return out
}

func classOf(name string) string {
	c, _, _ := strings.Cut(name, "/")
	return c
}

// loadFlows enqueues sets, the events of the flows interleaved.
func loadFlows(ctx context.Context, q *fairrelay.Queue, sets []flowSet) error {
	var ps []fairrelay.NewEvent
	flush := func() error {
		if len(ps) == 0 {
			return nil
		}
		_, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: fairrelay.AtStored, Events: ps})
		ps = ps[:0]
		return err
	}
	most := 0
	for _, s := range sets {
		most = max(most, s.events)
	}
	for e := range most {
		for _, s := range sets {
			if e >= s.events {
				continue
			}
			for f := range s.flows {
				flow := fmt.Sprintf("%s/%02d", s.class, f)
				ps = append(ps, fairrelay.NewEvent{ID: fmt.Sprintf("%s-%d", flow, e), Flow: flow, Group: s.group, Body: []byte(`{}`)})
				if len(ps) == 5000 {
					if err := flush(); err != nil {
						return err
					}
				}
			}
		}
	}
	return flush()
}

// latencyReceiver is an HTTP receiver on loopback that answers each
// delivery after its class's latency (the flow's name up to "/") and
// counts the deliveries by class.
type latencyReceiver struct {
	url string
	srv *http.Server

	mu    sync.Mutex
	count map[string]int
}

func newLatencyReceiver(latency map[string]time.Duration) (*latencyReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	rc := &latencyReceiver{url: "http://" + ln.Addr().String() + "/", count: map[string]int{}}
	rc.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		c := classOf(req.Header.Get(webhook.HeaderFlow))
		if d := latency[c]; d > 0 {
			t := time.NewTimer(d) // the workload: a receiver that takes d
			select {
			case <-t.C:
			case <-req.Context().Done():
				t.Stop()
				return
			}
		}
		rc.mu.Lock()
		rc.count[c]++
		rc.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = rc.srv.Serve(ln) }()
	return rc, nil
}

func (rc *latencyReceiver) counts() map[string]int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return maps.Clone(rc.count)
}

func (rc *latencyReceiver) reset() {
	rc.mu.Lock()
	rc.count = map[string]int{}
	rc.mu.Unlock()
}

func (rc *latencyReceiver) close() { _ = rc.srv.Close() }

// WriteTimeFairTable writes rep as a table.
func WriteTimeFairTable(w io.Writer, rep *TimeFairReport) error {
	fmt.Fprintf(w, "%d slots; %d flows whose receiver takes %s beside %d answered at once; each flow its own group\n\n",
		rep.Slots, rep.SlowFlows, rep.SlowLatency, rep.FastFlows)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "relays\tstore\tfast alone/s\tfast beside/s\tratio\tslow/s\tfair share/s\tratio\tslots slow\tslots fast\tshares 1:2:5\tworst error\t")
	for _, r := range rep.Rows {
		fmt.Fprintf(tw, "%d\t%s\t%.0f\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.3f %.3f %.3f\t%.0f%%\t\n",
			r.Relays, r.Store, r.FastAlone, r.FastBeside, r.FastRatio, r.Slow, r.SlowFair, r.SlowRatio,
			r.SlowSlots, r.FastSlots, r.WeightShares[0], r.WeightShares[1], r.WeightShares[2], 100*r.WeightsWorst)
	}
	return tw.Flush()
}
