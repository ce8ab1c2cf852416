package relay_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/relay"
	"github.com/fairrelay/fairrelay/sink"
)

// BenchmarkRelay measures the relay daemon end to end with a sink that
// accepts every event at once: b.N events, enqueued up front on 100 flows
// (ordered) or each on its own flow (unordered), dispatched by a relay with
// 100 workers until the last ack, on a SQLite file and on PostgreSQL. It
// reports events/s; ns/op is the time per event.
//
//	go test ./relay -run '^$' -bench Relay -benchtime 5000x
func BenchmarkRelay(b *testing.B) {
	for _, backend := range []string{"sqlite", "postgres"} {
		for _, shape := range []string{"unordered", "ordered"} {
			b.Run(backend+"/"+shape, func(b *testing.B) {
				dsn := filepath.Join(b.TempDir(), "queue.db")
				if backend == "postgres" {
					dsn = pgtest.Schema(b, "relay_bench_")
				}
				benchRelay(b, dsn, shape == "ordered")
			})
		}
	}
}

func benchRelay(b *testing.B, dsn string, ordered bool) {
	ctx := b.Context()
	q, err := fairrelay.Open(ctx, dsn, fairrelay.Config{Policy: fairrelay.DaemonPolicy()})
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	ps := make([]fairrelay.NewEvent, 0, 1000)
	for i := range b.N {
		flow := fmt.Sprintf("f%07d", i)
		if ordered {
			flow = fmt.Sprintf("f%03d", i%100)
		}
		ps = append(ps, fairrelay.NewEvent{ID: fmt.Sprintf("e%07d", i), Flow: flow, Body: []byte(`{"delta":1}`)})
		if len(ps) == cap(ps) || i == b.N-1 {
			if _, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: 0, Events: ps}); err != nil {
				b.Fatal(err)
			}
			ps = ps[:0]
		}
	}
	var acked atomic.Int64
	done := make(chan struct{})
	failed := make(chan relay.Settled, 1)
	r, err := relay.New(ctx, relay.Config{
		Queue: q, Workers: 100,
		Sink: sink.Func(func(context.Context, sink.Delivery) (sink.Result, error) {
			return sink.Result{Outcome: fairrelay.OutcomeAccepted}, nil
		}),
		OnSettle: func(s relay.Settled) {
			if s.LeaseLost || s.Result.Status != fairrelay.SettleAcked {
				select {
				case failed <- s:
				default:
				}
				return
			}
			if acked.Add(1) == int64(b.N) {
				close(done)
			}
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	runErr := make(chan error, 1)
	b.ResetTimer()
	go func() { runErr <- r.Run(runCtx) }()
	select {
	case <-done:
	case s := <-failed:
		b.Fatalf("settle: %+v", s)
	case err := <-runErr:
		b.Fatalf("relay stopped: %v", err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	stop()
	if err := <-runErr; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkQueueGaugesScrape times one scrape of RegisterQueueGauges'
// gauges on a store of 100 000 flows of one event each (1 000 of them
// claimed, so inflight), against the read the gauges made before: every
// flow's head, paged 1000 flows a read transaction (Queue.Heads), which is
// what "heads-paged" times. "grouped" puts the same flows in 1 000 groups
// (SPEC §8), whose per-group gauges read every grouped flow. ns/op is one
// scrape.
//
//	go test ./relay -run '^$' -bench QueueGaugesScrape -benchtime 20x
func BenchmarkQueueGaugesScrape(b *testing.B) {
	const flows = 100000
	for _, layout := range []string{"", "/grouped"} {
		for _, backend := range []string{"sqlite", "postgres"} {
			benchmarkQueueGaugesScrape(b, backend+layout, flows)
		}
	}
}

func benchmarkQueueGaugesScrape(b *testing.B, name string, flows int) {
	backend, grouped := strings.CutSuffix(name, "/grouped")
	b.Run(name, func(b *testing.B) {
		ctx := b.Context()
		dsn := filepath.Join(b.TempDir(), "queue.db")
		if backend == "postgres" {
			dsn = pgtest.Schema(b, "relay_gauges_")
		}
		q, err := fairrelay.Open(ctx, dsn, fairrelay.Config{Policy: fairrelay.DaemonPolicy()})
		if err != nil {
			b.Fatal(err)
		}
		defer q.Close()
		ps := make([]fairrelay.NewEvent, 0, 1000)
		for i := range flows {
			e := fairrelay.NewEvent{ID: fmt.Sprintf("e%07d", i), Flow: fmt.Sprintf("f%07d", i), Body: []byte(`{"delta":1}`)}
			if grouped {
				e.Group = fmt.Sprintf("g%04d", i%1000)
			}
			ps = append(ps, e)
			if len(ps) == cap(ps) {
				if _, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: 0, Events: ps}); err != nil {
					b.Fatal(err)
				}
				ps = ps[:0]
			}
		}
		for range 10 { // 1 000 heads inflight: 100 workers on each of 10 relays
			if _, err := q.Claim(ctx, fairrelay.ClaimParams{At: 1, Limit: 100}); err != nil {
				b.Fatal(err)
			}
		}
		reg := prometheus.NewRegistry()
		if err := relay.RegisterQueueGauges(reg, q); err != nil {
			b.Fatal(err)
		}
		b.Run("scrape", func(b *testing.B) {
			for b.Loop() {
				if _, err := reg.Gather(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("heads-paged", func(b *testing.B) {
			for b.Loop() {
				n := 0
				for after := ""; ; {
					hs, err := q.Heads(ctx, after, 1000)
					if err != nil {
						b.Fatal(err)
					}
					n += len(hs)
					if len(hs) < 1000 {
						break
					}
					after = hs[len(hs)-1].Flow
				}
				if n != flows {
					b.Fatalf("%d flows paged, want %d", n, flows)
				}
			}
		})
	})
}
