package fairrelay_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/fairrelay/fairrelay"
)

// Queue.Backlog counts the events not acked — ready, inflight and
// quarantined, acked ones not — alike on every backend, and Overview
// counts it only when asked (a console counts it in the background: on
// PostgreSQL it reads every flow).
func TestBacklogCountsTheEventsNotAcked(t *testing.T) {
	eachReferenceQueue(t, func(t *testing.T, q *fairrelay.Queue) {
		ctx := context.Background()
		body := []byte(`{"delta":1}`)
		var evs []fairrelay.NewEvent
		for i := range 6 {
			evs = append(evs, fairrelay.NewEvent{ID: fmt.Sprintf("%c%d", 'A'+i%3, i), Flow: string(rune('A' + i%3)), Body: body})
		}
		if _, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: 1, Events: evs}); err != nil {
			t.Fatal(err)
		}
		check := func(when string, want int64) {
			t.Helper()
			if n, err := q.Backlog(ctx); err != nil || n != want {
				t.Errorf("%s: Backlog = %d, %v; want %d", when, n, err, want)
			}
			o, err := q.Overview(ctx, fairrelay.OverviewParams{Backlog: true})
			if err != nil || !o.BacklogCounted || o.Backlog != want {
				t.Errorf("%s: Overview with the backlog = %+v, %v; want %d", when, o, err, want)
			}
			o, err = q.Overview(ctx, fairrelay.OverviewParams{})
			if err != nil || o.BacklogCounted || o.Backlog != 0 {
				t.Errorf("%s: Overview without the backlog = %+v, %v; want it left out", when, o, err)
			}
		}
		check("enqueued", 6)
		cr, err := q.Claim(ctx, fairrelay.ClaimParams{At: 2, Limit: 3})
		if err != nil || len(cr.Claims) != 3 {
			t.Fatalf("claim: %+v, %v", cr, err)
		}
		check("three inflight", 6)
		outcomes := []fairrelay.Outcome{fairrelay.OutcomeAccepted, fairrelay.OutcomeRejected, fairrelay.OutcomeRetry}
		for i, c := range cr.Claims {
			if _, err := q.Settle(ctx, fairrelay.SettleParams{At: 3, Token: c.Token, Outcome: outcomes[i]}); err != nil {
				t.Fatal(err)
			}
		}
		check("one acked, one quarantined, one backing off", 5)
	})
}
