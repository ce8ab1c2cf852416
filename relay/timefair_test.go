package relay_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/relay"
	"github.com/fairrelay/fairrelay/sink/webhook"
)

// Fair by worker time (SPEC §11). A flow here is named CLASS/N; its class
// decides how long the receiver takes to answer it (the workload: the
// receiver sleeps in its handler). The tests measure the relay's own
// accounting (Relay.GroupTimes) over windows bounded by deliveries, never
// by the wall clock.

// timefairPolicy: a lease far beyond the deliveries, quick retries.
func timefairPolicy() fairrelay.Policy {
	return fairrelay.Policy{Entry: fairrelay.EntryFair, Lease: 20_000, Budget: 1000, BackoffBase: 5, BackoffCap: 20, MaxBodyBytes: 1 << 20}
}

// hang is a latency that holds the request until the relay gives up.
const hang = time.Duration(-1)

// slowReceiver is a real HTTP receiver on loopback that answers each
// delivery after its class's latency, and counts, per class, the
// deliveries and the most under way at once.
type slowReceiver struct {
	url     string
	latency map[string]time.Duration

	mu       sync.Mutex
	count    map[string]int
	inflight map[string]int
	peak     map[string]int
	watches  []countWatch
}

type countWatch struct {
	class string
	n     int
	ch    chan struct{}
}

func class(flowOrGroup string) string {
	c, _, _ := strings.Cut(flowOrGroup, "/")
	return c
}

func newSlowReceiver(t *testing.T, latency map[string]time.Duration) *slowReceiver {
	rc := &slowReceiver{latency: latency, count: map[string]int{}, inflight: map[string]int{}, peak: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		c := class(req.Header.Get(webhook.HeaderFlow))
		rc.mu.Lock()
		rc.inflight[c]++
		rc.peak[c] = max(rc.peak[c], rc.inflight[c])
		rc.mu.Unlock()
		// Read the body first: only then does the server notice the
		// relay giving up (the request's context ends).
		_, _ = io.Copy(io.Discard, req.Body)
		switch d := rc.latency[c]; {
		case d == hang:
			<-req.Context().Done()
		case d > 0:
			time.Sleep(d) // the workload: a receiver that takes d
		}
		rc.mu.Lock()
		rc.inflight[c]--
		rc.count[c]++
		kept := rc.watches[:0]
		for _, w := range rc.watches {
			if rc.count[w.class] >= w.n {
				close(w.ch)
				continue
			}
			kept = append(kept, w)
		}
		rc.watches = kept
		rc.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	rc.url = srv.URL
	return rc
}

// reached returns a channel closed once the receiver has answered n
// deliveries of class c.
func (rc *slowReceiver) reached(c string, n int) <-chan struct{} {
	ch := make(chan struct{})
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.count[c] >= n {
		close(ch)
		return ch
	}
	rc.watches = append(rc.watches, countWatch{class: c, n: n, ch: ch})
	return ch
}

// resetPeak starts the peak of class c's deliveries under way over, from
// those under way now.
func (rc *slowReceiver) resetPeak(c string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.peak[c] = rc.inflight[c]
}

// peakOf is the most deliveries of class c the receiver had under way at
// once since it started (or since resetPeak).
func (rc *slowReceiver) peakOf(c string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.peak[c]
}

// tfFlows describes the flows of one class: how many, how many events
// each, and the group they join ("" for their own).
type tfFlows struct {
	class  string
	flows  int
	events int
	group  string
	from   int // the first event's number in its flow (ids are FLOW-N)
}

func enqueueFlows(ctx context.Context, t *testing.T, q *fairrelay.Queue, at int64, sets ...tfFlows) {
	t.Helper()
	var ps []fairrelay.NewEvent
	for _, s := range sets {
		for e := s.from; e < s.from+s.events; e++ {
			for f := range s.flows {
				flow := fmt.Sprintf("%s/%02d", s.class, f)
				ps = append(ps, fairrelay.NewEvent{ID: fmt.Sprintf("%s-%d", flow, e), Flow: flow, Group: s.group, Body: []byte(`{}`)})
			}
		}
	}
	for len(ps) > 0 {
		n := min(len(ps), 5000)
		if _, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: at, Events: ps[:n]}); err != nil {
			t.Fatal(err)
		}
		ps = ps[n:]
	}
}

