package fairrelay_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/harness/conformance"
	"github.com/fairrelay/fairrelay/internal/harness/queuetest"
	"github.com/fairrelay/fairrelay/internal/harness/refmodel"
)

// The property test of issues 4 and 16: random seeded operation sequences run
// against a real Queue on every backend (indexed heads, promoteDue, group
// indexes, batches) and against refmodel (the SPEC read literally, with
// naive scans) — SettleMany with a ClaimLimit against the model's SettleBatch then
// ClaimBatch; every answer, every error code (and the field an
// invalid_input names) and the snapshots must be identical. The operations
// are those of SPEC §2 and §6 and those of §8 (enqueue with a group,
// configure with weights and limits, prune) and §9 (expedite, pause,
// resume). Under the fair policy the same runs also check the fairness
// bound of SPEC §7 in §8's two-level, weighted form (fairnessTracker).
//
// Each subtest is named by its backend, policy and seed. Replay one with
//
//	FAIRRELAY_PROPERTY_SEED=<seed> go test -run 'TestPropertyMatchesReference/^<backend>$/^<policy>$' .
//
// and run more seeds with FAIRRELAY_PROPERTY_SEEDS=<n> (default 3 fixed seeds
// plus one drawn from the clock per policy, logged in the subtest name).
// FAIRRELAY_PROPERTY_VERBOSE=1 logs every operation with its answer;
// FAIRRELAY_PROPERTY_SHRINK=1 makes a failing run look for a short sequence
// of its operations that fails at the same operation on a fresh store, and
// log it: the replay for a bug report.

const propertyOps = 300

func propertySeeds(t *testing.T) []uint64 {
	if v := os.Getenv("FAIRRELAY_PROPERTY_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("FAIRRELAY_PROPERTY_SEED=%q: %v", v, err)
		}
		return []uint64{s}
	}
	n := 3
	if v := os.Getenv("FAIRRELAY_PROPERTY_SEEDS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("FAIRRELAY_PROPERTY_SEEDS=%q: want a positive integer", v)
		}
	}
	seeds := make([]uint64, 0, n+1)
	for i := range n {
		seeds = append(seeds, uint64(i+1))
	}
	return append(seeds, uint64(time.Now().UnixNano())%1_000_000_007)
}

// propertyPolicies are the policies the property runs under: both entry
// rules, with and without jitter, with small leases and budgets so that
// leases run out and budgets are used up within a few hundred operations.
func propertyPolicies() map[string]fairrelay.Policy {
	ref := fairrelay.ReferencePolicy()
	fair := ref
	fair.Entry = fairrelay.EntryFair
	seedJitter := ref
	seedJitter.Jitter = 0.3
	seedJitter.Budget = 2
	fairJitter := fair
	fairJitter.Jitter = 0.2
	fairJitter.Lease = 3
	fairJitter.BackoffBase, fairJitter.BackoffCap = 1, 4
	return map[string]fairrelay.Policy{
		"seed": ref, "fair": fair, "seed_jitter": seedJitter, "fair_jitter": fairJitter,
	}
}

func TestPropertyMatchesReference(t *testing.T) {
	t.Parallel()
	for _, b := range conformance.Backends() {
		for name, pol := range propertyPolicies() {
			for _, seed := range propertySeeds(t) {
				t.Run(fmt.Sprintf("%s/%s/seed=%d", b.Name, name, seed), func(t *testing.T) {
					t.Parallel()
					t.Logf("replay: FAIRRELAY_PROPERTY_SEED=%d go test -run 'TestPropertyMatchesReference/^%s$/^%s$' .", seed, b.Name, name)
					runProperty(t, b, pol, seed)
				})
			}
		}
	}
}

