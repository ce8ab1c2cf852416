package relay

import (
	"testing"

	"github.com/fairrelay/fairrelay"
)

// besideClaims.next: a short plain claim while answers wait turns combine
// on; a settle with a claim (SettleMany with a ClaimLimit) that filled k
// mostly with flows it did not ack turns it off; anything else keeps it.
func TestCombineNext(t *testing.T) {
	t.Parallel()
	acked := func(flows ...string) []Settled {
		var out []Settled
		for _, f := range flows {
			out = append(out, Settled{Claim: fairrelay.Claim{Flow: f}, Result: fairrelay.SettleResult{Status: fairrelay.SettleAcked}})
		}
		return out
	}
	claims := func(flows ...string) []fairrelay.Claim {
		var out []fairrelay.Claim
		for _, f := range flows {
			out = append(out, fairrelay.Claim{Flow: f})
		}
		return out
	}
	for _, c := range []struct {
		name    string
		combine bool
		settled []Settled
		k       int
		cs      []fairrelay.Claim
		waiting int
		want    bool
	}{
		{"short claim, answers waiting", false, nil, 4, claims("A"), 3, true},
		{"short claim, nothing waiting", false, nil, 4, claims("A"), 0, false},
		{"full claim, answers waiting", false, nil, 2, claims("A", "B"), 5, false},
		{"settle and claim behind the acks", true, acked("A", "B"), 2, claims("A", "B"), 0, true},
		{"settle and claim of other flows", true, acked("A", "B"), 2, claims("C", "D"), 0, false},
		{"settle and claim, half behind", true, acked("A", "B"), 2, claims("A", "D"), 0, true},
		{"settle and claim came back short", true, acked("A", "B"), 4, claims("C"), 0, true},
		{"settle only", true, acked("A"), 0, nil, 0, true},
	} {
		if got := (besideClaims{}).next(c.combine, c.settled, c.k, c.cs, c.waiting); got != c.want {
			t.Errorf("%s: combine %v, want %v", c.name, got, c.want)
		}
	}
}
