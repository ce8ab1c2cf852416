package fairrelay_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/harness/conformance"
	"github.com/fairrelay/fairrelay/internal/harness/queuetest"
)

// TestPruneKeepsWhatIsNotAcked: on random workloads (events acked,
// retried, quarantined and redriven, prunes at random horizons), every
// prune (SPEC §8 retention)
//
//   - deletes exactly the events acked before acked_before, and never an
//     event that is not acked: every other event, the flows (seq, served,
//     group, paused), the groups and the audit are as before, and the clock
//     moved to the prune's tick only;
//   - counts the events it deleted, those of them that left no tombstone
//     (acked before ids_before: Forgotten), and the tombstones it deleted:
//     those of events acked before ids_before, pruned earlier; and says how
//     long it held the writer, a positive time within the call;
//
// and an id enqueued again after its event was pruned answers as its
// tombstone says: existing with the event's seq for the same flow and body,
// conflict for another body or flow (checked before the limits), the group
// rule before both; once the tombstone is gone too, the id is new: created,
// with the flow's next seq. A prune with ids_before above acked_before is
// invalid_input naming ids_before and changes nothing.
func TestPruneKeepsWhatIsNotAcked(t *testing.T) {
	forWorkloads(t, func(t *testing.T, b conformance.Backend, rng *rand.Rand) {
		ctx := context.Background()
		q := referenceQueue(t, b)
		p := &pruneRun{t: t, ctx: ctx, q: q, rng: rng, ackedAt: map[string]int64{}, tombs: map[string]pruneTomb{},
			events: map[string]fairrelay.EnqueueParams{}, again: map[string]int{}, groupOf: map[string]string{"a": "g1", "b": "g1", "c": "g2"}}
		for range 300 {
			p.step()
		}
		t.Logf("prunes %d (events %d, tombstones %d deleted); enqueues of pruned ids by answer %v", p.prunes, p.deleted, p.tombsDeleted, p.again)
		for _, k := range []string{"existing", "conflict", "created", "invalid_input"} {
			if p.again[k] == 0 {
				t.Errorf("no enqueue of a pruned id answered %s: the property was not exercised", k)
			}
		}
		if p.tombsDeleted == 0 {
			t.Errorf("no prune deleted a tombstone: the property was not exercised")
		}
		if p.forgotten == 0 || p.forgotten == p.deleted {
			t.Errorf("of %d events pruned, %d left no tombstone: want some of each, or the count was not exercised", p.deleted, p.forgotten)
		}
	})
}

type pruneTomb struct {
	flow    string
	seq     int64
	sum     [sha256.Size]byte
	ackedAt int64
}

type pruneRun struct {
	t   *testing.T
	ctx context.Context
	q   *fairrelay.Queue
	rng *rand.Rand
	at  int64
	// events enqueued (by id), the tick each acked event was acked at, the
	// tombstones the store should keep, the group of the fixed flows.
	events  map[string]fairrelay.EnqueueParams
	ids     []string
	ackedAt map[string]int64
	tombs   map[string]pruneTomb
	groupOf map[string]string
	tokens  []fairrelay.Token
	nextID  int
	// what happened, for the log and the coverage checks.
	prunes, deleted, tombsDeleted, forgotten int64
	again                                    map[string]int
}

func (p *pruneRun) snapshot() *fairrelay.Snapshot {
	p.t.Helper()
	s, err := p.q.Snapshot(p.ctx)
	if err != nil {
		p.t.Fatal(err)
	}
	return s
}

