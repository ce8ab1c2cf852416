package relay

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairrelay/fairrelay"
)

// Metrics are the relay's Prometheus metrics. A nil *Metrics records
// nothing.
type Metrics struct {
	claims    prometheus.Counter
	idles     prometheus.Counter
	settles   *prometheus.CounterVec
	leaseLost prometheus.Counter
	claimQuar prometheus.Counter
	held      prometheus.Counter
	latency   *prometheus.HistogramVec
	txs       *prometheus.CounterVec
	storeErrs prometheus.Counter
	prunedEv  prometheus.Counter
	prunedTS  prometheus.Counter
	pruneHeld prometheus.Histogram
	// wallKept: what the last prune held back by the wall clock.
	wallKept prometheus.Gauge
	slotSecs *prometheus.CounterVec
	slots    *prometheus.GaugeVec
	labelMu  sync.Mutex
	labelled map[string]bool // the groups with series of their own
}

// MetricGroups is how many groups get series of their own in
// fairrelay_relay_group_slot_seconds_total and fairrelay_relay_group_slots:
// the first MetricGroups groups the relay claims for, for the life of the
// process; every later group counts under the label OtherGroups. So a store
// of a million flows, each its own group, makes at most MetricGroups + 1
// series per metric.
const MetricGroups = 50

// OtherGroups is the group label of the groups beyond MetricGroups. A group
// named so (a valid name) shares its series.
const OtherGroups = "(other)"

