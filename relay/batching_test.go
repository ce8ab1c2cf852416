package relay_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/relay"
)

// The claimer takes as many heads as there are free delivery slots in one
// transaction: 16 eligible flows, 16 workers, one claim transaction while
// every delivery is held at the receiver.
func TestOneClaimTransactionFillsTheFreeSlots(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, h *harness) {
		const n = 16
		for f := range n {
			h.enqueue(t, fmt.Sprintf("F%02d", f), 1)
		}
		arrived, release := make(chan string, n), make(chan struct{})
		h.intercept = func(w http.ResponseWriter, r *http.Request, d delivery) bool {
			arrived <- d.id
			<-release
			return false
		}
		reg := prometheus.NewRegistry()
		m, err := relay.NewMetrics(reg)
		if err != nil {
			t.Fatal(err)
		}
		// Held deliveries must not time out.
		cfg := h.patient(t)
		cfg.Workers, cfg.Metrics = n, m
		_, stop := h.start(t, cfg)
		for range n {
			select {
			case <-arrived:
			case <-time.After(10 * time.Second):
				t.Fatal("fewer than 16 deliveries arrived within 10 s")
			}
		}
		claims := metricValue(t, reg, "fairrelay_claims_total")
		txs := metricValue(t, reg, "fairrelay_transactions_total", "kind", "claim")
		close(release)
		h.until(t, acks(n))
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if claims != n || txs != 1 {
			t.Fatalf("with every delivery held: %v claims in %v claim transactions, want %d in 1", claims, txs, n)
		}
	}
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); run(t, newHarness(t, patientPolicy())) })
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		run(t, newHarnessOn(t, patientPolicy(), pgtest.Schema(t, "relay_q_"), pgtest.Schema(t, "relay_i_")))
	})
}

// On SQLite (one writer) the claimer settles each answer with its next
// claim: one flow of three events under one worker is one claim
// transaction, then three settles with a claim (SettleMany with a
// ClaimLimit), and no separate settle.
func TestSQLiteSettlesWithTheNextClaim(t *testing.T) {
	t.Parallel()
	h := newHarness(t, patientPolicy())
	h.enqueue(t, "A", 1, 2, 3)
	reg := prometheus.NewRegistry()
	m, err := relay.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := h.patient(t)
	cfg.Workers, cfg.Metrics = 1, m
	_, stop := h.start(t, cfg)
	h.until(t, acks(3))
	got := map[string]float64{}
	for _, kind := range []string{"claim", "settle_and_claim", "settle"} {
		got[kind] = metricValue(t, reg, "fairrelay_transactions_total", "kind", kind)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got["claim"] != 1 || got["settle_and_claim"] != 3 || got["settle"] != 0 {
		t.Fatalf("transactions %v, want claim 1, settle_and_claim 3, settle 0", got)
	}
}
