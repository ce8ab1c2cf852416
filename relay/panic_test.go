package relay_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/syncbuf"
	"github.com/fairrelay/fairrelay/relay"
	"github.com/fairrelay/fairrelay/sink"
)

// A sink that panics on an event is no answer: the delivery is retried,
// its detail names the panic, the panic is logged with its stack, and
// the relay goes on with the other flows. A sink.Func that panicked ended
// the relay with every head it had claimed still leased, and each relay
// that claimed the event after the lease ended the same way (a breaker's
// report).
func TestASinkThatPanicsIsRetried(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testPolicy())
	h.enqueue(t, "A", 1)
	h.enqueue(t, "B", 1)
	var logs syncbuf.Buffer
	var calls atomic.Int32
	cfg := h.config(t)
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	cfg.Sink = sink.Func(func(_ context.Context, d sink.Delivery) (sink.Result, error) {
		if d.Flow == "A" && calls.Add(1) == 1 {
			panic("poison A1 in the sink")
		}
		return sink.Result{Outcome: fairrelay.OutcomeAccepted}, nil
	})
	_, stop := h.start(t, cfg)
	var a1 []relay.Settled
	all := h.until(t, func(all []relay.Settled) bool {
		if len(all) > 0 && all[len(all)-1].Claim.Flow == "A" && all[len(all)-1].Outcome == fairrelay.OutcomeRetry {
			h.time.Advance(time.Second) // past A1's backoff
		}
		return acks(2)(all)
	})
	for _, s := range all {
		if s.Claim.Flow == "A" {
			a1 = append(a1, s)
		}
	}
	if len(a1) != 2 || a1[0].Outcome != fairrelay.OutcomeRetry || !strings.Contains(a1[0].Detail, "the sink panicked: poison A1 in the sink") ||
		a1[1].Result.Status != fairrelay.SettleAcked {
		t.Errorf("A1's settles %+v: want a retry naming the panic, then acked", a1)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if l := logs.String(); !strings.Contains(l, "relay: the sink panicked") || !strings.Contains(l, "stack=") {
		t.Errorf("the log has no error line with the panic's stack:\n%s", l)
	}
}

// A panic in OnSettle (or OnQuarantine) is logged and the relay goes on:
// it ended the relay after the settle had committed.
func TestAHookThatPanicsDoesNotStopTheRelay(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testPolicy())
	h.enqueue(t, "A", 1, 1, 1)
	var logs syncbuf.Buffer
	var calls atomic.Int32
	cfg := h.config(t)
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	report := cfg.OnSettle
	cfg.OnSettle = func(s relay.Settled) {
		report(s)
		if calls.Add(1) == 1 {
			panic("a bug in the application's hook")
		}
	}
	_, stop := h.start(t, cfg)
	h.until(t, acks(3))
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "relay: the OnSettle hook panicked; the relay goes on") {
		t.Errorf("no error line for the hook's panic:\n%s", logs.String())
	}
}