// NewMetrics creates the relay's metrics and registers them on reg:
//   - fairrelay_claims_total: claims that took a head;
//   - fairrelay_idle_claims_total: claims that found nothing eligible;
//   - fairrelay_settles_total{outcome, status}: settles by the outcome sent
//     and settle's answer (acked, ready, quarantined, stale, expired);
//   - fairrelay_lease_lost_total: settles not sent because the lease ran out;
//   - fairrelay_claim_quarantines_total: heads a claim quarantined itself,
//     with no settle (SPEC §2: an inflight head whose lease ran out after
//     its round used the whole budget, reason budget_exhausted; a relay
//     that died while delivering it leaves one); the relay logs each at
//     WARN, as a settle's quarantine;
//   - fairrelay_settles_held_total: settle attempts put off because another
//     transaction held the event's flow (an open outbox transaction on
//     PostgreSQL, fairrelay.SettleManyParams.SkipHeld): one per answer per attempt,
//     so an answer held for long counts many times; a rate above zero
//     says some flow is held (the relay also logs a warning once an
//     answer has waited about a second);
//   - fairrelay_delivery_seconds{class}: delivery latency histogram
//     (observed once the answer waits for its settle), by the class of the
//     receiver's answer: ack (accepted, duplicate), transient (retry, gap,
//     a timeout, an unknown answer) or permanent (SPEC §2), so that
//     timeouts and failures do not blend into the latency of the
//     deliveries that succeed;
//   - fairrelay_transactions_total{kind}: write transactions the relay
//     committed, by kind: claim (Claim), settle (SettleMany) or
//     settle_and_claim (SettleMany with a ClaimLimit). Claims and settles per
//     transaction are the group commit's batch sizes;
//   - fairrelay_store_errors_total: store round trips (reads and writes)
//     that failed and were tried again after a pause (the database
//     unreachable, restarting, busy or out of space; see Relay.Health);
//   - fairrelay_pruned_events_total, fairrelay_pruned_tombstones_total:
//     what the relay's own prunes deleted (Config.RetainAcked);
//   - fairrelay_prune_write_seconds: how long each of the relay's prune
//     batches held the store's writer in one write, in seconds
//     (fairrelay.PruneResult.Held: on SQLite what a dispatch step can wait
//     behind a prune);
//   - fairrelay_prune_wall_kept: the events and ids the last prune kept
//     although due by the store's tick, because the wall clock says they
//     are younger than the retention (fairrelay.PruneResult.WallKept,
//     summed over its batches): above 0, the store's tick runs ahead of
//     time; the relay warns too;
//   - fairrelay_relay_group_slot_seconds_total{group}: the slot time of the
//     group's ended deliveries, from claim to answer, in seconds (SPEC §11:
//     what the relay's time sharing charges, before the weight);
//   - fairrelay_relay_group_slots{group}: the delivery slots the group
//     holds now.
//
// The group label of the last two is bounded: the first MetricGroups
// groups get their own, every later one OtherGroups.
//
// The labelled series whose labels are known in advance start at zero: every
// outcome with each settle status it can have, every latency class and every
// transaction kind, so that an alert's increase() or rate() sees the first
// quarantine or the first permanent answer, not a series that appears at 1.
//
// Errors: reg's registration error (for example a duplicate).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		claims: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fairrelay_claims_total", Help: "Claims that took a head."}),
		idles: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fairrelay_idle_claims_total", Help: "Claims that found no eligible head."}),
		settles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairrelay_settles_total", Help: "Settles by outcome sent and settle status."},
			[]string{"outcome", "status"}),
		leaseLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fairrelay_lease_lost_total", Help: "Settles not sent because the lease ran out first."}),
		claimQuar: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fairrelay_claim_quarantines_total", Help: "Heads a claim quarantined itself: the lease ran out after the round used the whole budget (budget_exhausted, SPEC §2); no settle counts them."}),
		held: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fairrelay_settles_held_total", Help: "Settle attempts put off because another transaction (an open outbox transaction) held the event's flow; one per answer per attempt."}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "fairrelay_delivery_seconds", Help: "Delivery latency, from send to answer, by the class of the answer (ack, transient, permanent).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15)}, []string{"class"}),
		txs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairrelay_transactions_total", Help: "Write transactions the relay committed, by kind (claim, settle, settle_and_claim)."},
			[]string{"kind"}),
		prunedEv: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fairrelay_pruned_events_total", Help: "Acked events the relay's prunes deleted (SPEC §8 retention)."}),
		prunedTS: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fairrelay_pruned_tombstones_total", Help: "Tombstones the relay's prunes deleted (SPEC §8 retention)."}),
		pruneHeld: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "fairrelay_prune_write_seconds", Help: "How long each prune batch of the relay held the store's writer in one write (SQLite: what dispatch waits behind).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 12)}),
		wallKept: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fairrelay_prune_wall_kept", Help: "Events and ids the relay's last prune kept although due by the store's tick, because the wall clock says they are younger than the retention: above 0, the store's tick runs ahead of time (docs/operations.md, a poisoned tick)."}),
		storeErrs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fairrelay_store_errors_total", Help: "Store round trips that failed and were tried again after a pause."}),
		slotSecs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairrelay_relay_group_slot_seconds_total", Help: "Slot time of a group's ended deliveries, claim to answer (SPEC §11); the first 50 groups by label, the rest as (other)."},
			[]string{"group"}),
		slots: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fairrelay_relay_group_slots", Help: "Delivery slots a group holds now; the first 50 groups by label, the rest as (other)."},
			[]string{"group"}),
		labelled: map[string]bool{},
	}
	for _, o := range fairrelay.Outcomes() {
		for _, st := range settleStatuses(o) {
			m.settles.WithLabelValues(string(o), string(st))
		}
		m.latency.WithLabelValues(outcomeClass(o))
	}
	for _, kind := range []string{txClaim, txSettle, txSettleAndClaim} {
		m.txs.WithLabelValues(kind)
	}
	for _, c := range []prometheus.Collector{m.claims, m.idles, m.settles, m.leaseLost, m.claimQuar, m.held, m.latency, m.txs, m.storeErrs, m.prunedEv, m.prunedTS, m.pruneHeld, m.wallKept, m.slotSecs, m.slots} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// groupLabel is the group label of g: its own name for the first
// MetricGroups groups, OtherGroups after.
func (m *Metrics) groupLabel(g string) string {
	m.labelMu.Lock()
	defer m.labelMu.Unlock()
	if m.labelled[g] {
		return g
	}
	if len(m.labelled) < MetricGroups {
		m.labelled[g] = true
		return g
	}
	return OtherGroups
}

func (m *Metrics) groupSlots(g string, delta int) {
	if m != nil {
		m.slots.WithLabelValues(m.groupLabel(g)).Add(float64(delta))
	}
}

func (m *Metrics) groupSlotTime(g string, d time.Duration) {
	if m != nil {
		m.slotSecs.WithLabelValues(m.groupLabel(g)).Add(d.Seconds())
	}
}

func (m *Metrics) claim() {
	if m != nil {
		m.claims.Inc()
	}
}

// Transaction kinds of fairrelay_transactions_total.
const (
	txClaim          = "claim"
	txSettle         = "settle"
	txSettleAndClaim = "settle_and_claim"
)

func (m *Metrics) transaction(kind string) {
	if m != nil {
		m.txs.WithLabelValues(kind).Inc()
	}
}

