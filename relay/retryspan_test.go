package relay_test

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/relay"
	"github.com/fairrelay/fairrelay/sink"
)

// A relay over a queue whose policy spends a failing head's retries within
// a second warns at New: Policy{Lease: 30_000} left budget and backoff at
// the reference policy's (3 claims, 2 to 8 ticks = ms), and a head was
// quarantined after 3 failures in 10 ms with nothing said (a library
// user's report, from the package's own Example). DaemonPolicy's hour of
// retries says nothing.
func TestNewWarnsOfAPolicyThatRetriesWithinASecond(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		policy fairrelay.Policy
		warns  bool
	}{
		{"lease_only", fairrelay.Policy{Lease: 30_000}, true},
		{"daemon", fairrelay.DaemonPolicy(), false},
		{"one_claim", fairrelay.Policy{Lease: 30_000, Budget: 1}, true},
		{"a_second_of_backoff", fairrelay.Policy{Lease: 30_000, Budget: 2, BackoffBase: 1_000, BackoffCap: 1_000}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			q, err := fairrelay.Open(t.Context(), filepath.Join(t.TempDir(), "q.db"), fairrelay.Config{Policy: c.policy})
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			var logs bytes.Buffer
			_, err = relay.New(t.Context(), relay.Config{Queue: q, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
				Sink: sink.Func(func(context.Context, sink.Delivery) (sink.Result, error) { return sink.Result{}, nil })})
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(logs.String(), "level=WARN msg=\"relay: the queue's policy gives a failing head all its retries within a second"); got != c.warns {
				t.Errorf("warned %v, want %v; logs:\n%s", got, c.warns, logs.String())
			}
		})
	}
}