func sqliteQueue(t *testing.T) *fairrelay.Queue {
	t.Helper()
	q, err := fairrelay.Open(t.Context(), filepath.Join(t.TempDir(), "queue.db"), fairrelay.Config{Policy: timefairPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

func setWeight(t *testing.T, q *fairrelay.Queue, group string, w int64) {
	t.Helper()
	if _, err := q.Configure(t.Context(), fairrelay.ConfigureParams{At: fairrelay.AtStored, Group: group, Weight: &w}); err != nil {
		t.Fatal(err)
	}
}

// startRelay runs a relay of cfg delivering to rc; stop ends it and
// returns Run's error.
func startRelay(t *testing.T, cfg relay.Config, rc *slowReceiver) (*relay.Relay, func()) {
	t.Helper()
	s, err := webhook.New(webhook.Options{URL: rc.url, Unsigned: true, MaxConnsPerHost: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	cfg.Sink = s
	if cfg.Workers == 0 {
		cfg.Workers = 8
	}
	if cfg.DeliveryTimeout == 0 {
		cfg.DeliveryTimeout = 5 * time.Second
	}
	r, stopRun := runRelay(t, cfg)
	return r, func() {
		if err := stopRun(); err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

// times sums relays' accounts by class; SlotTime includes the deliveries
// under way.
func times(rs ...*relay.Relay) map[string]relay.GroupTime {
	out := map[string]relay.GroupTime{}
	for _, r := range rs {
		for _, g := range r.GroupTimes() {
			c := out[class(g.Group)]
			c.SlotTime += g.SlotTime + g.Holding
			c.Charge += g.Charge
			c.Slots += g.Slots
			c.Weight = g.Weight
			out[class(g.Group)] = c
		}
	}
	return out
}

// pgRelays runs n relays of workers slots and quantum q on one fresh
// PostgreSQL store, which load fills first; stop stops them all.
func pgRelays(t *testing.T, n, workers int, q time.Duration, rc *slowReceiver, load func(*fairrelay.Queue)) (rs []*relay.Relay, stop func()) {
	t.Helper()
	dsn := pgtest.Schema(t, "relay_timefair_")
	var stops []func()
	for i := range n {
		qu, err := fairrelay.Open(t.Context(), dsn, fairrelay.Config{Policy: timefairPolicy()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { qu.Close() })
		if i == 0 {
			load(qu)
		}
		r, stop := startRelay(t, relay.Config{Queue: qu, Workers: workers, Quantum: q}, rc)
		rs, stops = append(rs, r), append(stops, stop)
	}
	return rs, func() {
		for _, stop := range stops {
			stop()
		}
	}
}

// shares is each class's share of the slot time between two snapshots.
func shares(before, after map[string]relay.GroupTime) (map[string]float64, time.Duration) {
	var total time.Duration
	for c, a := range after {
		total += a.SlotTime - before[c].SlotTime
	}
	out := map[string]float64{}
	for c, a := range after {
		out[c] = float64(a.SlotTime-before[c].SlotTime) / float64(total)
	}
	return out, total
}

// counts is how many deliveries of each class the receiver answered.
func (rc *slowReceiver) counts() map[string]int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return maps.Clone(rc.count)
}

// window is what measure saw between its two snapshots.
type window struct {
	shares map[string]float64 // each class's share of the slot time
	slots  map[string]float64 // each class's slots held on average
	counts map[string]int     // each class's deliveries
}

// measure waits for warm deliveries of class c (the warm-up), then for n
// more, and returns what r did in between. The average slots are slot
// time over the window's length: a measurement, not a deadline.
func measure(t *testing.T, rc *slowReceiver, c string, warm, n int, rs ...*relay.Relay) window {
	t.Helper()
	wait(t, rc.reached(c, warm), "the warm-up")
	before, n0, t0 := times(rs...), rc.counts(), time.Now()
	wait(t, rc.reached(c, warm+n), fmt.Sprintf("%d deliveries of %s", n, c))
	after, n1, elapsed := times(rs...), rc.counts(), time.Since(t0)
	for k := range n1 {
		n1[k] -= n0[k]
	}
	sh, total := shares(before, after)
	slots := map[string]float64{}
	for k, v := range sh {
		slots[k] = v * float64(total) / float64(elapsed)
	}
	t.Logf("slot time %s in %s: shares %v; slots %v; deliveries %v", total, elapsed, sh, slots, n1)
	return window{shares: sh, slots: slots, counts: n1}
}

func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(60 * time.Second):
		t.Fatalf("gave up waiting for %s", what)
	}
}

// (a) The case, scaled down: slow flows (each its own group)
// beside fast ones, 8 slots. Counting claims, the slow flows held nearly
// every slot (the fast ones got 1 % of their alone throughput); shared by
// time, the slow groups hold their half of the slots (within 20 %), so the
// fast ones keep the other half.
func TestTimeFairFastBesideSlow(t *testing.T) {
	skipTimingUnderRace(t)
	t.Parallel()
	atSecondTry(t, fastBesideSlow)
}

func fastBesideSlow(t *testing.T, fail func(format string, args ...any)) {
	q := sqliteQueue(t)
	rc := newSlowReceiver(t, map[string]time.Duration{"slow": 100 * time.Millisecond})
	enqueueFlows(t.Context(), t, q, fairrelay.AtStored,
		tfFlows{class: "slow", flows: 10, events: 40}, tfFlows{class: "fast", flows: 10, events: 3000})
	reg := prometheus.NewRegistry()
	m, err := relay.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	r, stop := startRelay(t, relay.Config{Queue: q, Quantum: 20 * time.Millisecond, Metrics: m}, rc)
	// Warm-up: every slow group enters once at the floor.
	wait(t, rc.reached("slow", 20), "the warm-up")
	rc.resetPeak("slow")
	w := measure(t, rc, "slow", 20, 60, r)
	stop()
	fast := w.counts["fast"]
	if s := w.slots["slow"]; s > 4*1.2 || s < 4*0.5 {
		fail("the slow groups held %.1f slots on average, want their half, 4, within 20%% (or at least 2 if the run was starved)", s)
	}
	// Steadily: slow deliveries claimed together end together, and the
	// relay once replaced them together, swinging between every slot held
	// by slow flows and none (timeshare.longRoom): a peak of 8. Their half
	// is 4; one slot more is by design when the fast flows' heads all wait
	// for their settles for a quantum (the claimer's work-conserving second
	// claim, timeshare.short), which a loaded machine makes happen (seen at
	// -cpu 1 beside the other tests' relays).
	if p := rc.peakOf("slow"); p > 4+1 {
		fail("after the warm-up the slow flows held up to %d slots at once, want at most their half, 4, and the one a work-conserving claim may add", p)
	}
	// Counting claims, fast and slow flows are claimed alike: as many fast
	// deliveries as slow ones. (How many more depends on the machine's
	// transaction rate; at least twice as many on any.)
	if fast < 2*60 {
		fail("%d fast deliveries beside 60 slow ones, want at least 120", fast)
	}
	// The metrics say what the accounts say.
	var sum float64
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "fairrelay_transactions_total" {
			for _, mt := range mf.GetMetric() {
				t.Logf("transactions %v: %v", mt.GetLabel(), mt.GetCounter().GetValue())
			}
		}
		if mf.GetName() == "fairrelay_relay_group_slot_seconds_total" {
			for _, mt := range mf.GetMetric() {
				sum += mt.GetCounter().GetValue()
			}
		}
	}
	var want time.Duration
	for _, g := range r.GroupTimes() {
		want += g.SlotTime
	}
	if math.Abs(sum-want.Seconds()) > 1e-6 {
		t.Errorf("fairrelay_relay_group_slot_seconds_total sums to %.6fs, the accounts to %s", sum, want)
	}
}

// One slow group (8 flows, 100 ms) beside ten fast flows, each its own
// group: its share is 8/11 of a slot, below one. Sharing long deliveries'
// slots by their share rounded down once left it out of every claim (the
// fast flows always filled them), so it delivered nothing; it gets its
// share (within 20 %, or at least half if the run was starved).
func TestTimeFairOneSlowGroupBesideManyFast(t *testing.T) {
	skipTimingUnderRace(t)
	t.Parallel()
	q := sqliteQueue(t)
	rc := newSlowReceiver(t, map[string]time.Duration{"slow": 100 * time.Millisecond})
	enqueueFlows(t.Context(), t, q, fairrelay.AtStored,
		tfFlows{class: "slow", flows: 8, events: 10, group: "slow"}, tfFlows{class: "fast", flows: 10, events: 3000})
	r, stop := startRelay(t, relay.Config{Queue: q, Quantum: 20 * time.Millisecond}, rc)
	w := measure(t, rc, "slow", 5, 20, r)
	stop()
	if s, share := w.slots["slow"], 8.0/11; s < 0.5*share || s > 1.2*share {
		t.Errorf("the slow group held %.2f slots on average, want its share %.2f within 20%% (or at least half)", s, share)
	}
}

// groupSpec is a group of flows named like its class, with events events
// each, whose receiver takes latency.
type groupSpec struct {
	class   string
	latency time.Duration
	flows   int
	events  int
}

// groupsQuantum is the quantum of groupsRun's relay.
const groupsQuantum = 20 * time.Millisecond

// groupsRun runs a relay of 8 slots and a quantum of 20 ms on a fresh
// SQLite store holding the groups gs, with the weights given.
func groupsRun(t *testing.T, weights map[string]int64, gs ...groupSpec) (*relay.Relay, *slowReceiver, func()) {
	t.Helper()
	q := sqliteQueue(t)
	lat := map[string]time.Duration{}
	var fs []tfFlows
	for _, g := range gs {
		lat[g.class] = g.latency
		fs = append(fs, tfFlows{class: g.class, flows: g.flows, events: g.events, group: g.class})
	}
	for g, w := range weights {
		setWeight(t, q, g, w)
	}
	rc := newSlowReceiver(t, lat)
	enqueueFlows(t.Context(), t, q, fairrelay.AtStored, fs...)
	r, stop := startRelay(t, relay.Config{Queue: q, Quantum: groupsQuantum}, rc)
	return r, rc, stop
}

// (a) with two relays on one PostgreSQL store, 4 slots each: each relay
// keeps its own charges and sees only its own deliveries, yet together the
// slow groups hold their half of the 8 slots, not all of them.
func TestTimeFairFastBesideSlowTwoRelays(t *testing.T) {
	skipTimingUnderRace(t)
	t.Parallel()
	rc := newSlowReceiver(t, map[string]time.Duration{"slow": 100 * time.Millisecond})
	rs, stop := pgRelays(t, 2, 4, 20*time.Millisecond, rc, func(q *fairrelay.Queue) {
		enqueueFlows(t.Context(), t, q, fairrelay.AtStored,
			tfFlows{class: "slow", flows: 10, events: 40}, tfFlows{class: "fast", flows: 10, events: 1000})
	})
	// Warm-up: every slow group enters once at the floor of each relay.
	// Then 120 slow deliveries (about 2.5 s): each relay shares its own
	// 4 slots, so one slow delivery is a quarter of a relay's slots for
	// 100 ms, and over 60 of them (1.3 s) CI once saw 4.81 slots.
	w := measure(t, rc, "slow", 20, 120, rs...)
	stop()
	if s := w.slots["slow"]; s > 4*1.2 || s < 4*0.5 {
		t.Errorf("the slow groups held %.1f slots on average, want their half, 4, within 20%% (or at least 2 if the run was starved)", s)
	}
	// The fast flows use the slots the slow ones leave: more deliveries
	// than the slow flows in the same window. How many more is a rate, and
	// rates are the benchmark's (bench timefair, BENCHMARKS.md): on a loaded
	// machine CI saw 68 beside 61 where a quiet one gives hundreds.
	if fast, slow := w.counts["fast"], w.counts["slow"]; fast <= slow {
		t.Errorf("%d fast deliveries beside %d slow ones, want more", fast, slow)
	}
}

// (b) Three groups whose receivers take 1 ms, 20 ms and 200 ms. None
// holds more than its third of the slots (counting claims, the 200 ms
// group would hold nearly all), the 200 ms one, which can use its third,
// holds it, and the 1 ms group, which cannot, is not starved.
func TestTimeFairThreeLatencies(t *testing.T) {
	skipTimingUnderRace(t)
	t.Parallel()
	r, rc, stop := groupsRun(t, nil, groupSpec{"ms1", time.Millisecond, 8, 1000}, groupSpec{"ms20", 20 * time.Millisecond, 16, 150},
		groupSpec{"ms200", 200 * time.Millisecond, 8, 40})
	w := measure(t, rc, "ms200", 4, 24, r)
	stop()
	n1, n20 := w.counts["ms1"], w.counts["ms20"]
	const share = 8.0 / 3
	for c, s := range w.slots {
		if s > 1.2*share {
			t.Errorf("group %s held %.2f slots on average, beyond its third (%.2f) by more than 20%%", c, s, share)
		}
	}
	if s := w.slots["ms200"]; s < 0.8*share {
		t.Errorf("the 200 ms group held %.2f slots on average, want its third (%.2f) within 20%%", s, share)
	}
	if 2*n1 < n20 {
		t.Errorf("the 1 ms group had %d deliveries, fewer than half the 20 ms group's %d: starved", n1, n20)
	}
}

// (c) Weights 1:2:5 at equal latencies: slot-time shares within 20 % of
// 1/8, 2/8, 5/8, and the groups' charges within the bound of timeshare.go's
// doc.
func TestTimeFairWeights(t *testing.T) {
	skipTimingUnderRace(t)
	t.Parallel()
	r, rc, stop := groupsRun(t, map[string]int64{"w1": 1, "w2": 2, "w5": 5},
		groupSpec{"w1", 20 * time.Millisecond, 8, 100}, groupSpec{"w2", 20 * time.Millisecond, 8, 150}, groupSpec{"w5", 20 * time.Millisecond, 16, 150})
	sh := measure(t, rc, "w1", 10, 60, r).shares
	stop()
	checkChargeBound(t, r, groupsQuantum, "w1", "w2", "w5")
	wantWeightShares(t, sh, 0.2)
}

// wantWeightShares checks that the groups w1, w2 and w5 (weights 1, 2 and
// 5) held the slot-time shares sh of 1/8, 2/8 and 5/8, each within tol
// (relative).
func wantWeightShares(t *testing.T, sh map[string]float64, tol float64) {
	t.Helper()
	for c, w := range map[string]float64{"w1": 1, "w2": 2, "w5": 5} {
		if want := w / 8; math.Abs(sh[c]-want) > tol*want {
			t.Errorf("group %s (weight %.0f) held %.3f of the slot time, want %.3f within %.0f%%", c, w, sh[c], want, 100*tol)
		}
	}
}

// (c') Weights 1:2:5 at unequal latencies, 160, 80 and 40 ms: the
// weight-1 group's deliveries are the longest, so counting claims would
// give it the most slot time (equal claims: 160/280 = 0.57 of it, the
// weight-5 group 0.14). Shared by time, the charges (what the scheduler
// equalises) stay within the bound of timeshare.go's doc, and the shares
// follow the weights: in their order, each within 50 %, not the 20 % of
// equal latencies. A slot is idle from an answer to the claim that refills
// it (a few milliseconds, more on a loaded machine), a larger part of a
// 40 ms delivery than of a 160 ms one, and idle time is nobody's: measured
// 0.14-0.175, 0.27-0.30 and 0.53-0.58 on a loaded machine (load average
// 10), want 0.125, 0.25 and 0.625.
func TestTimeFairWeightsUnequalLatencies(t *testing.T) {
	skipTimingUnderRace(t)
	t.Parallel()
	r, rc, stop := groupsRun(t, map[string]int64{"w1": 1, "w2": 2, "w5": 5},
		groupSpec{"w1", 160 * time.Millisecond, 8, 20}, groupSpec{"w2", 80 * time.Millisecond, 8, 40}, groupSpec{"w5", 40 * time.Millisecond, 16, 80})
	sh := measure(t, rc, "w1", 6, 24, r).shares
	stop()
	checkChargeBound(t, r, groupsQuantum, "w1", "w2", "w5")
	wantWeightShares(t, sh, 0.5)
	if !(sh["w1"] < sh["w2"] && sh["w2"] < sh["w5"]) {
		t.Errorf("shares %v: not in the order of the weights", sh)
	}
}

// (d) A group whose receiver hangs is charged the whole delivery timeout
// for every attempt, so the slots go to the others meanwhile.
func TestTimeFairTimeoutChargesTheWholeTimeout(t *testing.T) {
	t.Parallel()
	q := sqliteQueue(t)
	rc := newSlowReceiver(t, map[string]time.Duration{"hang": hang})
	enqueueFlows(t.Context(), t, q, fairrelay.AtStored,
		tfFlows{class: "hang", flows: 1, events: 1, group: "hang"},
		tfFlows{class: "ok", flows: 4, events: 2000, group: "ok"})
	const timeout = 150 * time.Millisecond
	attempts := make(chan struct{}, 16)
	r, stop := startRelay(t, relay.Config{Queue: q, Quantum: 20 * time.Millisecond, DeliveryTimeout: timeout,
		OnSettle: func(s relay.Settled) {
			if s.Claim.Group == "hang" {
				attempts <- struct{}{}
			}
		}}, rc)
	for range 3 {
		select {
		case <-attempts:
		case <-time.After(60 * time.Second):
			t.Fatal("gave up waiting for the hanging group's attempts")
		}
	}
	stop()
	got := times(r)["hang"]
	t.Logf("hang: %+v", got)
	if got.SlotTime < 3*timeout {
		t.Errorf("three timed-out deliveries held %s of slot time, want at least 3 × %s", got.SlotTime, timeout)
	}
	if got.Charge < got.SlotTime {
		t.Errorf("charge %s below the slot time %s", got.Charge, got.SlotTime)
	}
}

// (e) A group idle while the others ran gets no burst when it comes back:
// it starts at the smallest charge, so over the window its share is its
// third, not the whole relay until it catches up.
func TestTimeFairIdleGroupGetsNoBurst(t *testing.T) {
	skipTimingUnderRace(t)
	t.Parallel()
	q := sqliteQueue(t)
	rc := newSlowReceiver(t, map[string]time.Duration{"a": 20 * time.Millisecond, "b": 20 * time.Millisecond, "idle": 20 * time.Millisecond})
	enqueueFlows(t.Context(), t, q, fairrelay.AtStored,
		tfFlows{class: "a", flows: 8, events: 200, group: "a"},
		tfFlows{class: "b", flows: 8, events: 200, group: "b"},
		tfFlows{class: "idle", flows: 8, events: 1, group: "idle"})
	r, stop := startRelay(t, relay.Config{Queue: q, Quantum: groupsQuantum}, rc)
	// The group runs its 8 events, then a and b run alone: 200
	// deliveries, 4 s of slot time, while it is idle.
	wait(t, rc.reached("idle", 8), "the group's first 8 deliveries")
	wait(t, rc.reached("a", 100), "a's first 100 deliveries")
	wait(t, rc.reached("b", 100), "b's first 100 deliveries")
	before := times(r)
	if err := r.Do(t.Context(), func(at int64) error {
		enqueueFlows(t.Context(), t, q, at, tfFlows{class: "idle", flows: 8, events: 20, group: "idle", from: 1})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	wait(t, rc.reached("idle", 8+60), "60 deliveries of the group back from idle")
	after := times(r)
	stop()
	sh, total := shares(before, after)
	t.Logf("slot time %s since the group came back: shares %v", total, sh)
	// Banked credit would give it every slot until it caught up 2 s of
	// slot time: the whole window.
	if want := 1.0 / 3; sh["idle"] > 1.2*want+0.1 {
		t.Errorf("the group back from idle held %.2f of the slot time, want about %.2f", sh["idle"], want)
	}
}

// (g) The relay never holds more slots for a group than its cap: the
// default (Config.MaxGroupSlots) or the group's own (max_slots).
func TestTimeFairGroupSlotCap(t *testing.T) {
	t.Parallel()
	q := sqliteQueue(t)
	one := int64(1)
	if _, err := q.Configure(t.Context(), fairrelay.ConfigureParams{At: fairrelay.AtStored, Group: "one", MaxSlots: &one}); err != nil {
		t.Fatal(err)
	}
	rc := newSlowReceiver(t, map[string]time.Duration{"one": 5 * time.Millisecond, "three": 5 * time.Millisecond, "x": 5 * time.Millisecond})
	enqueueFlows(t.Context(), t, q, fairrelay.AtStored,
		tfFlows{class: "one", flows: 8, events: 10, group: "one"},
		tfFlows{class: "three", flows: 8, events: 10, group: "three"},
		tfFlows{class: "x", flows: 8, events: 10, group: "x"})
	r, stop := startRelay(t, relay.Config{Queue: q, MaxGroupSlots: 3}, rc)
	wait(t, rc.reached("one", 80), "group one's events")
	wait(t, rc.reached("three", 80), "group three's events")
	wait(t, rc.reached("x", 80), "group x's events")
	stop()
	for _, g := range r.GroupTimes() {
		want := 3
		if g.Group == "one" {
			want = 1
		}
		if g.PeakSlots > want {
			t.Errorf("group %s held %d slots at once, cap %d", g.Group, g.PeakSlots, want)
		}
		rc.mu.Lock()
		peak := rc.peak[g.Group]
		rc.mu.Unlock()
		if peak > want {
			t.Errorf("the receiver saw %d deliveries of group %s at once, cap %d", peak, g.Group, want)
		}
	}
}

func TestTimeFairConfig(t *testing.T) {
	t.Parallel()
	q := sqliteQueue(t)
	rc := newSlowReceiver(t, nil)
	s, err := webhook.New(webhook.Options{URL: rc.url, Unsigned: true})
	if err != nil {
		t.Fatal(err)
	}
	for field, cfg := range map[string]relay.Config{
		"max_group_slots": {Queue: q, Sink: s, Workers: 4, MaxGroupSlots: 5},
		"quantum":         {Queue: q, Sink: s, Quantum: -time.Second},
		"groups_refresh":  {Queue: q, Sink: s, GroupsRefresh: -time.Second},
	} {
		var fe *fairrelay.Error
		if err := cfg.Validate(); !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("%s: got %v, want ErrInvalidInput naming it", field, err)
		}
	}
}

// (f) Two relays on one PostgreSQL store, weights 1:3: the slot-time
// shares of both relays together are the weights' within 20 % (SPEC §11).
// The charges are per relay, and the bound of timeshare.go's doc holds on
// each relay only for groups that can use their share there: here a group's
// flows are claimed by both relays, and a head in flight on one is not
// claimable by the other, so on one relay a group can trail V for a while
// (CI saw 0.32 s against 4.4 s on one relay while the summed shares were
// exactly 0.250). The bound is checked on one relay (TestTimeFairWeights);
// here, what SPEC §11 asks of several relays: the shares of their sum.
func TestTimeFairTwoRelaysOnPostgres(t *testing.T) {
	skipTimingUnderRace(t)
	t.Parallel()
	rc := newSlowReceiver(t, map[string]time.Duration{"w1": 20 * time.Millisecond, "w3": 20 * time.Millisecond})
	const quantum = 20 * time.Millisecond
	rs, stop := pgRelays(t, 2, 4, quantum, rc, func(q *fairrelay.Queue) {
		setWeight(t, q, "w1", 1)
		setWeight(t, q, "w3", 3)
		enqueueFlows(t.Context(), t, q, fairrelay.AtStored,
			tfFlows{class: "w1", flows: 8, events: 100, group: "w1"},
			tfFlows{class: "w3", flows: 24, events: 100, group: "w3"})
	})
	wait(t, rc.reached("w1", 10), "the warm-up")
	var before []map[string]relay.GroupTime
	for _, r := range rs {
		before = append(before, times(r))
	}
	wait(t, rc.reached("w1", 10+60), "60 deliveries of the weight-1 group")
	stop()
	var slot1, slot3 time.Duration
	for i, r := range rs {
		after := times(r)
		d1, d3 := after["w1"].SlotTime-before[i]["w1"].SlotTime, after["w3"].SlotTime-before[i]["w3"].SlotTime
		t.Logf("relay %d: slot time w1 %s, w3 %s; charges w1 %s, w3 %s", i, d1, d3, after["w1"].Charge, after["w3"].Charge)
		slot1, slot3 = slot1+d1, slot3+d3
	}
	share1 := float64(slot1) / float64(slot1+slot3)
	t.Logf("both relays: slot time w1 %s, w3 %s: share of w1 %.3f", slot1, slot3, share1)
	if want := 0.25; math.Abs(share1-want) > 0.2*want {
		t.Errorf("the weight-1 group held %.3f of the slot time on both relays, want 0.25 within 20%%", share1)
	}
}

// checkChargeBound checks, on one relay whose groups can all use their
// share, the bound of timeshare.go's doc: no two groups' charges differ by
// more than 2B, B = Quantum + max over groups of H × D / w. The
// bound assumes claims keep up (a group able to use its share is claimed
// within a quantum); on a loaded machine a claim can take longer (CI saw
// 118 ms against a bound of 96 ms), so the test allows twice it: that
// still fails a scheduler that lets a group run away, whose gap grows with
// the run.
func checkChargeBound(t *testing.T, r *relay.Relay, quantum time.Duration, groups ...string) {
	t.Helper()
	b := 2 * float64(quantum)
	for _, g := range r.GroupTimes() {
		b = max(b, 2*(float64(quantum)+float64(g.PeakSlots)*float64(g.MaxHold)/float64(g.Weight)))
	}
	now := times(r)
	for i, a := range groups {
		for _, c := range groups[i+1:] {
			d := math.Abs(float64(now[a].Charge - now[c].Charge))
			t.Logf("charges %s %s, %s %s: gap %s, bound %s", a, now[a].Charge, c, now[c].Charge, time.Duration(d), time.Duration(b))
			if d > 2*b {
				t.Errorf("the charges of %s and %s differ by %s, beyond twice the bound %s", a, c, time.Duration(d), time.Duration(b))
			}
		}
	}
}

// skipTimingUnderRace skips a test that measures shares of slot time or
// delivery counts when the race detector is on: it slows the relay's claim
// transactions about tenfold, so the claims, not the slots, bound what
// each group gets (CI saw 60 fast deliveries beside 60 slow ones). These
// tests run without it in the README's test command; under it, the
// time-sharing code still runs in TestTimeFairGroupSlotCap,
// TestTimeFairTimeoutChargesTheWholeTimeout and the timeshare unit tests.
func skipTimingUnderRace(t *testing.T) {
	t.Helper()
	if raceDetector {
		t.Skip("measures shares of slot time, which the race detector's slowdown distorts; runs without -race")
	}
}

// atSecondTry runs a scenario whose property is a share of slot time on a
// live relay, whose figures a machine busy with other work moves (CI's
// other packages, another session's processes): its claims and settles
// lag, and a work-conserving relay rightly gives what a lagging group
// cannot take to the others. The scenario reports a breach through fail;
// a first run with breaches is logged and run again, on fresh stores, and
// only the second run's breaches fail the test. The defects these tests
// were written for breached in every run (a share of 0.74-0.79 for a half,
// 5 to 6 slots of 8 for a half), so they still fail; a one-off lag does not.
func atSecondTry(t *testing.T, scenario func(t *testing.T, fail func(format string, args ...any))) {
	t.Helper()
	for try := 1; ; try++ {
		var breaches []string
		scenario(t, func(format string, args ...any) { breaches = append(breaches, fmt.Sprintf(format, args...)) })
		if len(breaches) == 0 || t.Failed() {
			return
		}
		if try == 2 {
			for _, b := range breaches {
				t.Error(b)
			}
			return
		}
		t.Logf("first run breached (run again on fresh stores): %s", strings.Join(breaches, "; "))
	}
}

// (b') Two slow groups of very different latencies, 1 s and 50 ms, each
// with work for every slot, on one relay of 8 slots: neither leaves slot
// time to the other, so each holds half of the slots, within 20 %
// (SPEC §11). A breaker measured 0.74-0.79 for the longer one (2 s beside
// 100 ms) on both backends: a claim raised the shorter group's charge of
// ended deliveries to the floor, counting its deliveries under way twice,
// and raised it while the longer group's deliveries held the slots it
// had work for (timeshare.overrun). The breaker's own case gives
// 0.45-0.46 now (2 s beside 100 ms; too long a run for the suite).
//
// Not parallel, not even its two backends: beside the other tests' relays
// it adds 16 slots of load, and TestTimeFairFastBesideSlow's peak of slots
// is sensitive to that.
func TestTimeFairTwoSlowLatencies(t *testing.T) {
	skipTimingUnderRace(t)
	lat := map[string]time.Duration{"s1000": time.Second, "s50": 50 * time.Millisecond}
	// Checked in slots held on average, not shares of the slot time: the
	// 50 ms group's slot is idle between its answer and its next claim
	// (settle, then claim: a store round trip or two), which a loaded
	// PostgreSQL makes a tenth of its 50 ms. What it cannot use goes to
	// the 1 s group (work-conserving, SPEC §11), so its share of the slot
	// time rises with the store's latency (CI saw 0.605, 4.26 slots
	// beside 2.78) while its slots stay at its half. Before the fix the
	// 1 s group held 5 to 6 of the 8 slots.
	check := func(w window, fail func(format string, args ...any)) {
		if s := w.slots["s1000"]; s > 4*1.2 || s < 4*0.8 {
			fail("the 1 s group held %.2f slots on average, want its half, 4, within 20%%", s)
		}
		if s := w.slots["s50"]; s < 4*0.5 {
			fail("the 50 ms group held %.2f slots on average, want its half, 4, or at least 2 if its claims lagged", s)
		}
	}
	t.Run("sqlite", func(t *testing.T) {
		atSecondTry(t, func(t *testing.T, fail func(format string, args ...any)) {
			r, rc, stop := groupsRun(t, nil, groupSpec{"s1000", lat["s1000"], 8, 30}, groupSpec{"s50", lat["s50"], 8, 600})
			w := measure(t, rc, "s1000", 8, 24, r)
			stop()
			check(w, fail)
		})
	})
	t.Run("postgres", func(t *testing.T) {
		atSecondTry(t, func(t *testing.T, fail func(format string, args ...any)) {
			rc := newSlowReceiver(t, lat)
			rs, stop := pgRelays(t, 1, 8, groupsQuantum, rc, func(q *fairrelay.Queue) {
				enqueueFlows(t.Context(), t, q, fairrelay.AtStored,
					tfFlows{class: "s1000", flows: 8, events: 30, group: "s1000"}, tfFlows{class: "s50", flows: 8, events: 600, group: "s50"})
			})
			w := measure(t, rc, "s1000", 8, 24, rs...)
			stop()
			check(w, fail)
		})
	})
}
