package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

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
	stop := serveMetrics(ln, reg, func(context.Context) error { return nil }, slog.New(slog.NewTextHandler(&logged, nil)), serverMustNotFail(t))
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

// /readyz gives its check a deadline within Kubernetes' default probe
// timeout (1 s), and a check that runs out answers 503 with why: with 5 s,
// a relay whose PostgreSQL store was locked answered after 5 s (an SRE's
// drill), which a probe takes as a timeout that says nothing.
func TestReadyzAnswersWithinAProbeTimeout(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	given := make(chan time.Duration, 1)
	stop := serveMetrics(ln, prometheus.NewRegistry(), func(ctx context.Context) error {
		dl, ok := ctx.Deadline()
		if !ok {
			return nil
		}
		given <- time.Until(dl)
		<-ctx.Done() // a store that does not answer
		return fmt.Errorf("read the store's clock: %w", ctx.Err())
	}, slog.New(slog.DiscardHandler), serverMustNotFail(t))
	defer stop()
	resp, err := http.Get("http://" + ln.Addr().String() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "context deadline exceeded") {
		t.Errorf("/readyz with a store that does not answer: %s %s, want 503 saying the read ran out", resp.Status, body)
	}
	select {
	case d := <-given:
		if d <= 0 || d > time.Second {
			t.Errorf("/readyz gave its check %v, want a deadline within 1 s", d)
		}
	default:
		t.Error("/readyz gave its check no deadline")
	}
}

// brokenWriter is a scraper gone mid-page: every write fails.
type brokenWriter struct{ h http.Header }

func (b *brokenWriter) Header() http.Header        { return b.h }
func (b *brokenWriter) Write([]byte) (int, error)  { return 0, errors.New("write: broken pipe") }
func (b *brokenWriter) WriteHeader(statusCode int) {}

// A scrape whose client is gone logs one line for the failed write and one
// counting the families that failed after it, not one per family (a fresh
// user's report: 46 lines per abandoned scrape, 414 after a 20 s SIGSTOP);
// a collection that fails is still logged on its own.
func TestAnAbandonedScrapeLogsTwoLines(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	for i := range 20 {
		reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: fmt.Sprintf("test_family_%d_total", i), Help: "a family"}))
	}
	reg.MustRegister(failing{prometheus.NewDesc("test_held", "held", nil, nil)})
	var logged strings.Builder
	h := metricsHandler(reg, slog.New(slog.NewTextHandler(&logged, nil)))
	req, err := http.NewRequest(http.MethodGet, "/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	h.ServeHTTP(&brokenWriter{h: http.Header{}}, req)
	// Every family the page holds (promhttp's own error counter with
	// them) failed to send: the first is logged, the others counted.
	mfs, _ := reg.Gather()
	more := fmt.Sprintf("families=%d", len(mfs)-1)
	lines := strings.Split(strings.TrimSpace(logged.String()), "\n")
	var sends, rest, held int
	for _, l := range lines {
		switch {
		case strings.Contains(l, "error encoding and sending metric family") && strings.Contains(l, "broken pipe"):
			sends++
		case strings.Contains(l, "the rest of the page could not be sent") && strings.Contains(l, more):
			rest++
		case strings.Contains(l, "held count: timeout"):
			held++
		}
	}
	if len(lines) != 3 || sends != 1 || rest != 1 || held != 1 {
		t.Errorf("logged %d lines, want 3 (the collection's failure, the first failed send, one counting the other %d):\n%s", len(lines), len(mfs)-1, logged.String())
	}
}
