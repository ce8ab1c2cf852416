package fairrelay_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/pgtest"
)

// A batch at the store's tick (AtStored, or at NULL through the SQL
// function) succeeds while other writers move the store's tick, as busy
// relays do every millisecond. enqueue_events read the stored tick again
// after taking each new flow's name and started the whole call over when it
// had moved; after ten start-overs the call answered FR001 (an SRE's drill:
// a bulk enqueue of new flows in a group beside two busy relays failed 8 of
// 8, "enqueue at tick 1265255: the store is at tick 1265256"), then busy
// (migration 037). The call now takes every name before it reads the tick
// (migration 039), and starts over only for a row it meets written past its
// tick (migration 038).
func TestPostgresABatchOfNewFlowsBesideMovingTicks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, err := fairrelay.Open(ctx, pgtest.Schema(t, "frbatchtick"), fairrelay.Config{Policy: fairrelay.DaemonPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	body := []byte(`{"delta":1}`)
	if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "m0", Flow: "mover", Body: body, At: 1}); err != nil {
		t.Fatal(err)
	}
	// The mover: writes at ever later ticks, one after another, as a
	// relay's claims and settles do, on a flow of its own.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	var moverErr error
	go func() {
		defer wg.Done()
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: fmt.Sprintf("m%d", i), Flow: "mover", Body: body, At: int64(1 + i)}); err != nil {
				moverErr = err
				return
			}
		}
	}()
	defer func() {
		close(stop)
		wg.Wait()
		if moverErr != nil {
			t.Errorf("the mover: %v", moverErr)
		}
	}()
	for round := range 5 {
		events := make([]fairrelay.NewEvent, 200)
		for i := range events {
			events[i] = fairrelay.NewEvent{ID: fmt.Sprintf("r%d-%d", round, i), Flow: fmt.Sprintf("r%d-f%d", round, i%100), Group: fmt.Sprintf("g%d", round), Body: body}
		}
		res, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: fairrelay.AtStored, Events: events})
		if err != nil {
			t.Fatalf("round %d: a batch of 100 new flows at the store's tick: %v, want success", round, err)
		}
		for i, r := range res {
			if r.Status != fairrelay.EnqueueCreated {
				t.Fatalf("round %d, event %d: %+v, want created", round, i, r)
			}
		}
	}
}
