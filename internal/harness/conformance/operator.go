package conformance

import (
	"fmt"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fairrelay/fairrelay"
)

// The operator actions of SPEC §9 and the attempt history, on every
// backend.

func (h h) expedite(id string, gen int64, reason string, at int64) fairrelay.ActionResult {
	h.t.Helper()
	r, err := h.Queue.Expedite(bg, fairrelay.ExpediteParams{EventID: id, ExpectedGeneration: gen, Reason: reason, Operator: "ana", At: at})
	if err != nil {
		h.t.Fatalf("expedite %s at %d: %v", id, at, err)
	}
	return r
}

func (h h) pause(flow, reason string, at int64) fairrelay.ActionResult {
	h.t.Helper()
	r, err := h.Queue.Pause(bg, fairrelay.FlowActionParams{Flow: flow, Reason: reason, Operator: "ana", At: at})
	if err != nil {
		h.t.Fatalf("pause %s at %d: %v", flow, at, err)
	}
	return r
}

func (h h) resume(flow, reason string, at int64) fairrelay.ActionResult {
	h.t.Helper()
	r, err := h.Queue.Resume(bg, fairrelay.FlowActionParams{Flow: flow, Reason: reason, At: at})
	if err != nil {
		h.t.Fatalf("resume %s at %d: %v", flow, at, err)
	}
	return r
}

// rejected requires a rejection with the given reason that changed nothing,
// not even the tick (SPEC §9).
func (h h) rejected(name, reason string, fn func() fairrelay.ActionResult) {
	h.t.Helper()
	h.unchanged(name, false, func() {
		h.t.Helper()
		if r := fn(); r.Status != fairrelay.ActionRejected || r.RejectReason != reason {
			h.t.Errorf("%s: %+v, want rejected %s", name, r, reason)
		}
	})
}

func (h h) flow(id string) fairrelay.FlowState {
	h.t.Helper()
	for _, f := range h.snapshot().Flows {
		if f.Flow == id {
			return f
		}
	}
	h.t.Fatalf("no flow %s", id)
	return fairrelay.FlowState{}
}

// budget is the reference policy with another budget.
func budget(n int64) func() fairrelay.Policy {
	return func() fairrelay.Policy {
		p := ref()
		p.Budget = n
		return p
	}
}

func ptr[T any](v T) *T { return &v }