// runProperty runs one seeded sequence on backend b under pol against the
// reference model.
func runProperty(t *testing.T, b conformance.Backend, pol fairrelay.Policy, seed uint64) {
	r := newPropertyRun(t, b, pol, seed)
	for i := range propertyOps {
		r.step(i)
	}
	r.compareSnapshots("end")
	if pol.Entry == fairrelay.EntryFair {
		for _, v := range r.fair.violations {
			t.Errorf("SPEC §7/§8 fairness bound: %s", v)
		}
		if r.fair.checked == 0 || r.fair.checkedRows == 0 {
			t.Errorf("the fairness bound was never exercised on groups: %d claims checked, %d of group rows", r.fair.checked, r.fair.checkedRows)
		}
	}
	t.Logf("ops %d, claims %d, fairness bound checked on %d claims (%d of group rows, %d inside them); answers: %v",
		propertyOps, r.claims, r.fair.checked, r.fair.checkedRows, r.fair.checkedMembers, r.seen)
}

// propertyRun drives one Queue and one Model with the same operations.
type propertyRun struct {
	t      *testing.T
	ctx    context.Context
	rng    *rand.Rand
	path   string
	policy fairrelay.Policy
	q      *fairrelay.Queue
	m      *refmodel.Model
	// ids are the event ids created so far, with their flow and body, so
	// repeated enqueues can be existing or conflict (pruned ones too, which
	// answer by their tombstones).
	ids    []string
	idFlow map[string]string
	idBody map[string][]byte
	flows  []string
	// groups are the group names enqueues and configures draw from; more
	// join as the run goes (see groupFor).
	groups []string
	// intended is the group a flow not yet created was first drawn with.
	intended map[string]string
	tokens   []fairrelay.Token // every token handed out, newest last
	nextID   int
	claims   int
	fair     fairnessTracker
	lastTag  string
	// seen counts the answers by kind, to show in the log that the run
	// reached the §8 and §9 cases (full, rejected, pruned …).
	seen map[string]int
	// verbose logs every operation with its answer (a failure's replay).
	verbose bool
	// backend and seed made the run; ops are the operations drawn so far,
	// for shrink; replaying marks a shrink's replay, whose failures panic
	// with a shrinkFailure.
	backend   conformance.Backend
	seed      uint64
	ops       []propertyOp
	replaying bool
}

