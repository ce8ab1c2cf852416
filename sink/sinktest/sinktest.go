// Package sinktest is the conformance suite every sink.Sink must pass: the
// same tests run unchanged against each implementation, with a real inbox
// (SPEC §3) on a SQLite file as the receiver behind it. A sink is done when
// Run passes, not when it compiles.
package sinktest

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/sink"
)

// NewSink wires the sink under test to the receiver in: every delivery it
// makes must reach in.Receive (over whatever transport the sink uses), and
// its Result must carry in's outcome. It is called once per subtest, with a
// fresh inbox; use t.Cleanup for servers it starts.
type NewSink func(t *testing.T, in *inbox.Inbox) sink.Sink

// Option changes what Run expects of the receiver behind the sink.
type Option func(*options)

type options struct{ holdsGaps bool }

// HoldsGaps says that the receiver keeps a delivery that answered gap and
// applies it once its predecessor is applied, before it answers the
// predecessor: a broker consumer (package consume holds such messages in
// the inbox), where the HTTP receiver keeps nothing and the relay sends it
// again.
func HoldsGaps() Option { return func(o *options) { o.holdsGaps = true } }

// Run runs the suite. Each subtest is parallel.
func Run(t *testing.T, newSink NewSink, opts ...Option) {
	t.Helper()
	var o options
	for _, f := range opts {
		f(&o)
	}
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, s sink.Sink, in *inbox.Inbox)
	}{
		{"AcceptedThenDuplicate", testAcceptedThenDuplicate},
		{"GapIsTransient", func(t *testing.T, s sink.Sink, in *inbox.Inbox) { testGap(t, s, in, o.holdsGaps) }},
		{"PermanentOutcomes", testPermanent},
		{"UnavailableIsRetry", testUnavailable},
		{"CancelledContext", testCancelled},
		{"ConcurrentFlows", testConcurrent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in, err := inbox.Open(t.Context(), filepath.Join(t.TempDir(), "inbox.db"), inbox.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { in.Close() })
			tc.fn(t, newSink(t, in), in)
		})
	}
}

func ledger(id, flow string, seq, delta int64) sink.Delivery {
	return sink.Delivery{EventID: id, Flow: flow, Seq: seq, Generation: 1, Attempt: 1,
		Body: fmt.Appendf(nil, `{"delta": %d}`, delta)}
}

func deliver(t *testing.T, s sink.Sink, d sink.Delivery, want fairrelay.Outcome) {
	t.Helper()
	res, err := s.Deliver(t.Context(), d)
	if err != nil {
		t.Fatalf("deliver %s: %v", d.EventID, err)
	}
	if res.Outcome != want {
		t.Fatalf("deliver %s: outcome %q (%s), want %q", d.EventID, res.Outcome, res.Detail, want)
	}
}

// projection returns the inbox's ledger and receipt count.
func projection(t *testing.T, in *inbox.Inbox) (map[string]inbox.Projection, int) {
	t.Helper()
	s, err := in.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return s.ByFlow(), len(s.Receipts)
}

func wantLedger(t *testing.T, in *inbox.Inbox, receipts int, want map[string]inbox.Projection) {
	t.Helper()
	got, n := projection(t, in)
	if n != receipts {
		t.Errorf("receipts: %d, want %d", n, receipts)
	}
	if len(got) != len(want) {
		t.Errorf("projection: %v, want %v", got, want)
	}
	for f, p := range want {
		if got[f] != p {
			t.Errorf("projection of %s: %+v, want %+v", f, got[f], p)
		}
	}
}

// The body arrives byte for byte (a redelivery of the same bytes is a
// duplicate, with one effect), and the second delivery of an id acks too.
func testAcceptedThenDuplicate(t *testing.T, s sink.Sink, in *inbox.Inbox) {
	d := ledger("A1", "A", 1, 7)
	d.Body = []byte(`{ "delta": 7,  "note": "é\u00e9" }`)
	deliver(t, s, d, fairrelay.OutcomeAccepted)
	d.Generation, d.Attempt = 2, 1
	deliver(t, s, d, fairrelay.OutcomeDuplicate)
	changed := d
	changed.Body = []byte(`{"delta":7,"note":"éé"}`)
	deliver(t, s, changed, fairrelay.OutcomeIDConflict)
	deliver(t, s, ledger("A2", "A", 2, 3), fairrelay.OutcomeAccepted)
	wantLedger(t, in, 2, map[string]inbox.Projection{"A": {Flow: "A", Seq: 2, Total: 10}})
}

