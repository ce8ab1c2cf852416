package fairrelay_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/harness/bench"
	"github.com/fairrelay/fairrelay/internal/harness/queuetest"
)

// The claim path's benchmarks (issue 4) at the flow counts of
// `fairrelay bench claim`, each over a backlog of benchBacklog() events
// spread over the flows. Setup runs only when a benchmark runs (go test
// -bench), never in plain go test. Run them with
//
//	go test -run '^$' -bench 'Claim|Settle' -benchtime 2000x .
//
// A fixed -benchtime keeps each store's backlog from running out.

var benchFlowCounts = []int{10, 1000, 100000}

// benchBacklog is the number of events loaded per store: 1000000, or
// FAIRRELAY_BENCH_BACKLOG when set (a smaller one loads faster).
func benchBacklog(b *testing.B) int {
	v := os.Getenv("FAIRRELAY_BENCH_BACKLOG")
	if v == "" {
		return 1000000
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("FAIRRELAY_BENCH_BACKLOG=%q: want a positive integer", v)
	}
	return n
}

// runSizes runs fn as one sub-benchmark per flow count, on a store loaded
// once for that sub-benchmark (lazily, so a -bench filter that skips a size
// loads nothing) and removed when it ends.
func runSizes(b *testing.B, fn func(b *testing.B, q *fairrelay.Queue, flows int)) {
	for _, flows := range benchFlowCounts {
		var q *fairrelay.Queue
		dir := ""
		b.Run(fmt.Sprintf("flows=%d", flows), func(b *testing.B) {
			if q == nil {
				backlog := benchBacklog(b)
				if flows > backlog {
					b.Skipf("%d flows need a backlog of at least %d events", flows, flows)
				}
				var err error
				if dir, err = os.MkdirTemp("", "fairrelay-bench-"); err != nil {
					b.Fatal(err)
				}
				q, err = fairrelay.Open(context.Background(), filepath.Join(dir, "queue.db"), fairrelay.Config{})
				if err != nil {
					b.Fatal(err)
				}
				if err := bench.Load(context.Background(), q, flows, 0, backlog, nil); err != nil {
					b.Fatal(err)
				}
				bench.FlushToDisk()
			}
			b.ResetTimer()
			fn(b, q, flows)
		})
		if q != nil {
			q.Close()
		}
		if dir != "" {
			os.RemoveAll(dir)
		}
	}
}

// benchClaim claims a head at tick 1 and fails the benchmark on idle: the
// backlog ran out.
func benchClaim(b *testing.B, q *fairrelay.Queue) *fairrelay.Claim {
	c, err := queuetest.ClaimOne(context.Background(), q, 1)
	if err != nil {
		b.Fatal(err)
	}
	if c == nil {
		b.Fatal("claim answered idle: the backlog ran out; use a smaller -benchtime or a larger FAIRRELAY_BENCH_BACKLOG")
	}
	return c
}

func settleAcked(b *testing.B, q *fairrelay.Queue, tok fairrelay.Token) {
	r, err := q.Settle(context.Background(), fairrelay.SettleParams{Token: tok, Outcome: fairrelay.OutcomeAccepted, At: 1})
	if err != nil {
		b.Fatal(err)
	}
	if r.Status != fairrelay.SettleAcked {
		b.Fatalf("settle %s answered %s, want acked", tok.EventID, r.Status)
	}
}

// accepted is the settle (outcome accepted) of each claim of cs.
func accepted(cs []fairrelay.Claim) []fairrelay.Settlement {
	ps := make([]fairrelay.Settlement, len(cs))
	for i, c := range cs {
		ps[i] = fairrelay.Settlement{Token: c.Token, Outcome: fairrelay.OutcomeAccepted}
	}
	return ps
}

// requireAcked fails the benchmark unless each settle of ps answered acked.
func requireAcked(b *testing.B, ps []fairrelay.Settlement, rs []fairrelay.SettleResult) {
	for i, r := range rs {
		if r.Status != fairrelay.SettleAcked {
			b.Fatalf("settle %s answered %s, want acked", ps[i].Token.EventID, r.Status)
		}
	}
}

// BenchmarkClaim times one Claim transaction per op; the settle that frees
// the flow again runs with the timer stopped.
func BenchmarkClaim(b *testing.B) {
	runSizes(b, func(b *testing.B, q *fairrelay.Queue, _ int) {
		for b.Loop() {
			c := benchClaim(b, q)
			b.StopTimer()
			settleAcked(b, q, c.Token)
			b.StartTimer()
		}
	})
}

