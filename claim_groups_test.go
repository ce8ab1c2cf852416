package fairrelay_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/harness/conformance"
	"github.com/fairrelay/fairrelay/internal/harness/queuetest"
	"github.com/fairrelay/fairrelay/internal/harness/refmodel"
)

// Regression tests for the claim bugs the property test found in the
// tenancy branch (issue 16), each the shortest sequence we found, on every
// backend. Each asserts the SPEC's answer (written out, and checked against
// refmodel), and where a claim of Limit k is involved, that it equals k
// single claims at the same tick (ClaimParams.Limit's contract).

// groupScript drives one Queue and, beside it, the model, failing the test
// on any error; its claims return event ids.
type groupScript struct {
	t   *testing.T
	ctx context.Context
	q   *fairrelay.Queue
	m   *refmodel.Model
}

func newGroupScript(t *testing.T, b conformance.Backend, pol fairrelay.Policy) *groupScript {
	t.Helper()
	ctx := context.Background()
	path, _ := b.New(t)
	q, err := fairrelay.Open(ctx, path, fairrelay.Config{Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return &groupScript{t: t, ctx: ctx, q: q, m: refmodel.New(q.Policy())}
}

func (s *groupScript) enqueue(id, flow, group string, at int64) {
	s.t.Helper()
	p := fairrelay.EnqueueParams{ID: id, Flow: flow, Group: group, Body: []byte(`{"delta":1}`), At: at}
	if _, err := s.q.Enqueue(s.ctx, p); err != nil {
		s.t.Fatalf("enqueue %s: %v", id, err)
	}
	if _, err := s.m.Enqueue(p); err != nil {
		s.t.Fatalf("model: enqueue %s: %v", id, err)
	}
}

// claim claims up to k heads at tick at and returns their ids, requiring
// the model's answer to be want too.
func (s *groupScript) claim(at int64, k int, want ...string) []string {
	s.t.Helper()
	r, err := s.q.Claim(s.ctx, fairrelay.ClaimParams{At: at, Limit: k})
	if err != nil {
		s.t.Fatalf("claim at %d limit %d: %v", at, k, err)
	}
	cs, err := s.m.ClaimBatch(at, k)
	if err != nil {
		s.t.Fatal(err)
	}
	if got := claimIDs(cs); fmt.Sprint(got) != fmt.Sprint(want) {
		s.t.Fatalf("the test's expectation disagrees with refmodel: claim at %d limit %d: model %v, want %v", at, k, got, want)
	}
	return claimIDs(r.Claims)
}

func (s *groupScript) settle(id string, gen, at int64) {
	s.t.Helper()
	tok := fairrelay.Token{EventID: id, Generation: gen}
	if _, err := s.q.Settle(s.ctx, fairrelay.SettleParams{Token: tok, Outcome: fairrelay.OutcomeAccepted, At: at}); err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.m.Settle(tok, fairrelay.OutcomeAccepted, at); err != nil {
		s.t.Fatal(err)
	}
}

func (s *groupScript) pause(flow string, at int64) {
	s.t.Helper()
	p := fairrelay.FlowActionParams{Flow: flow, Reason: "tenant asked", At: at}
	if r, err := s.q.Pause(s.ctx, p); err != nil || r.Status != fairrelay.ActionPaused {
		s.t.Fatalf("pause %s: %+v %v", flow, r, err)
	}
	if _, err := s.m.Pause(p); err != nil {
		s.t.Fatal(err)
	}
}

func claimIDs(cs []fairrelay.Claim) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, c.Token.EventID)
	}
	return out
}

func requireClaims(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s: claimed %v, want %v", what, got, want)
	}
}

// TestClaimLimitTakesAGroupAgain: a claim of Limit k takes a group a second
// time when its turn comes round again in the same transaction. Bug: with
// two member flows already runnable in the store, Limit 3 stopped after 2
// claims ([m1 x1]; a claim right after took n1): claim.go's member reads
// the group's members with limit fetched+want, not counting the member the
// group pick brought, so it reads back only flows it has claimed and
// decides the group has none left.
func TestClaimLimitTakesAGroupAgain(t *testing.T) {
	t.Parallel()
	for _, b := range conformance.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			for _, single := range []bool{false, true} {
				s := newGroupScript(t, b, fairrelay.ReferencePolicy())
				s.enqueue("a1", "A", "", 0)
				s.enqueue("m1", "M", "G", 0)
				s.enqueue("n1", "N", "G", 0)
				s.enqueue("x1", "X", "", 0)
				// A comes first by name; the claim files M and N in the
				// runnable index of group G without taking them.
				requireClaims(t, "first claim", s.claim(0, 1, "a1"), "a1")
				// G (served 0) then X (served 0, "G" < "X"), then G again.
				var got []string
				if single {
					for _, id := range []string{"m1", "x1", "n1"} {
						got = append(got, s.claim(0, 1, id)...)
					}
				} else {
					got = s.claim(0, 3, "m1", "x1", "n1")
				}
				requireClaims(t, fmt.Sprintf("three claims (single %t)", single), got, "m1", "x1", "n1")
			}
		})
	}
}

