package console_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/console"
)

// benchSize is the store BenchmarkPages reads: FAIRRELAY_CONSOLE_BENCH_EVENTS
// events over FAIRRELAY_CONSOLE_BENCH_FLOWS flows (default 20 000 over 2 000,
// quick; BENCHMARKS.md runs 1 000 000 over 100 000).
func benchSize(b *testing.B) (events, flows int) {
	get := func(name string, def int) int {
		v := os.Getenv(name)
		if v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("%s: want a positive integer, got %q", name, v)
		}
		return n
	}
	events, flows = get("FAIRRELAY_CONSOLE_BENCH_EVENTS", 20000), get("FAIRRELAY_CONSOLE_BENCH_FLOWS", 2000)
	if flows > events {
		b.Fatalf("more flows (%d) than events (%d)", flows, events)
	}
	return events, flows
}

// benchStore opens the benchmark's store, filling it the first time: a
// file under the temporary directory named by its size, kept for the next
// run (delete it to rebuild). events spread over flows in passes (the
// backlog of a store that fell behind); then 4% of the flows' heads
// claimed and settled in one batch (a quarter each rejected and
// unsupported_delta, so quarantined; retried; acked), and 100 flows
// paused.
//
// FAIRRELAY_CONSOLE_BENCH_PG_URL, when set, is a PostgreSQL database to use
// instead (filled when its queue store is empty, kept afterwards).
func benchStore(b *testing.B) *fairrelay.Queue {
	events, flows := benchSize(b)
	path := filepath.Join(os.TempDir(), fmt.Sprintf("fairrelay-console-bench-%d-%d.db", events, flows))
	if pg := os.Getenv("FAIRRELAY_CONSOLE_BENCH_PG_URL"); pg != "" {
		path = pg
	}
	q, err := fairrelay.Open(bg, path, fairrelay.Config{Policy: fairrelay.DaemonPolicy()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { q.Close() })
	c, err := q.Clock(bg)
	if err != nil {
		b.Fatal(err)
	}
	if c.Ticket > 0 {
		return q // filled by an earlier run (its claims took tickets)
	}
	start := time.Now()
	batch := make([]fairrelay.NewEvent, 0, 10000)
	flush := func() {
		if _, err := q.EnqueueMany(bg, fairrelay.EnqueueManyParams{At: fairrelay.AtStored, Events: batch}); err != nil {
			b.Fatal(err)
		}
		batch = batch[:0]
	}
	for i := range events {
		f := i % flows
		batch = append(batch, fairrelay.NewEvent{ID: fmt.Sprintf("e%07d", i), Flow: fmt.Sprintf("f%06d", f), Body: fmt.Appendf(nil, `{"delta":%d,"n":%d}`, 1+i%5, i)})
		if len(batch) == cap(batch) {
			flush()
		}
	}
	if len(batch) > 0 {
		flush()
	}
	b.Logf("enqueued %d events over %d flows in %v", events, flows, time.Since(start))
	heads := max(flows/25, 4)
	cl, err := q.Claim(bg, fairrelay.ClaimParams{At: fairrelay.AtStored, Limit: heads})
	if err != nil {
		b.Fatal(err)
	}
	var ss []fairrelay.Settlement
	for i, c := range cl.Claims {
		out := []fairrelay.Outcome{fairrelay.OutcomeRejected, fairrelay.OutcomeUnsupportedDelta, fairrelay.OutcomeRetry, fairrelay.OutcomeAccepted}[i%4]
		ss = append(ss, fairrelay.Settlement{Token: c.Token, Outcome: out, Duration: time.Duration(5+i%50) * time.Millisecond})
	}
	if _, err := q.SettleMany(bg, fairrelay.SettleManyParams{At: fairrelay.AtStored, Settles: ss}); err != nil {
		b.Fatal(err)
	}
	for i := range min(100, flows) {
		if _, err := q.Pause(bg, fairrelay.FlowActionParams{Flow: fmt.Sprintf("f%06d", flows-1-i), Reason: "bench", Operator: "bench", At: fairrelay.AtStored}); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("store ready in %v: %s", time.Since(start), path)
	return q
}

// BenchmarkPages times each page handler of the console on a large store
// (see benchSize), without the network: a request through the handler.
func BenchmarkPages(b *testing.B) {
	q := benchStore(b)
	_, flows := benchSize(b)
	s, err := console.New(console.Config{Queue: q, LocalOperator: "bench", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	mid := fmt.Sprintf("f%06d", flows/2)
	for _, p := range []struct{ name, path string }{
		{"overview", "/"},
		{"flows", "/flows"},
		{"flows_after", "/flows?after=" + mid},
		{"flows_prefix", "/flows?prefix=" + mid[:len(mid)-2]},
		{"flows_prefix_few", "/flows?prefix=f00000"}, // 10 flows, then the range ends
		{"flows_paused", "/flows?paused=1"},
		{"event", "/event/e" + fmt.Sprintf("%07d", flows/2)},
		{"flow", "/flow/" + mid},
		{"flow_after", "/flow/" + mid + "?after=5"},
		{"quarantine", "/quarantine"},
		{"quarantine_filtered", "/quarantine?reason=rejected&prefix=" + mid[:len(mid)-2]},
		{"quarantine_after", "/quarantine?after=" + mid},
		{"quarantine_prefix_few", "/quarantine?prefix=f0000"},
		{"audit", "/audit"},
	} {
		b.Run(p.name, func(b *testing.B) {
			for b.Loop() {
				w := httptest.NewRecorder()
				s.ServeHTTP(w, httptest.NewRequest("GET", "http://127.0.0.1"+p.path, nil)) // a loopback Host: the console has no sign-in
				if w.Code != http.StatusOK {
					b.Fatalf("GET %s: %d %s", p.path, w.Code, w.Body)
				}
			}
		})
	}
}