func (m *Metrics) heldSettles(n int) {
	if m != nil && n > 0 {
		m.held.Add(float64(n))
	}
}

func (m *Metrics) storeError() {
	if m != nil {
		m.storeErrs.Inc()
	}
}

func (m *Metrics) pruned(res fairrelay.PruneResult) {
	if m == nil {
		return
	}
	m.prunedEv.Add(float64(res.Events))
	m.prunedTS.Add(float64(res.Tombstones))
	m.pruneHeld.Observe(res.Held.Seconds())
}

// pruneWallKept sets what the last prune that read its batches to the end
// held back by the wall clock.
func (m *Metrics) pruneWallKept(n int64) {
	if m != nil {
		m.wallKept.Set(float64(n))
	}
}

func (m *Metrics) claimQuarantined(n int) {
	if m == nil || n == 0 {
		return
	}
	m.claimQuar.Add(float64(n))
}

func (m *Metrics) idle() {
	if m != nil {
		m.idles.Inc()
	}
}

func (m *Metrics) delivered(d time.Duration, o fairrelay.Outcome) {
	if m != nil {
		m.latency.WithLabelValues(outcomeClass(o)).Observe(d.Seconds())
	}
}

// settleStatuses are the statuses a settle with outcome o can answer (SPEC
// §2): an ack outcome acks, a permanent one quarantines, a transient one
// makes the head ready again or quarantines it once the budget is spent;
// any of them is stale or expired when the token no longer holds.
func settleStatuses(o fairrelay.Outcome) []fairrelay.SettleStatus {
	switch o.Class() {
	case fairrelay.ClassAck:
		return []fairrelay.SettleStatus{fairrelay.SettleAcked, fairrelay.SettleStale, fairrelay.SettleExpired}
	case fairrelay.ClassPermanent:
		return []fairrelay.SettleStatus{fairrelay.SettleQuarantined, fairrelay.SettleStale, fairrelay.SettleExpired}
	}
	return []fairrelay.SettleStatus{fairrelay.SettleReady, fairrelay.SettleQuarantined, fairrelay.SettleStale, fairrelay.SettleExpired}
}

// outcomeClass is the class label of fairrelay_delivery_seconds.
func outcomeClass(o fairrelay.Outcome) string {
	switch o.Class() {
	case fairrelay.ClassAck:
		return "ack"
	case fairrelay.ClassPermanent:
		return "permanent"
	}
	return "transient"
}

func (m *Metrics) settled(s Settled) {
	if m == nil {
		return
	}
	if s.LeaseLost {
		m.leaseLost.Inc()
		return
	}
	m.settles.WithLabelValues(string(s.Outcome), string(s.Result.Status)).Inc()
}

// queueCollector reads the queue's state at scrape time.
type queueCollector struct {
	q       *fairrelay.Queue
	events  *prometheus.Desc
	flows   *prometheus.Desc
	paused  *prometheus.Desc
	backlog *prometheus.Desc
	limit   *prometheus.Desc
	// quarantined counts a group's quarantined heads.
	quarantined *prometheus.Desc
	oldest      *prometheus.Desc
	up          *prometheus.Desc
	age         *prometheus.Desc

	log     *slog.Logger
	timeout time.Duration // a scrape's read of the store at most

	mu      sync.Mutex
	last    []prometheus.Metric // the values of the last read that succeeded
	lastAt  time.Time           // when that read began (zero: none yet)
	failing bool                // the last read failed (logged once per streak)
}

// QueueGaugesOptions are RegisterQueueGauges' options.
type QueueGaugesOptions struct {
	// Logger logs a failed read of the store at WARN when the gauges start
	// failing (with the error: a lock timeout, a refused connection) and at
	// INFO when a read succeeds again; nothing per scrape in between.
	// Defaults to slog.Default(); give slog.New(slog.DiscardHandler) to
	// drop them.
	Logger *slog.Logger
	// ReadTimeout bounds each scrape's read of the store; a read that takes
	// longer fails (the last values, up 0). Default DefaultQueueGaugesReadTimeout,
	// below Prometheus' common scrape timeouts, so that a store locked past
	// the lock timeout (5 s) shows as up 0 rather than as a scrape that
	// timed out with every other metric of the page (an SRE's report).
	ReadTimeout time.Duration
}

// DefaultQueueGaugesReadTimeout is QueueGaugesOptions.ReadTimeout's default.
const DefaultQueueGaugesReadTimeout = 3 * time.Second

