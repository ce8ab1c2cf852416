package bench

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
)

func TestLoadSpreadsTheBacklogOverTheFlows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, err := fairrelay.Open(ctx, filepath.Join(t.TempDir(), "q.db"), fairrelay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	var calls []int
	if err := Load(ctx, q, 3, 0, 11, func(done, total int) {
		if total != 11 {
			t.Errorf("progress total %d, want 11", total)
		}
		calls = append(calls, done)
	}); err != nil {
		t.Fatal(err)
	}
	if len(calls) == 0 || calls[len(calls)-1] != 11 {
		t.Errorf("progress calls %v, want a last call with 11 done", calls)
	}
	s, err := q.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// 11 over 3 flows: 4, 4, 3, each flow's events in seq order.
	want := map[string]int64{FlowID(0): 4, FlowID(1): 4, FlowID(2): 3}
	if len(s.Flows) != 3 {
		t.Fatalf("flows %+v, want 3", s.Flows)
	}
	for _, f := range s.Flows {
		if f.Seq != want[f.Flow] {
			t.Errorf("flow %s has %d events, want %d", f.Flow, f.Seq, want[f.Flow])
		}
	}
	if len(s.Events) != 11 || s.Events[0].ID != EventID(0, 1) || s.Events[0].State != fairrelay.StateReady {
		t.Errorf("events %+v: want 11, the first %s ready", s.Events, EventID(0, 1))
	}
	// A second load into the same store is refused: every id exists.
	if err := Load(ctx, q, 3, 0, 11, nil); err == nil {
		t.Error("loading twice succeeded, want an error naming the existing event")
	}
}

// loadedQueue opens a fresh store in t's temporary directory and loads it.
func loadedQueue(t *testing.T, flows, backlog int) *fairrelay.Queue {
	t.Helper()
	q, err := fairrelay.Open(context.Background(), filepath.Join(t.TempDir(), "q.db"), fairrelay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	if err := Load(context.Background(), q, flows, 0, backlog, nil); err != nil {
		t.Fatal(err)
	}
	return q
}

func TestMeasureSettlesEverythingItClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := loadedQueue(t, 4, 4000)
	n, elapsed, err := Measure(ctx, q, 1, 3, 30*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if n < 1 || elapsed < 30*time.Millisecond {
		t.Fatalf("measured %d events in %v, want at least one event over at least 30ms", n, elapsed)
	}
	s, err := q.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	acked, inflight := 0, 0
	for _, e := range s.Events {
		switch e.State {
		case fairrelay.StateAcked:
			acked++
		case fairrelay.StateInflight:
			inflight++
		}
	}
	// The timed events plus the last step's claims, settled untimed.
	if inflight != 0 || acked < n || acked > n+3 {
		t.Errorf("after Measure: %d acked, %d inflight; want no inflight and %d..%d acked", acked, inflight, n, n+3)
	}
}

func TestMeasureReportsAnEmptyBacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := loadedQueue(t, 2, 2)
	if _, _, err := Measure(ctx, q, 1, 1, time.Minute); err == nil {
		t.Fatal("Measure over a 2-event backlog for a minute succeeded, want the idle error")
	}
}

func TestRunClaimReportShape(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var loads int
	rep, err := RunClaim(context.Background(), ClaimOptions{
		Dir: dir, Flows: []int{2, 5}, Backlog: 3000, Batches: []int{1, 4}, Duration: 40 * time.Millisecond, Rounds: 2,
		OnLoad: func(flows, done, total int) { loads++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.RawCommitPerS <= 0 {
		t.Errorf("raw_commit_per_s %v, want > 0", rep.RawCommitPerS)
	}
	if len(rep.Results) != 4 || loads < 2 {
		t.Fatalf("%d results, %d load calls: want 4 results and a load per flow count", len(rep.Results), loads)
	}
	for i, r := range rep.Results {
		wantFlows, wantBatch := []int{2, 2, 5, 5}[i], []int{1, 4, 1, 4}[i]
		if r.Flows != wantFlows || r.Batch != wantBatch {
			t.Errorf("result %d: flows %d batch %d, want %d and %d", i, r.Flows, r.Batch, wantFlows, wantBatch)
		}
		if r.ClaimSettlePerS <= 0 || math.Abs(r.RatioToRaw-r.ClaimSettlePerS/rep.RawCommitPerS) > 1e-9 || r.PeakRSSMB <= 0 {
			t.Errorf("result %d: %+v: want a positive rate, ratio = rate / raw, a positive peak RSS", i, r)
		}
	}
	// The first batch size sees the whole backlog, the next what is left.
	if rep.Results[0].Backlog != 3000 || rep.Results[1].Backlog >= 3000 {
		t.Errorf("backlogs %d then %d, want 3000 then less", rep.Results[0].Backlog, rep.Results[1].Backlog)
	}
	left, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("the benchmark left %d files in its directory, want none", len(left))
	}
}

func TestRunClaimRejectsBadOptions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, o := range map[string]ClaimOptions{
		"no dir":            {Flows: []int{1}, Backlog: 1},
		"zero flows":        {Dir: dir, Flows: []int{0}, Backlog: 10},
		"more flows":        {Dir: dir, Flows: []int{20}, Backlog: 10},
		"zero batch":        {Dir: dir, Flows: []int{1}, Backlog: 10, Batches: []int{0}},
		"negative duration": {Dir: dir, Flows: []int{1}, Backlog: 10, Duration: -time.Second},
		"negative rounds":   {Dir: dir, Flows: []int{1}, Backlog: 10, Rounds: -1},
	} {
		if _, err := RunClaim(context.Background(), o); err == nil {
			t.Errorf("%s: RunClaim succeeded, want an error", name)
		}
	}
}

func TestPeakRSSIsReadFromProc(t *testing.T) {
	t.Parallel()
	mb, err := PeakRSSMB()
	if err != nil {
		t.Fatal(err)
	}
	if mb <= 0 {
		t.Errorf("peak RSS %v MiB, want > 0", mb)
	}
}
