package fairrelay_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/fairrelay/fairrelay"
)

// A flow's poison head is quarantined at once while other flows go on; a
// redrive with a reason puts it back.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "fairrelay-example-")
	defer os.RemoveAll(dir)

	q, err := fairrelay.Open(ctx, filepath.Join(dir, "queue.db"), fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	for _, e := range []struct{ id, flow string }{{"A1", "A"}, {"A2", "A"}, {"B1", "B"}} {
		if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: e.id, Flow: e.flow, Body: []byte(`{"delta":1}`), At: 0}); err != nil {
			log.Fatal(err)
		}
	}
	// A receiver that rejects A1 for good and accepts everything else.
	answer := func(c *fairrelay.Claim) fairrelay.Outcome {
		if c.Token.EventID == "A1" && c.Token.Generation == 1 {
			return fairrelay.OutcomeIDConflict
		}
		return fairrelay.OutcomeAccepted
	}
	run := func(at int64) {
		for {
			res, err := q.Claim(ctx, fairrelay.ClaimParams{At: at})
			if err != nil {
				log.Fatal(err)
			}
			c := res.First() // nil: idle
			if c == nil {
				fmt.Println("idle")
				return
			}
			r, err := q.Settle(ctx, fairrelay.SettleParams{Token: c.Token, Outcome: answer(c), At: at})
			if err != nil {
				log.Fatal(err)
			}
			fmt.Printf("tick %d: %s (generation %d) -> %s\n", at, c.Token.EventID, c.Token.Generation, r.Status)
		}
	}
	run(0)
	r, err := q.Redrive(ctx, fairrelay.RedriveParams{EventID: "A1", ExpectedGeneration: 1, Reason: "receiver fixed", Operator: "ops", At: 1})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("redrive:", r.Status, "generation", r.Generation)
	run(1)
	// Output:
	// tick 0: A1 (generation 1) -> quarantined
	// tick 0: B1 (generation 1) -> acked
	// idle
	// redrive: ready generation 2
	// tick 1: A1 (generation 3) -> acked
	// tick 1: A2 (generation 1) -> acked
	// idle
}
