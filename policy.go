package fairrelay

import (
	"fmt"
	"hash/fnv"
	"math"
)

// Entry is the rule by which a flow enters the rotation and ties on served are
// broken (SPEC §7).
type Entry string

const (
	// EntrySeed is the article's reference rule: a new flow starts at
	// served = 0 and ties go by flow id. An endless stream of new flows can
	// keep overtaking an old one (SPEC §5 item 10). The script command and
	// the shared test vectors use it.
	EntrySeed Entry = "seed"
	// EntryFair joins a new flow at the back of the current rotation
	// (served = the current ticket) and breaks ties by flow creation order,
	// so new flows cannot push an old flow back (SPEC §7). The daemon's
	// default.
	EntryFair Entry = "fair"
)

// ParseEntry parses "seed" or "fair". Errors: ErrInvalidInput naming field
// "policy".
func ParseEntry(s string) (Entry, error) {
	switch Entry(s) {
	case EntrySeed, EntryFair:
		return Entry(s), nil
	}
	return "", invalid("policy", "must be seed or fair, not %q", s)
}

// Policy holds every number of the protocol (SPEC §2, §7). The zero value of
// a field means its default; Validate reports fields that are out of range.
type Policy struct {
	// Entry is the entry and tie rule. Defaults to EntryFair.
	Entry Entry
	// Lease is how long a claim holds its head, in ticks: a claim at tick t
	// leases until t+Lease. Defaults to 5.
	Lease int64
	// Budget is how many claims one round of attempts may take before a
	// transient failure (or a lease that ran out) quarantines the head with
	// reason budget_exhausted. Defaults to 3.
	Budget int64
	// BackoffBase is the first retry delay in ticks; attempt n waits
	// min(BackoffBase*2^(n-1), BackoffCap). Defaults to 2.
	BackoffBase int64
	// BackoffCap caps the retry delay, in ticks. Defaults to 8.
	BackoffCap int64
	// Jitter j in [0, 1) shortens each delay d to a value in [d*(1-j), d],
	// derived from (event_id, generation) so a run can be replayed. Defaults
	// to 0 (the reference policy); the daemon uses 0.2.
	Jitter float64
	// MaxBodyBytes is the largest body enqueue accepts, in bytes. Defaults to
	// 1 MiB (1048576).
	MaxBodyBytes int
	// MaxTickJump, when positive, refuses a write whose tick lies more than
	// this many ticks ahead of the stored tick: ErrInvalidInput naming "at",
	// and nothing changes (SPEC §7), so that a typo cannot poison a store's
	// clock. 0 (the default, and the reference policy's) sets no limit; the
	// daemon's policy sets one hour (3 600 000 ticks). A write with Floor
	// set (a daemon clock's, as the relay's) is not checked: that clock
	// moves only by the time that passed, also across a long outage.
	MaxTickJump int64
}

// ReferencePolicy is the article's policy: seed entry, lease 5, budget 3,
// backoff 2·2^(n-1) capped at 8, no jitter. The reference results of SPEC §5
// and the shared vectors depend on it.
func ReferencePolicy() Policy {
	return Policy{Entry: EntrySeed, Lease: 5, Budget: 3, BackoffBase: 2, BackoffCap: 8, MaxBodyBytes: 1 << 20}
}

// DaemonPolicy is the relay daemon's policy, where 1 tick = 1 ms (SPEC §7):
// fair entry, lease 30 000 ticks (30 s: above a 10 s delivery timeout plus a
// 1 s margin), budget 20, backoff from 1 000 ticks (1 s) doubling up to
// 300 000 (5 min) with jitter 0.2, bodies up to 1 MiB. The budget and the
// backoff retry a head whose receiver keeps failing transiently for 47–59
// min (the 19 waits, each shortened by up to 20 % of jitter) before it is
// quarantined; a permanent failure quarantines at once whatever the budget.
// A write more than an hour (3 600 000 ticks) ahead of the stored tick is
// refused (MaxTickJump). Use it for a Queue
// that a relay.Relay dispatches, and for tools that act on the same store.
func DaemonPolicy() Policy {
	return Policy{Entry: EntryFair, Lease: 30_000, Budget: 20, BackoffBase: 1_000, BackoffCap: 300_000, Jitter: 0.2, MaxBodyBytes: 1 << 20,
		MaxTickJump: 3_600_000}
}

