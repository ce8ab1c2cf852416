package relay

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/sink"
)

// backends runs fn on a fresh SQLite file and on a fresh PostgreSQL schema.
func backends(t *testing.T, fn func(t *testing.T, dsn string)) {
	pgtest.EachBackend(t, "queue.db", "relay_pipe_", fn)
}

// newTestRelay opens a queue on dsn with one event on each of n flows and a
// relay over it (no Run) whose sink accepts everything.
func newTestRelay(t *testing.T, dsn string, n int) (*Relay, *Metrics) {
	t.Helper()
	q, err := fairrelay.Open(t.Context(), dsn, fairrelay.Config{Policy: fairrelay.DaemonPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	ps := make([]fairrelay.NewEvent, n)
	for i := range ps {
		ps[i] = fairrelay.NewEvent{ID: fmt.Sprintf("E%02d", i), Flow: fmt.Sprintf("F%02d", i), Body: []byte(`{"delta":1}`)}
	}
	if _, err := q.EnqueueMany(t.Context(), fairrelay.EnqueueManyParams{At: 0, Events: ps}); err != nil {
		t.Fatal(err)
	}
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(t.Context(), Config{Queue: q, Workers: n, Metrics: m, Source: &fixedTime{},
		Sink: sink.Func(func(context.Context, sink.Delivery) (sink.Result, error) {
			return sink.Result{Outcome: fairrelay.OutcomeAccepted}, nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	return r, m
}

// fixedTime is a Monotonic source that never moves.
type fixedTime struct{}

func (*fixedTime) Elapsed() time.Duration { return 0 }

// stepTime is a Monotonic source a test moves by hand (one goroutine).
type stepTime struct{ d time.Duration }

func (s *stepTime) Elapsed() time.Duration { return s.d }

// counter reads a counter's value.
func counter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// atomicTime is a Monotonic source a test moves while deliveries read it.
type atomicTime struct{ d atomic.Int64 }

func (s *atomicTime) Elapsed() time.Duration { return time.Duration(s.d.Load()) }

// When the last young delivery ends beside a slow one still under way, the
// claimer and the settler are woken: their batch wait waits only for young
// deliveries (youngDelivery), so with none left it would otherwise sit out
// its whole window after every round of fast deliveries beside a slow
// receiver. The ending delivery is neither the one that frees a full relay
// nor the first answer nor the last delivery, the wake-ups it had before.
func TestLastYoungDeliveryWakesTheBatchWaits(t *testing.T) {
	src := &atomicTime{}
	q, err := fairrelay.Open(t.Context(), filepath.Join(t.TempDir(), "queue.db"), fairrelay.Config{Policy: fairrelay.DaemonPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	r, err := New(t.Context(), Config{Queue: q, Workers: 8, Source: src,
		Sink: sink.Func(func(context.Context, sink.Delivery) (sink.Result, error) {
			return sink.Result{Outcome: fairrelay.OutcomeAccepted}, nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		slowStart time.Duration // the other delivery under way
		wantKick  bool
	}{
		{"beside a slow delivery", 0, true},
		{"beside a young delivery", time.Second - time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src.d.Store(int64(time.Second))
			p := &pipeline{
				inDelivery: map[string]chan struct{}{},
				claimKick:  make(chan struct{}, 1),
				settleKick: make(chan struct{}, 1),
				// One other delivery under way, and one answer already
				// waiting: this one's is not the first.
				started:    []time.Duration{tc.slowStart},
				delivering: 2,
				answers:    []answer{{}},
			}
			var wg sync.WaitGroup
			cl := fairrelay.Claim{Token: fairrelay.Token{EventID: "E", Generation: 1}, Flow: "F", Group: "F", Seq: 1, LeaseUntil: 1 << 40}
			r.startDelivery(t.Context(), p, &wg, cl, src.Elapsed())
			wg.Wait()
			var claimer, settler bool
			select {
			case <-p.claimKick:
				claimer = true
			default:
			}
			select {
			case <-p.settleKick:
				settler = true
			default:
			}
			if claimer != tc.wantKick || settler != tc.wantKick {
				t.Fatalf("claimer woken %v, settler woken %v; want %v for both", claimer, settler, tc.wantKick)
			}
		})
	}
}