func (p *pruneRun) step() {
	p.t.Helper()
	p.at += int64(p.rng.IntN(3))
	switch op := p.rng.IntN(20); {
	case op < 7:
		p.nextID++
		flows := []string{"a", "b", "c", "d", "e"}
		f := flows[p.rng.IntN(len(flows))]
		e := fairrelay.EnqueueParams{ID: fmt.Sprintf("e%d", p.nextID), Flow: f, Group: p.groupOf[f], Body: []byte(fmt.Sprintf(`{"delta":%d}`, 1+p.rng.IntN(5))), At: p.at}
		r, err := p.q.Enqueue(p.ctx, e)
		if err != nil || r.Status != fairrelay.EnqueueCreated {
			p.t.Fatalf("enqueue %+v: %+v %v", e, r, err)
		}
		p.events[e.ID] = e
		p.ids = append(p.ids, e.ID)
	case op < 12:
		// Settle the last claims (acked mostly; some retried, some
		// quarantined), claim the next.
		var ss []fairrelay.Settlement
		for _, tok := range p.tokens {
			o := fairrelay.OutcomeAccepted
			switch p.rng.IntN(8) {
			case 0:
				o = fairrelay.OutcomeRetry
			case 1:
				o = fairrelay.OutcomeInvalidBody
			}
			ss = append(ss, fairrelay.Settlement{Token: tok, Outcome: o})
		}
		rs, cs, err := queuetest.SettleClaims(p.q.SettleMany(p.ctx, fairrelay.SettleManyParams{At: p.at, Settles: ss, ClaimLimit: 1 + p.rng.IntN(3)}))
		if err != nil {
			p.t.Fatal(err)
		}
		for i, r := range rs {
			if r.Status == fairrelay.SettleAcked {
				p.ackedAt[ss[i].Token.EventID] = p.at
			}
		}
		p.tokens = p.tokens[:0]
		for _, c := range cs {
			p.tokens = append(p.tokens, c.Token)
		}
	case op < 13:
		qs, err := p.q.Quarantined(p.ctx, 2)
		if err != nil {
			p.t.Fatal(err)
		}
		for _, e := range qs {
			if _, err := p.q.Redrive(p.ctx, fairrelay.RedriveParams{EventID: e.ID, ExpectedGeneration: e.Generation, Reason: "fixed", At: p.at}); err != nil {
				p.t.Fatal(err)
			}
		}
	case op < 16:
		p.prune()
	default:
		p.enqueueAgain()
	}
}

// prune runs a prune at random horizons and checks what it deleted.
func (p *pruneRun) prune() {
	p.t.Helper()
	ackedBefore := p.rng.Int64N(p.at + 2)
	idsBefore := p.rng.Int64N(ackedBefore + 1)
	before := p.snapshot()
	if p.rng.IntN(10) == 0 {
		_, err := p.q.Prune(p.ctx, fairrelay.PruneParams{At: p.at, AckedBefore: ackedBefore, IDsBefore: ackedBefore + 1})
		if fairrelay.CodeOf(err) != fairrelay.CodeInvalidInput || errField(err) != "ids_before" {
			p.t.Fatalf("prune with ids_before above acked_before: %v, want invalid_input naming ids_before", err)
		}
		if d := cmp.Diff(before, p.snapshot()); d != "" {
			p.t.Fatalf("an invalid prune changed the store (-before +after):\n%s", d)
		}
		return
	}
	called := time.Now()
	res, err := p.q.Prune(p.ctx, fairrelay.PruneParams{At: p.at, AckedBefore: ackedBefore, IDsBefore: idsBefore})
	if err != nil {
		p.t.Fatal(err)
	}
	if took := time.Since(called); res.Held <= 0 || res.Held > took {
		p.t.Fatalf("prune held the writer %v in a call of %v: want a positive time within the call", res.Held, took)
	}
	after := p.snapshot()
	// What the prune must have deleted, and what it must have kept.
	var wantEvents, wantTombs, wantForgotten int64
	kept := []fairrelay.EventState{}
	for _, e := range before.Events {
		if e.State == fairrelay.StateAcked && p.ackedAt[e.ID] < ackedBefore {
			wantEvents++
			if p.ackedAt[e.ID] >= idsBefore {
				ev := p.events[e.ID]
				p.tombs[e.ID] = pruneTomb{flow: e.Flow, seq: e.Seq, sum: sha256.Sum256(ev.Body), ackedAt: p.ackedAt[e.ID]}
			} else {
				wantForgotten++
			}
			continue
		}
		kept = append(kept, e)
	}
	for id, tb := range p.tombs { // those kept by earlier prunes (new ones are acked at idsBefore or later)
		if tb.ackedAt < idsBefore {
			wantTombs++
			delete(p.tombs, id)
		}
	}
	if d := cmp.Diff(kept, after.Events); d != "" {
		p.t.Fatalf("prune at %d (acked_before %d, ids_before %d): events (-want kept +after):\n%s", p.at, ackedBefore, idsBefore, d)
	}
	if res.Events != wantEvents || res.Tombstones != wantTombs || res.Forgotten != wantForgotten {
		p.t.Fatalf("prune at %d (acked_before %d, ids_before %d): answered events %d, tombstones %d, forgotten %d; want %d, %d, %d",
			p.at, ackedBefore, idsBefore, res.Events, res.Tombstones, res.Forgotten, wantEvents, wantTombs, wantForgotten)
	}
	for id := range p.ackedAt {
		if !p.present(after, id) {
			delete(p.ackedAt, id) // pruned: its tombstone, if any, is in p.tombs
		}
	}
	before.Events, after.Events = nil, nil
	before.Clock.Tick = p.at
	if d := cmp.Diff(before, after); d != "" {
		p.t.Fatalf("prune changed more than the pruned events and the tick (-before +after):\n%s", d)
	}
	p.prunes++
	p.deleted += res.Events
	p.tombsDeleted += res.Tombstones
	p.forgotten += res.Forgotten
}

