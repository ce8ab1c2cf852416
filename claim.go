package fairrelay

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/fairrelay/fairrelay/internal/faultpoint"
	"github.com/fairrelay/fairrelay/internal/store"
)

// Token is the fencing token a claim hands out: the event id and the
// generation the claim set. Only the current generation, before the lease
// runs out, can settle (SPEC §2 settle).
type Token struct {
	EventID    string `json:"id"`
	Generation int64  `json:"generation"`
}

// Claim is one claimed head: what to deliver and the token to settle it with.
type Claim struct {
	Token Token
	// Flow and Seq place the event in its flow; Body is its payload.
	Flow string
	// Group is the flow's group (SPEC §8): its own id when it joined none.
	Group string
	Seq   int64
	Body  []byte
	// LeaseUntil is the tick at which the lease runs out: a settle at or
	// after it answers expired.
	LeaseUntil int64
	// Ticket is the global ticket this claim took; it is the flow's new
	// served value.
	Ticket int64
	// Attempts is the event's claim count in the current round, this claim
	// included (1-based).
	Attempts int64
}

// ClaimParams is one claim transaction (SPEC §2 claim).
type ClaimParams struct {
	// At is the tick of the write (SPEC §2: at >= the stored tick); AtStored
	// runs it at the store's tick.
	At int64
	// Limit is the most heads to claim, each of a distinct flow, with exactly
	// the answers Limit consecutive claims at the same tick would give (one
	// commit, one fsync, for many claims). Defaults to 1; at most MaxLimit.
	Limit int
	// Floor runs the claim at the stored tick when At lies below it, instead
	// of failing with ErrClockRegressed: the daemon clock of SPEC §7, which
	// never goes below the stored tick. For a dispatcher whose writes wait
	// for locks while other processes commit later ticks (several relays on
	// one PostgreSQL queue), where a retry at a fresher tick would lose the
	// same race again. ClaimResult.Tick says the tick it ran at. Scripts and
	// tests that give explicit ticks leave it false. A floor write is a
	// daemon clock's, so Policy.MaxTickJump does not apply to it.
	Floor bool
	// Exclude names groups whose heads this claim must not take (a flow
	// that is its own group is named by its id), at most MaxExclude: for a
	// dispatcher that shares its slots by its own measure (package relay,
	// SPEC §11) or caps a group's slots. The others are claimed in dispatch
	// order as always; an excluded group keeps its turn.
	Exclude []string
	// Relay names the process that claims (CheckID's rule; optional),
	// recorded with each claim: when a claim's lease runs out unsettled, its
	// attempt (Status AttemptLeaseExpired, Queue.Attempts) names this relay,
	// the one that crashed or lost its store.
	Relay string
}

// MaxExclude is the longest ClaimParams.Exclude (and
// SettleManyParams.Exclude) accepted.
const MaxExclude = 4096

// MaxLimit is the largest ClaimParams.Limit (and SettleManyParams.ClaimLimit)
// accepted.
const MaxLimit = 1 << 16

// ClaimResult is the answer of Claim.
type ClaimResult struct {
	// Claims are the heads claimed, in claim order (ascending Ticket); empty
	// when nothing was eligible (idle; the tick still advanced).
	Claims []Claim
	// Quarantined are the heads the claim quarantined instead of claiming
	// them (SPEC §2: an expired inflight head whose round already used the
	// whole budget goes to quarantined, reason budget_exhausted), so that a
	// dispatcher reports them as it reports a settle's quarantine; no
	// settle answers them. Empty in the common case.
	Quarantined []Quarantined
	// Tick is the tick the claim ran at: At, or the stored tick (AtStored,
	// Floor).
	Tick int64
}

// Quarantined is a head that went to quarantine: its id, flow and seq, the
// generation of the claim it went with, the attempts of its round and the
// reason. A claim that quarantines a head itself (ClaimResult.Quarantined,
// SettleManyResult.Quarantined) gives the generation of the claim whose
// lease ran out, the policy's budget as attempts and ReasonBudgetExhausted;
// package relay reports a settle's quarantine in the same shape
// (relay.Quarantine.Head: the settled generation, its attempts so far, the
// permanent outcome's reason or ReasonBudgetExhausted).
type Quarantined struct {
	ID         string `json:"id"`
	Flow       string `json:"flow"`
	Seq        int64  `json:"seq"`
	Generation int64  `json:"generation"`
	Attempts   int64  `json:"attempts"`
	Reason     string `json:"reason"`
}

