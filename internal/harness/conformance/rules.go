package conformance

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/harness/queuetest"
)

// rule is one named rule test; each gets a fresh store.
type rule struct {
	name   string
	policy func() fairrelay.Policy
	fn     func(h h)
}

func ref() fairrelay.Policy { return fairrelay.ReferencePolicy() }

func fair() fairrelay.Policy {
	p := fairrelay.ReferencePolicy()
	p.Entry = fairrelay.EntryFair
	return p
}

func runRules(t *testing.T, b Backend) {
	for _, r := range slices.Concat(rules, operatorRules, pagingRules, excludeRules) {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			r.fn(h{t: t, Env: Open(t, b, r.policy())})
		})
	}
}

var rules = []rule{
	{"enqueue_seq_per_flow_and_idempotency", ref, func(h h) {
		for i, want := range []int64{1, 2, 3} {
			if r := h.enqueue(fmt.Sprintf("A%d", i+1), "A", 1, 0); r.Status != fairrelay.EnqueueCreated || r.Seq != want {
				h.t.Fatalf("A%d: %+v, want created seq %d", i+1, r, want)
			}
		}
		if r := h.enqueue("B1", "B", 1, 0); r.Seq != 1 {
			h.t.Fatalf("B1 seq %d, want 1: seq is per flow", r.Seq)
		}
		if r := h.enqueue("A2", "A", 1, 1); r.Status != fairrelay.EnqueueExisting || r.Seq != 2 {
			h.t.Fatalf("repeat A2: %+v, want existing seq 2", r)
		}
		h.unchanged("conflicting enqueue", true, func() {
			if r := h.enqueue("A2", "A", 2, 2); r.Status != fairrelay.EnqueueConflict {
				h.t.Fatalf("A2 other body: %+v, want conflict", r)
			}
			if r := h.enqueue("A2", "B", 1, 3); r.Status != fairrelay.EnqueueConflict {
				h.t.Fatalf("A2 other flow: %+v, want conflict", r)
			}
		})
		if tick := h.snapshot().Clock.Tick; tick != 3 {
			h.t.Fatalf("tick %d after existing/conflict answers at 1..3, want 3", tick)
		}
	}},
	{"clock_regressed_changes_nothing", ref, func(h h) {
		h.enqueue("A1", "A", 1, 5)
		c := h.claimID(5, "A1")
		h.enqueue("Q1", "Q", 1, 6)
		h.unchanged("regressing writes", false, func() {
			_, err := h.Queue.Enqueue(bg, fairrelay.EnqueueParams{ID: "A2", Flow: "A", Body: ledger(1), At: 4})
			wantCode(h.t, "enqueue", err, fairrelay.CodeClockRegressed, "")
			_, err = queuetest.ClaimOne(bg, h.Queue, 5)
			wantCode(h.t, "claim", err, fairrelay.CodeClockRegressed, "")
			_, err = h.Queue.Settle(bg, fairrelay.SettleParams{Token: c.Token, Outcome: fairrelay.OutcomeAccepted, At: 5})
			wantCode(h.t, "settle", err, fairrelay.CodeClockRegressed, "")
			_, err = h.Queue.Redrive(bg, fairrelay.RedriveParams{EventID: "A1", Reason: "x", At: 0})
			wantCode(h.t, "redrive", err, fairrelay.CodeClockRegressed, "")
			if !errors.Is(err, fairrelay.ErrClockRegressed) {
				h.t.Errorf("errors.Is(err, ErrClockRegressed) is false for %v", err)
			}
		})
	}},
	{"at_stored_runs_at_the_stored_tick", ref, func(h h) {
		h.enqueue("A1", "A", 1, 7)
		c := h.claim(fairrelay.AtStored)
		if c == nil || c.LeaseUntil != 12 {
			h.t.Fatalf("claim at the stored tick 7: %+v, want lease_until 12", c)
		}
		r := h.settle(c.Token, fairrelay.OutcomeIDConflict, fairrelay.AtStored)
		if r.Status != fairrelay.SettleQuarantined {
			h.t.Fatalf("settle: %+v", r)
		}
		rr, err := h.Queue.Redrive(bg, fairrelay.RedriveParams{EventID: "A1", ExpectedGeneration: 1, Reason: "fixed", At: fairrelay.AtStored})
		if err != nil || rr.Status != fairrelay.RedriveReady {
			h.t.Fatalf("redrive: %+v %v", rr, err)
		}
		if a := h.snapshot().Audit[0]; a.At != 7 {
			h.t.Fatalf("audit at %d, want the stored tick 7", a.At)
		}
		if e := h.event("A1"); *e.NextAt != 7 {
			h.t.Fatalf("next_at %d, want 7", *e.NextAt)
		}
	}},
	{"next_due_reads_without_writing", ref, func(h h) {
		due := func() (int64, bool) {
			h.t.Helper()
			stored, d, ok, err := h.Queue.NextDue(bg)
			if err != nil {
				h.t.Fatal(err)
			}
			if want := h.snapshot().Clock.Tick; stored != want {
				h.t.Fatalf("NextDue stored tick %d, want %d", stored, want)
			}
			return d, ok
		}
		if _, ok := due(); ok {
			h.t.Fatal("empty store: nothing is ever due")
		}
		h.enqueue("A1", "A", 1, 3)
		if d, ok := due(); !ok || d != 3 {
			h.t.Fatalf("a ready head: due %d %v, want the stored tick 3", d, ok)
		}
		c := h.claimID(3, "A1")
		if d, ok := due(); !ok || d != 8 {
			h.t.Fatalf("a leased head: due %d %v, want its lease end 8", d, ok)
		}
		h.settle(c.Token, fairrelay.OutcomeRetry, 4)
		if d, ok := due(); !ok || d != 6 {
			h.t.Fatalf("a head in backoff: due %d %v, want next_at 6", d, ok)
		}
		h.unchanged("NextDue", false, func() { due() })
		c = h.claimID(6, "A1")
		h.settle(c.Token, fairrelay.OutcomeIDConflict, 6)
		if _, ok := due(); ok {
			h.t.Fatal("a quarantined head is never due")
		}
	}},
	{"round_robin_across_flows", ref, func(h h) {
		for _, f := range []string{"A", "B", "C"} {
			for i := 1; i <= 3; i++ {
				h.enqueue(fmt.Sprintf("%s%d", f, i), f, 1, 0)
			}
		}
		var got []string
		for range 9 {
			id, st := h.step(0)
			if st != fairrelay.SettleAcked {
				h.t.Fatalf("%s settled %s", id, st)
			}
			got = append(got, id)
		}
		want := []string{"A1", "B1", "C1", "A2", "B2", "C2", "A3", "B3", "C3"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			h.t.Fatalf("order %v, want %v (SPEC §5 item 1)", got, want)
		}
		h.claimID(0, "")
	}},
	{"head_blocks_its_flow_in_every_state", ref, func(h h) {
		h.enqueue("A1", "A", 1, 0)
		h.enqueue("A2", "A", 1, 0)
		h.enqueue("B1", "B", 1, 0)
		h.enqueue("B2", "B", 1, 0)
		h.enqueue("B3", "B", 1, 0)
		// inflight: A1 is leased, A2 must wait.
		a := h.claimID(0, "A1")
		h.claimID(0, "B1")
		h.claimID(1, "")
		// ready in backoff: A1 back off until 3; A2 still waits.
		if r := h.settle(a.Token, fairrelay.OutcomeRetry, 1); r.Status != fairrelay.SettleReady || r.NextAt != 3 {
			h.t.Fatalf("retry: %+v, want ready next_at 3", r)
		}
		h.claimID(2, "")
		a = h.claimID(3, "A1")
		// quarantined: A1 blocks A2 for ever; B goes on.
		if r := h.settle(a.Token, fairrelay.OutcomeIDConflict, 3); r.Status != fairrelay.SettleQuarantined {
			h.t.Fatalf("id_conflict: %+v, want quarantined", r)
		}
		h.claimID(5, "B1") // B1's lease ran out at 5: re-claimed, never B2.
		for at := int64(6); at < 40; at += 5 {
			if c := h.claim(at); c != nil && c.Flow == "A" {
				h.t.Fatalf("claimed %s behind a quarantined head", c.Token.EventID)
			}
		}
		if e := h.event("A2"); e.State != fairrelay.StateReady || e.Generation != 0 {
			h.t.Fatalf("A2 %+v: a head in any state must block its flow", e)
		}
	}},
	{"one_lease_per_flow", ref, func(h h) {
		for i := 1; i <= 5; i++ {
			h.enqueue(fmt.Sprintf("A%d", i), "A", 1, 0)
		}
		h.claimID(0, "A1")
		for at := int64(0); at < 5; at++ {
			h.claimID(at, "")
		}
		// Lease ran out: the same head is re-claimed, never A2.
		c := h.claimID(5, "A1")
		if c.Token.Generation != 2 || c.Attempts != 2 {
			h.t.Fatalf("re-claim %+v, want generation 2 attempts 2", c)
		}
	}},
	{"claim_spends_the_turn_of_a_failing_head", func() fairrelay.Policy {
		p := ref()
		p.Budget, p.BackoffBase, p.BackoffCap = 100, 1, 1
		return p
	}, func(h h) {
		// A1 answers retry for ever and is eligible again one tick later; B's
		// events succeed. Because served moves at claim time, A1 and B
		// alternate instead of A1 taking every turn (SPEC §2).
		h.enqueue("A1", "A", 1, 0)
		for i := 1; i <= 3; i++ {
			h.enqueue(fmt.Sprintf("B%d", i), "B", 1, 0)
		}
		var got []string
		for at := int64(0); at < 3; at++ {
			for range 2 {
				c := h.claim(at)
				got = append(got, c.Token.EventID)
				o := fairrelay.OutcomeAccepted
				if c.Flow == "A" {
					o = fairrelay.OutcomeRetry
				}
				h.settle(c.Token, o, at)
			}
		}
		if fmt.Sprint(got) != "[A1 B1 A1 B2 A1 B3]" {
			h.t.Fatalf("claims %v, want A1 and B alternating", got)
		}
	}},
	{"retry_backoff_schedule_and_budget", ref, func(h h) {
		h.enqueue("A1", "A", 1, 0)
		h.enqueue("B1", "B", 1, 0)
		var next []int64
		c := h.claimID(0, "A1")
		for _, at := range []int64{0, 2, 6} {
			if c == nil {
				h.t.Fatalf("A1 not claimable at %d", at)
			}
			r := h.settle(c.Token, fairrelay.OutcomeRetry, at)
			if r.Status == fairrelay.SettleReady {
				next = append(next, r.NextAt)
				if at == 0 {
					if id, _ := h.step(0); id != "B1" {
						h.t.Fatalf("B1 must run at tick 0 while A1 backs off, got %q", id)
					}
					h.claimID(1, "")
					c = h.claimID(2, "A1")
				} else {
					h.claimID(5, "")
					c = h.claimID(6, "A1")
				}
				continue
			}
			if r.Status != fairrelay.SettleQuarantined || at != 6 {
				h.t.Fatalf("settle at %d: %+v", at, r)
			}
		}
		if fmt.Sprint(next) != "[2 6]" {
			h.t.Fatalf("next_at %v, want [2 6] (SPEC §5 item 4)", next)
		}
		e := h.event("A1")
		if e.State != fairrelay.StateQuarantined || *e.Reason != fairrelay.ReasonBudgetExhausted {
			h.t.Fatalf("A1 %+v, want quarantined budget_exhausted", e)
		}
	}},
	{"backoff_is_capped", func() fairrelay.Policy {
		p := ref()
		p.Budget = 6
		return p
	}, func(h h) {
		h.enqueue("A1", "A", 1, 0)
		at := int64(0)
		var delays []int64
		for range 5 {
			c := h.claim(at)
			r := h.settle(c.Token, fairrelay.OutcomeGap, at)
			delays = append(delays, r.NextAt-at)
			at = r.NextAt
		}
		if fmt.Sprint(delays) != "[2 4 8 8 8]" {
			h.t.Fatalf("delays %v, want [2 4 8 8 8]: min(base*2^(n-1), cap)", delays)
		}
	}},
	{"jitter_stays_in_bounds_and_replays", func() fairrelay.Policy {
		p := ref()
		p.Jitter = 0.5
		p.Budget = 50
		p.BackoffCap = 64
		return p
	}, func(h h) {
		h.enqueue("A1", "A", 1, 0)
		at := int64(0)
		for n := int64(1); n <= 8; n++ {
			c := h.claim(at)
			r := h.settle(c.Token, fairrelay.OutcomeRetry, at)
			d := min(int64(2)<<(n-1), 64)
			got := r.NextAt - at
			if float64(got) < float64(d)*0.5 || got > d {
				h.t.Fatalf("attempt %d: delay %d outside [%v, %d]", n, got, float64(d)*0.5, d)
			}
			if want := h.Queue.Policy().Backoff("A1", c.Token.Generation, n); got != want {
				h.t.Fatalf("attempt %d: delay %d, but Policy.Backoff says %d: jitter must replay", n, got, want)
			}
			at = r.NextAt
		}
	}},
	{"lease_expiry_spends_budget", ref, func(h h) {
		h.enqueue("A1", "A", 1, 0)
		h.enqueue("A2", "A", 1, 0)
		h.claimID(0, "A1")
		h.claimID(5, "A1")
		h.claimID(10, "A1")
		h.claimID(15, "") // third lease ran out with the budget used: quarantine, not claim.
		e := h.event("A1")
		if e.State != fairrelay.StateQuarantined || *e.Reason != fairrelay.ReasonBudgetExhausted || e.Generation != 3 {
			h.t.Fatalf("A1 %+v, want quarantined budget_exhausted at generation 3", e)
		}
	}},
	{"fence_stale_expired_not_found", ref, func(h h) {
		h.enqueue("A1", "A", 4, 0)
		old := h.claimID(0, "A1")
		cur := h.claimID(5, "A1")
		if o := h.receive(old); o != fairrelay.OutcomeAccepted {
			h.t.Fatalf("old delivery: %s", o)
		}
		if r := h.settle(old.Token, fairrelay.OutcomeAccepted, 6); r.Status != fairrelay.SettleStale {
			h.t.Fatalf("old token: %+v, want stale", r)
		}
		if o := h.receive(cur); o != fairrelay.OutcomeDuplicate {
			h.t.Fatalf("new delivery: %s, want duplicate", o)
		}
		// The lease ends at 10: a settle at exactly 10 is expired, even with
		// nobody re-claiming.
		if r := h.settle(cur.Token, fairrelay.OutcomeDuplicate, 10); r.Status != fairrelay.SettleExpired {
			h.t.Fatalf("settle at lease end: %+v, want expired", r)
		}
		if e := h.event("A1"); e.State != fairrelay.StateInflight {
			h.t.Fatalf("expired settle changed A1: %+v", e)
		}
		_, err := h.Queue.Settle(bg, fairrelay.SettleParams{Token: fairrelay.Token{EventID: "NOPE", Generation: 1}, Outcome: fairrelay.OutcomeAccepted, At: 11})
		wantCode(h.t, "settle unknown id", err, fairrelay.CodeNotFound, "")
		if p := h.inboxSnapshot().Projection; len(p) != 1 || p[0].Total != 4 {
			h.t.Fatalf("projection %+v: two deliveries must make one effect", p)
		}
	}},
	{"permanent_outcomes_quarantine_at_once", ref, func(h h) {
		perm := []fairrelay.Outcome{fairrelay.OutcomeIDConflict, fairrelay.OutcomeSequenceConflict,
			fairrelay.OutcomeUnsupportedDelta, fairrelay.OutcomeInvalidBody, fairrelay.OutcomeRejected}
		for i, o := range perm {
			f := fmt.Sprintf("F%d", i)
			h.enqueue(f+"-1", f, 1, 0)
			c := h.claimID(0, f+"-1")
			if r := h.settle(c.Token, o, 0); r.Status != fairrelay.SettleQuarantined {
				h.t.Fatalf("%s: %+v, want quarantined", o, r)
			}
			if e := h.event(f + "-1"); *e.Reason != string(o) || e.Attempts != 1 {
				h.t.Fatalf("%s: %+v, want reason %s after one attempt", o, e, o)
			}
		}
	}},
	{"unknown_outcome_is_transient", ref, func(h h) {
		h.enqueue("A1", "A", 1, 0)
		c := h.claimID(0, "A1")
		if r := h.settle(c.Token, fairrelay.Outcome("teapot"), 0); r.Status != fairrelay.SettleReady {
			h.t.Fatalf("unknown outcome: %+v, want ready (never silently permanent)", r)
		}
	}},
	{"redrive_checks_and_audit", ref, func(h h) {
		h.enqueue("A1", "A", 10, 0)
		h.enqueue("A2", "A", 1, 0)
		h.enqueue("B1", "B", 1, 0)
		h.Inbox.SetMaxDelta(5)
		if id, st := h.step(0); id != "A1" || st != fairrelay.SettleQuarantined {
			h.t.Fatalf("A1: %s %s", id, st)
		}
		if id, st := h.step(0); id != "B1" || st != fairrelay.SettleAcked {
			h.t.Fatalf("B1: %s %s", id, st)
		}
		h.claimID(1, "")
		h.unchanged("rejected redrives", false, func() {
			for _, c := range []struct {
				p    fairrelay.RedriveParams
				want string
			}{
				{fairrelay.RedriveParams{EventID: "A1", ExpectedGeneration: 7, Reason: "  ", At: 2}, fairrelay.RejectEmptyReason},
				{fairrelay.RedriveParams{EventID: "A2", ExpectedGeneration: 7, Reason: "x", At: 2}, fairrelay.RejectNotQuarantined},
				{fairrelay.RedriveParams{EventID: "A1", ExpectedGeneration: 7, Reason: "x", At: 2}, fairrelay.RejectGenerationMismatch},
			} {
				r, err := h.Queue.Redrive(bg, c.p)
				if err != nil || r.Status != fairrelay.RedriveRejected || r.RejectReason != c.want {
					h.t.Fatalf("redrive %+v: %+v %v, want rejected %s", c.p, r, err, c.want)
				}
			}
		})
		r, err := h.Queue.Redrive(bg, fairrelay.RedriveParams{EventID: "A1", ExpectedGeneration: 1, Reason: "receiver upgraded", Operator: "ops-1", At: 2})
		if err != nil || r.Status != fairrelay.RedriveReady || r.Generation != 2 {
			h.t.Fatalf("redrive: %+v %v", r, err)
		}
		h.Inbox.SetMaxDelta(1000)
		h.step(3)
		h.step(3)
		s := h.snapshot()
		if len(s.Audit) != 1 {
			h.t.Fatalf("audit %+v, want one row", s.Audit)
		}
		a := s.Audit[0]
		if a.ID == nil || *a.ID != "A1" || a.Flow != "A" || a.Action != "redrive" || a.Reason != "receiver upgraded" || *a.Operator != "ops-1" ||
			*a.PreviousReason != "unsupported_delta" || a.Generation == nil || *a.Generation != 2 || a.At != 2 {
			h.t.Fatalf("audit row %+v", a)
		}
		e := h.event("A1")
		if e.State != fairrelay.StateAcked || e.LifetimeAttempts != 2 || e.Attempts != 1 {
			h.t.Fatalf("A1 %+v, want acked, lifetime_attempts 2, attempts 1", e)
		}
		p := h.inboxSnapshot().Projection
		if p[0].Flow != "A" || p[0].Seq != 2 || p[0].Total != 11 {
			h.t.Fatalf("projection %+v, want A seq 2 total 11 (SPEC §5 item 3)", p)
		}
		_, err = h.Queue.Redrive(bg, fairrelay.RedriveParams{EventID: "NOPE", Reason: "x", At: 4})
		wantCode(h.t, "redrive unknown id", err, fairrelay.CodeNotFound, "")
	}},
	{"seed_entry_lets_new_flows_overtake", ref, func(h h) {
		h.enqueue("A1", "A", 1, 0)
		h.enqueue("A2", "A", 1, 0)
		h.step(0)
		var got []string
		for i, f := range []string{"B", "C", "D"} {
			h.enqueue(f+"1", f, 1, int64(i+1))
			id, _ := h.step(int64(i + 1))
			got = append(got, id)
		}
		if fmt.Sprint(got) != "[B1 C1 D1]" {
			h.t.Fatalf("got %v, want new flows before A2 under seed entry (SPEC §5 item 10)", got)
		}
	}},
	{"fair_entry_keeps_old_flow_turn", fair, func(h h) {
		h.enqueue("A1", "A", 1, 0)
		h.enqueue("A2", "A", 1, 0)
		h.step(0)
		h.enqueue("B1", "B", 1, 1)
		if id, _ := h.step(1); id != "A2" {
			h.t.Fatalf("got %s, want A2: a new flow joins at the back under fair entry (SPEC §7)", id)
		}
	}},
	{"claim_batch_equals_consecutive_claims", ref, func(h h) {
		for _, f := range []string{"A", "B", "C", "D"} {
			h.enqueue(f+"1", f, 1, 0)
			h.enqueue(f+"2", f, 1, 0)
		}
		cs, err := queuetest.Claims(h.Queue.Claim(bg, fairrelay.ClaimParams{At: 0, Limit: 3}))
		if err != nil {
			h.t.Fatal(err)
		}
		var got []string
		for _, c := range cs {
			got = append(got, fmt.Sprintf("%s/t%d", c.Token.EventID, c.Ticket))
		}
		if fmt.Sprint(got) != "[A1/t1 B1/t2 C1/t3]" {
			h.t.Fatalf("batch %v", got)
		}
		cs, err = queuetest.Claims(h.Queue.Claim(bg, fairrelay.ClaimParams{At: 0, Limit: 10}))
		if err != nil || len(cs) != 1 || cs[0].Token.EventID != "D1" {
			h.t.Fatalf("second batch %+v %v: only D1 is eligible, one lease per flow", cs, err)
		}
		var ps []fairrelay.Settlement
		for _, id := range []string{"A1", "B1", "C1"} {
			ps = append(ps, fairrelay.Settlement{Token: fairrelay.Token{EventID: id, Generation: 1}, Outcome: fairrelay.OutcomeAccepted})
		}
		ps = append(ps, fairrelay.Settlement{Token: fairrelay.Token{EventID: "D1", Generation: 9}, Outcome: fairrelay.OutcomeAccepted})
		rs, err := queuetest.Settles(h.Queue.SettleMany(bg, fairrelay.SettleManyParams{At: 1, Settles: ps}))
		if err != nil {
			h.t.Fatal(err)
		}
		want := []fairrelay.SettleResult{{Status: fairrelay.SettleAcked}, {Status: fairrelay.SettleAcked}, {Status: fairrelay.SettleAcked}, {Status: fairrelay.SettleStale}}
		if !slices.Equal(rs, want) {
			h.t.Fatalf("settle batch %+v, want %+v", rs, want)
		}
		_, err = queuetest.Settles(h.Queue.SettleMany(bg, fairrelay.SettleManyParams{At: 1, Settles: []fairrelay.Settlement{ps[3], {Token: fairrelay.Token{EventID: "NOPE"}, Outcome: fairrelay.OutcomeAccepted}}}))
		wantCode(h.t, "settle batch with unknown id", err, fairrelay.CodeNotFound, "")
	}},
	{"inbox_answers", ref, func(h h) {
		in := h.Inbox
		rcv := func(id, flow string, seq int64, body string) fairrelay.Outcome {
			h.t.Helper()
			o, err := in.Receive(bg, inboxDelivery(id, flow, seq, body))
			if err != nil {
				h.t.Fatal(err)
			}
			return o
		}
		in.SetUnavailable(true)
		h.unchanged("unavailable receiver", false, func() {
			if o := rcv("A1", "A", 1, `{"delta":1}`); o != fairrelay.OutcomeRetry {
				h.t.Fatalf("unavailable: %s", o)
			}
		})
		in.SetUnavailable(false)
		in.SetMaxDelta(5)
		for _, c := range []struct {
			id, flow string
			seq      int64
			body     string
			want     fairrelay.Outcome
		}{
			{"A2", "A", 2, `{"delta":1}`, fairrelay.OutcomeGap},
			{"A1", "A", 1, `{"delta":"1"}`, fairrelay.OutcomeInvalidBody},
			{"A1", "A", 1, `[1]`, fairrelay.OutcomeInvalidBody},
			{"A1", "A", 1, `{"delta":0}`, fairrelay.OutcomeInvalidBody},
			{"A1", "A", 1, `{"delta":1.0}`, fairrelay.OutcomeInvalidBody},
			{"A1", "A", 1, `{"delta":-1,"delta":1}`, fairrelay.OutcomeInvalidBody},
			{"A1", "A", 1, `{"delta":4611686018427387904}`, fairrelay.OutcomeUnsupportedDelta},
			{"A1", "A", 1, `{"delta":100000000000000000000000}`, fairrelay.OutcomeUnsupportedDelta},
			{"A1", "A", 1, `{"delta":6}`, fairrelay.OutcomeUnsupportedDelta},
			{"A1", "A", 1, `{"delta":5,"note":"x"}`, fairrelay.OutcomeAccepted},
			{"A1", "A", 1, `{"delta":5,"note":"x"}`, fairrelay.OutcomeDuplicate},
			{"A1", "A", 1, `{"delta":4}`, fairrelay.OutcomeIDConflict},
			{"A1", "B", 1, `{"delta":5,"note":"x"}`, fairrelay.OutcomeIDConflict},
			{"X1", "A", 1, `{"delta":1}`, fairrelay.OutcomeSequenceConflict},
			{"A2", "A", 2, `{"delta":2}`, fairrelay.OutcomeAccepted},
		} {
			if o := rcv(c.id, c.flow, c.seq, c.body); o != c.want {
				h.t.Fatalf("receive %s %s/%d %s: %s, want %s", c.id, c.flow, c.seq, c.body, o, c.want)
			}
		}
		s := h.inboxSnapshot()
		if len(s.Receipts) != 2 || s.Projection[0].Total != 7 || s.Projection[0].Seq != 2 {
			h.t.Fatalf("inbox %+v, want 2 receipts, A seq 2 total 7", s)
		}
		// max_delta 0 supports no delta at all (SPEC §3 step 4 has no
		// "no limit" value).
		in.SetMaxDelta(0)
		if o := rcv("A3", "A", 3, `{"delta":1}`); o != fairrelay.OutcomeUnsupportedDelta {
			h.t.Fatalf("max_delta 0: %s, want unsupported_delta", o)
		}
	}},
}
