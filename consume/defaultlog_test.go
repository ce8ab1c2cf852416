package consume_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/consume"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/syncbuf"
)

// Without Options.Logger the consumer logs to slog.Default(): before, it
// discarded its lines by default, so a receiver built without a Logger
// said nothing of a refused or held event (the closing notes' "loggers
// that discard by default"). Not parallel: it replaces the process's
// default logger.
func TestRunLogsToTheDefaultLoggerWithoutALogger(t *testing.T) {
	logs := syncbuf.DefaultLog(t)
	in := newInbox(t, inbox.Options{})
	if _, err := in.Hold(t.Context(), inbox.Delivery{EventID: "A1", Flow: "A", Seq: 1, Body: []byte(`{"delta":9}`)}, fairrelay.OutcomeUnsupportedDelta); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	bound := time.AfterFunc(20*time.Second, cancel) // a bound on a failure, not synchronisation
	defer bound.Stop()
	err := consume.Run(ctx, &fake{done: map[string][]string{}}, consume.Options{Inbox: in, RedeliverBase: time.Hour, RedeliverCap: time.Hour,
		OnApplied: func(a consume.Applied) {
			if a.Action == consume.ActionApplied && a.Message.Delivery.EventID == "A1" {
				cancel()
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), `msg="consume: held events applied" flow=A applied=1`) {
		t.Errorf("the default logger got %q: want the info line for the held events applied", logs.String())
	}
}
