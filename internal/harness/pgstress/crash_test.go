package pgstress

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/faultpoint"
	"github.com/fairrelay/fairrelay/internal/pgtest"
)

// view is what the stores show about A1, the one event of a crash row.
type view struct {
	State      fairrelay.State
	Ticket     int64
	Generation int64
	Receipts   int
	Total      int64
}

func look(t *testing.T, q *fairrelay.Queue, in *inbox.Inbox) view {
	t.Helper()
	ctx := context.Background()
	s, err := q.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	is, err := in.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v := view{State: s.Events[0].State, Ticket: s.Clock.Ticket, Generation: s.Events[0].Generation, Receipts: len(is.Receipts)}
	for _, p := range is.Projection {
		v.Total += p.Total
	}
	return v
}

// TestCrashMatrix is SPEC §5 item 8 on PostgreSQL: a child process claims A1
// at tick 0, delivers and settles, and exits with code 73 at one fault point;
// the stores show what the SPEC's table says, and recovery at tick 5 ends
// with one receipt, one effect and A1 acked.
func TestCrashMatrix(t *testing.T) {
	t.Parallel()
	claimed := view{State: fairrelay.StateInflight, Ticket: 1, Generation: 1}
	received := claimed
	received.Receipts, received.Total = 1, 1
	acked := received
	acked.State = fairrelay.StateAcked
	rows := []struct {
		point  string
		before view
		// recovery: what the delivery at tick 5 claims and receives.
		claim    string
		gen      int64
		received fairrelay.Outcome
	}{
		{faultpoint.BeforeClaimCommit, view{State: fairrelay.StateReady}, "A1", 1, fairrelay.OutcomeAccepted},
		{faultpoint.AfterClaimCommit, claimed, "A1", 2, fairrelay.OutcomeAccepted},
		{faultpoint.BeforeReceiptCommit, claimed, "A1", 2, fairrelay.OutcomeAccepted},
		{faultpoint.AfterReceiptCommit, received, "A1", 2, fairrelay.OutcomeDuplicate},
		{faultpoint.BeforeSettleCommit, received, "A1", 2, fairrelay.OutcomeDuplicate},
		{faultpoint.AfterSettleCommit, acked, "", 0, ""},
	}
	for _, row := range rows {
		t.Run(row.point, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			q, in, qdsn, idsn := fresh(t, "frx")
			if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "A1", Flow: "A", Body: []byte(`{"delta":1}`)}); err != nil {
				t.Fatal(err)
			}
			cmd := child(t, "deliver", queueEnv+"="+qdsn, inboxEnv+"="+idsn, faultpoint.EnvVar+"="+row.point)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != faultpoint.ExitCode {
				t.Fatalf("child: %v, want exit %d; %s", err, faultpoint.ExitCode, stderr.String())
			}
			if got := look(t, q, in); got != row.before {
				t.Fatalf("before recovery: %+v, want %+v", got, row.before)
			}
			// The child died inside a transaction at some points; the
			// server ends it once it sees the socket closed, and until then
			// the claim skips A's locked row (idle). Recovery starts after.
			pgtest.WaitForWriters(t, qdsn)
			pgtest.WaitForWriters(t, idsn)
			d, err := deliver(ctx, q, in, 5)
			if err != nil {
				t.Fatal(err)
			}
			want := delivery{Claim: row.claim, Generation: row.gen, Received: row.received}
			if row.claim != "" {
				want.Settled = fairrelay.SettleAcked
			}
			if d != want {
				t.Fatalf("recovery at tick 5: %+v, want %+v", d, want)
			}
			after := look(t, q, in)
			if after.State != fairrelay.StateAcked || after.Receipts != 1 || after.Total != 1 {
				t.Fatalf("after recovery: %+v, want acked with one receipt and one effect", after)
			}
		})
	}
}
