package relay_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/relay"
)

// Under 4 workers each flow arrives at the receiver in seq order, one
// delivery at a time, and every event is applied once.
func TestOrderPerFlowUnderWorkers(t *testing.T) {
	t.Parallel()
	testOrderPerFlow(t, newHarness(t, patientPolicy()))
}

// The same on PostgreSQL: queue store and inbox each in a fresh schema.
func TestOrderPerFlowUnderWorkersPostgres(t *testing.T) {
	t.Parallel()
	testOrderPerFlow(t, newHarnessOn(t, patientPolicy(), pgtest.Schema(t, "relay_q_"), pgtest.Schema(t, "relay_i_")))
}

func testOrderPerFlow(t *testing.T, h *harness) {
	const flows, events = 8, 6
	for f := range flows {
		h.enqueue(t, fmt.Sprintf("F%d", f), 1, 2, 3, 4, 5, 6)
	}
	_, stop := h.start(t, h.patient(t))
	all := h.until(t, acks(flows*events))
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, s := range all {
		if s.Outcome != fairrelay.OutcomeAccepted {
			t.Errorf("%s: outcome %s (%s), want accepted only", s.Claim.Token.EventID, s.Outcome, s.Detail)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.overlap) > 0 {
		t.Errorf("flows delivered twice at once: %v", h.overlap)
	}
	next := map[string]int{}
	for _, d := range h.seen {
		next[d.flow]++
		if want := fmt.Sprint(next[d.flow]); d.seq != want {
			t.Errorf("flow %s: got seq %s, want %s", d.flow, d.seq, want)
		}
	}
	led, receipts := h.ledger(t)
	if receipts != flows*events {
		t.Errorf("receipts %d, want %d", receipts, flows*events)
	}
	for f, p := range led {
		if p.Seq != events || p.Total != 21 {
			t.Errorf("flow %s: %+v, want seq 6 total 21", f, p)
		}
	}
}

// One worker under the fair policy serves the flows in rotation (SPEC §5
// result 1 through the daemon).
func TestFairRotation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, patientPolicy())
	for _, f := range []string{"A", "B", "C"} {
		h.enqueue(t, f, 1, 1, 1)
	}
	cfg := h.patient(t)
	cfg.Workers = 1
	_, stop := h.start(t, cfg)
	all := h.until(t, acks(9))
	stop()
	var order []string
	for _, s := range all {
		order = append(order, s.Claim.Token.EventID)
	}
	if got, want := strings.Join(order, " "), "A1 B1 C1 A2 B2 C2 A3 B3 C3"; got != want {
		t.Fatalf("order %s, want %s", got, want)
	}
}

// A permanent answer quarantines A1 without holding back B; A2 is never
// delivered; a redrive through Do (after the receiver gains the capability)
// completes A.
func TestQuarantineOnPermanentAnswerThenRedrive(t *testing.T) {
	t.Parallel()
	h := newHarness(t, patientPolicy())
	h.in.SetMaxDelta(5)
	h.enqueue(t, "A", 10, 1)
	h.enqueue(t, "B", 1, 2, 3)
	cfg := h.patient(t)
	reported := make(chan relay.Quarantine, 4)
	cfg.OnQuarantine = func(q relay.Quarantine) { reported <- q }
	r, stop := h.start(t, cfg)
	quarantined := func(all []relay.Settled) bool {
		q := false
		for _, s := range all {
			q = q || s.Result.Status == fairrelay.SettleQuarantined
		}
		return q && acks(3)(all)
	}
	all := h.until(t, quarantined)
	for _, s := range all {
		if s.Result.Status == fairrelay.SettleQuarantined && (s.Claim.Token.EventID != "A1" || s.Outcome != fairrelay.OutcomeUnsupportedDelta) {
			t.Errorf("quarantined %s with %s, want A1 with unsupported_delta", s.Claim.Token.EventID, s.Outcome)
		}
	}
	a1 := h.event(t, "A1")
	if a1.State != fairrelay.StateQuarantined || *a1.Reason != "unsupported_delta" {
		t.Fatalf("A1: %+v", a1.EventState)
	}
	// Config.OnQuarantine hears of it once, with the generation a redrive
	// needs.
	if q := nextQuarantine(t, reported); q.ByClaim || q.Head.ID != "A1" || q.Head.Flow != "A" || q.Head.Seq != 1 ||
		q.Head.Reason != "unsupported_delta" || q.Head.Generation != a1.Generation || q.Outcome != fairrelay.OutcomeUnsupportedDelta {
		t.Errorf("OnQuarantine got %+v, want A1 by a settle of unsupported_delta at generation %d", q, a1.Generation)
	}
	if a2 := h.event(t, "A2"); a2.State != fairrelay.StateReady || a2.Generation != 0 {
		t.Fatalf("A2 was touched: %+v", a2.EventState)
	}
	h.mu.Lock()
	for _, d := range h.seen {
		if d.id == "A2" {
			t.Error("A2 was delivered behind a quarantined head")
		}
	}
	h.mu.Unlock()

	select {
	case q := <-reported:
		t.Errorf("OnQuarantine called again: %+v", q)
	default:
	}
	h.in.SetMaxDelta(1000)
	err := r.Do(t.Context(), func(at int64) error {
		_, err := h.q.Redrive(t.Context(), fairrelay.RedriveParams{EventID: "A1", ExpectedGeneration: a1.Generation, Reason: "receiver upgraded", At: at})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	h.until(t, acks(2))
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	led, _ := h.ledger(t)
	if led["A"].Seq != 2 || led["A"].Total != 11 || led["B"].Total != 6 {
		t.Fatalf("ledger %+v", led)
	}
}