// withDefaults fills zero fields with their defaults.
func (p Policy) withDefaults() Policy {
	if p.Entry == "" {
		p.Entry = EntryFair
	}
	if p.Lease == 0 {
		p.Lease = 5
	}
	if p.Budget == 0 {
		p.Budget = 3
	}
	if p.BackoffBase == 0 {
		p.BackoffBase = 2
	}
	if p.BackoffCap == 0 {
		p.BackoffCap = 8
	}
	if p.MaxBodyBytes == 0 {
		p.MaxBodyBytes = 1 << 20
	}
	return p
}

// Validate reports the first field out of range, as ErrInvalidInput naming
// the field (policy.lease, policy.budget, …). Zero fields are valid: they
// take their defaults.
func (p Policy) Validate() error {
	p = p.withDefaults()
	if _, err := ParseEntry(string(p.Entry)); err != nil {
		return err
	}
	switch {
	case p.Lease < 1 || p.Lease > MaxTick:
		return invalid("policy.lease", "must be 1 to %d ticks, got %d", int64(MaxTick), p.Lease)
	case p.Budget < 1:
		return invalid("policy.budget", "must be at least 1, got %d", p.Budget)
	case p.BackoffBase < 1:
		return invalid("policy.backoff_base", "must be at least 1 tick, got %d", p.BackoffBase)
	case p.BackoffCap < p.BackoffBase || p.BackoffCap > MaxTick:
		return invalid("policy.backoff_cap", "must be from backoff_base (%d) to %d ticks, got %d", p.BackoffBase, int64(MaxTick), p.BackoffCap)
	case math.IsNaN(p.Jitter) || p.Jitter < 0 || p.Jitter >= 1:
		return invalid("policy.jitter", "must be in [0, 1), got %v", p.Jitter)
	case p.MaxBodyBytes < 1:
		return invalid("policy.max_body_bytes", "must be at least 1 byte, got %d", p.MaxBodyBytes)
	case p.MaxTickJump < 0 || p.MaxTickJump > MaxTick:
		return invalid("policy.max_tick_jump", "must be 0 (no limit) to %d ticks, got %d", int64(MaxTick), p.MaxTickJump)
	}
	return nil
}

// Backoff returns the delay in ticks before attempt number attempts+1 of the
// event may be claimed, after a transient outcome of claim number attempts
// (1-based) with the given generation: min(base*2^(attempts-1), cap),
// shortened by the deterministic jitter of SPEC §7 to a value in
// [d*(1-Jitter), d]. The result is at least 1 tick.
func (p Policy) Backoff(eventID string, generation, attempts int64) int64 {
	p = p.withDefaults()
	d := p.BackoffCap
	if attempts < 1 {
		attempts = 1
	}
	// Doubling stops at the cap, so no shift can overflow.
	if n := attempts - 1; n < 62 {
		if v := p.BackoffBase << n; v>>n == p.BackoffBase && v > 0 && v < d {
			d = v
		}
	}
	if p.Jitter > 0 {
		u := unitHash(eventID, generation)
		cut := int64(math.Floor(float64(d) * p.Jitter * u))
		d -= cut
	}
	if d < 1 {
		d = 1
	}
	return d
}

// unitHash maps (event id, generation) to [0, 1) with FNV-1a followed by
// murmur3's 64-bit finaliser, so jitter is replayable and spread evenly:
// FNV-1a alone barely moves its high bits when only the generation changes.
func unitHash(id string, generation int64) float64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%d", id, generation)
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return float64(x>>11) / float64(1<<53)
}