func testGap(t *testing.T, s sink.Sink, in *inbox.Inbox, holdsGaps bool) {
	deliver(t, s, ledger("A2", "A", 2, 1), fairrelay.OutcomeGap)
	if fairrelay.OutcomeGap.Class() != fairrelay.ClassTransient {
		t.Fatal("gap must be transient")
	}
	wantLedger(t, in, 0, map[string]inbox.Projection{})
	deliver(t, s, ledger("A1", "A", 1, 1), fairrelay.OutcomeAccepted)
	deliver(t, s, ledger("X1", "A", 1, 1), fairrelay.OutcomeSequenceConflict)
	if holdsGaps {
		// A2 was kept, and applied once A1 was.
		wantLedger(t, in, 2, map[string]inbox.Projection{"A": {Flow: "A", Seq: 2, Total: 2}})
		return
	}
	wantLedger(t, in, 1, map[string]inbox.Projection{"A": {Flow: "A", Seq: 1, Total: 1}})
}

func testPermanent(t *testing.T, s sink.Sink, in *inbox.Inbox) {
	in.SetMaxDelta(5)
	deliver(t, s, ledger("A1", "A", 1, 10), fairrelay.OutcomeUnsupportedDelta)
	bad := ledger("B1", "B", 1, 1)
	bad.Body = []byte(`{"delta": "ten"}`)
	deliver(t, s, bad, fairrelay.OutcomeInvalidBody)
	wantLedger(t, in, 0, map[string]inbox.Projection{})
	in.SetMaxDelta(1000)
	deliver(t, s, ledger("A1", "A", 1, 10), fairrelay.OutcomeAccepted)
	wantLedger(t, in, 1, map[string]inbox.Projection{"A": {Flow: "A", Seq: 1, Total: 10}})
}

func testUnavailable(t *testing.T, s sink.Sink, in *inbox.Inbox) {
	in.SetUnavailable(true)
	res, err := s.Deliver(t.Context(), ledger("A1", "A", 1, 1))
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome.Class() != fairrelay.ClassTransient {
		t.Fatalf("unavailable receiver: outcome %q is not transient", res.Outcome)
	}
	wantLedger(t, in, 0, map[string]inbox.Projection{})
	in.SetUnavailable(false)
	deliver(t, s, ledger("A1", "A", 1, 1), fairrelay.OutcomeAccepted)
}

// A delivery whose context is already done returns at once with an error or
// a transient outcome, never an ack or a permanent outcome it did not get.
func testCancelled(t *testing.T, s sink.Sink, in *inbox.Inbox) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	res, err := s.Deliver(ctx, ledger("A1", "A", 1, 1))
	if err == nil && res.Outcome.Class() != fairrelay.ClassTransient {
		t.Fatalf("cancelled delivery: outcome %q with no error", res.Outcome)
	}
}

// Deliver is safe for concurrent use across flows.
func testConcurrent(t *testing.T, s sink.Sink, in *inbox.Inbox) {
	const flows, events = 8, 3
	var wg sync.WaitGroup
	errs := make(chan error, flows)
	for f := range flows {
		wg.Go(func() {
			flow := fmt.Sprintf("F%d", f)
			for seq := int64(1); seq <= events; seq++ {
				res, err := s.Deliver(t.Context(), ledger(fmt.Sprintf("%s-%d", flow, seq), flow, seq, seq))
				if err != nil || res.Outcome != fairrelay.OutcomeAccepted {
					errs <- fmt.Errorf("%s seq %d: %q %v", flow, seq, res.Outcome, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	want := map[string]inbox.Projection{}
	for f := range flows {
		flow := fmt.Sprintf("F%d", f)
		want[flow] = inbox.Projection{Flow: flow, Seq: events, Total: 1 + 2 + 3}
	}
	wantLedger(t, in, flows*events, want)
}
