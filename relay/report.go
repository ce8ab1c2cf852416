package relay

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"

	"time"

	"github.com/fairrelay/fairrelay"
)

// reportSettles reports the settles of a transaction that ran at tick ran
// (settled[i] reports as[i]), but for those that came back Held, whose
// answers it returns to settle again later (heldBack); reports are the
// settles it reported.
func (r *Relay) reportSettles(as []answer, settled []Settled, ran int64) (held []answer, reports []Settled) {
	held, reports = heldBack(as, settled)
	r.cfg.Metrics.heldSettles(len(held))
	for _, s := range reports {
		s.At = ran // the floor may have raised the tick
		r.report(s)
	}
	return held, reports
}

// failedKind is the kind of the failed deliveries' WARN lines, which
// Relay.failLog caps (report).
const failedKind = "relay: delivery failed"

func (r *Relay) report(s Settled) {
	r.cfg.Metrics.settled(s)
	level, msg := slog.LevelDebug, "relay: settled"
	var quiet int64 // failed deliveries logged at DEBUG before this one
	switch {
	case s.LeaseLost && s.Result.Held:
		level, msg = slog.LevelWarn, "relay: another transaction held the flow until the shutdown deadline; not settled"
	case s.LeaseLost && s.At < s.Claim.LeaseUntil:
		level, msg = slog.LevelWarn, "relay: the store still failed at the shutdown deadline; not settled"
	case s.LeaseLost:
		level, msg = slog.LevelWarn, "relay: lease ran out before the settle; not settled"
	case s.Result.Status == fairrelay.SettleQuarantined:
		level, msg = slog.LevelWarn, "relay: quarantined"
	case s.Result.Status == fairrelay.SettleReady:
		// A failed delivery is worth an operator's eye: repeated, it ends in
		// budget_exhausted. But a receiver down for 8 s behind 100 waiting
		// flows gave 223 lines, and 10 000 flows would give hundreds of
		// thousands (an operator's drill): at most logcap.Burst at once and
		// logcap.Rate after that at WARN, the rest at DEBUG, counted in the
		// next WARN line (failures_at_debug_only) and always in the metrics.
		level, msg = slog.LevelWarn, "relay: delivery failed; will retry"
		if r.failLog != nil {
			var ok bool
			if ok, quiet = r.failLog.Allow(failedKind, time.Unix(0, 0).Add(r.cfg.Source.Elapsed())); !ok {
				level = slog.LevelDebug
			}
		}
	}
	// The attributes are built only for a record the logger keeps: the
	// acks of a busy relay are not logged at the default level.
	if r.log.Enabled(context.Background(), level) {
		attrs := []any{"id", s.Claim.Token.EventID, "flow", s.Claim.Flow, "seq", s.Claim.Seq,
			"generation", s.Claim.Token.Generation, "attempt", s.Claim.Attempts, "outcome", s.Outcome,
			"detail", s.Detail, "tick", s.At, "latency", s.Latency}
		switch {
		case s.LeaseLost:
		case s.Result.Status == fairrelay.SettleQuarantined:
			attrs = append(attrs, "reason", quarantineReason(s.Outcome))
		case s.Result.Status == fairrelay.SettleReady:
			attrs = append(attrs, "next_at", s.Result.NextAt)
			if quiet > 0 {
				attrs = append(attrs, "failures_at_debug_only", quiet)
			}
		default:
			attrs = append(attrs, "status", s.Result.Status)
		}
		r.log.Log(context.Background(), level, msg, attrs...)
	}
	if r.cfg.OnSettle != nil {
		r.hook("OnSettle", func() { r.cfg.OnSettle(s) })
	}
	if r.cfg.OnQuarantine != nil && !s.LeaseLost && s.Result.Status == fairrelay.SettleQuarantined {
		c := s.Claim
		q := Quarantine{Head: fairrelay.Quarantined{ID: c.Token.EventID, Flow: c.Flow, Seq: c.Seq, Generation: c.Token.Generation,
			Attempts: c.Attempts, Reason: quarantineReason(s.Outcome)}, At: s.At, Outcome: s.Outcome, Detail: s.Detail}
		r.hook("OnQuarantine", func() { r.cfg.OnQuarantine(q) })
	}
}

// hook runs call, the application's hook name (Config.OnSettle,
// OnQuarantine), after what it reports was committed; a panic in it is
// logged at ERROR with the stack and the relay goes on: it ended the
// relay, with the heads it had claimed still leased (a breaker's report).
func (r *Relay) hook(name string, call func()) {
	defer func() {
		if v := recover(); v != nil {
			r.log.Error("relay: the "+name+" hook panicked; the relay goes on", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
		}
	}()
	call()
}

// reportQuarantined reports the heads a claim of tick ran quarantined
// itself (fairrelay.ClaimResult.Quarantined: budget spent, no settle), at
// WARN like a settle's quarantine (docs/operations.md: the relay logs
// every quarantine) and in fairrelay_claim_quarantines_total.
func (r *Relay) reportQuarantined(qs []fairrelay.Quarantined, ran int64) {
	r.cfg.Metrics.claimQuarantined(len(qs))
	for _, q := range qs {
		r.log.Warn("relay: quarantined", "id", q.ID, "flow", q.Flow, "seq", q.Seq, "generation", q.Generation,
			"attempt", q.Attempts, "reason", q.Reason, "tick", ran,
			"detail", "its lease ran out after the round used the whole budget (by the claim; no answer was settled)")
		if r.cfg.OnQuarantine != nil {
			r.hook("OnQuarantine", func() { r.cfg.OnQuarantine(Quarantine{Head: q, At: ran, ByClaim: true}) })
		}
	}
}

// quarantineReason is the reason settle quarantined a head for when the
// outcome o was settled (SPEC §2): a permanent outcome is its own reason;
// a transient one quarantines only when the budget is spent.
func quarantineReason(o fairrelay.Outcome) string {
	if o.Class() == fairrelay.ClassPermanent {
		return string(o)
	}
	return fairrelay.ReasonBudgetExhausted
}
