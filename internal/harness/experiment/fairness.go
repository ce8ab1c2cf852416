package experiment

import (
	"context"
	"slices"
	"strings"

	"github.com/fairrelay/fairrelay"
)

type roundRobinFacts struct {
	Steps []delivery `json:"steps"`
	Order []string   `json:"order"`
	Final state      `json:"final"`
}

// roundRobinNineSteps is SPEC §5 item 1: claim order follows served, so
// every flow gets a turn before any flow gets a second one.
func roundRobinNineSteps(ctx context.Context, s *session) (any, error) {
	q, in, err := s.open(ctx)
	if err != nil {
		return nil, err
	}
	var evs []ledgerEvent
	for _, f := range []string{"A", "B", "C"} {
		for _, n := range []string{"1", "2", "3"} {
			evs = append(evs, ledgerEvent{f + n, f, 1})
		}
	}
	if err := enqueue(ctx, q, 0, evs...); err != nil {
		return nil, err
	}
	var f roundRobinFacts
	for range 9 {
		d, err := deliver(ctx, q, in, 0)
		if err != nil {
			return nil, err
		}
		f.Steps = append(f.Steps, d)
	}
	f.Order = claimed(f.Steps)
	if f.Final, err = snapshot(ctx, q, in); err != nil {
		return nil, err
	}
	want := []string{"A1", "B1", "C1", "A2", "B2", "C2", "A3", "B3", "C3"}
	s.expect(slices.Equal(f.Order, want), "claim order %v, want %v", f.Order, want)
	for _, fl := range []string{"A", "B", "C"} {
		p := f.Final.projection(fl)
		s.expect(p.Seq == 3 && p.Total == 3, "flow %s projection seq %d total %d, want seq 3 total 3", fl, p.Seq, p.Total)
	}
	return f, nil
}

// modelEvent is one event of the baseline scheduling model.
type modelEvent struct {
	ID   string `json:"id"`
	Flow string `json:"flow"`
	// Answer is what the receiver answers for it, every time.
	Answer fairrelay.Outcome `json:"answer"`
	acked  bool
}

type baselineFacts struct {
	Model  string         `json:"model"`
	Input  []modelEvent   `json:"input"`
	Picks  []string       `json:"picks"`
	Served map[string]int `json:"served"`
}

// firstUnackedBaselineStarves is SPEC §5 item 2, the article's unfair
// baseline as a pure scheduling model (no database): each step picks the
// first event in enqueue order that is not acked. A head the receiver
// refuses for good is never acked, so it is picked every step and B starves.
func firstUnackedBaselineStarves(ctx context.Context, s *session) (any, error) {
	evs := []modelEvent{
		{ID: "A1", Flow: "A", Answer: fairrelay.OutcomeIDConflict},
		{ID: "A2", Flow: "A", Answer: fairrelay.OutcomeAccepted},
		{ID: "B1", Flow: "B", Answer: fairrelay.OutcomeAccepted},
		{ID: "B2", Flow: "B", Answer: fairrelay.OutcomeAccepted},
	}
	f := baselineFacts{
		Model:  "pure scheduling model, no database: each step picks the first unacked event in enqueue order",
		Input:  slices.Clone(evs),
		Served: map[string]int{"A": 0, "B": 0},
	}
	for range 9 {
		i := firstUnacked(evs)
		if i < 0 {
			f.Picks = append(f.Picks, idle)
			continue
		}
		f.Picks = append(f.Picks, evs[i].ID)
		f.Served[evs[i].Flow]++
		if evs[i].Answer.Class() == fairrelay.ClassAck {
			evs[i].acked = true
		}
	}
	s.expect(strings.Count(strings.Join(f.Picks, " "), "A1") == 9, "picks %v, want A1 at every step", f.Picks)
	s.expect(f.Served["B"] == 0, "B served %d times, want never", f.Served["B"])
	return f, nil
}

// firstUnacked is the baseline's selection: the index of the first event not
// acked, or -1.
func firstUnacked(evs []modelEvent) int {
	for i, e := range evs {
		if !e.acked {
			return i
		}
	}
	return -1
}

type entryFacts struct {
	Policy fairrelay.Entry `json:"policy"`
	Steps  []entryStep     `json:"steps"`
	Order  []string        `json:"order"`
	Final  state           `json:"final"`
}

type entryStep struct {
	At       int64    `json:"at"`
	Enqueued string   `json:"enqueued,omitempty"`
	Delivery delivery `json:"delivery"`
}

// entryRun is the input of SPEC §5 item 10 (shared vectors 06 and 07): A has
// two events; one step per tick, and before ticks 1, 2, 3 a new flow B, C, D
// arrives while A waits with A2.
func entryRun(ctx context.Context, s *session, entry fairrelay.Entry) (entryFacts, error) {
	pol := fairrelay.ReferencePolicy()
	pol.Entry = entry
	q, in, err := s.openWith(ctx, pol, 0)
	if err != nil {
		return entryFacts{}, err
	}
	if err := enqueue(ctx, q, 0, ledgerEvent{"A1", "A", 1}, ledgerEvent{"A2", "A", 1}); err != nil {
		return entryFacts{}, err
	}
	f := entryFacts{Policy: entry}
	arrivals := map[int64]string{1: "B", 2: "C", 3: "D"}
	for at := int64(0); at <= 4; at++ {
		st := entryStep{At: at}
		if fl, ok := arrivals[at]; ok {
			st.Enqueued = fl + "1"
			if err := enqueue(ctx, q, at, ledgerEvent{st.Enqueued, fl, 1}); err != nil {
				return entryFacts{}, err
			}
		}
		if st.Delivery, err = deliver(ctx, q, in, at); err != nil {
			return entryFacts{}, err
		}
		f.Steps = append(f.Steps, st)
		f.Order = append(f.Order, st.Delivery.Claim)
	}
	f.Final, err = snapshot(ctx, q, in)
	return f, err
}

// newFlowsOvertakeUnderSeedEntry is SPEC §5 item 10, the documented limit
// of the article's seed entry: a new flow starts at served 0, so B, C and D
// each go before A2.
func newFlowsOvertakeUnderSeedEntry(ctx context.Context, s *session) (any, error) {
	f, err := entryRun(ctx, s, fairrelay.EntrySeed)
	if err != nil {
		return nil, err
	}
	a2 := slices.Index(f.Order, "A2")
	for _, id := range []string{"B1", "C1", "D1"} {
		i := slices.Index(f.Order, id)
		s.expect(i >= 0 && (a2 < 0 || i < a2), "seed entry: %s at step %d, A2 at step %d: want %s claimed before A2", id, i, a2, id)
	}
	return f, nil
}

// fairEntryKeepsOldFlowTurn is SPEC §7: under fair entry a new flow joins at
// the back of the rotation, so the same input claims A2 before B1, C1, D1.
func fairEntryKeepsOldFlowTurn(ctx context.Context, s *session) (any, error) {
	f, err := entryRun(ctx, s, fairrelay.EntryFair)
	if err != nil {
		return nil, err
	}
	a2 := slices.Index(f.Order, "A2")
	for _, id := range []string{"B1", "C1", "D1"} {
		i := slices.Index(f.Order, id)
		s.expect(a2 >= 0 && i > a2, "fair entry: %s at step %d, A2 at step %d: want A2 claimed first", id, i, a2)
	}
	return f, nil
}
