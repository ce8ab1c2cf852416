package relay

import (
	"sync"
	"time"
)

// Monotonic is a source of monotonic time: Elapsed is the time since a fixed
// origin of the source's choosing and never decreases. The relay's default
// is the process's monotonic clock; tests inject one they advance by hand,
// so no test needs to sleep.
type Monotonic interface {
	Elapsed() time.Duration
}

// systemMonotonic reads Go's monotonic clock (time.Since of a fixed start),
// which a wall clock set back does not move.
type systemMonotonic struct{ start time.Time }

func (s systemMonotonic) Elapsed() time.Duration { return time.Since(s.start) }

// SystemMonotonic returns the process's monotonic clock, with its origin now.
func SystemMonotonic() Monotonic { return systemMonotonic{start: time.Now()} }

// Clock is the daemon clock of SPEC §7: 1 tick = 1 ms. It starts at the
// stored tick, moves forward by the non-negative differences between
// readings of a Monotonic source, and is raised (never lowered) to any
// stored tick it observes, so a wall clock set back neither errors nor stalls
// dispatch, and another process's writes never make ours regress. Safe for
// concurrent use.
type Clock struct {
	mu     sync.Mutex
	src    Monotonic
	offset int64 // tick = offset + elapsed ms
	last   int64 // the largest tick handed out: Now never goes below it
}

// NewClock returns a clock reading stored (the store's tick, from
// fairrelay.Queue.Clock) now.
func NewClock(src Monotonic, stored int64) *Clock {
	return &Clock{src: src, offset: stored - src.Elapsed().Milliseconds(), last: stored}
}

// Now returns the current tick: >= every tick returned before and >= every
// stored tick observed.
func (c *Clock) Now() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nowLocked()
}

func (c *Clock) nowLocked() int64 {
	t := c.offset + c.src.Elapsed().Milliseconds()
	// A source that stepped back (it should not) stalls the clock instead of
	// moving it back.
	c.last = max(c.last, t)
	return c.last
}

// Observe raises the clock to stored when stored is ahead (another process
// wrote a later tick); the clock then moves on from there.
func (c *Clock) Observe(stored int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := c.nowLocked(); stored > now {
		c.offset += stored - now
		c.last = stored
	}
}
