package fairrelay_test

import (
	"errors"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/errs"
	"github.com/fairrelay/fairrelay/internal/pgtest"
)

// A call on a closed Queue answers an error with ErrClosed in its chain,
// on both backends, for writes and reads alike: a caller (the relay, a
// consumer) can tell it from a store outage, which waiting cures and this
// does not. database/sql's "sql: database is closed" and pgxpool's "closed
// pool" were plain database errors.
func TestACallOnAClosedQueueAnswersErrClosed(t *testing.T) {
	pgtest.EachBackend(t, "queue.db", "frclosed", func(t *testing.T, dsn string) {
		q, err := fairrelay.Open(t.Context(), dsn, fairrelay.Config{Policy: fairrelay.DaemonPolicy()})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		_, enqErr := q.Enqueue(t.Context(), fairrelay.EnqueueParams{ID: "E1", Flow: "F", Body: []byte(`{"delta":1}`), At: fairrelay.AtStored})
		_, claimErr := q.Claim(t.Context(), fairrelay.ClaimParams{At: fairrelay.AtStored, Limit: 1})
		_, readErr := q.Snapshot(t.Context())
		for name, err := range map[string]error{"Enqueue": enqErr, "Claim": claimErr, "Snapshot": readErr} {
			if !errors.Is(err, fairrelay.ErrClosed) || !errors.Is(err, fairrelay.ErrDatabase) {
				t.Errorf("%s on a closed Queue: %v, want an ErrDatabase error with ErrClosed in its chain", name, err)
			} else if m := errs.Stutter(err.Error()); m != "" {
				t.Errorf("%s on a closed Queue: %q names its operation twice (%q)", name, err, m)
			}
		}
	})
}
