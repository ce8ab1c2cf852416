package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay/internal/store"
)

// changeSignal holds Store.Changes to its contract (internal/store,
// changes.go): a value once the watch holds; a value after a commit of
// another handle (another process, as far as the store can tell) that
// makes a head claimable — onto a new flow, and onto a flow whose head was
// acked — through the store's own Enqueue and through a caller's
// transaction; and the channel closed when ctx is done and when the store
// closes. Values coalesce, so before each commit the channel is drained.
func changeSignal(t *testing.T, open Opener) {
	s, reopen := open(t, "fair")
	other, err := reopen("fair", false)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	var statuses []error
	c := s.Changes(ctx, func(err error) { statuses = append(statuses, err) })
	WaitChange(t, c, "once the watch holds")
	Drain(c)

	enqueue(t, other, 0, ev("A1", "A", 1))
	WaitChange(t, c, "after an enqueue of another handle onto a new flow")

	// Drain flow A (claim A1, ack it): then A2 is a claimable head again.
	write(t, other, store.LaneClaim, store.ReadSet{At: 0, PickLimit: 1, Order: store.OrderCreation}, func(rr *store.ReadResult) *store.WriteSet {
		f := rr.Picks[0].Flow
		f.HeadSeq++ // acked
		f.Runnable = false
		return &store.WriteSet{Flows: []store.FlowRow{f}, Clock: rr.Clock}
	})
	Drain(c)
	enqueue(t, other, 0, ev("A2", "A", 1))
	WaitChange(t, c, "after an enqueue onto a flow whose head was acked")

	Drain(c)
	r, err := other.Enqueue(bg, nil, store.EnqueueParams{At: store.AtStored, MaxBodyBytes: 1 << 20,
		Events: []store.NewEvent{ev("B1", "B", 1), ev("C1", "C", 1)}})
	if err != nil || r.Answers[0].Status != "created" {
		t.Fatalf("enqueue a batch: %+v %v", r, err)
	}
	WaitChange(t, c, "after a batch onto new flows")

	cancel()
	waitClosed(t, c, "after ctx is done")
	if len(statuses) != 0 {
		t.Errorf("status calls %v, want none: the watch never failed", statuses)
	}

	// Close ends a watch whose ctx is still live.
	c = s.Changes(bg, nil)
	WaitChange(t, c, "once the second watch holds")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, c, "after the store closed")
	c = s.Changes(bg, nil)
	waitClosed(t, c, "from a closed store")
}

// WaitChange waits for a value on c (a Store.Changes channel), failing the
// test after 10 s or when c closes; what says when it was due.
func WaitChange(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case _, ok := <-c:
		if !ok {
			t.Fatalf("no change signal %s: the channel closed", what)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no change signal within 10s %s", what)
	}
}

// waitClosed waits for c to close, failing after 10 s.
func waitClosed(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-c:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatalf("the change channel is still open 10s %s", what)
		}
	}
}

// Drain takes the value waiting on c, if any: a change signalled before
// what the test does next.
func Drain(c <-chan struct{}) {
	select {
	case <-c:
	default:
	}
}