func newPropertyRun(t *testing.T, b conformance.Backend, pol fairrelay.Policy, seed uint64) *propertyRun {
	ctx := context.Background()
	path, _ := b.New(t)
	q, err := fairrelay.Open(ctx, path, fairrelay.Config{Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	r := &propertyRun{
		t: t, ctx: ctx, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), path: path,
		policy: q.Policy(), q: q, m: refmodel.New(q.Policy()),
		idFlow: map[string]string{}, idBody: map[string][]byte{},
		flows: []string{"A", "B", "C", "D"}, groups: []string{"G1", "G2", "G3"},
		intended: map[string]string{}, seen: map[string]int{},
		verbose: os.Getenv("FAIRRELAY_PROPERTY_VERBOSE") != "",
		backend: b, seed: seed,
	}
	r.fair.reset()
	r.fair.on = r.policy.Entry == fairrelay.EntryFair
	return r
}

var propertyOutcomes = []fairrelay.Outcome{
	fairrelay.OutcomeAccepted, fairrelay.OutcomeAccepted, fairrelay.OutcomeAccepted, fairrelay.OutcomeDuplicate,
	fairrelay.OutcomeRetry, fairrelay.OutcomeRetry, fairrelay.OutcomeGap, "teapot",
	fairrelay.OutcomeIDConflict, fairrelay.OutcomeSequenceConflict, fairrelay.OutcomeUnsupportedDelta,
	fairrelay.OutcomeInvalidBody, fairrelay.OutcomeRejected,
}

// tick picks the tick of the next write: mostly the stored tick or a little
// after, sometimes far enough for leases and backoffs to run out, and one
// time in twelve below the stored tick (clock_regressed in both).
func (r *propertyRun) tick() int64 {
	now := r.m.Tick()
	switch x := r.rng.IntN(12); {
	case x == 0 && now > 0:
		return now - 1 - r.rng.Int64N(min(now, 3))
	case x < 7:
		return now
	case x < 10:
		return now + 1 + r.rng.Int64N(2)
	default:
		return now + 3 + r.rng.Int64N(6)
	}
}

func (r *propertyRun) enqueueParams() fairrelay.EnqueueParams {
	if len(r.ids) > 0 && r.rng.IntN(6) == 0 {
		// A repeated id: the same flow and body (existing) or not (conflict).
		// A pruned id answers by its tombstone, or is new again once the
		// tombstone is gone (SPEC §8).
		id := r.ids[r.rng.IntN(len(r.ids))]
		p := fairrelay.EnqueueParams{ID: id, Flow: r.idFlow[id], Body: r.idBody[id]}
		switch r.rng.IntN(3) {
		case 1:
			p.Body = []byte(`{"delta":99}`)
		case 2:
			p.Flow = r.flows[r.rng.IntN(len(r.flows))] + "x"
		}
		p.Group = r.groupFor(p.Flow)
		return p
	}
	if r.rng.IntN(8) == 0 {
		// A new flow: under the fair policy it must join behind the others.
		r.flows = append(r.flows, fmt.Sprintf("N%03d", len(r.flows)))
	}
	r.nextID++
	id := fmt.Sprintf("e%04d", r.nextID)
	flow := r.flows[r.rng.IntN(len(r.flows))]
	body := []byte(fmt.Sprintf(`{"delta":%d}`, 1+r.rng.IntN(3)))
	return fairrelay.EnqueueParams{ID: id, Flow: flow, Group: r.groupFor(flow), Body: body}
}

func (r *propertyRun) recordEnqueue(p fairrelay.EnqueueParams, res fairrelay.EnqueueResult) {
	if res.Status == fairrelay.EnqueueCreated {
		r.ids = append(r.ids, p.ID)
		r.idFlow[p.ID], r.idBody[p.ID] = p.Flow, p.Body
	}
}

// token picks a token to settle: usually one of the latest, sometimes an old
// (stale) one, a wrong generation, or an unknown id (not_found).
func (r *propertyRun) token() fairrelay.Token {
	switch {
	case len(r.tokens) == 0 || r.rng.IntN(40) == 0:
		return fairrelay.Token{EventID: "nope", Generation: 1}
	case r.rng.IntN(10) == 0:
		tok := r.tokens[r.rng.IntN(len(r.tokens))]
		tok.Generation += int64(r.rng.IntN(3)) - 1
		return tok
	}
	n := min(len(r.tokens), 6)
	return r.tokens[len(r.tokens)-1-r.rng.IntN(n)]
}

func (r *propertyRun) settleParams() fairrelay.Settlement {
	p := fairrelay.Settlement{Token: r.token(), Outcome: propertyOutcomes[r.rng.IntN(len(propertyOutcomes))]}
	if r.rng.IntN(5) == 0 {
		p.NotBefore = r.m.Tick() + r.rng.Int64N(12)
	}
	return p
}

// propertyOp is one drawn operation: its parameters are fixed when it is
// drawn, so that run can replay it on a fresh Queue and Model (shrink).
type propertyOp struct {
	tag string
	run func(r *propertyRun)
}

// step draws operation i from the run's state and runs it.
func (r *propertyRun) step(i int) {
	r.t.Helper()
	op := r.draw(i)
	r.ops = append(r.ops, op)
	r.lastTag = op.tag
	op.run(r)
}

// draw draws operation i; its run compares the Queue's answers with the
// model's.
func (r *propertyRun) draw(i int) propertyOp {
	op := r.rng.IntN(120)
	if len(r.m.BackingOff(r.m.Tick())) > 0 && r.rng.IntN(5) == 0 {
		op = 110 // an expedite while a head backs off: rare otherwise
	}
	switch {
	case op < 22:
		p := r.enqueueParams()
		p.At = r.tick()
		return propertyOp{fmt.Sprintf("op %d: enqueue at %d %s", i, p.At, describeEnqueue(p)), func(r *propertyRun) {
			got, gotErr := r.q.Enqueue(r.ctx, p)
			want, wantErr := r.m.Enqueue(p)
			r.same(got, gotErr, want, wantErr)
			r.recordEnqueue(p, want)
			r.count("enqueue "+string(want.Status)+" "+want.Limit, wantErr)
		}}
	case op < 30:
		at := r.tick()
		ps := draw(1+r.rng.IntN(4), r.enqueueParams)
		tag := fmt.Sprintf("op %d: enqueue batch at %d", i, at)
		for _, p := range ps {
			tag += " [" + describeEnqueue(p) + "]"
		}
		return propertyOp{tag, func(r *propertyRun) {
			got, gotErr := r.q.EnqueueMany(r.ctx, fairrelay.EnqueueManyParams{At: at, Events: cloneEnqueue(ps)})
			want, wantErr := r.m.EnqueueBatch(at, cloneEnqueue(ps))
			r.same(got, gotErr, want, wantErr)
			for j, res := range want {
				r.recordEnqueue(ps[j], res)
			}
			r.count("enqueue batch", wantErr)
		}}
	case op < 50:
		at := r.tick()
		return propertyOp{fmt.Sprintf("op %d: claim at %d", i, at), func(r *propertyRun) {
			eligible := r.fair.before(r, at)
			got, gotErr := queuetest.ClaimOne(r.ctx, r.q, at)
			want, wantErr := r.m.Claim(at)
			r.same(got, gotErr, want, wantErr)
			if want != nil {
				r.claimed([]fairrelay.Claim{*want}, eligible)
			}
		}}
	case op < 58:
		at, k := r.tick(), 1+r.rng.IntN(4)
		return propertyOp{fmt.Sprintf("op %d: claim batch at %d k %d", i, at, k), func(r *propertyRun) {
			eligible := r.fair.before(r, at)
			got, gotErr := queuetest.Claims(r.q.Claim(r.ctx, fairrelay.ClaimParams{At: at, Limit: k}))
			want, wantErr := r.m.ClaimBatch(at, k)
			if gotErr == nil && len(got) == 0 {
				got = []fairrelay.Claim{} // idle: empty either way
			}
			r.same(got, gotErr, want, wantErr)
			if wantErr == nil {
				r.claimed(want, eligible)
			}
		}}
	case op < 80:
		p, at := r.settleParams(), r.tick()
		return propertyOp{fmt.Sprintf("op %d: settle at %d %+v", i, at, p), func(r *propertyRun) {
			var got, want fairrelay.SettleResult
			var gotErr, wantErr error
			if p.NotBefore == 0 {
				got, gotErr = r.q.Settle(r.ctx, fairrelay.SettleParams{Token: p.Token, Outcome: p.Outcome, At: at})
				want, wantErr = r.m.Settle(p.Token, p.Outcome, at)
			} else {
				var gs, ws []fairrelay.SettleResult
				gs, gotErr = queuetest.Settles(r.q.SettleMany(r.ctx, fairrelay.SettleManyParams{At: at, Settles: []fairrelay.Settlement{p}}))
				ws, wantErr = r.m.SettleBatch(at, []fairrelay.Settlement{p})
				if len(gs) > 0 {
					got = gs[0]
				}
				if len(ws) > 0 {
					want = ws[0]
				}
			}
			r.same(got, gotErr, want, wantErr)
		}}
	case op < 84:
		// SettleAndClaim: the answers of SettleBatch then ClaimBatch at one
		// tick, in one transaction.
		at, k := r.tick(), r.rng.IntN(3)
		ps := draw(r.rng.IntN(3), r.settleParams)
		return propertyOp{fmt.Sprintf("op %d: settle and claim at %d k %d %+v", i, at, k, ps), func(r *propertyRun) {
			gotRs, gotCs, gotErr := queuetest.SettleClaims(r.q.SettleMany(r.ctx, fairrelay.SettleManyParams{At: at, Settles: ps, ClaimLimit: k}))
			wantRs, wantErr := r.m.SettleBatch(at, ps)
			var wantCs []fairrelay.Claim
			var eligible map[string]bool
			if wantErr == nil && k > 0 {
				eligible = r.fair.before(r, at)
				wantCs, wantErr = r.m.ClaimBatch(at, k)
			}
			if len(gotCs) == 0 && len(wantCs) == 0 {
				gotCs, wantCs = nil, nil // idle, or no claim asked
			}
			if len(gotRs) == 0 && len(wantRs) == 0 {
				gotRs, wantRs = nil, nil
			}
			r.same(gotRs, gotErr, wantRs, wantErr)
			r.same(gotCs, gotErr, wantCs, wantErr)
			r.claimed(wantCs, eligible)
		}}
	case op < 88:
		at := r.tick()
		ps := draw(1+r.rng.IntN(4), r.settleParams)
		return propertyOp{fmt.Sprintf("op %d: settle batch at %d %+v", i, at, ps), func(r *propertyRun) {
			got, gotErr := queuetest.Settles(r.q.SettleMany(r.ctx, fairrelay.SettleManyParams{At: at, Settles: ps}))
			want, wantErr := r.m.SettleBatch(at, ps)
			r.same(got, gotErr, want, wantErr)
		}}
	case op < 95:
		p := r.redriveParams()
		return propertyOp{fmt.Sprintf("op %d: redrive %+v", i, p), func(r *propertyRun) {
			got, gotErr := r.q.Redrive(r.ctx, p)
			want, wantErr := r.m.Redrive(p)
			r.same(got, gotErr, want, wantErr)
		}}
	case op < 99:
		return propertyOp{fmt.Sprintf("op %d: snapshot", i), func(r *propertyRun) {
			r.compareSnapshots(fmt.Sprintf("op %d", i))
		}}
	case op < 106:
		p := r.configureParams()
		return propertyOp{fmt.Sprintf("op %d: configure %s", i, describeConfigure(p)), func(r *propertyRun) {
			got, gotErr := r.q.Configure(r.ctx, p)
			want, wantErr := r.m.Configure(p)
			r.same(got, gotErr, want, wantErr)
			if wantErr == nil && p.Weight != nil {
				r.fair.reset() // a weight may lengthen a turn ahead (fairnessTracker)
			}
			r.count("configure", wantErr)
		}}
	case op < 110:
		p := r.pruneParams()
		return propertyOp{fmt.Sprintf("op %d: prune at %d acked_before %d ids_before %d", i, p.At, p.AckedBefore, p.IDsBefore), func(r *propertyRun) {
			got, gotErr := r.q.Prune(r.ctx, p)
			want, wantErr := r.m.Prune(p)
			// Held is how long this store held its writer, a measurement,
			// not part of the answer the model gives (TestPruneKeepsWhatIsNotAcked
			// checks it is a positive time within the call).
			got.Held = 0
			r.same(got, gotErr, want, wantErr)
			r.count(fmt.Sprintf("prune events>0=%t tombstones>0=%t", want.Events > 0, want.Tombstones > 0), wantErr)
		}}
	case op < 114:
		p := r.expediteParams()
		return propertyOp{fmt.Sprintf("op %d: expedite %+v", i, p), func(r *propertyRun) {
			got, gotErr := r.q.Expedite(r.ctx, p)
			want, wantErr := r.m.Expedite(p)
			r.same(got, gotErr, want, wantErr)
			r.count("expedite "+string(want.Status)+" "+want.RejectReason, wantErr)
		}}
	case op < 117:
		p := r.flowActionParams(true)
		return propertyOp{fmt.Sprintf("op %d: pause %+v", i, p), func(r *propertyRun) {
			got, gotErr := r.q.Pause(r.ctx, p)
			want, wantErr := r.m.Pause(p)
			r.same(got, gotErr, want, wantErr)
			r.count("pause "+string(want.Status)+" "+want.RejectReason, wantErr)
		}}
	case op < 120:
		p := r.flowActionParams(false)
		return propertyOp{fmt.Sprintf("op %d: resume %+v", i, p), func(r *propertyRun) {
			got, gotErr := r.q.Resume(r.ctx, p)
			want, wantErr := r.m.Resume(p)
			r.same(got, gotErr, want, wantErr)
			r.count("resume "+string(want.Status)+" "+want.RejectReason, wantErr)
		}}
	default:
		// Reopen: everything the answers depend on is on disk.
		return propertyOp{fmt.Sprintf("op %d: reopen", i), func(r *propertyRun) {
			if err := r.q.Close(); err != nil {
				r.t.Fatal(err)
			}
			q, err := fairrelay.Open(r.ctx, r.path, fairrelay.Config{Policy: r.policy})
			if err != nil {
				r.t.Fatal(err)
			}
			r.q = q
			r.t.Cleanup(func() { q.Close() })
		}}
	}
}

// describeEnqueue shows an enqueue's fields, its body as text.
func describeEnqueue(p fairrelay.EnqueueParams) string {
	s := fmt.Sprintf("id %s flow %s", p.ID, p.Flow)
	if p.Group != "" {
		s += " group " + p.Group
	}
	return s + " body " + string(p.Body)
}

func (r *propertyRun) redriveParams() fairrelay.RedriveParams {
	p := fairrelay.RedriveParams{Reason: "fixed the receiver", Operator: "op", At: r.tick()}
	if r.rng.IntN(2) == 0 {
		p.Operator = ""
	}
	switch r.rng.IntN(10) {
	case 0:
		p.Reason = "  "
	case 1:
		p.EventID = "nope"
		return p
	}
	if len(r.ids) == 0 {
		p.EventID = "nope"
		return p
	}
	// Prefer quarantined events, the only ones a redrive can move.
	var quarantined []string
	for _, id := range r.ids {
		if st, _, _ := r.m.Event(id); st == fairrelay.StateQuarantined {
			quarantined = append(quarantined, id)
		}
	}
	if len(quarantined) > 0 && r.rng.IntN(4) != 0 {
		p.EventID = quarantined[r.rng.IntN(len(quarantined))]
	} else {
		p.EventID = r.ids[r.rng.IntN(len(r.ids))]
	}
	_, gen, _ := r.m.Event(p.EventID)
	p.ExpectedGeneration = gen
	if r.rng.IntN(5) == 0 {
		p.ExpectedGeneration += int64(r.rng.IntN(3)) - 1
	}
	return p
}

// draw returns n values of gen, in order.
func draw[T any](n int, gen func() T) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = gen()
	}
	return out
}

