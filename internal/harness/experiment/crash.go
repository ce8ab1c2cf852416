package experiment

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/faultpoint"
)

// crashView is what the files show about the single event A1 of a crash row.
type crashView struct {
	State      fairrelay.State `json:"state"`
	Ticket     int64           `json:"ticket"`
	Generation int64           `json:"generation"`
	Attempts   int64           `json:"attempts"`
	Receipts   int             `json:"receipts"`
	// ProjectionSeq and ProjectionTotal are flow A's ledger: the effect.
	ProjectionSeq   int64 `json:"projection_seq"`
	ProjectionTotal int64 `json:"projection_total"`
}

// crashFacts is one row of the crash matrix (SPEC §5 item 8).
type crashFacts struct {
	Point    string    `json:"point"`
	ExitCode int       `json:"exit_code"`
	Before   crashView `json:"before_recovery"`
	// RecoveryAt is the tick of the recovery delivery.
	RecoveryAt int64     `json:"recovery_at"`
	Recovery   delivery  `json:"recovery"`
	After      crashView `json:"after_recovery"`
}

// crashRow is one exit point with what SPEC §5 item 8 says is visible before
// recovery and what recovery does.
type crashRow struct {
	point  string
	claim  string
	before crashView
	// recovery is the expected recovery delivery at tick 5.
	recovery delivery
}

// crashDelta is A1's delta: one effect is a projection total of crashDelta.
const crashDelta = 1

// crashRecoveryAt is the tick recovery runs at: the lease of the claim at
// tick 0 has run out.
const crashRecoveryAt = 5

// crashRows is the table of SPEC §5 item 8, one row per fault point, in the
// order a delivery passes them.
func crashRows() []crashRow {
	claimedOnce := crashView{State: fairrelay.StateInflight, Ticket: 1, Generation: 1, Attempts: 1}
	received := claimedOnce
	received.Receipts, received.ProjectionSeq, received.ProjectionTotal = 1, 1, crashDelta
	settled := received
	settled.State = fairrelay.StateAcked
	reclaim := func(out fairrelay.Outcome) delivery {
		return delivery{Claim: "A1", Generation: 2, Ticket: 2, Received: out, Settled: fairrelay.SettleAcked}
	}
	return []crashRow{
		{point: faultpoint.BeforeClaimCommit, claim: "ticket, attempts, state unchanged; recovery: an ordinary claim",
			before:   crashView{State: fairrelay.StateReady},
			recovery: delivery{Claim: "A1", Generation: 1, Ticket: 1, Received: fairrelay.OutcomeAccepted, Settled: fairrelay.SettleAcked}},
		{point: faultpoint.AfterClaimCommit, claim: "inflight, ticket and one attempt used; recovery: re-claim after the lease",
			before: claimedOnce, recovery: reclaim(fairrelay.OutcomeAccepted)},
		{point: faultpoint.BeforeReceiptCommit, claim: "claim committed, inbox empty; recovery: re-claim, re-deliver → accepted",
			before: claimedOnce, recovery: reclaim(fairrelay.OutcomeAccepted)},
		{point: faultpoint.AfterReceiptCommit, claim: "effect present, queue not settled; recovery: re-claim, re-deliver → duplicate",
			before: received, recovery: reclaim(fairrelay.OutcomeDuplicate)},
		{point: faultpoint.BeforeSettleCommit, claim: "effect present, settle rolled back; recovery: re-claim, re-deliver → duplicate",
			before: received, recovery: reclaim(fairrelay.OutcomeDuplicate)},
		{point: faultpoint.AfterSettleCommit, claim: "acked; recovery answers idle",
			before: settled, recovery: delivery{Claim: idle}},
	}
}

// run is one crash row: a real child process claims, delivers and settles
// A1 at tick 0 with the row's fault point armed and must exit 73 there. The
// parent then opens the files, records what is visible, and recovers at
// tick 5 with an ordinary delivery. Every row must end with one receipt, one
// effect and A1 acked.
func (row crashRow) run(ctx context.Context, s *session) (any, error) {
	if err := s.seed(ctx, ledgerEvent{"A1", "A", crashDelta}); err != nil {
		return nil, err
	}
	cmd, err := s.command(ctx, row.point, modeDeliver, "--queue", s.queuePath(), "--inbox", s.inboxPath(), "--at", "0")
	if err != nil {
		return nil, err
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	f := crashFacts{Point: row.point, RecoveryAt: crashRecoveryAt}
	if f.ExitCode, err = exitCode(cmd.Run()); err != nil {
		return nil, fmt.Errorf("worker did not exit: %w: %s", err, stderr.String())
	}
	s.expect(f.ExitCode == faultpoint.ExitCode, "worker exited %d (stdout %q, stderr %q), want %d at %s",
		f.ExitCode, stdout.String(), stderr.String(), faultpoint.ExitCode, row.point)
	q, in, err := s.open(ctx)
	if err != nil {
		return nil, err
	}
	if f.Before, err = view(ctx, q, in); err != nil {
		return nil, err
	}
	if f.Recovery, err = deliver(ctx, q, in, crashRecoveryAt); err != nil {
		return nil, err
	}
	if f.After, err = view(ctx, q, in); err != nil {
		return nil, err
	}
	s.expect(f.Before == row.before, "before recovery %+v, want %+v", f.Before, row.before)
	s.expect(f.Recovery == row.recovery, "recovery %+v, want %+v", f.Recovery, row.recovery)
	s.expect(f.After.State == fairrelay.StateAcked && f.After.Receipts == 1 && f.After.ProjectionSeq == 1 && f.After.ProjectionTotal == crashDelta,
		"after recovery %+v, want acked with one receipt and one effect (seq 1, total %d)", f.After, crashDelta)
	return f, nil
}

// view reads A1, the clock and the inbox into a crashView.
func view(ctx context.Context, q *fairrelay.Queue, in *inbox.Inbox) (crashView, error) {
	st, err := snapshot(ctx, q, in)
	if err != nil {
		return crashView{}, err
	}
	a1, p := st.event("A1"), st.projection("A")
	return crashView{State: a1.State, Ticket: st.Clock.Ticket, Generation: a1.Generation, Attempts: a1.Attempts,
		Receipts: len(st.Receipts), ProjectionSeq: p.Seq, ProjectionTotal: p.Total}, nil
}

// exitCode returns a worker's exit status; err is set when it did not exit
// by itself (killed by the timeout, not started).
func exitCode(err error) (int, error) {
	if err == nil {
		return 0, nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.Exited() {
		return ee.ExitCode(), nil
	}
	return -1, err
}
