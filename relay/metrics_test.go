package relay_test

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/relay"
)

func TestMetrics(t *testing.T) {
	t.Parallel()
	h := newHarness(t, patientPolicy())
	h.in.SetMaxDelta(5)
	h.enqueue(t, "A", 10, 1)
	h.enqueue(t, "B", 1, 2)
	reg := prometheus.NewRegistry()
	m, err := relay.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.RegisterQueueGauges(reg, h.q); err != nil {
		t.Fatal(err)
	}
	cfg := h.patient(t)
	cfg.Metrics = m
	_, stop := h.start(t, cfg)
	h.until(t, func(all []relay.Settled) bool { return len(all) == 3 })
	stop()
	got := series(t, reg)
	for name, want := range map[string]float64{
		"fairrelay_claims_total":                                               3,
		"fairrelay_settles_total,outcome=accepted,status=acked":                2,
		"fairrelay_settles_total,outcome=unsupported_delta,status=quarantined": 1,
		"fairrelay_delivery_seconds,class=ack":                                 2,
		"fairrelay_delivery_seconds,class=permanent":                           1,
		"fairrelay_events,state=quarantined":                                   1,
		"fairrelay_events,state=ready":                                         1,
		"fairrelay_events,state=inflight":                                      0,
		"fairrelay_flows":                                                      2,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
}

// openReference opens a queue store of the reference policy in a new
// SQLite file, closed when the test ends.
func openReference(t *testing.T) *fairrelay.Queue {
	t.Helper()
	q, err := fairrelay.Open(t.Context(), filepath.Join(t.TempDir(), "q.db"), fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

// series gathers reg as name,label=value,… → the counter's or gauge's
// value, or the histogram's sample count.
func series(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range mt.GetLabel() {
				name += "," + l.GetName() + "=" + l.GetValue()
			}
			got[name] = mt.GetCounter().GetValue() + mt.GetGauge().GetValue() + float64(mt.GetHistogram().GetSampleCount())
		}
	}
	return got
}

// metricValue reads one counter of reg by name and label pairs, 0 when it
// has no such series yet.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					found = found || (l.GetName() == labels[i] && l.GetValue() == labels[i+1])
				}
				if !found {
					continue series
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// counterValue returns the value of the unlabelled counter name in reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	return unlabelled(t, reg, name).GetCounter().GetValue()
}

// histogram returns the sample count and sum of the unlabelled histogram
// name in reg.
func histogram(t *testing.T, reg *prometheus.Registry, name string) (uint64, float64) {
	t.Helper()
	h := unlabelled(t, reg, name).GetHistogram()
	return h.GetSampleCount(), h.GetSampleSum()
}

// unlabelled returns the one series of the unlabelled metric name in reg.
func unlabelled(t *testing.T, reg *prometheus.Registry, name string) *dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0]
		}
	}
	t.Fatalf("no metric %s", name)
	return nil
}

// fairrelay_oldest_unacked_age_seconds is the stored tick minus the enqueue
// tick of the oldest event not acked, in seconds (1 tick = 1 ms), and 0
// once every event is acked: a gauge to alert on for a stuck head.
func TestOldestUnackedAgeGauge(t *testing.T) {
	t.Parallel()
	ctx, q := t.Context(), openReference(t)
	reg := prometheus.NewRegistry()
	if err := relay.RegisterQueueGauges(reg, q); err != nil {
		t.Fatal(err)
	}
	age := func() float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "fairrelay_oldest_unacked_age_seconds" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no fairrelay_oldest_unacked_age_seconds")
		return 0
	}
	if a := age(); a != 0 {
		t.Errorf("empty store: age %v, want 0", a)
	}
	for _, e := range []struct {
		id, flow string
		at       int64
	}{{"A1", "A", 1000}, {"B1", "B", 2500}, {"C1", "C", 6000}} {
		if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: e.id, Flow: e.flow, Body: []byte(`{"delta":1}`), At: e.at}); err != nil {
			t.Fatal(err)
		}
	}
	if a := age(); a != 5 {
		t.Errorf("A1 enqueued at tick 1000, the store at 6000: age %v, want 5", a)
	}
	cr, err := q.Claim(ctx, fairrelay.ClaimParams{At: 7000, Limit: 3})
	if err != nil || len(cr.Claims) != 3 {
		t.Fatalf("claim: %+v %v", cr, err)
	}
	for _, c := range cr.Claims {
		if c.Token.EventID != "A1" {
			continue
		}
		if r, err := q.Settle(ctx, fairrelay.SettleParams{Token: c.Token, Outcome: fairrelay.OutcomeAccepted, At: 7001}); err != nil || r.Status != fairrelay.SettleAcked {
			t.Fatalf("settle A1: %+v %v", r, err)
		}
	}
	if a := age(); a != 4.501 {
		t.Errorf("A1 acked, B1 enqueued at 2500, the store at 7001: age %v, want 4.501", a)
	}
	for _, c := range cr.Claims {
		if c.Token.EventID == "A1" {
			continue
		}
		if r, err := q.Settle(ctx, fairrelay.SettleParams{Token: c.Token, Outcome: fairrelay.OutcomeAccepted, At: 7002}); err != nil || r.Status != fairrelay.SettleAcked {
			t.Fatalf("settle %s: %+v %v", c.Token.EventID, r, err)
		}
	}
	if a := age(); a != 0 {
		t.Errorf("every event acked: age %v, want 0", a)
	}
}

