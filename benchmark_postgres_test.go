package fairrelay_test

import (
	"fmt"
	"testing"

	"github.com/fairrelay/fairrelay"
)

// BenchmarkPostgresSettleAndClaim is BenchmarkSettleAndClaim on
// PostgreSQL: one worker settles the 16 heads it claimed and claims 16 more
// in one transaction (SettleMany), over 1 000 flows of 40 events each;
// ns/op is per event. b.N is at most 40 000 - 16.
func BenchmarkPostgresSettleAndClaim(b *testing.B) {
	pol := fairrelay.ReferencePolicy()
	pol.Lease = 1 << 40
	q, _, _ := outboxStore(b, "frbenchsc_", pol)
	ctx := b.Context()
	const flows, per = 1000, 40
	body := []byte(`{"delta":1}`)
	for i := range per {
		var evs []fairrelay.NewEvent
		for f := range flows {
			evs = append(evs, fairrelay.NewEvent{ID: fmt.Sprintf("e%d-%d", f, i), Flow: fmt.Sprintf("f%d", f), Body: body})
		}
		if _, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: 0, Events: evs}); err != nil {
			b.Fatal(err)
		}
	}
	res, err := q.Claim(ctx, fairrelay.ClaimParams{At: 0, Limit: 16})
	if err != nil {
		b.Fatal(err)
	}
	cs := res.Claims
	b.ResetTimer()
	n := 0
	for n < b.N {
		var st []fairrelay.Settlement
		for _, c := range cs {
			st = append(st, fairrelay.Settlement{Token: c.Token, Outcome: fairrelay.OutcomeAccepted})
		}
		r, err := q.SettleMany(ctx, fairrelay.SettleManyParams{At: 0, Settles: st, ClaimLimit: 16})
		if err != nil {
			b.Fatal(err)
		}
		n += len(cs)
		cs = r.Claims
		if len(cs) == 0 {
			b.Fatal("drained")
		}
	}
}
