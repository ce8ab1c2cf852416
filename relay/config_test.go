package relay_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/relay"
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
		{func(c *relay.Config) { c.MaxPollInterval = time.Microsecond }, "poll_interval"},
		{func(c *relay.Config) { c.MaxRetryWait = time.Microsecond }, "retry_wait"},
		{func(c *relay.Config) { c.RetryWait = -time.Second }, "retry_wait"},
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
