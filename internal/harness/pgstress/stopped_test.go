package pgstress

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/harness/queuetest"
	"github.com/fairrelay/fairrelay/internal/pgtest"
)

// childSpin settles and claims one head at a time, as a relay's worker
// does, until it is killed: every head it claims is acked at once. A store
// error is ridden out (tried again), as the relay does.
func childSpin(ctx context.Context) error {
	q, err := fairrelay.Open(ctx, os.Getenv(queueEnv), fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		return err
	}
	defer q.Close()
	var ps []fairrelay.Settlement
	for {
		_, cs, err := queuetest.SettleClaims(q.SettleMany(ctx, fairrelay.SettleManyParams{At: 0, Settles: ps, ClaimLimit: 1}))
		if err != nil {
			ps = nil // a settle of a lost transaction may answer stale: a fresh start
			continue
		}
		ps = ps[:0]
		for _, c := range cs {
			ps = append(ps, fairrelay.Settlement{Token: c.Token, Outcome: fairrelay.OutcomeAccepted})
		}
	}
}

// A process of the store stopped in the middle of a transaction (SIGSTOP,
// a paused VM, a host gone without closing its connection) holds its
// writer lane's lock and the rows it wrote until the server ends its
// session: every other relay's claims and settles waited behind it, failing
// busy, for as long as it stayed stopped, and no lease could run out where
// nobody could claim (a fresh user's report: minutes, until SIGCONT). The
// store's connections carry idle_in_transaction_session_timeout
// (pgstore.IdleInTransactionTimeout, 10 s), so another process claims
// again after it, and the stopped one's session is ended.
func TestAStoppedProcessHoldsTheStoreOnlyUntilItsSessionTimesOut(t *testing.T) {
	ctx := context.Background()
	qdsn := pgtest.Schema(t, "pgstress_stop")
	q, err := fairrelay.Open(ctx, qdsn, fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	var evs []fairrelay.NewEvent
	for i := range 400 {
		evs = append(evs, fairrelay.NewEvent{ID: fmt.Sprintf("e%d", i), Flow: fmt.Sprintf("f%d", i%200), Body: []byte(`{"delta":1}`)})
	}
	if _, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: 0, Events: evs}); err != nil {
		t.Fatal(err)
	}
	app := fmt.Sprintf("pgstress-stopped-%d", os.Getpid())
	cmd := child(t, "spin", queueEnv+"="+qdsn+"&application_name="+app)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		cmd.Wait()
	})
	admin := pgtest.Connect(t, qdsn)
	// Stop the child until it is stopped where the server sees its session
	// idle inside a transaction that holds a writer lane's lock.
	deadline := time.Now().Add(2 * time.Minute)
	for tries := 1; ; tries++ {
		if time.Now().After(deadline) {
			t.Fatalf("after %d tries, never stopped inside a transaction holding a lane's lock", tries)
		}
		if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		// A statement the child had sent still runs: wait until the
		// server has answered every one (the child reads none of them).
		var running, held bool
		for running = true; running; {
			if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND state = 'active')`, app).Scan(&running); err != nil {
				t.Fatal(err)
			}
		}
		if err := admin.QueryRow(ctx, `SELECT EXISTS (
			SELECT 1 FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid
			WHERE a.application_name = $1 AND a.state = 'idle in transaction' AND l.locktype = 'advisory' AND l.granted)`, app).Scan(&held); err != nil {
			t.Fatal(err)
		}
		if held {
			t.Logf("stopped inside a transaction holding a lane's lock after %d tries", tries)
			break
		}
		if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	// Another process's claims: busy while the stopped one holds the lane,
	// then claimed, within a bound far beyond the timeout (before the
	// timeout, busy for as long as the child stayed stopped).
	start := time.Now()
	busy := 0
	for {
		r, err := q.Claim(ctx, fairrelay.ClaimParams{At: 0})
		if err == nil {
			if len(r.Claims) != 1 {
				t.Fatalf("claim answered %+v, want one head (200 flows, the stopped process holds at most one)", r)
			}
			break
		}
		if !errors.Is(err, fairrelay.ErrBusy) {
			t.Fatalf("claim beside the stopped process: %v, want busy until its session ends", err)
		}
		busy++
		if time.Since(start) > time.Minute {
			t.Fatalf("claims still busy after %s (%d busy answers): the stopped process holds the store", time.Since(start).Round(time.Millisecond), busy)
		}
	}
	t.Logf("claimed after %s and %d busy answers", time.Since(start).Round(time.Millisecond), busy)
	// The server ended the stopped process's session.
	for gone := false; !gone; {
		if err := admin.QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND state = 'idle in transaction')`, app).Scan(&gone); err != nil {
			t.Fatal(err)
		}
	}
}
