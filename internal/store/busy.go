package store

import "time"

// DefaultBusyTimeout is the busy timeout of a store or inbox opened with
// none (zero).
const DefaultBusyTimeout = 5 * time.Second

// BusyTimeout is the busy timeout a backend is given for d, a caller's
// non-negative one: DefaultBusyTimeout for zero, else d rounded up to whole
// milliseconds, the unit SQLite's busy_timeout and PostgreSQL's
// lock_timeout count in. Truncated, 500µs became 0: no wait at all on
// SQLite, and no limit at all on PostgreSQL, where lock_timeout 0 waits
// for ever (a breaker's report).
func BusyTimeout(d time.Duration) time.Duration {
	if d <= 0 {
		return DefaultBusyTimeout
	}
	return (d + time.Millisecond - 1).Truncate(time.Millisecond)
}
