package store_test

import (
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/internal/store"
	"github.com/fairrelay/fairrelay/internal/store/pgstore"
	"github.com/fairrelay/fairrelay/internal/store/sqlitestore"
)

// Every place that hands a busy timeout to a backend rounds it up to whole
// milliseconds: the SQLite DSNs (read-write and read-only) and
// PostgreSQL's lock_timeout. Truncated, 500µs was 0: no wait on SQLite, no
// limit at all on PostgreSQL.
func TestBusyTimeoutsRoundUpToWholeMilliseconds(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{500 * time.Microsecond, "1"},
		{time.Millisecond, "1"},
		{1500 * time.Microsecond, "2"},
		{2 * time.Second, "2000"},
	} {
		if got := strconv.FormatInt(store.BusyMillis(tc.d), 10); got != tc.want {
			t.Errorf("BusyMillis(%v) = %s, want %s", tc.d, got, tc.want)
		}
		for name, dsn := range map[string]string{
			"DSN":         sqlitestore.DSN("/tmp/x.db", tc.d, true),
			"ReadOnlyDSN": sqlitestore.ReadOnlyDSN("/tmp/x.db", tc.d),
		} {
			u, err := url.Parse(dsn)
			if err != nil {
				t.Fatal(err)
			}
			if p := u.Query()["_pragma"]; !slices.Contains(p, "busy_timeout("+tc.want+")") {
				t.Errorf("sqlitestore.%s(%v): pragmas %v, want busy_timeout(%s)", name, tc.d, p, tc.want)
			}
		}
		cfg, _, err := pgstore.PoolConfig(pgtest.URL(t), tc.d)
		if err != nil {
			t.Fatal(err)
		}
		if got := pgtest.Settings(t, cfg.ConnConfig, "lock_timeout")["lock_timeout"]; got != tc.want {
			t.Errorf("pgstore.PoolConfig(%v): lock_timeout %q, want %s", tc.d, got, tc.want)
		}
	}
	if got := store.BusyTimeout(0); got != store.DefaultBusyTimeout {
		t.Errorf("BusyTimeout(0) = %v, want the default %v", got, store.DefaultBusyTimeout)
	}
	if got := store.BusyTimeout(500 * time.Microsecond); got != time.Millisecond {
		t.Errorf("BusyTimeout(500µs) = %v, want 1ms", got)
	}
}
