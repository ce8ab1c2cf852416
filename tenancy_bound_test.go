package fairrelay_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/harness/conformance"
	"github.com/fairrelay/fairrelay/internal/harness/queuetest"
)

// TestWeightedBoundUnderAdversaries checks SPEC §8's bound under the fair
// policy on adversarial workloads: an always-eligible group P is claimed
// again after a number of claims bounded by the sum of the other active
// groups' weights. Around P (weight 1 or 2, 40 flows that always have a
// ready head, every claim acked), adversary groups of weights 1 to 5 and
// flows that are their own group keep the claims busy: poison heads
// (permanent outcomes, redriven again and again), retry storms (transient
// outcomes until the budget quarantines them, then redriven), claims never
// settled (leases run out), and an endless stream of new groups and new
// flows. Checked between every two consecutive claims of P, in ticket
// order:
//
//   - no other group is claimed more times than its weight (a deficit
//     round robin turn), so the claims between them are at most the sum of
//     the weights of the groups claimed there;
//   - no group created after P's previous claim is claimed before P's next
//     one (new groups join at the back, SPEC §7).
func TestWeightedBoundUnderAdversaries(t *testing.T) {
	forWorkloads(t, func(t *testing.T, b conformance.Backend, rng *rand.Rand) {
		pol := fairrelay.ReferencePolicy()
		pol.Entry = fairrelay.EntryFair
		a := newAdversaries(t, b, pol, rng)
		const steps = 150
		for range steps {
			a.step()
		}
		a.check()
	})
}

// adversaries is the workload of TestWeightedBoundUnderAdversaries.
type adversaries struct {
	t   *testing.T
	ctx context.Context
	q   *fairrelay.Queue
	rng *rand.Rand
	at  int64
	// groups: weight and behaviour of every group (a flow that is its own
	// group is listed under its name, weight 1); group of every flow;
	// created: the number of claims when the group's first event was
	// enqueued.
	weight   map[string]int64
	behave   map[string]string
	group    map[string]string
	created  map[string]int
	flows    []string // adversary flows
	nextID   int
	claims   []fairrelay.Claim // every claim, in ticket order
	pending  []fairrelay.Claim // the last step's claims
	newGroup int
}

const boundP = "P"