func cloneEnqueue(ps []fairrelay.EnqueueParams) []fairrelay.NewEvent {
	out := make([]fairrelay.NewEvent, len(ps))
	for i, p := range ps {
		out[i] = fairrelay.NewEvent{ID: p.ID, Flow: p.Flow, Group: p.Group, Body: p.Body}
	}
	return out
}

func (r *propertyRun) claimed(cs []fairrelay.Claim, eligible map[string]bool) {
	for _, c := range cs {
		r.claims++
		r.tokens = append(r.tokens, c.Token)
		g, row := groupOfClaim(r.m, c.Flow)
		r.fair.claim(r, c, g, row, eligible)
	}
}

// same fails the test when the Queue's answer or error code differs from the
// model's.
func (r *propertyRun) same(got any, gotErr error, want any, wantErr error) {
	r.t.Helper()
	if gc, wc := fairrelay.CodeOf(gotErr), fairrelay.CodeOf(wantErr); gc != wc || (gotErr == nil) != (wantErr == nil) || errField(gotErr) != errField(wantErr) {
		r.fail("%s: error: queue %v, reference %v", r.lastTag, gotErr, wantErr)
	}
	if gotErr != nil {
		if r.verbose {
			r.t.Logf("%s: %v", r.lastTag, wantErr)
		}
		return
	}
	if d := cmp.Diff(want, got); d != "" {
		r.fail("%s: answer differs (-reference +queue):\n%s\nreference: %s\nqueue:     %s", r.lastTag, d, describeAnswer(want), describeAnswer(got))
	}
	if r.verbose {
		r.t.Logf("%s: %s", r.lastTag, describeAnswer(want))
	}
}

