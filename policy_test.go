package fairrelay_test

import (
	"errors"
	"math"
	"testing"

	"github.com/fairrelay/fairrelay"
)

func TestPolicyValidateNamesTheField(t *testing.T) {
	t.Parallel()
	cases := []struct {
		p     fairrelay.Policy
		field string
	}{
		{fairrelay.Policy{Entry: "lifo"}, "policy"},
		{fairrelay.Policy{Lease: -1}, "policy.lease"},
		{fairrelay.Policy{Lease: fairrelay.MaxTick + 1}, "policy.lease"},
		{fairrelay.Policy{BackoffCap: math.MaxInt64}, "policy.backoff_cap"},
		{fairrelay.Policy{Budget: -3}, "policy.budget"},
		{fairrelay.Policy{BackoffBase: -2}, "policy.backoff_base"},
		{fairrelay.Policy{BackoffBase: 10, BackoffCap: 5}, "policy.backoff_cap"},
		{fairrelay.Policy{Jitter: 1}, "policy.jitter"},
		{fairrelay.Policy{Jitter: -0.1}, "policy.jitter"},
		{fairrelay.Policy{Jitter: math.NaN()}, "policy.jitter"},
		{fairrelay.Policy{MaxBodyBytes: -1}, "policy.max_body_bytes"},
	}
	for _, c := range cases {
		err := c.p.Validate()
		var fe *fairrelay.Error
		if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != c.field {
			t.Errorf("%+v: got %v, want invalid_input naming %s", c.p, err, c.field)
		}
	}
	if err := (fairrelay.Policy{}).Validate(); err != nil {
		t.Errorf("zero policy: %v (zero fields take defaults)", err)
	}
	if err := fairrelay.ReferencePolicy().Validate(); err != nil {
		t.Errorf("reference policy: %v", err)
	}
}

func TestBackoffDoublesUpToTheCapWithoutOverflow(t *testing.T) {
	t.Parallel()
	p := fairrelay.ReferencePolicy()
	want := []int64{2, 4, 8, 8, 8}
	for n, w := range want {
		if got := p.Backoff("A1", 1, int64(n+1)); got != w {
			t.Errorf("attempt %d: %d, want %d", n+1, got, w)
		}
	}
	p.BackoffBase, p.BackoffCap = 1000, math.MaxInt64/2
	if got := p.Backoff("A1", 1, 40); got != 1000<<39 {
		t.Errorf("attempt 40: %d, want %d", got, int64(1000)<<39)
	}
	for _, n := range []int64{55, 62, 63, 64, 1000, math.MaxInt64} {
		if got := p.Backoff("A1", 1, n); got != p.BackoffCap {
			t.Errorf("attempt %d: %d, want the cap %d", n, got, p.BackoffCap)
		}
	}
}

func TestJitterIsBoundedAndDeterministic(t *testing.T) {
	t.Parallel()
	p := fairrelay.ReferencePolicy()
	p.Jitter, p.BackoffBase, p.BackoffCap = 0.2, 1000, 1000
	seen := map[int64]bool{}
	for g := int64(1); g <= 200; g++ {
		d := p.Backoff("evt", g, 1)
		if d < 800 || d > 1000 {
			t.Fatalf("generation %d: delay %d outside [800, 1000]", g, d)
		}
		if d != p.Backoff("evt", g, 1) {
			t.Fatalf("generation %d: not deterministic", g)
		}
		seen[d] = true
	}
	if len(seen) < 20 {
		t.Fatalf("only %d distinct delays over 200 generations: jitter does not spread retries", len(seen))
	}
}

func TestOutcomeClassesAndParsing(t *testing.T) {
	t.Parallel()
	for _, o := range fairrelay.Outcomes() {
		got, err := fairrelay.ParseOutcome(string(o))
		if err != nil || got != o {
			t.Errorf("ParseOutcome(%q) = %q, %v", o, got, err)
		}
	}
	if _, err := fairrelay.ParseOutcome("Accepted"); !errors.Is(err, fairrelay.ErrInvalidInput) {
		t.Errorf("ParseOutcome is case-sensitive and strict, got %v", err)
	}
	if fairrelay.Outcome("teapot").Class() != fairrelay.ClassTransient {
		t.Error("an unknown outcome must be transient, never silently permanent")
	}
	if fairrelay.OutcomeDuplicate.Class() != fairrelay.ClassAck || fairrelay.OutcomeGap.Class() != fairrelay.ClassTransient ||
		fairrelay.OutcomeInvalidBody.Class() != fairrelay.ClassPermanent {
		t.Error("classes do not follow SPEC §2")
	}
}

// The daemon's budget and backoff ride out a receiver outage of about an
// hour before quarantining a head (the waits of every attempt but the last,
// jitter at its shortest), and not a week.
func TestDaemonPolicyRidesOutAnHourLongOutage(t *testing.T) {
	p := fairrelay.DaemonPolicy()
	var waited int64
	for attempts := int64(1); attempts < p.Budget; attempts++ {
		waited += p.Backoff("e1", 1, attempts)
	}
	if least := int64(45 * 60 * 1000); waited < least || waited > 2*60*60*1000 {
		t.Fatalf("a head is quarantined after %d ms of transient failures, want between 45 min and 2 h", waited)
	}
}
