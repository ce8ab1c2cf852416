package relay_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/relay"
	"github.com/fairrelay/fairrelay/sink"
)

// Several relays on one PostgreSQL queue (the usual high-availability
// setup), each with its own pool and clock, dispatch one backlog together:
// none stops on clock_regressed (their writes wait for lane locks while the
// others commit later ticks: fairrelay.ClaimParams.Floor), every event is
// applied once, in order within its flow, never two deliveries of a flow at
// once.
func TestSeveralRelaysOnOnePostgresQueue(t *testing.T) {
	t.Parallel()
	const relays, flows, perFlow = 3, 100, 30
	dsn := pgtest.Schema(t, "relay_ha_")
	ctx := t.Context()
	var (
		mu       sync.Mutex
		last     = map[string]int64{} // flow → seq applied
		inflight = map[string]int{}
		overlap  []string
		applied  int
		all      = make(chan struct{})
	)
	receiver := sink.Func(func(_ context.Context, d sink.Delivery) (sink.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		if inflight[d.Flow]++; inflight[d.Flow] > 1 {
			overlap = append(overlap, d.EventID)
		}
		defer func() { inflight[d.Flow]-- }()
		switch {
		case d.Seq <= last[d.Flow]:
			return sink.Result{Outcome: fairrelay.OutcomeDuplicate}, nil
		case d.Seq > last[d.Flow]+1:
			return sink.Result{Outcome: fairrelay.OutcomeGap}, nil
		}
		last[d.Flow] = d.Seq
		if applied++; applied == flows*perFlow {
			close(all)
		}
		return sink.Result{Outcome: fairrelay.OutcomeAccepted}, nil
	})
	runErr := make(chan error, relays)
	var stops []context.CancelFunc
	var qs []*fairrelay.Queue
	for i := range relays {
		q, err := fairrelay.Open(ctx, dsn, fairrelay.Config{Policy: fairrelay.DaemonPolicy()})
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		qs = append(qs, q)
		if i == 0 {
			ps := make([]fairrelay.NewEvent, 0, flows*perFlow)
			for s := range perFlow {
				for f := range flows {
					ps = append(ps, fairrelay.NewEvent{ID: fmt.Sprintf("F%03d-%02d", f, s+1), Flow: fmt.Sprintf("F%03d", f), Body: []byte(`{"delta":1}`)})
				}
			}
			if _, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: fairrelay.AtStored, Events: ps}); err != nil {
				t.Fatal(err)
			}
		}
		r, err := relay.New(ctx, relay.Config{Queue: q, Sink: receiver, Workers: 16})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		stops = append(stops, stop)
		go func() { runErr <- r.Run(runCtx) }()
	}
	select {
	case <-all:
	case err := <-runErr:
		t.Fatalf("a relay stopped before the backlog was done: %v", err)
	case <-time.After(2 * time.Minute):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("%d of %d events applied in 2 minutes", applied, flows*perFlow)
	}
	for _, stop := range stops {
		stop()
	}
	for range relays {
		if err := <-runErr; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(overlap) > 0 {
		t.Errorf("deliveries of one flow at once: %v", overlap)
	}
	hs, err := qs[0].Heads(ctx, "", flows+1)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		if h.Head != nil {
			t.Errorf("flow %s: head %+v left, want every event acked", h.Flow, h.Head)
		}
	}
}