// BenchmarkSettle times one Settle transaction (outcome accepted) per op; the
// claim that hands out its token runs with the timer stopped.
func BenchmarkSettle(b *testing.B) {
	runSizes(b, func(b *testing.B, q *fairrelay.Queue, _ int) {
		for b.Loop() {
			b.StopTimer()
			c := benchClaim(b, q)
			b.StartTimer()
			settleAcked(b, q, c.Token)
		}
	})
}

// BenchmarkClaimBatch times one Claim with Limit 64 plus one SettleMany of
// what it claimed per op, and reports events per second (a batch takes at most one
// head per flow, so 10 flows give 10 events per op).
func BenchmarkClaimBatch(b *testing.B) {
	const k = 64
	runSizes(b, func(b *testing.B, q *fairrelay.Queue, _ int) {
		ctx := context.Background()
		events := 0
		for b.Loop() {
			cs, err := queuetest.Claims(q.Claim(ctx, fairrelay.ClaimParams{At: 1, Limit: k}))
			if err != nil {
				b.Fatal(err)
			}
			if len(cs) == 0 {
				b.Fatal("claim batch answered idle: the backlog ran out")
			}
			ps := accepted(cs)
			rs, err := queuetest.Settles(q.SettleMany(ctx, fairrelay.SettleManyParams{At: 1, Settles: ps}))
			if err != nil {
				b.Fatal(err)
			}
			requireAcked(b, ps, rs)
			events += len(cs)
		}
		b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	})
}

// BenchmarkSettleAndClaim times the worker's loop step with one commit: one
// SettleMany transaction (with a ClaimLimit) that settles the event the previous step
// claimed and claims the next.
func BenchmarkSettleAndClaim(b *testing.B) {
	runSizes(b, func(b *testing.B, q *fairrelay.Queue, _ int) {
		ctx := context.Background()
		var held []fairrelay.Settlement
		for b.Loop() {
			rs, cs, err := queuetest.SettleClaims(q.SettleMany(ctx, fairrelay.SettleManyParams{At: 1, Settles: held, ClaimLimit: 1}))
			if err != nil {
				b.Fatal(err)
			}
			requireAcked(b, held, rs)
			if len(cs) == 0 {
				b.Fatal("claim answered idle: the backlog ran out")
			}
			held = accepted(cs[:1])
		}
	})
}

// BenchmarkPrune times the prune of b.N acked events (SPEC §8 retention) on
// a real SQLite file, in transactions of 1000 events as the relay and
// `fairrelay prune` run it, so ns/op is the cost per event pruned. Before
// the timer starts, b.N events are loaded over 1000 flows, claimed and
// settled (accepted) at tick 1. keep keeps a tombstone per event (the
// relay's default: an id stays idempotent after its body goes); none
// deletes the ids with the bodies. Run it with a fixed count, e.g.
//
//	go test -run '^$' -bench Prune -benchtime 20000x .
func BenchmarkPrune(b *testing.B) {
	for _, tc := range []struct {
		name      string
		idsBefore int64
	}{{"tombstones=keep", 0}, {"tombstones=none", 2}} {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			q, err := fairrelay.Open(ctx, filepath.Join(b.TempDir(), "queue.db"), fairrelay.Config{})
			if err != nil {
				b.Fatal(err)
			}
			defer q.Close()
			if err := bench.Load(ctx, q, min(1000, b.N), 0, b.N, nil); err != nil {
				b.Fatal(err)
			}
			// Ack everything: settle what the previous step claimed and
			// claim up to 64 more, one transaction each, until idle.
			var held []fairrelay.Settlement
			for acked := 0; acked < b.N; {
				rs, cs, err := queuetest.SettleClaims(q.SettleMany(ctx, fairrelay.SettleManyParams{At: 1, Settles: held, ClaimLimit: 64}))
				if err != nil {
					b.Fatal(err)
				}
				requireAcked(b, held, rs)
				acked += len(rs)
				held = accepted(cs)
				if len(held) == 0 && acked < b.N {
					b.Fatalf("claim answered idle with %d of %d events acked", acked, b.N)
				}
			}
			bench.FlushToDisk()
			b.ResetTimer()
			var pruned int64
			for more := true; more; {
				r, err := q.Prune(ctx, fairrelay.PruneParams{At: 2, AckedBefore: 2, IDsBefore: tc.idsBefore, Limit: 1000})
				if err != nil {
					b.Fatal(err)
				}
				pruned += r.Events
				more = r.More
			}
			b.StopTimer()
			if pruned != int64(b.N) {
				b.Fatalf("pruned %d events, want %d", pruned, b.N)
			}
		})
	}
}