// First returns the first claim, nil when the claim was idle: for a claim of
// one head (Limit 1).
func (r ClaimResult) First() *Claim {
	if len(r.Claims) == 0 {
		return nil
	}
	return &r.Claims[0]
}

// Claim takes up to p.Limit eligible heads in dispatch order, each the one
// with the smallest served (SPEC §2 claim): ready with next_at <= at, or
// inflight with a lease that ran out. An empty ClaimResult.Claims is idle
// (the tick still advances). In the same transaction, every expired
// inflight head whose round already used the whole budget is quarantined
// with reason budget_exhausted instead of being claimed ([decision] of SPEC
// §2). Errors: ErrClockRegressed; ErrInvalidInput (at, limit);
// ErrBusy (nothing changed; retry); ErrDatabase.
func (q *Queue) Claim(ctx context.Context, p ClaimParams) (ClaimResult, error) {
	k := p.Limit
	if k == 0 {
		k = 1
	}
	var out []Claim
	var qs []Quarantined
	op := writeOp{name: "claim", lanes: store.LaneClaim, at: p.At, floor: p.Floor,
		read: store.ReadSet{PickLimit: max(k, 1) + len(p.Exclude), GroupPickLimit: max(k, 1) + len(p.Exclude), Order: q.pickOrder(), DueLimit: duePage},
		check: func() error {
			if k < 1 || k > MaxLimit {
				return invalid("limit", "must be 1 to %d, got %d", MaxLimit, p.Limit)
			}
			if p.Relay != "" {
				if err := checkID("relay", p.Relay); err != nil {
					return err
				}
			}
			return checkExclude(p.Exclude)
		},
		before: faultpoint.BeforeClaimCommit, after: faultpoint.AfterClaimCommit}
	tick, err := q.write(ctx, op, func(t *txn, rr *store.ReadResult) error {
		var err error
		t.claimer = p.Relay
		out, err = t.claim(ctx, k, excludeSet(p.Exclude), rr)
		qs = slices.Clone(t.quarantined)
		return err
	})
	if err != nil {
		return ClaimResult{}, err
	}
	return ClaimResult{Claims: out, Quarantined: qs, Tick: tick}, nil
}

// checkExclude refuses an Exclude list that is too long or names no group.
func checkExclude(ex []string) error {
	if len(ex) > MaxExclude {
		return invalid("exclude", "at most %d groups, got %d", MaxExclude, len(ex))
	}
	for _, g := range ex {
		if g == "" {
			return invalid("exclude", "an empty group name")
		}
	}
	return nil
}

// excludeSet is ex as a set; nil when empty.
func excludeSet(ex []string) map[string]bool {
	if len(ex) == 0 {
		return nil
	}
	m := make(map[string]bool, len(ex))
	for _, g := range ex {
		m[g] = true
	}
	return m
}

// duePage is how many due flows one read brings: a claim reads pages until
// every due flow is promoted.
const duePage = 256

