package inbox_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairrelay/fairrelay/inbox"
)

// The receiver's request series of the codes it answers start at zero,
// before its first request, so that an alert's increase() sees the first
// 500 (the inbox's database failed) or 422 (a permanent answer).
func TestReceiverMetricsStartAtZero(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	if _, err := inbox.Instrument(reg, http.NotFoundHandler()); err != nil {
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

// Instrument counts what the handler answered, by status: library users
// get the metrics fairrelay receive serves (they were the CLI's alone; a
// library user's report).
func TestInstrumentCountsTheAnswers(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	h, err := inbox.Instrument(reg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusConflict) }))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", nil))
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got float64
	for _, mf := range mfs {
		if mf.GetName() != "fairrelay_receive_requests_total" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "code" && l.GetValue() == "409" {
					got = mt.GetCounter().GetValue()
				}
			}
		}
	}
	if got != 3 {
		t.Errorf("fairrelay_receive_requests_total{code=\"409\"} = %v, want 3", got)
	}
	if _, err := inbox.Instrument(reg, h); err == nil {
		t.Error("Instrument on a registry that has its metrics already: no error")
	}
}
