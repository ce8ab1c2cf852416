package store

import "time"

// DefaultBusyTimeout is the busy timeout of a store or inbox opened with
// none (zero).
const DefaultBusyTimeout = 5 * time.Second

// BusyTimeout is the busy timeout a backend is given for d, a caller's
// non-negative one: DefaultBusyTimeout for zero, else d rounded up to whole
// milliseconds (BusyMillis).
func BusyTimeout(d time.Duration) time.Duration {
	if d <= 0 {
		return DefaultBusyTimeout
	}
	return time.Duration(BusyMillis(d)) * time.Millisecond
}

// BusyMillis is d, a positive busy timeout, in the whole milliseconds that
// SQLite's busy_timeout and PostgreSQL's lock_timeout count in, rounded up.
// Every place that hands a busy timeout to a backend converts with it:
// truncated, 500µs became 0, which is no wait at all on SQLite and no limit
// at all on PostgreSQL, where lock_timeout 0 waits for ever (a breaker's
// report). Zero or less is 0.
func BusyMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
