package relay_test

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/relay"
	"github.com/fairrelay/fairrelay/sink/webhook"
)

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testPolicy()) // lease 2000 ms
	for _, tc := range []struct {
		change func(*relay.Config)
		field  string
	}{
		{func(c *relay.Config) { c.DeliveryTimeout = 1900 * time.Millisecond }, "lease"},
		{func(c *relay.Config) {
			c.DeliveryTimeout = 1500 * time.Millisecond
			c.LeaseMargin = 500 * time.Millisecond
		}, "lease"},
		{func(c *relay.Config) { c.Workers = -1 }, "workers"},
		{func(c *relay.Config) { c.Workers = relay.MaxWorkers + 1 }, "workers"},
		{func(c *relay.Config) { c.Sink = nil }, "sink"},
		{func(c *relay.Config) { c.Queue = nil }, "queue"},
		// Named as the Config's fields (a library user's report: "timeout"
		// for DeliveryTimeout, "poll_interval" for MaxPollInterval).
		{func(c *relay.Config) { c.DeliveryTimeout = time.Microsecond }, "delivery_timeout"},
		{func(c *relay.Config) { c.PollInterval = -time.Second }, "poll_interval"},
		{func(c *relay.Config) { c.MaxPollInterval = time.Microsecond }, "max_poll_interval"},
		{func(c *relay.Config) { c.MaxRetryWait = time.Microsecond }, "max_retry_wait"},
		{func(c *relay.Config) { c.RetryWait = -time.Second }, "retry_wait"},
		// Sub-millisecond retention is 0 ticks: it pruned everything at once
		// (a breaker's report), the opposite of 0, which keeps it forever.
		{func(c *relay.Config) { c.RetainAcked = 500 * time.Microsecond }, "retain_acked"},
		{func(c *relay.Config) { c.RetainAcked, c.RetainIDs = time.Hour, time.Hour+time.Microsecond }, "retain_ids"},
	} {
		cfg := h.config(t)
		tc.change(&cfg)
		_, err := relay.New(t.Context(), cfg)
		var fe *fairrelay.Error
		if !errors.As(err, &fe) || fe.Field != tc.field || !errors.Is(err, fairrelay.ErrInvalidInput) {
			t.Errorf("want field %s, got %v", tc.field, err)
		}
	}
}

// relay.New checks the lease against the timeout and the margin the relay
// runs with: a LeaseMargin left at 0 is 1s, and the check once used 0, so
// a lease of 10.5s beside the 10s timeout passed though the relay keeps 1s
// between a delivery's timeout and its lease's end. The error shows the
// margin used, and names DaemonPolicy: a queue opened with a zero Config
// has the reference policy's lease of 5 ticks, made for scripts.
func TestLeaseCheckUsesTheMarginTheRelayRunsWith(t *testing.T) {
	t.Parallel()
	const hint = " (the lease is the queue's Policy.Lease, in ms; fairrelay.DaemonPolicy() gives one for a daemon, 30s)"
	longer := fairrelay.DaemonPolicy()
	longer.Lease = 10500
	for _, tc := range []struct {
		cfg  fairrelay.Config
		want string
	}{
		{fairrelay.Config{}, "lease: 5ms must exceed the delivery timeout 10s plus the margin 1s: a delivery could outlive its lease" + hint},
		{fairrelay.Config{Policy: longer}, "lease: 10.5s must exceed the delivery timeout 10s plus the margin 1s: a delivery could outlive its lease" + hint},
	} {
		q, err := fairrelay.Open(t.Context(), filepath.Join(t.TempDir(), "queue.db"), tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		s, err := webhook.New(webhook.Options{URL: "http://127.0.0.1:1/", Unsigned: true})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		_, err = relay.New(t.Context(), relay.Config{Queue: q, Sink: s})
		if !errors.Is(err, fairrelay.ErrInvalidInput) || err.Error() != tc.want {
			t.Errorf("relay.New, lease %d ms, margin and timeout left out: %v\nwant %s", q.Policy().Lease, err, tc.want)
		}
	}
}