// fairrelay_group_quarantined counts each group's quarantined heads: a
// head rejected for good counts in its group, a ready or inflight one does
// not, and a group with none reports 0. An operator's alert names the
// tenant whose events wait for a redrive.
func TestGroupQuarantinedGauge(t *testing.T) {
	t.Parallel()
	ctx, q := t.Context(), openReference(t)
	for _, e := range []struct{ id, flow, group string }{{"A1", "A", "acme"}, {"B1", "B", "acme"}, {"C1", "C", "beta"}, {"D1", "D", "acme"}} {
		if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: e.id, Flow: e.flow, Group: e.group, Body: []byte(`{"delta":1}`), At: 1}); err != nil {
			t.Fatal(err)
		}
	}
	// A1 and C1 rejected (quarantined), B1 left inflight, D1 ready.
	for range 3 {
		r, err := q.Claim(ctx, fairrelay.ClaimParams{At: 2})
		if err != nil || len(r.Claims) != 1 {
			t.Fatalf("claim: %+v %v", r, err)
		}
		if c := r.Claims[0]; c.Flow != "B" {
			if _, err := q.Settle(ctx, fairrelay.SettleParams{Token: c.Token, Outcome: fairrelay.OutcomeRejected, At: 2}); err != nil {
				t.Fatal(err)
			}
		}
	}
	reg := prometheus.NewRegistry()
	if err := relay.RegisterQueueGauges(reg, q); err != nil {
		t.Fatal(err)
	}
	got := series(t, reg)
	for name, want := range map[string]float64{
		"fairrelay_group_quarantined,group=acme": 1, "fairrelay_group_quarantined,group=beta": 1,
		"fairrelay_events,state=quarantined": 2, "fairrelay_events,state=inflight": 1,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
}

