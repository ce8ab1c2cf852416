//go:build unix

package chaos

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// opKind is what one step of the schedule does to a process.
type opKind int

const (
	opKill  opKind = iota // SIGKILL
	opStart               // start a new process in its place
	opStop                // SIGSTOP
	opCont                // SIGCONT
)

func (k opKind) String() string {
	return [...]string{"kill", "start", "stop", "cont"}[k]
}

// op is one step: at At after the chaos began, Kind to the process Target
// (an index of planConfig's targets).
type op struct {
	At     time.Duration
	Kind   opKind
	Target int
}

// planConfig shapes a schedule. Targets 0..Relays-1 are the relays, Relays
// the receiver, Relays+1 the producer (killed only: it restarts itself).
type planConfig struct {
	Relays   int
	Duration time.Duration // actions are drawn until then, and on until MinKills
	MinKills int           // kills of relays and the receiver
	Lease    time.Duration // a stop lasts longer than this
}

func (c planConfig) receiver() int { return c.Relays }
func (c planConfig) producer() int { return c.Relays + 1 }

// plan is a schedule and what it holds.
type plan struct {
	Ops                                      []op
	RelayKills, ReceiverKills, ProducerKills int
	RelayStops, ReceiverStops                int
	Longest                                  time.Duration // the longest time a relay or the receiver is away
	End                                      time.Duration // the last op's time
}

// The schedule's numbers. An action every 250–950 ms; a killed process is
// started again 50 ms–1 s later; a stopped one is continued 0.3–1.5 s after
// its lease would have run out.
const (
	gapMin, gapMax             = 250 * time.Millisecond, 950 * time.Millisecond
	downMin, downMax           = 50 * time.Millisecond, time.Second
	stopExtraMin, stopExtraMax = 300 * time.Millisecond, 1500 * time.Millisecond
)

// makePlan draws a schedule from seed. The same seed and config give the
// same schedule. Every kill is followed by a start of the same target and
// every stop by a cont (or by a kill, which drops the cont), so when the
// last op has run every process is up. Only a running process is stopped,
// and only a running or stopped one is killed.
func makePlan(seed uint64, c planConfig) plan {
	rng := rand.New(rand.NewPCG(seed, 0xc4a05))
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	const (
		up = iota
		down
		stopped
	)
	n := c.Relays + 1
	state := make([]int, n)
	since := make([]time.Duration, n) // when it went away
	var p plan
	pending := []op{} // starts and conts not yet due
	emit := func(o op) { p.Ops = append(p.Ops, o) }
	away := func(target int, back time.Duration) {
		p.Longest = max(p.Longest, back-since[target])
	}
	for at := time.Duration(0); at < c.Duration || p.RelayKills+p.ReceiverKills < c.MinKills; {
		at += between(gapMin, gapMax)
		// Bring back what is due by now.
		slices.SortStableFunc(pending, func(a, b op) int { return int(a.At - b.At) })
		for len(pending) > 0 && pending[0].At <= at {
			o := pending[0]
			pending = pending[1:]
			emit(o)
			away(o.Target, o.At)
			state[o.Target] = up
		}
		targets := func(ok func(s int) bool, lo, hi int) []int {
			var ts []int
			for i := lo; i < hi; i++ {
				if ok(state[i]) {
					ts = append(ts, i)
				}
			}
			return ts
		}
		running := func(s int) bool { return s == up }
		killable := func(s int) bool { return s != down }
		// Weights out of 100: kill a relay 55, kill the receiver 15, stop a
		// relay 15, stop the receiver 5, kill the producer 10.
		var ts []int
		var kind opKind
		switch w := rng.IntN(100); {
		case w < 55:
			kind, ts = opKill, targets(killable, 0, c.Relays)
		case w < 70:
			kind, ts = opKill, targets(killable, c.Relays, c.Relays+1)
		case w < 85:
			kind, ts = opStop, targets(running, 0, c.Relays)
		case w < 90:
			kind, ts = opStop, targets(running, c.Relays, c.Relays+1)
		default:
			emit(op{At: at, Kind: opKill, Target: c.producer()})
			p.ProducerKills++
			continue
		}
		if len(ts) == 0 {
			continue
		}
		target := ts[rng.IntN(len(ts))]
		switch kind {
		case opKill:
			if state[target] == stopped {
				// The kill ends the stop: drop its cont.
				pending = slices.DeleteFunc(pending, func(o op) bool { return o.Target == target && o.Kind == opCont })
			} else {
				since[target] = at
			}
			emit(op{At: at, Kind: opKill, Target: target})
			back := at + between(downMin, downMax)
			pending = append(pending, op{At: back, Kind: opStart, Target: target})
			state[target] = down
			if target == c.receiver() {
				p.ReceiverKills++
			} else {
				p.RelayKills++
			}
		case opStop:
			emit(op{At: at, Kind: opStop, Target: target})
			back := at + c.Lease + between(stopExtraMin, stopExtraMax)
			pending = append(pending, op{At: back, Kind: opCont, Target: target})
			state[target], since[target] = stopped, at
			if target == c.receiver() {
				p.ReceiverStops++
			} else {
				p.RelayStops++
			}
		}
	}
	slices.SortStableFunc(pending, func(a, b op) int { return int(a.At - b.At) })
	for _, o := range pending {
		emit(o)
		away(o.Target, o.At)
	}
	if len(p.Ops) > 0 {
		p.End = p.Ops[len(p.Ops)-1].At
	}
	return p
}

// TestPlan checks the schedule itself: the same seed gives the same ops,
// ops are in time order, every process ends up, stops last longer than the
// lease, and there are enough kills.
func TestPlan(t *testing.T) {
	t.Parallel()
	c := planConfig{Relays: 2, Duration: 75 * time.Second, MinKills: 50, Lease: 3 * time.Second}
	for seed := range uint64(50) {
		p := makePlan(seed, c)
		if q := makePlan(seed, c); !slices.Equal(p.Ops, q.Ops) {
			t.Fatalf("seed %d: two schedules", seed)
		}
		if k := p.RelayKills + p.ReceiverKills; k < c.MinKills {
			t.Errorf("seed %d: %d kills, want at least %d", seed, k, c.MinKills)
		}
		state := map[int]opKind{}
		stoppedAt := map[int]time.Duration{}
		for i, o := range p.Ops {
			if i > 0 && o.At < p.Ops[i-1].At {
				t.Fatalf("seed %d: op %d at %v before op %d at %v", seed, i, o.At, i-1, p.Ops[i-1].At)
			}
			if o.Target == c.producer() {
				if o.Kind != opKill {
					t.Fatalf("seed %d: %v of the producer", seed, o.Kind)
				}
				continue
			}
			prev, seen := state[o.Target]
			if !seen {
				prev = opStart
			}
			ok := map[opKind][]opKind{
				opKill:  {opStart, opCont, opStop},
				opStart: {opKill},
				opStop:  {opStart, opCont},
				opCont:  {opStop},
			}[o.Kind]
			if !slices.Contains(ok, prev) {
				t.Fatalf("seed %d: op %d: %v of target %d after %v", seed, i, o.Kind, o.Target, prev)
			}
			switch o.Kind {
			case opStop:
				stoppedAt[o.Target] = o.At
			case opCont:
				if d := o.At - stoppedAt[o.Target]; d <= c.Lease {
					t.Errorf("seed %d: target %d stopped for %v, not longer than the lease", seed, o.Target, d)
				}
			}
			state[o.Target] = o.Kind
		}
		for target, k := range state {
			if k != opStart && k != opCont {
				t.Errorf("seed %d: target %d ends after %v", seed, target, k)
			}
		}
	}
}