// claim is the body of Claim inside a write transaction, whose read asked
// for the first k runnable flows that are their own group (rr.Picks), the
// first k runnable groups with their first members (rr.GroupPicks) and the
// first page of due flows (rr.Due): it promotes every due flow, then claims
// up to k heads, each time the first in dispatch order (SPEC §8: the group,
// then the flow; a flow that is its own group competes as a group).
func (t *txn) claim(ctx context.Context, k int, exclude map[string]bool, rr *store.ReadResult) ([]Claim, error) {
	if err := t.promoteDue(ctx, rr.Due); err != nil {
		return nil, err
	}
	order := t.q.pickOrder()
	// The first k runnable flows in dispatch order are exactly what k
	// consecutive claims pick among them: a claim takes its flow out of
	// the runnable index and changes no other flow. They are among the
	// first k flows of the index as read, and the flows this transaction
	// made runnable (due heads, heads behind an ack): the working rows
	// decide.
	cands, seen := t.cands[:0], t.seen
	for _, h := range rr.Picks {
		if f := t.flows[h.Flow.Flow]; f.Runnable && f.Group == "" && !seen[f.Flow] && !exclude[f.Flow] {
			seen[f.Flow] = true
			cands = append(cands, f)
		}
	}
	for _, f := range t.dirtyFlows {
		if f.Runnable && f.Group == "" && !seen[f.Flow] && !exclude[f.Flow] {
			seen[f.Flow] = true
			cands = append(cands, f)
		}
	}
	sortDispatch(cands, order)
	t.cands = cands
	gc, err := t.groupCands(ctx, rr, order, exclude, k+len(exclude))
	if err != nil {
		return nil, err
	}
	out := make([]Claim, 0, k)
	next := 0
	for len(out) < k {
		for next < len(cands) && !cands[next].Runnable {
			next++
		}
		g, err := gc.best(ctx, t, order, k-len(out))
		if err != nil {
			return nil, err
		}
		var f *store.FlowRow
		switch {
		case g == nil && next == len(cands):
			return out, nil
		case g == nil || next < len(cands) && dispatchBefore(cands[next].Served, cands[next].Flow, cands[next].Ord, g.row.Served, g.row.Group, g.row.Ord, order):
			f, g = cands[next], nil
			next++
		default:
			if f, err = t.member(ctx, g, order, k-len(out)); err != nil {
				return nil, err
			}
			if f == nil {
				g.done = true // its runnable members are paused, or held by other transactions
				continue
			}
		}
		cl, err := t.claimOne(f)
		if err != nil {
			return nil, err
		}
		if cl == nil {
			continue
		}
		if g != nil {
			t.turn(g.row)
		}
		out = append(out, *cl)
	}
	return out, nil
}

// position is a place in dispatch order: (served, name, ord).
type position struct {
	served int64
	name   string
	ord    int64
}

func flowPos(f *store.FlowRow) position { return position{f.Served, f.Flow, f.Ord} }

func groupPos(g *store.GroupRow) position { return position{g.Served, g.Group, g.Ord} }

func (p position) before(q position, order store.Order) bool {
	return dispatchBefore(p.served, p.name, p.ord, q.served, q.name, q.ord, order)
}

// groupCand is a group a claim may take a turn of: its row, and the member
// flows known runnable, in dispatch order (a claim takes them from the
// front). A known member is the next in dispatch order only if it comes no
// later than bound, the store's position of the last member read in the
// store's order (members made runnable by this transaction are known
// although the store's order has not reached them), or when all are read.
type groupCand struct {
	group   string
	row     *store.GroupRow
	members []*store.FlowRow
	seen    map[*store.FlowRow]bool
	bound   *position // nil: no member read in the store's order yet
	all     bool      // every runnable member has been read
	done    bool      // no member left that this claim can take
}

// groupSet is the groups a claim may take turns of. Groups are read in the
// store's order a page at a time; the best known group is the next one in
// dispatch order only if it comes no later than bound, the store's
// position of the last group read (turns move groups back, and a group
// whose members are paused or held gives none), or when all are read.
type groupSet struct {
	cands  []*groupCand
	byName map[string]*groupCand
	bound  *position
	all    bool
	read   int // groups read in the store's order so far
	excl   map[string]bool
}

// groupCands returns the groups a claim may take turns of: those the read
// picked, and those of the member flows this transaction made runnable,
// each with the members it knows. It reads the rows of groups it lacks.
func (t *txn) groupCands(ctx context.Context, rr *store.ReadResult, order store.Order, exclude map[string]bool, asked int) (*groupSet, error) {
	gs := &groupSet{byName: map[string]*groupCand{}, excl: exclude, read: len(rr.GroupPicks)}
	// The read asked for as many groups as claims (and excluded groups):
	// fewer means it read them all.
	gs.all = len(rr.GroupPicks) < asked
	if n := len(rr.GroupPicks); n > 0 && !gs.all {
		p := groupPos(&rr.GroupPicks[n-1].Group)
		gs.bound = &p
	}
	var missing []string
	for i := range rr.GroupPicks {
		gs.note(t, rr.GroupPicks[i].Group.Group, &missing)
	}
	for _, f := range t.dirtyFlows {
		if f.Runnable && f.Group != "" {
			gs.note(t, f.Group, &missing)
		}
	}
	if err := t.loadGroups(ctx, missing); err != nil {
		return nil, err
	}
	for _, g := range gs.cands {
		if g.row == nil {
			if g.row = t.groups[g.group]; g.row == nil {
				return nil, fmt.Errorf("group %q of a runnable flow is missing: the store is inconsistent", g.group)
			}
		}
	}
	for i := range rr.GroupPicks {
		gs.addPick(t, &rr.GroupPicks[i])
	}
	for _, f := range t.dirtyFlows {
		if g := gs.byName[f.Group]; g != nil && f.Runnable && f.Group != "" {
			g.add(f)
		}
	}
	for _, g := range gs.cands {
		g.sort(order)
	}
	return gs, nil
}

