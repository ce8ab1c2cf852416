package relay_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
)

// Every settle the relay sends carries what the attempt history needs
// (issue 17): the sink's detail (here the receiver's HTTP status and the
// start of its body), the delivery's duration as the relay's clock
// measured it, and the relay's name. A relay with no name given is named
// HOST:PID.
func TestRelayRecordsTheAttemptHistory(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testPolicy())
	h.enqueue(t, "A", 1)
	first := true
	h.intercept = func(w http.ResponseWriter, r *http.Request, d delivery) bool {
		h.time.Advance(25 * time.Millisecond) // the delivery takes 25 ms of the relay's clock
		if first {
			first = false
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("down for maintenance, back soon"))
			return true
		}
		return false
	}
	cfg := h.config(t)
	cfg.Name = "relay-east-1"
	_, stop := h.start(t, cfg)
	h.next(t) // the 503: retry
	h.time.Advance(time.Second)
	h.until(t, acks(1))
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	as, err := h.q.Attempts(t.Context(), "A1")
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 2 {
		t.Fatalf("%d attempts, want 2: %+v", len(as), as)
	}
	if a := as[0]; a.Outcome != string(fairrelay.OutcomeRetry) || !strings.Contains(a.Detail, "503") || !strings.Contains(a.Detail, "down for maintenance") {
		t.Errorf("first attempt: outcome %q, detail %q; want retry with the 503 and the body's start", a.Outcome, a.Detail)
	}
	for i, a := range as {
		if a.Relay != "relay-east-1" {
			t.Errorf("attempt %d: relay %q, want relay-east-1", i+1, a.Relay)
		}
		if a.Duration < 25*time.Millisecond {
			t.Errorf("attempt %d: duration %s, want at least the 25ms the delivery took", i+1, a.Duration)
		}
	}

	cfg = h.config(t)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg.Name = "bad name\n"
	if err := cfg.Validate(); fairrelay.CodeOf(err) != fairrelay.CodeInvalidInput || !strings.Contains(err.Error(), "name") {
		t.Errorf("a name with a newline: %v, want invalid_input naming name", err)
	}
}