// TestClaimPassesOverPausedMember: a paused member flow does not hide the
// other members of its group (SPEC §9: its head is never eligible; SPEC §2
// step 5: idle only when nothing is eligible). Bug: the claim answered idle
// while D's head was eligible (the next claim took it): the group pick
// brings the paused A, the claim parks it, then re-reads the members with
// the same too-small limit as in TestClaimLimitTakesAGroupAgain, gets A
// back and gives the group up.
func TestClaimPassesOverPausedMember(t *testing.T) {
	t.Parallel()
	for _, b := range conformance.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			s := newGroupScript(t, b, fairrelay.ReferencePolicy())
			s.enqueue("b1", "B", "", 0)
			s.enqueue("a1", "A", "G", 0)
			s.enqueue("d1", "D", "G", 0)
			requireClaims(t, "first claim", s.claim(0, 1, "b1"), "b1") // files A and D as runnable
			s.pause("A", 0)
			requireClaims(t, "claim with A paused", s.claim(0, 1, "d1"), "d1")
		})
	}
}

// TestClaimPassesOverGroupsOfPausedFlows: a group whose runnable members
// are all paused does not hide the groups after it. Bug: the claim
// answered idle while M's head (group D) was eligible (the next claim took
// it): a claim of Limit k reads the first k groups of the group runnable
// index, where a group stays while a paused member is counted runnable;
// when such a group turns out to have nothing to claim, the claim reads no
// further group. (With an own-group flow or a member promoted in the same
// transaction in play, the same gap makes the claim take the wrong head:
// the property test's fair/seed=2 took D's head before A's, whose served
// was smaller, because its group was known only through D.)
func TestClaimPassesOverGroupsOfPausedFlows(t *testing.T) {
	t.Parallel()
	for _, b := range conformance.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			pol := fairrelay.ReferencePolicy()
			pol.Entry = fairrelay.EntryFair
			s := newGroupScript(t, b, pol)
			s.enqueue("c1", "C", "H", 0)
			s.enqueue("c2", "C", "H", 0)
			s.enqueue("n1", "N", "D", 0)
			s.enqueue("m1", "M", "D", 0)
			requireClaims(t, "first claim", s.claim(0, 1, "c1"), "c1") // H was created first
			s.settle("c1", 1, 0)                                       // c2 is C's head, filed by the next claim
			requireClaims(t, "second claim", s.claim(0, 1, "n1"), "n1")
			s.pause("C", 0) // H (served 1) is still first in the group index, with C counted runnable
			requireClaims(t, "claim with C paused", s.claim(0, 1, "m1"), "m1")
		})
	}
}

// TestClaimLimitKeepsMemberOrder: inside a group a claim of Limit k takes
// the member with the smallest served (SPEC §8, §2 step 3), also when
// another member became eligible in the same transaction. Bug: the fourth
// claim took b1 (B, served 3, its lease ran out at this tick) instead of a2
// (A, served 1, ready since tick 0), which four single claims take: once
// the member the group pick brought is claimed, member returns the member
// the transaction promoted without reading the store's runnable members,
// which may come before it.
func TestClaimLimitKeepsMemberOrder(t *testing.T) {
	t.Parallel()
	for _, b := range conformance.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			for _, single := range []bool{false, true} {
				s := newGroupScript(t, b, fairrelay.ReferencePolicy())
				s.enqueue("a1", "A", "G", 0)
				s.enqueue("a2", "A", "G", 0)
				s.enqueue("b1", "B", "G", 0)
				s.enqueue("y1", "Y", "", 0)
				s.enqueue("y2", "Y", "", 0)
				requireClaims(t, "claim 1", s.claim(0, 1, "a1"), "a1") // G, then A by name
				requireClaims(t, "claim 2", s.claim(0, 1, "y1"), "y1")
				requireClaims(t, "claim 3", s.claim(0, 1, "b1"), "b1") // b1's lease runs to 5
				s.settle("a1", 1, 0)
				s.settle("y1", 1, 0)
				s.enqueue("x1", "X", "G", 0)                           // X: served 0
				requireClaims(t, "claim 4", s.claim(0, 1, "y2"), "y2") // files a2 and x1 as runnable
				s.enqueue("z1", "Z", "", 5)
				// At 5: Z (served 0), G → X (served 0), Y (its lease ran
				// out), G → A (served 1) before B (served 3).
				var got []string
				if single {
					for _, id := range []string{"z1", "x1", "y2", "a2"} {
						got = append(got, s.claim(5, 1, id)...)
					}
				} else {
					got = s.claim(5, 4, "z1", "x1", "y2", "a2")
				}
				requireClaims(t, fmt.Sprintf("four claims at 5 (single %t)", single), got, "z1", "x1", "y2", "a2")
			}
		})
	}
}