var operatorRules = []rule{
	{"expedite_rejections_in_order_change_nothing", ref, func(h h) {
		h.enqueue("A1", "A", 1, 0)
		h.enqueue("A2", "A", 1, 0)
		h.enqueue("B1", "B", 1, 0)
		h.enqueue("C1", "C", 1, 0)
		a := h.claimID(0, "A1")
		if r := h.settle(a.Token, fairrelay.OutcomeRetry, 0); r.Status != fairrelay.SettleReady || r.NextAt != 2 {
			h.t.Fatalf("A1 retry: %+v, want ready next_at 2", r)
		}
		b := h.claimID(0, "B1") // inflight
		c := h.claimID(0, "C1")
		h.settle(c.Token, fairrelay.OutcomeUnsupportedDelta, 0) // quarantined
		h.rejected("blank reason (before every other check)", fairrelay.RejectEmptyReason, func() fairrelay.ActionResult { return h.expedite("B1", 1, "   ", 1) })
		h.rejected("inflight", fairrelay.RejectNotReady, func() fairrelay.ActionResult { return h.expedite("B1", 1, "why", 1) })
		h.rejected("quarantined", fairrelay.RejectNotReady, func() fairrelay.ActionResult { return h.expedite("C1", 1, "why", 1) })
		h.rejected("waiting behind a head (not backing off)", fairrelay.RejectNotBackingOff, func() fairrelay.ActionResult { return h.expedite("A2", 0, "why", 1) })
		h.rejected("wrong generation", fairrelay.RejectGenerationMismatch, func() fairrelay.ActionResult { return h.expedite("A1", 2, "why", 1) })
		h.rejected("backoff over at this tick", fairrelay.RejectNotBackingOff, func() fairrelay.ActionResult { return h.expedite("A1", 1, "why", 2) })
		h.settle(b.Token, fairrelay.OutcomeAccepted, 0)
		h.rejected("acked", fairrelay.RejectNotReady, func() fairrelay.ActionResult { return h.expedite("B1", 1, "why", 1) })
		h.unchanged("refused input", false, func() {
			_, err := h.Queue.Expedite(bg, fairrelay.ExpediteParams{EventID: "nope", ExpectedGeneration: 1, Reason: "why", At: 1})
			wantCode(h.t, "unknown id", err, fairrelay.CodeNotFound, "")
			_, err = h.Queue.Expedite(bg, fairrelay.ExpediteParams{EventID: "A1", ExpectedGeneration: -1, Reason: "why", At: 1})
			wantCode(h.t, "negative generation", err, fairrelay.CodeInvalidInput, "expected_generation")
			_, err = h.Queue.Expedite(bg, fairrelay.ExpediteParams{EventID: "A1", ExpectedGeneration: 1, Reason: "why", Operator: " ana", At: 1})
			wantCode(h.t, "bad operator", err, fairrelay.CodeInvalidInput, "operator")
			_, err = h.Queue.Expedite(bg, fairrelay.ExpediteParams{EventID: "A1", ExpectedGeneration: 1, Reason: "line\nbreak", At: 1})
			wantCode(h.t, "reason with a control character", err, fairrelay.CodeInvalidInput, "reason")
		})
		_, err := h.Queue.Expedite(bg, fairrelay.ExpediteParams{EventID: "A1", ExpectedGeneration: 1, Reason: "why", At: -1})
		wantCode(h.t, "tick below the stored one", err, fairrelay.CodeClockRegressed, "")

		before := h.event("A1")
		if r := h.expedite("A1", 1, "receiver is back", 1); r.Status != fairrelay.ActionReady || r.NextAt != 1 {
			h.t.Fatalf("expedite A1 at 1: %+v, want ready next_at 1", r)
		}
		after := h.event("A1")
		if after.State != fairrelay.StateReady || *after.NextAt != 1 || after.Attempts != before.Attempts || after.Generation != before.Generation {
			h.t.Fatalf("A1 after expedite %+v (before %+v): want ready, next_at 1, attempts and generation unchanged", after, before)
		}
		if c := h.claimID(1, "A1"); c.Attempts != 2 {
			h.t.Fatalf("claim after expedite: attempts %d, want 2 (unchanged by expedite, then one more)", c.Attempts)
		}
		want := []fairrelay.AuditEntry{{ID: ptr("A1"), Flow: "A", Action: "expedite", Reason: "receiver is back", Operator: ptr("ana"), Generation: ptr(int64(1)), At: 1}}
		if d := cmp.Diff(want, h.snapshot().Audit); d != "" {
			h.t.Fatalf("audit (-want +got):\n%s", d)
		}
	}},

	{"pause_blocks_the_head_in_every_state_and_resume_keeps_served", ref, func(h h) {
		for _, f := range []string{"R", "I", "E", "N", "Q", "Z"} {
			h.enqueue(f+"1", f, 1, 0)
		}
		h.enqueue("I2", "I", 1, 0)
		i := h.claimID(0, "E1") // seed order: E, I, N, Q, R, Z
		e := i
		i = h.claimID(0, "I1")
		n := h.claimID(0, "N1")
		h.settle(n.Token, fairrelay.OutcomeAccepted, 0) // N has no head
		q := h.claimID(0, "Q1")
		h.settle(q.Token, fairrelay.OutcomeUnsupportedDelta, 0) // Q's head quarantined
		served := map[string]int64{}
		for _, f := range []string{"R", "I", "E", "N", "Q"} {
			if r := h.pause(f, "schema migration", 1); r.Status != fairrelay.ActionPaused {
				h.t.Fatalf("pause %s: %+v", f, r)
			}
			served[f] = h.flow(f).Served
			if !h.flow(f).Paused {
				h.t.Fatalf("flow %s not paused in the snapshot", f)
			}
		}
		h.rejected("pause twice", fairrelay.RejectAlreadyPaused, func() fairrelay.ActionResult { return h.pause("R", "again", 1) })
		h.rejected("blank reason", fairrelay.RejectEmptyReason, func() fairrelay.ActionResult { return h.pause("Z", "", 1) })
		h.rejected("resume a flow not paused", fairrelay.RejectNotPaused, func() fairrelay.ActionResult { return h.resume("Z", "why", 1) })
		h.unchanged("unknown flow", false, func() {
			_, err := h.Queue.Pause(bg, fairrelay.FlowActionParams{Flow: "nope", Reason: "why", At: 1})
			wantCode(h.t, "pause an unknown flow", err, fairrelay.CodeNotFound, "")
			_, err = h.Queue.Resume(bg, fairrelay.FlowActionParams{Flow: "", Reason: "why", At: 1})
			wantCode(h.t, "resume without a flow", err, fairrelay.CodeInvalidInput, "flow")
		})
		// An inflight head of a paused flow still settles; the next event,
		// its new head, waits.
		if r := h.settle(i.Token, fairrelay.OutcomeAccepted, 1); r.Status != fairrelay.SettleAcked {
			h.t.Fatalf("settle I1 while paused: %+v", r)
		}
		// A new head of a paused flow (N had none) waits too, and so does a
		// redriven one.
		h.enqueue("N2", "N", 1, 1)
		if r, err := h.Queue.Redrive(bg, fairrelay.RedriveParams{EventID: "Q1", ExpectedGeneration: 1, Reason: "fixed", At: 1}); err != nil || r.Status != fairrelay.RedriveReady {
			h.t.Fatalf("redrive Q1: %+v %v", r, err)
		}
		// Only Z is claimable, at any tick: E1's lease ran out at 5 and its
		// flow is paused, so it is neither claimed nor quarantined.
		z := h.claimID(1, "Z1")
		h.settle(z.Token, fairrelay.OutcomeAccepted, 1)
		for at := int64(2); at <= 20; at += 6 {
			h.claimID(at, "")
		}
		if s := h.event("E1"); s.State != fairrelay.StateInflight || s.Generation != e.Token.Generation {
			h.t.Fatalf("E1 %+v: an expired head of a paused flow must stay as it is", s)
		}
		for _, f := range []string{"R", "I", "E", "N", "Q"} {
			if r := h.resume(f, "migration done", 21); r.Status != fairrelay.ActionResumed {
				h.t.Fatalf("resume %s: %+v", f, r)
			}
			if got := h.flow(f); got.Served != served[f] || got.Paused {
				h.t.Fatalf("flow %s after resume: %+v, want served %d unchanged, not paused", f, got, served[f])
			}
		}
		// Resumed, in dispatch order by served (SPEC §2): R (never claimed,
		// 0), E (1), I (2), N (3), Q (4). E1's expired lease is claimed again.
		for _, want := range []string{"R1", "E1", "I2", "N2", "Q1"} {
			c := h.claimID(21, want)
			h.settle(c.Token, fairrelay.OutcomeAccepted, 21)
		}
		var actions []string
		for _, a := range h.snapshot().Audit {
			if a.Action == "pause" || a.Action == "resume" {
				if a.ID != nil || a.Generation != nil || a.PreviousReason != nil || a.Flow == "" {
					h.t.Fatalf("%s row %+v: want flow set, id, generation and previous_reason null", a.Action, a)
				}
				actions = append(actions, a.Action+" "+a.Flow+" "+deref(a.Operator))
			}
		}
		want := []string{"pause R ana", "pause I ana", "pause E ana", "pause N ana", "pause Q ana", "resume R ", "resume I ", "resume E ", "resume N ", "resume Q "}
		if d := cmp.Diff(want, actions); d != "" {
			h.t.Fatalf("audit of pause and resume (-want +got):\n%s", d)
		}
	}},

	{"resume_applies_the_budget_to_an_expired_head", ref, func(h h) {
		h.enqueue("A1", "A", 1, 0)
		for at := int64(0); at <= 10; at += 5 {
			h.claimID(at, "A1") // three claims, each lease runs out: the budget is used up
		}
		h.pause("A", "look first", 11)
		h.claimID(20, "")
		if s := h.event("A1"); s.State != fairrelay.StateInflight {
			h.t.Fatalf("A1 %+v: paused, want inflight left as it is", s)
		}
		h.resume("A", "go", 21)
		h.claimID(21, "")
		if s := h.event("A1"); s.State != fairrelay.StateQuarantined || *s.Reason != fairrelay.ReasonBudgetExhausted {
			h.t.Fatalf("A1 %+v: resumed with its budget used, want quarantined budget_exhausted", s)
		}
	}},

	{"expedite_of_a_paused_flow_waits_for_resume", ref, func(h h) {
		h.enqueue("A1", "A", 1, 0)
		a := h.claimID(0, "A1")
		h.settle(a.Token, fairrelay.OutcomeRetry, 0)
		h.pause("A", "hold", 0)
		if r := h.expedite("A1", 1, "now", 1); r.Status != fairrelay.ActionReady {
			h.t.Fatalf("expedite: %+v", r)
		}
		h.claimID(1, "")
		h.resume("A", "go", 1)
		h.claimID(1, "A1")
	}},

	// A claim whose lease runs out is recorded by a later claim, perhaps
	// another relay's: its attempt names the relay that claimed and lost
	// it (ClaimParams.Relay), whichever way it was claimed (a Claim, the
	// claims of a SettleMany) and however its lease is found run out (a
	// claim of it again, the budget's quarantine). Its lease runs out at
	// claim tick + 5 (budget(3)'s policy).
	{"lease_expired_attempts_name_the_relay_that_claimed", budget(3), func(h h) {
		claim := func(at int64, relay, want string) fairrelay.Claim {
			h.t.Helper()
			r, err := h.Queue.Claim(bg, fairrelay.ClaimParams{At: at, Relay: relay})
			if err != nil || len(r.Claims) != 1 || r.Claims[0].Token.EventID != want {
				h.t.Fatalf("claim at %d by %s: %+v %v, want %s", at, relay, r, err, want)
			}
			return r.Claims[0]
		}
		lastAttempt := func(id string) fairrelay.Attempt {
			h.t.Helper()
			as, err := h.Queue.Attempts(bg, id)
			if err != nil || len(as) == 0 {
				h.t.Fatalf("attempts of %s: %+v %v", id, as, err)
			}
			return as[len(as)-1]
		}
		h.enqueue("A1", "A", 1, 0)
		claim(0, "relay-a", "A1")
		claim(5, "relay-b", "A1") // relay-a's lease ran out
		if a := lastAttempt("A1"); a.Generation != 1 || a.Status != fairrelay.AttemptLeaseExpired || a.Relay != "relay-a" {
			h.t.Fatalf("A1's first attempt: %+v, want lease_expired by relay-a", a)
		}
		claim(10, "relay-e", "A1")
		if a := lastAttempt("A1"); a.Generation != 2 || a.Relay != "relay-b" {
			h.t.Fatalf("A1's second attempt: %+v, want lease_expired by relay-b", a)
		}
		// The budget spent (3): the claim that finds the last lease run
		// out quarantines A1 and records that lease as relay-e's.
		if r, err := h.Queue.Claim(bg, fairrelay.ClaimParams{At: 16, Relay: "relay-f"}); err != nil || len(r.Quarantined) != 1 || len(r.Claims) != 0 {
			h.t.Fatalf("claim at 16: %+v %v, want A1 quarantined", r, err)
		}
		if a := lastAttempt("A1"); a.Generation != 3 || a.Status != fairrelay.AttemptLeaseExpired || a.Relay != "relay-e" {
			h.t.Fatalf("A1's last attempt: %+v, want generation 3 lease_expired by relay-e", a)
		}
		// The head acked and the next claimed in one transaction: B2's
		// claim is the settling relay's.
		h.enqueue("B1", "B", 1, 16)
		h.enqueue("B2", "B", 1, 16)
		b1 := claim(16, "relay-a", "B1")
		r, err := h.Queue.SettleMany(bg, fairrelay.SettleManyParams{At: 17, Relay: "relay-c", ClaimLimit: 1,
			Settles: []fairrelay.Settlement{{Token: b1.Token, Outcome: fairrelay.OutcomeAccepted}}})
		if err != nil || len(r.Claims) != 1 || r.Claims[0].Token.EventID != "B2" {
			h.t.Fatalf("settle B1 and claim: %+v %v, want B2 claimed", r, err)
		}
		claim(22, "relay-d", "B2")
		if a := lastAttempt("B2"); a.Generation != 1 || a.Status != fairrelay.AttemptLeaseExpired || a.Relay != "relay-c" {
			h.t.Fatalf("B2's first attempt: %+v, want lease_expired by relay-c", a)
		}
		if a := lastAttempt("B1"); a.Status != string(fairrelay.SettleAcked) || a.Relay != "relay-c" {
			h.t.Fatalf("B1's attempt: %+v, want acked by relay-c", a)
		}
		// A claimer's name follows CheckID's rule, and a bad one changes
		// nothing.
		h.unchanged("claim by a bad relay name", false, func() {
			_, err := h.Queue.Claim(bg, fairrelay.ClaimParams{At: 22, Relay: " padded"})
			wantCode(h.t, "claim by a bad relay name", err, fairrelay.CodeInvalidInput, "relay")
		})
	}},

	{"attempts_record_each_claim_once", budget(5), func(h h) {
		wall := time.UnixMilli(1_800_000_000_000).UTC()
		h.enqueue("A1", "A", 1, 0)
		a := h.claimID(0, "A1")
		r, err := h.Queue.SettleMany(bg, fairrelay.SettleManyParams{At: 1, Relay: "relay-1", Settles: []fairrelay.Settlement{{
			Token: a.Token, Outcome: fairrelay.OutcomeRetry, Detail: "503 Service Unavailable", Duration: 250 * time.Millisecond}}})
		if err != nil || r.Results[0].Status != fairrelay.SettleReady {
			h.t.Fatalf("settle A1: %+v %v", r, err)
		}
		h.settle(a.Token, fairrelay.OutcomeAccepted, 1)  // stale: records nothing
		a2 := h.claimID(3, "A1")                         // lease runs out at 8
		h.settle(a2.Token, fairrelay.OutcomeAccepted, 8) // expired: recorded, first word
		h.claimID(8, "A1")                               // gen 3; gen 2 already has its word
		h.claimID(13, "A1")                              // gen 3 ran out: lease_expired
		got, err := h.Queue.Attempts(bg, "A1")
		if err != nil {
			h.t.Fatal(err)
		}
		want := []fairrelay.Attempt{
			{Generation: 1, Flow: "A", LeaseUntil: 5, Claimed: wall, SettledAt: ptr(int64(1)), Settled: wall, Outcome: "retry", Status: "ready",
				Detail: "503 Service Unavailable", Duration: 250 * time.Millisecond, Relay: "relay-1"},
			{Generation: 2, Flow: "A", LeaseUntil: 8, Claimed: wall, SettledAt: ptr(int64(8)), Settled: wall, Outcome: "accepted", Status: "expired"},
			{Generation: 3, Flow: "A", LeaseUntil: 13, Claimed: wall, Status: fairrelay.AttemptLeaseExpired},
		}
		if d := cmp.Diff(want, got); d != "" {
			h.t.Fatalf("attempts of A1 (-want +got):\n%s", d)
		}
		// Claims until the budget is used up: the quarantine records the
		// last lease as run out too.
		at := int64(13)
		for ; h.event("A1").State == fairrelay.StateInflight; at += 5 {
			h.claim(at)
		}
		got, err = h.Queue.Attempts(bg, "A1")
		if err != nil {
			h.t.Fatal(err)
		}
		last := got[len(got)-1]
		if s := h.event("A1"); s.State != fairrelay.StateQuarantined || int64(len(got)) != s.Generation || last.Generation != s.Generation || last.Status != fairrelay.AttemptLeaseExpired {
			h.t.Fatalf("after the budget quarantine: A1 %+v, attempts %+v: want one per generation, the last lease_expired", s, got)
		}
		if _, err := h.Queue.Attempts(bg, "nope"); err == nil {
			h.t.Fatal("attempts of an unknown event: no error")
		} else {
			wantCode(h.t, "attempts of an unknown event", err, fairrelay.CodeNotFound, "")
		}
		for _, bad := range []fairrelay.Settlement{
			{Token: a.Token, Outcome: fairrelay.OutcomeAccepted, Detail: string([]byte{0xff})},
			{Token: a.Token, Outcome: fairrelay.OutcomeAccepted, Duration: -time.Second},
		} {
			h.unchanged("bad settlement", false, func() {
				_, err := h.Queue.SettleMany(bg, fairrelay.SettleManyParams{At: 20, Settles: []fairrelay.Settlement{bad}})
				if err == nil {
					h.t.Errorf("settlement %+v: no error", bad)
				}
			})
		}
	}},
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

var pagingRules = []rule{
	// A claim promotes every due flow, page after page (duePage rows a
	// read): more due flows than a page once crashed the second page's
	// read, whose key came from a row the first page had promoted.
	{"claim_promotes_due_flows_past_one_page", budget(5), func(h h) {
		const n = 700
		evs := make([]fairrelay.NewEvent, n)
		for i := range evs {
			evs[i] = fairrelay.NewEvent{ID: fmt.Sprintf("E%04d", i), Flow: fmt.Sprintf("F%04d", i), Body: ledger(1)}
		}
		if _, err := h.Queue.EnqueueMany(bg, fairrelay.EnqueueManyParams{At: 0, Events: evs}); err != nil {
			h.t.Fatal(err)
		}
		r, err := h.Queue.Claim(bg, fairrelay.ClaimParams{At: 0, Limit: n})
		if err != nil || len(r.Claims) != n {
			h.t.Fatalf("claim of %d: %d claims, %v", n, len(r.Claims), err)
		}
		// Every lease runs out at 5: at 5 all n flows are due together.
		r, err = h.Queue.Claim(bg, fairrelay.ClaimParams{At: 5, Limit: n})
		if err != nil || len(r.Claims) != n {
			h.t.Fatalf("claim of %d expired leases: %d claims, %v", n, len(r.Claims), err)
		}
		for _, c := range r.Claims {
			if c.Token.Generation != 2 {
				h.t.Fatalf("%+v: want generation 2", c.Token)
			}
		}
	}},
	// The same through groups: members whose heads an enqueue filed in the
	// due index (only claims count a group's runnable members).
	{"claim_promotes_due_members_past_one_page", ref, func(h h) {
		const n = 700
		evs := make([]fairrelay.NewEvent, n)
		for i := range evs {
			evs[i] = fairrelay.NewEvent{ID: fmt.Sprintf("E%04d", i), Flow: fmt.Sprintf("F%04d", i), Group: fmt.Sprintf("G%d", i%7), Body: ledger(1)}
		}
		if _, err := h.Queue.EnqueueMany(bg, fairrelay.EnqueueManyParams{At: 0, Events: evs}); err != nil {
			h.t.Fatal(err)
		}
		r, err := h.Queue.Claim(bg, fairrelay.ClaimParams{At: 0, Limit: n})
		if err != nil || len(r.Claims) != n {
			h.t.Fatalf("claim of %d members: %d claims, %v", n, len(r.Claims), err)
		}
	}},
}

var excludeRules = []rule{
	// ClaimParams.Exclude (for a relay that shares slots by time, SPEC §11):
	// the excluded groups' heads are not taken and keep their turn; the
	// others are claimed in dispatch order.
	{"claim_excludes_groups_and_keeps_their_turn", ref, func(h h) {
		evs := []fairrelay.NewEvent{
			{ID: "A1", Flow: "A", Body: ledger(1)},
			{ID: "B1", Flow: "B", Body: ledger(1)},
			{ID: "G1", Flow: "G-x", Group: "G", Body: ledger(1)},
			{ID: "G2", Flow: "G-y", Group: "G", Body: ledger(1)},
			{ID: "H1", Flow: "H-x", Group: "H", Body: ledger(1)},
		}
		if _, err := h.Queue.EnqueueMany(bg, fairrelay.EnqueueManyParams{At: 0, Events: evs}); err != nil {
			h.t.Fatal(err)
		}
		r, err := h.Queue.Claim(bg, fairrelay.ClaimParams{At: 0, Limit: 5, Exclude: []string{"A", "G"}})
		if err != nil {
			h.t.Fatal(err)
		}
		var got []string
		for _, c := range r.Claims {
			got = append(got, c.Token.EventID+"/"+c.Group)
		}
		if d := cmp.Diff([]string{"B1/B", "H1/H"}, got); d != "" {
			h.t.Fatalf("claims excluding A and G (-want +got):\n%s", d)
		}
		// A and G kept their turns: served 0, first in the order (then G
		// again: B's and H's heads are out).
		r, err = h.Queue.Claim(bg, fairrelay.ClaimParams{At: 0, Limit: 5})
		got = got[:0]
		for _, c := range r.Claims {
			got = append(got, c.Token.EventID+"/"+c.Group)
		}
		if err != nil || cmp.Diff([]string{"A1/A", "G1/G", "G2/G"}, got) != "" {
			h.t.Fatalf("claims after: %v %v, want A1, G1, G2", got, err)
		}
		h.unchanged("bad exclude", false, func() {
			_, err := h.Queue.Claim(bg, fairrelay.ClaimParams{At: 0, Exclude: []string{""}})
			wantCode(h.t, "empty group in exclude", err, fairrelay.CodeInvalidInput, "exclude")
		})
	}},
}