// A scrape whose read of the store fails reports the values of the last
// read that succeeded, with fairrelay_queue_gauges_up 0 and their age, and
// no gathering error: the gauges went missing when the store could not be
// read (a lock held by a migration, the database down), so an alert on a
// quarantined head or the oldest event's age resolved at the moment it
// mattered (an operator's report). Before any read succeeded, only up (0).
func TestQueueGaugesKeepTheirLastValuesWhenTheStoreFails(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	gather := func(reg *prometheus.Registry) map[string]float64 { t.Helper(); return series(t, reg) }
	q, err := fairrelay.Open(ctx, filepath.Join(t.TempDir(), "q.db"), fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []struct{ id, flow, group string }{{"A1", "A", ""}, {"B1", "B", "g"}, {"B2", "B", "g"}} {
		if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: e.id, Flow: e.flow, Group: e.group, Body: []byte(`{"delta":1}`), At: 1000}); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	var logged bytes.Buffer
	if err := relay.RegisterQueueGauges(reg, q, relay.QueueGaugesOptions{Logger: slog.New(slog.NewTextHandler(&logged, nil))}); err != nil {
		t.Fatal(err)
	}
	read := gather(reg)
	want := map[string]float64{
		"fairrelay_events,state=ready": 3, "fairrelay_events,state=inflight": 0, "fairrelay_events,state=quarantined": 0,
		"fairrelay_flows": 2, "fairrelay_flows_paused": 0, "fairrelay_group_backlog,group=g": 2, "fairrelay_group_max_backlog,group=g": 0,
		"fairrelay_group_quarantined,group=g":  0,
		"fairrelay_oldest_unacked_age_seconds": 0, "fairrelay_queue_gauges_up": 1, "fairrelay_queue_gauges_age_seconds": 0,
	}
	if d := cmp.Diff(want, read); d != "" {
		t.Errorf("a scrape that reads the store (-want +got):\n%s", d)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	failed := gather(reg)
	gather(reg)
	// The error is logged, once for the streak, not per scrape.
	if n := strings.Count(logged.String(), "could not read the store"); n != 1 || !strings.Contains(logged.String(), "database is closed") {
		t.Errorf("%d lines for two failed scrapes, want 1 naming the error:\n%s", n, logged.String())
	}
	if failed["fairrelay_queue_gauges_up"] != 0 {
		t.Errorf("a scrape whose read failed: up %v, want 0", failed["fairrelay_queue_gauges_up"])
	}
	if a, ok := failed["fairrelay_queue_gauges_age_seconds"]; !ok || a < 0 {
		t.Errorf("a scrape whose read failed: age %v (present %v), want the values' age", a, ok)
	}
	delete(failed, "fairrelay_queue_gauges_up")
	delete(failed, "fairrelay_queue_gauges_age_seconds")
	delete(read, "fairrelay_queue_gauges_up")
	delete(read, "fairrelay_queue_gauges_age_seconds")
	if d := cmp.Diff(read, failed); d != "" {
		t.Errorf("a scrape whose read failed: want the last values read (-want +got):\n%s", d)
	}
	if strings.Contains(logged.String(), "no values yet") {
		t.Errorf("the collector that had read values logged that it had none:\n%s", logged.String())
	}
	// A collector whose first read fails has no values: only up; its line
	// says so rather than promising last values.
	var logged2 bytes.Buffer
	reg2 := prometheus.NewRegistry()
	if err := relay.RegisterQueueGauges(reg2, q, relay.QueueGaugesOptions{Logger: slog.New(slog.NewTextHandler(&logged2, nil))}); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[string]float64{"fairrelay_queue_gauges_up": 0}, gather(reg2)); d != "" {
		t.Errorf("a first scrape whose read failed (-want +got):\n%s", d)
	}
	if !strings.Contains(logged2.String(), "have no values yet") || strings.Contains(logged2.String(), "last values") {
		t.Errorf("a first read that failed: the line does not say there are no values yet:\n%s", logged2.String())
	}
}

// The series whose labels are known in advance exist at zero before the
// first delivery, so that increase() over an alert's window sees the first
// quarantine; the settles' series are the statuses each outcome can have.
func TestMetricsStartAtZero(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	if _, err := relay.NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	got := series(t, reg)
	for name, v := range got {
		if v != 0 {
			t.Errorf("%s = %v before any delivery", name, v)
		}
	}
	for _, name := range []string{
		"fairrelay_settles_total,outcome=accepted,status=acked",
		"fairrelay_settles_total,outcome=duplicate,status=expired",
		"fairrelay_settles_total,outcome=unsupported_delta,status=quarantined",
		"fairrelay_settles_total,outcome=retry,status=ready",
		"fairrelay_settles_total,outcome=retry,status=quarantined",
		"fairrelay_settles_total,outcome=gap,status=stale",
		"fairrelay_delivery_seconds,class=ack",
		"fairrelay_delivery_seconds,class=transient",
		"fairrelay_delivery_seconds,class=permanent",
		"fairrelay_transactions_total,kind=claim",
		"fairrelay_transactions_total,kind=settle",
		"fairrelay_transactions_total,kind=settle_and_claim",
	} {
		if _, ok := got[name]; !ok {
			t.Errorf("no series %s before any delivery", name)
		}
	}
	for _, name := range []string{
		"fairrelay_settles_total,outcome=accepted,status=quarantined",
		"fairrelay_settles_total,outcome=rejected,status=ready",
	} {
		if _, ok := got[name]; ok {
			t.Errorf("series %s exists: no settle can answer it", name)
		}
	}
}
