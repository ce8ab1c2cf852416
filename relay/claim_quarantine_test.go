package relay_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/relay"
)

// A head a claim quarantines itself — its lease ran out after its round
// used the whole budget, as a relay that died while delivering it leaves
// it (SPEC §2) — is logged at WARN as "relay: quarantined" and counted in
// fairrelay_claim_quarantines_total, as a settle's quarantine is (a
// breaker's report: no settle answers it, and the relay said nothing), and
// reported to Config.OnQuarantine.
func TestRelayReportsAClaimsQuarantine(t *testing.T) {
	t.Parallel()
	pol := testPolicy()
	pol.Budget = 1
	h := newHarness(t, pol)
	h.enqueue(t, "A", 1)
	// Another relay's claim, never settled: A1 inflight, its one attempt
	// the whole budget.
	cr, err := h.q.Claim(t.Context(), fairrelay.ClaimParams{At: fairrelay.AtStored, Limit: 1})
	if err != nil || len(cr.Claims) != 1 {
		t.Fatalf("claim: %+v %v", cr, err)
	}
	reg := prometheus.NewRegistry()
	m, err := relay.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := h.config(t)
	cfg.Metrics = m
	quarantined := make(chan struct{})
	cfg.Logger = slog.New(&onMessage{prefix: "relay: quarantined", do: func() { close(quarantined) }})
	reported := make(chan relay.Quarantine, 4)
	cfg.OnQuarantine = func(q relay.Quarantine) { reported <- q }
	_, stop := h.start(t, cfg)
	h.time.Advance(time.Duration(pol.Lease)*time.Millisecond + time.Minute) // past its lease
	waitClosed(t, quarantined)
	// And to the application's hook, which OnSettle alone never told.
	if q := nextQuarantine(t, reported); !q.ByClaim || q.Head.ID != "A1" || q.Head.Reason != fairrelay.ReasonBudgetExhausted ||
		q.Head.Generation != cr.Claims[0].Token.Generation || q.Outcome != "" {
		t.Errorf("OnQuarantine got %+v, want A1 by the claim, budget_exhausted, generation %d", q, cr.Claims[0].Token.Generation)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := counterValue(t, reg, "fairrelay_claim_quarantines_total"); n != 1 {
		t.Errorf("fairrelay_claim_quarantines_total = %v, want 1", n)
	}
	e, err := h.q.Event(t.Context(), "A1")
	if err != nil || e.State != fairrelay.StateQuarantined || e.Reason == nil || *e.Reason != fairrelay.ReasonBudgetExhausted {
		t.Fatalf("A1: %+v %v, want quarantined budget_exhausted", e, err)
	}
}
