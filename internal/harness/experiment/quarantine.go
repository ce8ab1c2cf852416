package experiment

import (
	"context"
	"slices"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
)

type poisonFacts struct {
	MaxDelta int64      `json:"max_delta"`
	Steps    []delivery `json:"steps"`
	Final    state      `json:"final"`
}

// poisonSetup is the first half of SPEC §5 item 3: A1 carries delta 10, the
// receiver supports at most 5, so A1 is a poison head; deliveries run at
// tick 0 until idle.
func poisonSetup(ctx context.Context, s *session) (*fairrelay.Queue, *inbox.Inbox, poisonFacts, error) {
	f := poisonFacts{MaxDelta: 5}
	q, in, err := s.openWith(ctx, fairrelay.ReferencePolicy(), f.MaxDelta)
	if err != nil {
		return nil, nil, f, err
	}
	if err := enqueue(ctx, q, 0, ledgerEvent{"A1", "A", 10}, ledgerEvent{"A2", "A", 1}, ledgerEvent{"B1", "B", 1}); err != nil {
		return nil, nil, f, err
	}
	if f.Steps, err = drain(ctx, q, in, 0, 10); err != nil {
		return nil, nil, f, err
	}
	f.Final, err = snapshot(ctx, q, in)
	return q, in, f, err
}

// poisonHeadIsolated is SPEC §5 item 3: the poison head is quarantined, it
// keeps blocking its own flow, and the other flow runs.
func poisonHeadIsolated(ctx context.Context, s *session) (any, error) {
	_, _, f, err := poisonSetup(ctx, s)
	if err != nil {
		return nil, err
	}
	a1, a2, b1 := f.Final.event("A1"), f.Final.event("A2"), f.Final.event("B1")
	s.expect(a1.State == fairrelay.StateQuarantined && a1.Reason != nil && *a1.Reason == string(fairrelay.OutcomeUnsupportedDelta),
		"A1 is %s (reason %v), want quarantined with reason unsupported_delta", a1.State, a1.Reason)
	s.expect(a2.State == fairrelay.StateReady && a2.LifetimeAttempts == 0, "A2 is %s after %d claims, want never claimed", a2.State, a2.LifetimeAttempts)
	s.expect(b1.State == fairrelay.StateAcked, "B1 is %s, want acked", b1.State)
	s.expect(!slices.Contains(claimed(f.Steps), "A2"), "A2 was claimed: %v", claimed(f.Steps))
	return f, nil
}

type redriveFacts struct {
	Before   poisonFacts             `json:"before"`
	Redrive  fairrelay.RedriveResult `json:"redrive"`
	MaxDelta int64                   `json:"max_delta"`
	Steps    []delivery              `json:"steps"`
	Final    state                   `json:"final"`
}

// redriveRestoresFlow is SPEC §5 item 3: an operator redrives A1 with a
// reason and the receiver gains the capability (max_delta 1000); A1 and A2
// are then delivered in order, once each.
func redriveRestoresFlow(ctx context.Context, s *session) (any, error) {
	q, in, before, err := poisonSetup(ctx, s)
	if err != nil {
		return nil, err
	}
	f := redriveFacts{Before: before, MaxDelta: 1000}
	a1 := before.Final.event("A1")
	f.Redrive, err = q.Redrive(ctx, fairrelay.RedriveParams{
		EventID: "A1", ExpectedGeneration: a1.Generation, At: 1,
		Reason: "receiver now supports delta up to 1000", Operator: "experiment",
	})
	if err != nil {
		return nil, err
	}
	in.SetMaxDelta(f.MaxDelta)
	if f.Steps, err = drain(ctx, q, in, 1, 10); err != nil {
		return nil, err
	}
	if f.Final, err = snapshot(ctx, q, in); err != nil {
		return nil, err
	}
	s.expect(f.Redrive.Status == fairrelay.RedriveReady, "redrive answered %s, want ready", f.Redrive.Status)
	for _, id := range []string{"A1", "A2"} {
		s.expect(f.Final.event(id).State == fairrelay.StateAcked, "%s is %s, want acked", id, f.Final.event(id).State)
	}
	p := f.Final.projection("A")
	s.expect(p.Seq == 2 && p.Total == 11, "A projection seq %d total %d, want seq 2 total 11", p.Seq, p.Total)
	s.expect(len(f.Final.Audit) == 1, "%d audit rows, want 1", len(f.Final.Audit))
	s.expect(f.Final.event("A1").LifetimeAttempts == 2, "A1 lifetime_attempts %d, want 2", f.Final.event("A1").LifetimeAttempts)
	return f, nil
}

type retryStep struct {
	At int64 `json:"at"`
	// Unavailable is whether the receiver was marked unavailable (its
	// answer is then retry, written nowhere).
	Unavailable bool     `json:"unavailable"`
	Delivery    delivery `json:"delivery"`
}

type retryFacts struct {
	Steps []retryStep `json:"steps"`
	Final state       `json:"final"`
}

// retryBackoffSchedule is SPEC §5 item 4: the receiver is unavailable for
// A's deliveries (it answers retry, a transient outcome). Backoff puts A1 at
// next_at 2, then 6, and the third failure uses up the budget of 3; claims
// at ticks 1 and 5 find nothing eligible, while B runs at tick 0.
func retryBackoffSchedule(ctx context.Context, s *session) (any, error) {
	q, in, err := s.open(ctx)
	if err != nil {
		return nil, err
	}
	if err := enqueue(ctx, q, 0, ledgerEvent{"A1", "A", 1}, ledgerEvent{"A2", "A", 1}, ledgerEvent{"B1", "B", 1}); err != nil {
		return nil, err
	}
	plan := []retryStep{{At: 0, Unavailable: true}, {At: 0}, {At: 1, Unavailable: true}, {At: 2, Unavailable: true},
		{At: 5, Unavailable: true}, {At: 6, Unavailable: true}}
	var f retryFacts
	for _, st := range plan {
		in.SetUnavailable(st.Unavailable)
		if st.Delivery, err = deliver(ctx, q, in, st.At); err != nil {
			return nil, err
		}
		f.Steps = append(f.Steps, st)
	}
	in.SetUnavailable(false)
	if f.Final, err = snapshot(ctx, q, in); err != nil {
		return nil, err
	}
	at := func(i int) delivery { return f.Steps[i].Delivery }
	s.expect(at(0).Claim == "A1" && at(0).Settled == fairrelay.SettleReady && at(0).NextAt == 2, "tick 0: %+v, want A1 ready next_at 2", at(0))
	s.expect(at(1).Claim == "B1" && at(1).Settled == fairrelay.SettleAcked, "tick 0: %+v, want B1 acked while A waits", at(1))
	s.expect(at(2).Claim == idle, "tick 1: %+v, want idle (A1 waits until 2)", at(2))
	s.expect(at(3).Claim == "A1" && at(3).Settled == fairrelay.SettleReady && at(3).NextAt == 6, "tick 2: %+v, want A1 ready next_at 6", at(3))
	s.expect(at(4).Claim == idle, "tick 5: %+v, want idle (A1 waits until 6)", at(4))
	s.expect(at(5).Claim == "A1" && at(5).Settled == fairrelay.SettleQuarantined, "tick 6: %+v, want A1 quarantined", at(5))
	a1 := f.Final.event("A1")
	s.expect(a1.Reason != nil && *a1.Reason == fairrelay.ReasonBudgetExhausted, "A1 reason %v, want budget_exhausted", a1.Reason)
	return f, nil
}