// note makes a candidate of group name, unless excluded or known.
func (gs *groupSet) note(t *txn, name string, missing *[]string) {
	if _, ok := gs.byName[name]; ok || gs.excl[name] {
		return
	}
	g := &groupCand{group: name, seen: map[*store.FlowRow]bool{}, row: t.groups[name]}
	if g.row == nil {
		*missing = append(*missing, name) // its row: loadGroups
	}
	gs.byName[name] = g
	gs.cands = append(gs.cands, g)
}

// addPick records a group read in the store's order with its first member:
// the store's first runnable member, so the bound of the group's members.
func (gs *groupSet) addPick(t *txn, gp *store.GroupPick) {
	g := gs.byName[gp.Group.Group]
	if g == nil {
		return // excluded
	}
	if gp.First.Flow.Flow == "" {
		return // every runnable member held: the claim reads them again if it needs to
	}
	p := flowPos(&gp.First.Flow)
	g.bound = &p
	g.add(t.flows[gp.First.Flow.Flow])
}

// loadGroups reads the rows of the groups the transaction lacks.
func (t *txn) loadGroups(ctx context.Context, names []string) error {
	if len(names) == 0 {
		return nil
	}
	more, err := t.tx.Read(ctx, store.ReadSet{At: t.at, Groups: names})
	if err != nil {
		return err
	}
	t.addGroups(more)
	return nil
}

// best returns the group a claim takes a turn of next: among those with a
// runnable member it can take, the smallest served, ties by group name
// (seed) or creation order (fair); nil when there is none. It reads more
// groups in the store's order while the best it knows may come after one
// it has not read, want more claims' worth at a time.
func (gs *groupSet) best(ctx context.Context, t *txn, order store.Order, want int) (*groupCand, error) {
	for {
		var best *groupCand
		for _, g := range gs.cands {
			if g.done || t.runnable(g.row) <= 0 {
				continue
			}
			if best == nil || groupPos(g.row).before(groupPos(best.row), order) {
				best = g
			}
		}
		if gs.all || gs.bound == nil || (best != nil && !gs.bound.before(groupPos(best.row), order)) {
			return best, nil
		}
		// Read further: as many groups as were read, plus want.
		limit := gs.read + want
		rr, err := t.tx.Read(ctx, store.ReadSet{At: t.at, GroupPickLimit: limit, Order: order})
		if err != nil {
			return nil, err
		}
		t.addGroups(rr)
		gs.all = len(rr.GroupPicks) < limit
		gs.read = len(rr.GroupPicks)
		if n := len(rr.GroupPicks); n > 0 {
			p := groupPos(&rr.GroupPicks[n-1].Group)
			gs.bound = &p
		}
		var missing []string
		for i := range rr.GroupPicks {
			gs.note(t, rr.GroupPicks[i].Group.Group, &missing)
		}
		for i := range rr.GroupPicks {
			if g := gs.byName[rr.GroupPicks[i].Group.Group]; g != nil && g.bound == nil {
				gs.addPick(t, &rr.GroupPicks[i])
				g.sort(order)
			}
		}
	}
}

func (g *groupCand) add(f *store.FlowRow) bool {
	if f != nil && f.Runnable && f.Group == g.row.Group && !g.seen[f] {
		g.seen[f] = true
		g.members = append(g.members, f)
		return true
	}
	return false
}

func (g *groupCand) sort(order store.Order) {
	sortDispatch(g.members, order)
}