// TestSettleAndClaimTwoTokensOfOneFlow: SettleMany with ClaimLimit settles
// a batch that holds two tokens of one flow — the head's, then a stale one
// of an event acked before — and claims the event the ack made the head
// (SPEC §2: the stale token answers stale, nothing else changes). Bug: the
// whole transaction failed with `flow "A": head seq 3 is missing: the
// store is inconsistent`: the read that brings the event after each
// settled one keys it by flow (store.ReadResult.Next, sqlitestore Read),
// so the stale a1's next event (a2) replaces a2's (a3). It predates the
// tenancy branch; the PostgreSQL read keys Next by flow too.
func TestSettleAndClaimTwoTokensOfOneFlow(t *testing.T) {
	t.Parallel()
	for _, b := range conformance.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			s := newGroupScript(t, b, fairrelay.ReferencePolicy())
			s.enqueue("a1", "A", "", 0)
			s.enqueue("a2", "A", "", 0)
			s.enqueue("a3", "A", "", 0)
			s.claim(0, 1, "a1")
			s.settle("a1", 1, 0)
			s.claim(0, 1, "a2")
			settles := []fairrelay.Settlement{
				{Token: fairrelay.Token{EventID: "a2", Generation: 1}, Outcome: fairrelay.OutcomeAccepted},
				{Token: fairrelay.Token{EventID: "a1", Generation: 1}, Outcome: fairrelay.OutcomeAccepted},
			}
			if mrs, err := s.m.SettleBatch(0, settles); err != nil || mrs[0].Status != fairrelay.SettleAcked || mrs[1].Status != fairrelay.SettleStale {
				t.Fatalf("the test's expectation disagrees with refmodel: settles %+v %v", mrs, err)
			}
			if mcs, _ := s.m.ClaimBatch(0, 1); fmt.Sprint(claimIDs(mcs)) != "[a3]" {
				t.Fatalf("the test's expectation disagrees with refmodel: claims %v", claimIDs(mcs))
			}
			rs, cs, err := queuetest.SettleClaims(s.q.SettleMany(s.ctx, fairrelay.SettleManyParams{At: 0, Settles: settles, ClaimLimit: 1}))
			if err != nil {
				t.Fatalf("settle a2 (head) and a1 (stale), then claim: %v", err)
			}
			if len(rs) != 2 || rs[0].Status != fairrelay.SettleAcked || rs[1].Status != fairrelay.SettleStale {
				t.Errorf("settles: got %+v, want acked then stale", rs)
			}
			requireClaims(t, "claim after the settles", claimIDs(cs), "a3")
		})
	}
}

// TestClaimPromotesAFullPageOfDueFlows: a claim promotes every due flow
// however many there are (claim.go reads them duePage = 256 at a time).
// Bug: with 256 or more flows due at one claim the claim panicked with a
// nil pointer dereference: promoteDue takes the next page's cursor from the
// page's last flow after promoting it, when its WaitUntil is nil. It
// predates the tenancy branch (256 leases running out at once), but now
// any enqueue of 256 new flows in groups does it: a member flow's first
// head is filed in the due index.
func TestClaimPromotesAFullPageOfDueFlows(t *testing.T) {
	t.Parallel()
	for _, b := range conformance.Backends() {
		for _, group := range []string{"", "G"} {
			t.Run(fmt.Sprintf("%s/group=%q", b.Name, group), func(t *testing.T) {
				t.Parallel()
				s := newGroupScript(t, b, fairrelay.ReferencePolicy())
				var evs []fairrelay.NewEvent
				for i := range 256 {
					evs = append(evs, fairrelay.NewEvent{ID: fmt.Sprintf("e%03d", i), Flow: fmt.Sprintf("f%03d", i), Group: group, Body: []byte(`{"delta":1}`)})
				}
				if _, err := s.q.EnqueueMany(s.ctx, fairrelay.EnqueueManyParams{At: 0, Events: evs}); err != nil {
					t.Fatal(err)
				}
				at := int64(0)
				if group == "" {
					// Flows of their own are runnable at once: claim all 256;
					// their leases run out together at tick 5.
					r, err := s.q.Claim(s.ctx, fairrelay.ClaimParams{At: 0, Limit: 256})
					if err != nil || len(r.Claims) != 256 {
						t.Fatalf("claim 256 at 0: %d claims, %v", len(r.Claims), err)
					}
					at = 5
				}
				defer func() {
					if v := recover(); v != nil {
						t.Fatalf("claim at %d with 256 flows due: panic: %v", at, v)
					}
				}()
				c, err := queuetest.ClaimOne(s.ctx, s.q, at)
				if err != nil || c == nil || c.Token.EventID != "e000" {
					t.Fatalf("claim at %d with 256 flows due: %+v, %v; want e000", at, c, err)
				}
			})
		}
	}
}
