package relay

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/harness/queuetest"
	"github.com/fairrelay/fairrelay/internal/logcap"
)

// The settler takes every answer waiting into one transaction: 16 answers,
// one SettleMany, 16 acks.
func TestSettlerSettlesEveryWaitingAnswerInOneTransaction(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, dsn string) {
		const n = 16
		r, m := newTestRelay(t, dsn, n)
		cs, err := queuetest.Claims(r.q.Claim(t.Context(), fairrelay.ClaimParams{At: 0, Limit: n}))
		if err != nil || len(cs) != n {
			t.Fatalf("claim: %d heads, %v", len(cs), err)
		}
		var settled []Settled
		r.cfg.OnSettle = func(s Settled) { settled = append(settled, s) }
		p := &pipeline{claimDone: true, claimKick: make(chan struct{}, 1), settleKick: make(chan struct{}, 1)}
		for _, c := range cs {
			p.answers = append(p.answers, answer{s: Settled{Claim: c, Outcome: fairrelay.OutcomeAccepted}})
		}
		if err := r.settleLoop(t.Context(), t.Context(), p); err != nil {
			t.Fatal(err)
		}
		if got := counter(t, m.txs.WithLabelValues(txSettle)); got != 1 {
			t.Errorf("settle transactions: %v, want 1", got)
		}
		if len(settled) != n {
			t.Fatalf("%d settles reported, want %d", len(settled), n)
		}
		for _, s := range settled {
			if s.Result.Status != fairrelay.SettleAcked {
				t.Errorf("%s: %+v, want acked", s.Claim.Token.EventID, s.Result)
			}
			e, err := r.q.Event(t.Context(), s.Claim.Token.EventID)
			if err != nil || e.State != fairrelay.StateAcked {
				t.Errorf("%s stored as %+v (%v), want acked", s.Claim.Token.EventID, e, err)
			}
		}
	})
}

// An answer whose lease ran out by the settle's tick is not sent: it is
// reported LeaseLost and its event stays inflight; the others settle.
func TestSettleSkipsAnswersPastTheirLease(t *testing.T) {
	t.Parallel()
	at := int64(100)
	claims := []fairrelay.Claim{
		{Token: fairrelay.Token{EventID: "A", Generation: 1}, LeaseUntil: at},
		{Token: fairrelay.Token{EventID: "B", Generation: 2}, LeaseUntil: at + 1},
	}
	as := []answer{
		{s: Settled{Claim: claims[0], Outcome: fairrelay.OutcomeAccepted}},
		{s: Settled{Claim: claims[1], Outcome: fairrelay.OutcomeRetry}, retryAfter: 1500e6}, // 1.5 s
	}
	ps, out := settleParams(at, as)
	if len(ps) != 1 || ps[0].Token != claims[1].Token || ps[0].NotBefore != at+1500 {
		t.Fatalf("sent %+v, want B only, not before %d", ps, at+1500)
	}
	if !out[0].LeaseLost || out[1].LeaseLost || out[0].At != at || out[1].At != at {
		t.Fatalf("reports %+v", out)
	}
	setResults(out, []fairrelay.SettleResult{{Status: fairrelay.SettleReady}})
	if out[0].Result.Status != "" || out[1].Result.Status != fairrelay.SettleReady {
		t.Fatalf("results went to %+v", out)
	}
}

// A streak of held-only settles pauses 2 ms, doubling to 1 s, and warns
// once, about a second into the streak however many pauses that took (a
// claimer that also waited out idle polls used to warn ~9 s late).
func TestHeldPauseDoublesAndWarnsOnceAfterASecond(t *testing.T) {
	var logged bytes.Buffer
	src := &stepTime{}
	r := &Relay{log: slog.New(slog.NewTextHandler(&logged, nil)), cfg: Config{Source: src}}
	held := []answer{{s: Settled{Claim: fairrelay.Claim{Flow: "A"}}}}
	var h heldStreak
	var pauses []time.Duration
	for range 3 {
		pauses = append(pauses, r.heldPause(&h, held))
	}
	if want := []time.Duration{2 * time.Millisecond, 4 * time.Millisecond, 8 * time.Millisecond}; fmt.Sprint(pauses) != fmt.Sprint(want) {
		t.Fatalf("pauses %v, want %v", pauses, want)
	}
	if logged.Len() != 0 {
		t.Fatalf("warned at the start of a streak: %s", logged.String())
	}
	src.d += time.Second // a second into the streak
	r.heldPause(&h, held)
	r.heldPause(&h, held)
	if n := strings.Count(logged.String(), "settles wait for flows another transaction holds"); n != 1 || !strings.Contains(logged.String(), "flows=[A]") {
		t.Fatalf("warnings a second into the streak: %d, want 1 naming flow A:\n%s", n, logged.String())
	}
	for range 20 {
		if d := r.heldPause(&h, held); d > maxHeldWait {
			t.Fatalf("pause %v above %v", d, maxHeldWait)
		}
	}
}