// RegisterQueueGauges registers gauges read from the queue store at each
// scrape, in two read transactions: one Queue.Overview (its exact counts,
// and the backlog and flow count) and the groups, 1000 a read:
//   - fairrelay_events{state}: events not acked, by state (inflight and
//     quarantined heads, counted through their indexes; ready: the rest of
//     the backlog, every event behind a head included — a quarantined
//     event is always a head and blocks the events behind it);
//   - fairrelay_flows: flows in the store;
//   - fairrelay_flows_paused: flows paused by an operator (SPEC §9), whose
//     heads are not claimed until they are resumed;
//   - fairrelay_group_backlog{group}: events not acked in each group that
//     has a row (SPEC §8: a group a flow named, or a configured one; a
//     flow created without a group is its own and counts in
//     fairrelay_events only, so that a store of a million flows does not
//     make a million series), paged 1000 groups a read;
//   - fairrelay_group_max_backlog{group}: its backlog limit (0: none);
//   - fairrelay_group_quarantined{group}: its quarantined heads, one per
//     flow at most (the heads redrive --all --group takes), so that an
//     alert can name the tenant whose events wait for an operator;
//   - fairrelay_oldest_unacked_age_seconds: how long the event not acked
//     that was enqueued first has waited, on the store's clock: the stored
//     tick minus its enqueue tick, in seconds (1 tick = 1 ms, SPEC §7); 0
//     when every event is acked. One read through an index. The store's
//     clock moves with the writes of the processes that write their tick
//     (a running relay does), so it is the signal to alert on for a stuck
//     flow or a relay that falls behind, not for a relay that is down
//     (alert on its absence);
//   - fairrelay_queue_gauges_up: 1 when this scrape read the store, 0 when
//     the read failed (a lock held by a migration, the database down);
//   - fairrelay_queue_gauges_age_seconds: how old the values above are, in
//     seconds: 0 when this scrape read them.
//
// A scrape whose read fails reports the values of the last read that
// succeeded, with up 0 and their age, so that an alert on them (a
// quarantined head, the oldest event's age) does not resolve because the
// store cannot be read — the moment an operator needs it (before, the
// gauges went missing). Alert on up == 0 too. Before any read succeeded
// only up (0) is reported. Of scrapes that overlap, the values of the read
// that began last are kept. opts (at most one) may name a Logger for the
// failed reads' errors and a ReadTimeout (3 s by default).
//
// A scrape's cost: the backlog is a counter on SQLite and a sum over the
// flow table on PostgreSQL, the flow count one count of the flow table on
// both (O(flows), in one statement each; before, a scrape paged through
// every flow's head, a read per 1000 flows), the state counts O(inflight
// + quarantined heads), the groups O(groups + their flows: the flow and
// quarantined-head counts read each group's flows through an index)
// (BENCHMARKS.md, "The queue gauges").
func RegisterQueueGauges(reg prometheus.Registerer, q *fairrelay.Queue, opts ...QueueGaugesOptions) error {
	log := slog.Default()
	timeout := DefaultQueueGaugesReadTimeout
	for _, o := range opts {
		if o.Logger != nil {
			log = o.Logger
		}
		if o.ReadTimeout > 0 {
			timeout = o.ReadTimeout
		}
	}
	return reg.Register(&queueCollector{
		q:       q,
		log:     log,
		timeout: timeout,
		events:  prometheus.NewDesc("fairrelay_events", "Events not acked, by state.", []string{"state"}, nil),
		flows:   prometheus.NewDesc("fairrelay_flows", "Flows in the queue store.", nil, nil),
		paused:  prometheus.NewDesc("fairrelay_flows_paused", "Flows paused by an operator (SPEC §9): their heads are not claimed until resumed.", nil, nil),
		backlog: prometheus.NewDesc("fairrelay_group_backlog", "Events not acked in a group (SPEC §8), for the groups that have a row.",
			[]string{"group"}, nil),
		limit: prometheus.NewDesc("fairrelay_group_max_backlog", "A group's backlog limit (0: none).", []string{"group"}, nil),
		quarantined: prometheus.NewDesc("fairrelay_group_quarantined",
			"Quarantined heads in a group (SPEC §8), for the groups that have a row: what redrive --all --group would take.", []string{"group"}, nil),
		oldest: prometheus.NewDesc("fairrelay_oldest_unacked_age_seconds",
			"How long the oldest event not acked has waited, on the store's clock (its tick now minus the event's enqueue tick; 1 tick = 1 ms); 0 when every event is acked.", nil, nil),
		up: prometheus.NewDesc("fairrelay_queue_gauges_up",
			"1 when this scrape read the queue store's gauges, 0 when the read failed (the other queue gauges then hold the last values read).", nil, nil),
		age: prometheus.NewDesc("fairrelay_queue_gauges_age_seconds",
			"How old the queue gauges' values are, in seconds: 0 when this scrape read them.", nil, nil),
	})
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.events
	ch <- c.flows
	ch <- c.paused
	ch <- c.backlog
	ch <- c.limit
	ch <- c.quarantined
	ch <- c.oldest
	ch <- c.up
	ch <- c.age
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	began := time.Now()
	ms, err := c.read()
	c.mu.Lock()
	defer c.mu.Unlock()
	up := 1.0
	switch {
	case err != nil:
		up, ms = 0, c.last
		if !c.failing {
			if c.lastAt.IsZero() {
				// Nothing read yet: the page has up 0 alone (an SRE's
				// report: the line promised last values there were none of).
				c.log.Warn("relay: the queue gauges could not read the store, and have no values yet; /metrics reports fairrelay_queue_gauges_up 0 alone", "err", err)
			} else {
				c.log.Warn("relay: the queue gauges could not read the store; /metrics reports their last values with fairrelay_queue_gauges_up 0", "err", err)
			}
		}
		c.failing = true
	case began.Before(c.lastAt):
		ms = c.last // a read that began later has stored its values
	default:
		c.last, c.lastAt = ms, began
		if c.failing {
			c.log.Info("relay: the queue gauges read the store again")
		}
		c.failing = false
	}
	for _, m := range ms {
		ch <- m
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up)
	switch {
	case err == nil:
		ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, 0)
	case !c.lastAt.IsZero():
		ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, max(0, time.Since(c.lastAt).Seconds()))
	}
}