func (r *propertyRun) compareSnapshots(when string) {
	r.t.Helper()
	got, err := r.q.Snapshot(r.ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	if d := cmp.Diff(r.m.Snapshot(), got); d != "" {
		r.fail("%s (after %s): snapshot differs (-reference +queue):\n%s", when, r.lastTag, d)
	}
}

// describeAnswer shows an answer in one line for the verbose log: claims by
// event, flow and ticket.
func describeAnswer(a any) string {
	claim := func(c fairrelay.Claim) string {
		return fmt.Sprintf("%s(%s gen %d ticket %d)", c.Token.EventID, c.Flow, c.Token.Generation, c.Ticket)
	}
	switch v := a.(type) {
	case *fairrelay.Claim:
		if v == nil {
			return "idle"
		}
		return claim(*v)
	case []fairrelay.Claim:
		s := "claims"
		for _, c := range v {
			s += " " + claim(c)
		}
		return s
	}
	return fmt.Sprintf("%+v", a)
}

// shrinkFailure is what fail panics with during a shrink's replay: the
// failure and the operation that failed.
type shrinkFailure struct{ msg, tag string }

// fail reports a difference between the Queue and the model. With
// FAIRRELAY_PROPERTY_SHRINK=1 it first looks for a short sequence of the
// run's operations that still makes a difference, and logs it: the replay
// for a bug report.
func (r *propertyRun) fail(format string, args ...any) {
	r.t.Helper()
	if r.replaying {
		panic(shrinkFailure{fmt.Sprintf(format, args...), r.lastTag})
	}
	if os.Getenv("FAIRRELAY_PROPERTY_SHRINK") != "" {
		r.shrink()
	}
	r.t.Fatalf(format, args...)
}

// shrink removes operations from the run's sequence while a replay on a
// fresh Queue and Model still fails at the same operation (delta
// debugging), then logs what is left with its answers.
func (r *propertyRun) shrink() {
	failing := r.lastTag
	ops := append([]propertyOp{}, r.ops...)
	n := 2
	for len(ops) >= 2 {
		chunk := max(1, len(ops)/n)
		removed := false
		for start := 0; start < len(ops); start += chunk {
			cand := append(append([]propertyOp{}, ops[:start]...), ops[min(len(ops), start+chunk):]...)
			if _, tag := r.replay(cand, false); tag == failing {
				ops, n, removed = cand, max(n-1, 2), true
				break
			}
		}
		if !removed {
			if chunk == 1 {
				break
			}
			n = min(2*n, len(ops))
		}
	}
	r.t.Logf("shrunk to %d operations:", len(ops))
	msg, _ := r.replay(ops, true)
	r.t.Logf("which fails with: %s", msg)
}

// replay runs ops on a fresh Queue and Model (fairness tracker off), then
// compares the snapshots, and returns the first failure and the operation
// that failed ("" for none).
func (r *propertyRun) replay(ops []propertyOp, verbose bool) (msg, tag string) {
	x := newPropertyRun(r.t, r.backend, r.policy, r.seed)
	x.replaying, x.verbose, x.fair.on = true, verbose, false
	defer func() {
		if v := recover(); v != nil {
			f, ok := v.(shrinkFailure)
			if !ok {
				panic(v)
			}
			msg, tag = f.msg, f.tag
		}
	}()
	for _, op := range ops {
		x.lastTag = op.tag
		if verbose && (strings.HasSuffix(op.tag, ": reopen") || strings.HasSuffix(op.tag, ": snapshot")) {
			r.t.Log(op.tag)
		}
		op.run(x)
	}
	x.compareSnapshots("replay end")
	return "", ""
}