func (p *pruneRun) present(s *fairrelay.Snapshot, id string) bool {
	for _, e := range s.Events {
		if e.ID == id {
			return true
		}
	}
	return false
}

// enqueueAgain enqueues a pruned id again and checks the answer against
// its tombstone (or its absence).
func (p *pruneRun) enqueueAgain() {
	p.t.Helper()
	s := p.snapshot()
	var pruned []string
	for _, id := range p.ids {
		if !p.present(s, id) {
			pruned = append(pruned, id)
		}
	}
	if len(pruned) == 0 {
		return
	}
	id := pruned[p.rng.IntN(len(pruned))]
	ev := p.events[id]
	ev.At = p.at
	tb, hasTomb := p.tombs[id]
	want, wantSeq := "created", int64(0)
	switch p.rng.IntN(4) {
	case 0:
		ev.Body = []byte(`{"delta":99}`)
		if string(p.events[id].Body) == string(ev.Body) {
			ev.Body = []byte(`{"delta":98}`)
		}
		want = "conflict"
	case 1:
		ev.Flow, ev.Group = "e", "" // another flow (its own group)
		if ev.Flow == p.events[id].Flow {
			ev.Flow = "d"
		}
		want = "conflict"
	case 2:
		if g := p.groupOf[ev.Flow]; g != "" {
			ev.Group = map[string]string{"g1": "g2", "g2": "g1"}[g] // the group rule comes first
			want = "invalid_input"
		} else {
			want = "existing"
		}
	default:
		want = "existing"
	}
	if want == "existing" {
		wantSeq = tb.seq
	}
	if !hasTomb && want != "invalid_input" {
		// The id is unknown again: created, as the flow's next event.
		want, wantSeq = "created", 0
		for _, f := range s.Flows {
			if f.Flow == ev.Flow {
				wantSeq = f.Seq
			}
		}
		wantSeq++
	}
	r, err := p.q.Enqueue(p.ctx, ev)
	got := string(r.Status)
	if err != nil {
		got = string(fairrelay.CodeOf(err))
		if errField(err) != "group" {
			p.t.Fatalf("enqueue %s again: %v", id, err)
		}
	}
	if got != want || (want != "conflict" && want != "invalid_input" && r.Seq != wantSeq) {
		p.t.Fatalf("enqueue of pruned id %s again (tombstone %t, flow %s, body %s): got %s seq %d, want %s seq %d", id, hasTomb, ev.Flow, ev.Body, got, r.Seq, want, wantSeq)
	}
	p.again[want]++
	if want == "created" {
		p.events[id] = ev
	}
	if want != "created" {
		after := p.snapshot()
		s.Clock.Tick = after.Clock.Tick
		if d := cmp.Diff(s, after); d != "" {
			p.t.Fatalf("enqueue of pruned id %s answered %s but changed the store (-before +after):\n%s", id, got, d)
		}
	}
}

