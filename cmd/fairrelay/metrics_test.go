package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// failing is a collector whose every collection fails, as the inbox's held
// gauge does while the inbox's database cannot be read.
type failing struct{ desc *prometheus.Desc }

func (f failing) Describe(ch chan<- *prometheus.Desc) { ch <- f.desc }
func (f failing) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.NewInvalidMetric(f.desc, errors.New("held count: timeout"))
}

// A metric that cannot be collected now is left out of /metrics, and the
// rest is served: a 500 for the whole page hid the counters of what went
// wrong meanwhile (a fresh user's report).
func TestMetricsPageSurvivesAFailingCollector(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "test_errors_total", Help: "errors"})
	c.Add(3)
	reg.MustRegister(c, failing{prometheus.NewDesc("test_held", "held", nil, nil)})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var logged strings.Builder
	stop := serveMetrics(ln, reg, func(context.Context) error { return nil }, slog.New(slog.NewTextHandler(&logged, nil)))
	defer stop()
	resp, err := http.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "test_errors_total 3") || strings.Contains(string(body), "test_held ") {
		t.Errorf("/metrics: %s\n%s\nwant 200 with the counter and without the failing gauge", resp.Status, body)
	}
	stop()
	if !strings.Contains(logged.String(), "held count: timeout") {
		t.Errorf("the failed collection was not logged:\n%s", logged.String())
	}
}

// The receiver's request series of the codes it answers start at zero,
// before its first request, so that an alert's increase() sees the first
// 500 (the inbox's database failed) or 422 (a permanent answer).
func TestReceiverMetricsStartAtZero(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	if _, err := instrumentReceiver(reg, http.NotFoundHandler()); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				got[mf.GetName()+"{"+l.GetValue()+"}"] = mt.GetCounter().GetValue() == 0 && mt.GetHistogram().GetSampleCount() == 0
			}
		}
	}
	for _, code := range []string{"200", "400", "401", "409", "422", "500", "503"} {
		for _, name := range []string{"fairrelay_receive_requests_total", "fairrelay_receive_request_seconds"} {
			if !got[name+"{"+code+"}"] {
				t.Errorf("no series %s{code=%q} at zero before the first request", name, code)
			}
		}
	}
}