// runnable is the group's count of runnable members as this transaction
// has left it.
func (t *txn) runnable(g *store.GroupRow) int64 { return g.RunnableFlows + t.groupDelta[g.Group] }

// dispatchBefore reports whether a flow or group (served, name, ord) comes
// before another in dispatch order (SPEC §2 step 3, §7, §8).
func dispatchBefore(served int64, name string, ord int64, served2 int64, name2 string, ord2 int64, order store.Order) bool {
	if served != served2 {
		return served < served2
	}
	if order == store.OrderCreation {
		return ord < ord2
	}
	return name < name2
}

// member returns the next member flow of g a claim takes: the first runnable
// one in dispatch order that this transaction has not claimed. A paused
// member it meets is parked (only a claim parks a member flow). While the
// first member it knows may come after one it has not read (see
// groupCand), it reads more of the group's members in the store's order,
// enough for want more claims; nil when the group has none left that it can
// take.
func (t *txn) member(ctx context.Context, g *groupCand, order store.Order, want int) (*store.FlowRow, error) {
	for {
		for len(g.members) > 0 && (!g.members[0].Runnable || g.members[0].Group != g.row.Group) {
			g.members = g.members[1:]
		}
		if len(g.members) > 0 {
			f := g.members[0]
			if g.all || (g.bound != nil && !g.bound.before(flowPos(f), order)) {
				g.members = g.members[1:]
				if f.Paused {
					t.parkHead(f)
					t.changedFlow(f)
					continue
				}
				return f, nil
			}
		} else if g.all || t.runnable(g.row) <= 0 {
			return nil, nil
		}
		// Every member read so far is known: a page as large as those plus
		// want has room for want more.
		limit := len(g.seen) + want
		hs, err := t.tx.Members(ctx, g.row.Group, order, limit)
		if err != nil {
			return nil, err
		}
		g.all = len(hs) < limit
		if n := len(hs); n > 0 {
			p := flowPos(&hs[n-1].Flow)
			g.bound = &p
		}
		for i := range hs {
			f := t.addFlow(&hs[i].Flow)
			if hs[i].Head != nil {
				t.addEvent(hs[i].Head)
			}
			g.add(f)
		}
		g.sort(order)
	}
}

// turn records that a claim took a turn of group g (SPEC §8): with weight 1
// the group's served becomes the claim's ticket, as a flow's does. With
// weight w > 1 the group keeps its place for w consecutive claims (deficit
// round robin: Credit counts the claims left in its turn) and goes to the
// back with the last one, so a saturated group of weight w gets w claims
// for every claim of a saturated group of weight 1, and an always-eligible
// group is claimed again after at most the sum of the other active groups'
// weights.
func (t *txn) turn(g *store.GroupRow) {
	if g.Weight <= 1 {
		g.Served, g.Credit = t.clock.Ticket, 0
	} else {
		if g.Credit <= 0 || g.Credit > g.Weight {
			g.Credit = g.Weight
		}
		g.Credit--
		if g.Credit == 0 {
			g.Served = t.clock.Ticket
		}
	}
	t.turned[g.Group] = true
}

// sortDispatch sorts flows in dispatch order (SPEC §2 step 3, §7): the
// smallest served first, ties by flow id (seed) or creation order (fair).
// It is the Go side of the runnable index's order, which each backend's SQL
// reads in; the conformance suite holds the two to the same answers.
func sortDispatch(fs []*store.FlowRow, order store.Order) {
	slices.SortFunc(fs, func(a, b *store.FlowRow) int {
		if c := cmp.Compare(a.Served, b.Served); c != 0 {
			return c
		}
		if order == store.OrderCreation {
			return cmp.Compare(a.Ord, b.Ord)
		}
		return strings.Compare(a.Flow, b.Flow)
	})
}