// read reads the gauges' values from the store, within c.timeout; its
// error says when the store took longer.
func (c *queueCollector) read() (ms []prometheus.Metric, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	defer func() {
		if err != nil && ctx.Err() != nil {
			err = fmt.Errorf("the read took longer than its %s (QueueGaugesOptions.ReadTimeout): %w", c.timeout, err)
		}
	}()
	// One read transaction: the counts agree with each other. Exact
	// counts (no MaxCount bound): each reads its index of inflight or
	// quarantined heads, which a relay keeps small.
	o, err := c.q.Overview(ctx, fairrelay.OverviewParams{Backlog: true, Flows: true, MaxCount: math.MaxInt32})
	if err != nil {
		return nil, err
	}
	var age float64
	if o.Oldest != nil {
		age = float64(max(0, o.Clock.Tick-o.Oldest.EnqueuedAt)) / 1000
	}
	// Every event not acked is a ready, inflight or quarantined head, or
	// behind a head, where it is ready (untouched since its enqueue).
	ready := max(0, o.Backlog-o.Inflight-o.Quarantined)
	ms = []prometheus.Metric{
		prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, age),
		prometheus.MustNewConstMetric(c.events, prometheus.GaugeValue, float64(ready), string(fairrelay.StateReady)),
		prometheus.MustNewConstMetric(c.events, prometheus.GaugeValue, float64(o.Inflight), string(fairrelay.StateInflight)),
		prometheus.MustNewConstMetric(c.events, prometheus.GaugeValue, float64(o.Quarantined), string(fairrelay.StateQuarantined)),
		prometheus.MustNewConstMetric(c.flows, prometheus.GaugeValue, float64(o.Flows)),
		prometheus.MustNewConstMetric(c.paused, prometheus.GaugeValue, float64(o.Paused)),
	}
	const page = 1000
	for after := ""; ; {
		gs, err := c.q.Groups(ctx, after, page)
		if err != nil {
			return nil, err
		}
		for _, g := range gs {
			var limit int64
			if g.MaxBacklog != nil {
				limit = *g.MaxBacklog
			}
			ms = append(ms, prometheus.MustNewConstMetric(c.backlog, prometheus.GaugeValue, float64(g.Backlog), g.Group),
				prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(limit), g.Group),
				prometheus.MustNewConstMetric(c.quarantined, prometheus.GaugeValue, float64(g.Quarantined), g.Group))
		}
		if len(gs) < page {
			return ms, nil
		}
		after = gs[len(gs)-1].Group
	}
}