func newAdversaries(t *testing.T, b conformance.Backend, pol fairrelay.Policy, rng *rand.Rand) *adversaries {
	ctx := context.Background()
	path, _ := b.New(t)
	q, err := fairrelay.Open(ctx, path, fairrelay.Config{Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	a := &adversaries{t: t, ctx: ctx, q: q, rng: rng, weight: map[string]int64{}, behave: map[string]string{},
		group: map[string]string{}, created: map[string]int{}}
	a.addGroup(boundP, 1+int64(rng.IntN(2)), "ack", 40)
	for range 10 {
		a.addAdversary()
	}
	return a
}

var adversaryBehaviours = []string{"poison", "retry", "silent", "ack"}

// addGroup creates group g of weight w with n flows, one event each.
func (a *adversaries) addGroup(g string, w int64, behave string, n int) {
	a.t.Helper()
	a.weight[g], a.behave[g], a.created[g] = w, behave, len(a.claims)
	if w > 1 {
		if _, err := a.q.Configure(a.ctx, fairrelay.ConfigureParams{At: a.at, Group: g, Weight: &w}); err != nil {
			a.t.Fatal(err)
		}
	}
	var evs []fairrelay.NewEvent
	for i := range n {
		f := fmt.Sprintf("%s.f%d", g, i)
		a.group[f] = g
		if g != boundP {
			a.flows = append(a.flows, f)
		}
		evs = append(evs, a.event(f))
	}
	a.enqueue(evs)
}

// addAdversary creates a new group of weight 1 to 5 with 1 to 6 flows, or
// a new flow that is its own group.
func (a *adversaries) addAdversary() {
	a.newGroup++
	behave := adversaryBehaviours[a.rng.IntN(len(adversaryBehaviours))]
	if a.rng.IntN(3) == 0 {
		f := fmt.Sprintf("own%d", a.newGroup)
		a.weight[f], a.behave[f], a.created[f], a.group[f] = 1, behave, len(a.claims), f
		a.flows = append(a.flows, f)
		a.enqueue([]fairrelay.NewEvent{a.event(f)})
		return
	}
	a.addGroup(fmt.Sprintf("adv%d", a.newGroup), 1+int64(a.rng.IntN(5)), behave, 1+a.rng.IntN(6))
}

func (a *adversaries) event(flow string) fairrelay.NewEvent {
	a.nextID++
	ev := fairrelay.NewEvent{ID: fmt.Sprintf("e%d", a.nextID), Flow: flow, Body: []byte(`{"delta":1}`)}
	if g := a.group[flow]; g != flow {
		ev.Group = g
	}
	return ev
}

func (a *adversaries) enqueue(evs []fairrelay.NewEvent) {
	a.t.Helper()
	rs, err := a.q.EnqueueMany(a.ctx, fairrelay.EnqueueManyParams{At: a.at, Events: evs})
	if err != nil {
		a.t.Fatal(err)
	}
	for i, r := range rs {
		if r.Status != fairrelay.EnqueueCreated {
			a.t.Fatalf("enqueue %s: %+v", evs[i].ID, r)
		}
	}
}

// step settles the last step's claims as their groups behave, claims the
// next ones, refills P, feeds the adversaries (new events, new flows, new
// groups) and redrives a few quarantined heads.
func (a *adversaries) step() {
	a.t.Helper()
	a.at += 1 + int64(a.rng.IntN(3)) // leases (5 ticks) and backoffs run out
	var settles []fairrelay.Settlement
	for _, c := range a.pending {
		var o fairrelay.Outcome
		switch a.behave[a.group[c.Flow]] {
		case "ack":
			o = fairrelay.OutcomeAccepted
		case "poison":
			o = fairrelay.OutcomeInvalidBody
		case "retry":
			o = fairrelay.OutcomeRetry
		default:
			continue // silent: the lease runs out
		}
		settles = append(settles, fairrelay.Settlement{Token: c.Token, Outcome: o})
	}
	k := 8 + a.rng.IntN(25)
	_, cs, err := queuetest.SettleClaims(a.q.SettleMany(a.ctx, fairrelay.SettleManyParams{At: a.at, Settles: settles, ClaimLimit: k}))
	if err != nil {
		a.t.Fatalf("step at %d: %v", a.at, err)
	}
	a.claims = append(a.claims, cs...)
	a.pending = cs
	var evs []fairrelay.NewEvent
	for _, c := range cs {
		if a.group[c.Flow] == boundP {
			evs = append(evs, a.event(c.Flow)) // P's flows never run dry
		}
	}
	for range 3 + a.rng.IntN(6) {
		evs = append(evs, a.event(a.flows[a.rng.IntN(len(a.flows))]))
	}
	if a.rng.IntN(2) == 0 {
		// A new flow in an existing adversary group.
		g := a.group[a.flows[a.rng.IntN(len(a.flows))]]
		if g[:3] == "adv" {
			f := fmt.Sprintf("%s.f%d", g, a.nextID)
			a.group[f] = g
			a.flows = append(a.flows, f)
			evs = append(evs, a.event(f))
		}
	}
	a.enqueue(evs)
	for range 1 + a.rng.IntN(3) {
		a.addAdversary()
	}
	qs, err := a.q.Quarantined(a.ctx, 3)
	if err != nil {
		a.t.Fatal(err)
	}
	for _, e := range qs {
		r, err := a.q.Redrive(a.ctx, fairrelay.RedriveParams{EventID: e.ID, ExpectedGeneration: e.Generation, Reason: "try again", At: a.at})
		if err != nil || r.Status != fairrelay.RedriveReady {
			a.t.Fatalf("redrive %s: %+v %v", e.ID, r, err)
		}
	}
}

// check walks the claims in ticket order between consecutive claims of P.
func (a *adversaries) check() {
	a.t.Helper()
	prev := -1 // index of P's previous claim
	gaps, maxGap, maxSum := 0, 0, int64(0)
	var behaviours = map[string]int{}
	for i, c := range a.claims {
		if i > 0 && c.Ticket <= a.claims[i-1].Ticket {
			a.t.Fatalf("claims out of ticket order: %d after %d", c.Ticket, a.claims[i-1].Ticket)
		}
		behaviours[a.behave[a.group[c.Flow]]]++
		if a.group[c.Flow] != boundP {
			continue
		}
		if prev >= 0 {
			count := map[string]int64{}
			sum := int64(0)
			for _, o := range a.claims[prev+1 : i] {
				g := a.group[o.Flow]
				if count[g] == 0 {
					sum += a.weight[g]
				}
				count[g]++
				if count[g] > a.weight[g] {
					a.t.Errorf("between P's claims of tickets %d and %d, group %s of weight %d was claimed %d times", a.claims[prev].Ticket, c.Ticket, g, a.weight[g], count[g])
				}
				if a.created[g] > prev {
					a.t.Errorf("between P's claims of tickets %d and %d, group %s, created after the first, was claimed (ticket %d)", a.claims[prev].Ticket, c.Ticket, g, o.Ticket)
				}
			}
			gaps++
			maxGap, maxSum = max(maxGap, i-prev-1), max(maxSum, sum)
		}
		prev = i
	}
	a.t.Logf("%d claims (%v), P (weight %d) claimed %d times, %d groups in all; largest gap between P's claims %d, largest sum of the weights of the groups claimed in a gap %d",
		len(a.claims), behaviours, a.weight[boundP], gaps+1, len(a.weight), maxGap, maxSum)
	if gaps < 50 {
		a.t.Errorf("P was claimed only %d times: the bound was hardly exercised", gaps+1)
	}
}