// A quarantine is logged with its reason (SPEC §2): the permanent outcome,
// or budget_exhausted when a transient one spent the budget — the outcome
// alone (retry) does not say why the head stopped.
func TestQuarantineLogNamesTheReason(t *testing.T) {
	for _, tc := range []struct {
		outcome fairrelay.Outcome
		want    string
	}{
		{fairrelay.OutcomeRetry, "reason=budget_exhausted"},
		{fairrelay.OutcomeGap, "reason=budget_exhausted"},
		{fairrelay.OutcomeRejected, "reason=rejected"},
		{fairrelay.OutcomeUnsupportedDelta, "reason=unsupported_delta"},
	} {
		var logged bytes.Buffer
		r := &Relay{log: slog.New(slog.NewTextHandler(&logged, nil)), cfg: Config{Source: &stepTime{}}}
		r.report(Settled{Claim: fairrelay.Claim{Flow: "A"}, Outcome: tc.outcome, Result: fairrelay.SettleResult{Status: fairrelay.SettleQuarantined}})
		if line := logged.String(); !strings.Contains(line, `msg="relay: quarantined"`) || !strings.Contains(line, tc.want) {
			t.Errorf("%s: logged %q, want %s", tc.outcome, line, tc.want)
		}
	}
}

// The start line logs a retention of 0 as forever, not as 0s (which reads
// as "prune at once").
func TestRetentionAsLogged(t *testing.T) {
	if got := retention(0); got != "forever" {
		t.Errorf("retention(0) = %q, want forever", got)
	}
	if got := retention(7 * 24 * time.Hour); got != "168h0m0s" {
		t.Errorf("retention(7d) = %q", got)
	}
}

// Failed deliveries are logged at WARN 20 at once and then one a second,
// the rest at DEBUG and counted in the next WARN line (failures_at_debug_only): a
// receiver down for 8 s behind 100 waiting flows gave 223 WARN lines, and
// 10 000 flows would give hundreds of thousands (an operator's drill).
// Quarantines are all logged.
func TestFailedDeliveriesAreLoggedAtABoundedRate(t *testing.T) {
	var logged bytes.Buffer
	src := &stepTime{}
	r := &Relay{log: slog.New(slog.NewTextHandler(&logged, nil)), cfg: Config{Source: src},
		failLog: logcap.New()}
	failed := Settled{Claim: fairrelay.Claim{Flow: "A"}, Outcome: fairrelay.OutcomeRetry, Result: fairrelay.SettleResult{Status: fairrelay.SettleReady}}
	warns := func() int {
		return strings.Count(logged.String(), `level=WARN msg="relay: delivery failed; will retry"`)
	}
	for range 100 {
		r.report(failed)
	}
	if n := warns(); n != logcap.Burst {
		t.Fatalf("100 failures at once: %d WARN lines, want %d", n, logcap.Burst)
	}
	src.d += time.Second
	r.report(failed)
	if n := warns(); n != logcap.Burst+1 || !strings.Contains(logged.String(), "failures_at_debug_only=80") {
		t.Fatalf("a second later: %d WARN lines, want %d, the last saying failures_at_debug_only=80:\n%s", n, logcap.Burst+1, logged.String())
	}
	for range 30 {
		r.report(Settled{Claim: fairrelay.Claim{Flow: "A"}, Outcome: fairrelay.OutcomeRetry, Result: fairrelay.SettleResult{Status: fairrelay.SettleQuarantined}})
	}
	if n := strings.Count(logged.String(), `msg="relay: quarantined"`); n != 30 {
		t.Fatalf("30 quarantines: %d logged, want every one", n)
	}
}