// promoteDue moves every flow whose head became eligible by the
// transaction's tick (backoff over, lease run out) from the due index to
// the runnable one, so that a claim never scans heads that are not
// eligible. An expired inflight head whose round used the whole budget is
// quarantined instead ([decision] of SPEC §2), in every flow, whatever the
// claim then picks. due is the first page; the next pages are read here.
func (t *txn) promoteDue(ctx context.Context, due []store.FlowHead) error {
	for {
		// The page's last key, taken before the promotions below clear
		// the rows' WaitUntil (a row read is the working row).
		var next store.FlowKey
		if n := len(due); n > 0 && due[n-1].Flow.WaitUntil != nil {
			next = store.FlowKey{WaitUntil: *due[n-1].Flow.WaitUntil, Flow: due[n-1].Flow.Flow}
		}
		for i := range due {
			f := t.addFlow(&due[i].Flow)
			if f.WaitUntil == nil || *f.WaitUntil > t.at {
				continue // changed by this transaction already
			}
			head, err := t.head(f)
			if err != nil {
				return err
			}
			if head.State == store.StateInflight && head.Attempts >= t.q.policy.Budget {
				t.leaseExpired(head)
				head.State, head.Reason = store.StateQuarantined, ReasonBudgetExhausted
				t.changedEvent(head)
				t.quarantined = append(t.quarantined, Quarantined{ID: head.ID, Flow: head.Flow, Seq: head.Seq,
					Generation: head.Generation, Attempts: head.Attempts, Reason: head.Reason})
				t.parkHead(f)
			} else if f.Paused {
				t.parkHead(f) // a member flow paused while it waited
			} else {
				t.setRunnable(f, true)
				f.WaitUntil = nil
			}
			t.changedFlow(f)
		}
		if len(due) < duePage {
			return nil
		}
		rr, err := t.tx.Read(ctx, store.ReadSet{At: t.at, DueLimit: duePage, DueAfter: &next})
		if err != nil {
			return err
		}
		t.addHeads(rr.Due)
		t.addGroups(rr)
		due = rr.Due
	}
}

// AttemptLeaseExpired is an attempt's Status when its lease ran out before a
// settle (the event was claimed again, or quarantined for its budget).
const AttemptLeaseExpired = "lease_expired"

// leaseExpired records that e's current claim ended with its lease run out
// unsettled, naming the relay that claimed it (ClaimParams.Relay). A settle
// recorded earlier for the same generation (one that answered expired) is
// kept: the first word wins.
func (t *txn) leaseExpired(e *store.EventRow) {
	t.attempts = append(t.attempts, store.AttemptRow{EventID: e.ID, Generation: e.Generation, Flow: e.Flow,
		LeaseUntil: e.LeaseUntil, ClaimedWall: e.ClaimedWall, Status: AttemptLeaseExpired, Relay: e.ClaimedBy})
}

// claimOne claims the head of f, a runnable flow picked in dispatch order;
// nil when the head is not eligible at the transaction's tick after all.
func (t *txn) claimOne(f *store.FlowRow) (*Claim, error) {
	head, err := t.head(f)
	if err != nil {
		return nil, err
	}
	if head.State != store.StateReady && head.State != store.StateInflight {
		return nil, fmt.Errorf("flow %q: runnable head %q is %s: the store is inconsistent", f.Flow, head.ID, head.State)
	}
	at := t.at
	if head.State == store.StateReady && head.NextAt > at {
		// Not eligible yet (SPEC §2 step 2): with one writer this cannot
		// happen, but where lanes run side by side (PostgreSQL) an enqueue,
		// a redrive or a settle may have made this head ready at a later
		// tick than this claim's while it ran. A later claim takes it.
		return nil, nil
	}
	if head.State == store.StateInflight {
		t.leaseExpired(head) // the claim before this one ran out unsettled
	}
	// served moves at claim time, not at success: the claim spends the
	// flow's turn whatever happens next (SPEC §2).
	t.clock.Ticket++
	f.Served = t.clock.Ticket
	lease := at + t.q.policy.Lease
	t.setRunnable(f, false)
	f.WaitUntil = &lease
	head.State = store.StateInflight
	head.Generation++
	head.Attempts++
	head.LifetimeAttempts++
	head.LeaseUntil = lease
	head.ClaimedWall = t.wall
	head.ClaimedBy = t.claimer
	t.changedEvent(head)
	t.changedFlow(f)
	group := f.Group
	if group == "" {
		group = f.Flow
	}
	return &Claim{
		Token: Token{EventID: head.ID, Generation: head.Generation},
		Flow:  head.Flow, Group: group, Seq: head.Seq, Body: head.Body,
		LeaseUntil: lease, Ticket: t.clock.Ticket, Attempts: head.Attempts,
	}, nil
}