// PruneParams.AckedMinAge and IDsMinAge hold back by the queue's wall clock
// what the ticks make due: an event claimed less than AckedMinAge ago stays
// (counted in WallKept) whatever its tick; once deleted, its id stays in a
// tombstone until IDsMinAge, though its tick is below IDsBefore; the
// tombstone goes once that old. A negative age is refused naming it. Both
// backends.
func TestPruneHoldsBackByTheWallClock(t *testing.T) {
	t.Parallel()
	for _, b := range conformance.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			path, _ := b.New(t)
			var wall atomic.Int64
			wall.Store(time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC).UnixMilli())
			q, err := fairrelay.Open(ctx, path, fairrelay.Config{Policy: fairrelay.ReferencePolicy(),
				Now: func() time.Time { return time.UnixMilli(wall.Load()) }})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { q.Close() })
			enqueueAt(t, q, 1, []fairrelay.EnqueueParams{{ID: "A1", Flow: "A"}, {ID: "A2", Flow: "A"}})
			for range 2 {
				r, err := q.Claim(ctx, fairrelay.ClaimParams{At: 2})
				if err != nil || len(r.Claims) != 1 {
					t.Fatalf("claim: %+v %v", r, err)
				}
				if s, err := q.Settle(ctx, fairrelay.SettleParams{Token: r.Claims[0].Token, Outcome: fairrelay.OutcomeAccepted, At: 2}); err != nil || s.Status != fairrelay.SettleAcked {
					t.Fatalf("settle: %+v %v", s, err)
				}
			}
			// Every tick is far behind: by the ticks alone both events and
			// their ids are due.
			prune := func(want fairrelay.PruneResult) {
				t.Helper()
				r, err := q.Prune(ctx, fairrelay.PruneParams{At: 1000, AckedBefore: 1000, IDsBefore: 1000, Limit: 10,
					AckedMinAge: time.Hour, IDsMinAge: 2 * time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				got := fairrelay.PruneResult{Events: r.Events, Tombstones: r.Tombstones, Forgotten: r.Forgotten, WallKept: r.WallKept}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("prune at wall %s (-want +got):\n%s", time.UnixMilli(wall.Load()).UTC().Format(time.TimeOnly), diff)
				}
			}
			again := func(want fairrelay.EnqueueStatus) {
				t.Helper()
				r, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "A1", Flow: "A", Body: []byte(`{"delta":1}`), At: 1000})
				if err != nil || r.Status != want {
					t.Fatalf("A1 again: %+v %v, want %s", r, err, want)
				}
			}
			// SQLite's pass ends at the first event kept; PostgreSQL reads
			// its batches whole (A1 from the events, A2 from its flow).
			kept := int64(1)
			if b.Name == "postgres" {
				kept = 2
			}
			prune(fairrelay.PruneResult{WallKept: kept})
			again(fairrelay.EnqueueExisting)
			wall.Add((time.Hour + time.Second).Milliseconds())
			prune(fairrelay.PruneResult{Events: 2, WallKept: 2}) // ids the ticks alone would forget
			again(fairrelay.EnqueueExisting)                     // the tombstone, though tick 2 < IDsBefore
			wall.Add((time.Hour).Milliseconds())
			prune(fairrelay.PruneResult{Tombstones: 2})
			again(fairrelay.EnqueueCreated)
			for _, c := range []struct {
				p     fairrelay.PruneParams
				field string
			}{
				{fairrelay.PruneParams{At: 1000, AckedMinAge: -time.Second}, "acked_min_age"},
				{fairrelay.PruneParams{At: 1000, IDsMinAge: -time.Second}, "ids_min_age"},
			} {
				_, err := q.Prune(ctx, c.p)
				var fe *fairrelay.Error
				if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != c.field {
					t.Errorf("%+v: %v, want invalid_input naming %s", c.p, err, c.field)
				}
			}
		})
	}
}
