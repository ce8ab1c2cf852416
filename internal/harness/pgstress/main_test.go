package pgstress

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/harness/queuetest"
	"github.com/fairrelay/fairrelay/internal/pgtest"
)

// The test binary is its own child process: with childEnv set, TestMain runs
// one child mode instead of the tests.
const (
	childEnv   = "FAIRRELAY_PGSTRESS_CHILD" // drain | race | deliver | spin
	queueEnv   = "FAIRRELAY_PGSTRESS_QUEUE"
	inboxEnv   = "FAIRRELAY_PGSTRESS_INBOX"
	workersEnv = "FAIRRELAY_PGSTRESS_WORKERS"
	totalEnv   = "FAIRRELAY_PGSTRESS_TOTAL"
)

func TestMain(m *testing.M) {
	mode := os.Getenv(childEnv)
	if mode == "" {
		os.Exit(m.Run())
	}
	ctx := context.Background()
	var err error
	switch mode {
	case "drain":
		err = childDrain(ctx)
	case "race":
		err = childRace(ctx)
	case "deliver":
		err = childDeliver(ctx)
	case "spin":
		err = childSpin(ctx)
	default:
		err = fmt.Errorf("unknown child mode %q", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgstress child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// child starts this test binary in mode with the given environment.
func child(t *testing.T, mode string, env ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	// One P per child: eight children on a small machine then compete as
	// eight threads, not sixteen, and a child holding the clock lock gets
	// the CPU back sooner.
	cmd.Env = append(os.Environ(), append([]string{childEnv + "=" + mode, "GOMAXPROCS=1"}, env...)...)
	return cmd
}

// fresh opens a queue store and an inbox on two fresh schemas (dropped when
// the test ends; both closed before) and returns them with their URLs, for
// the children to open too.
func fresh(t *testing.T, prefix string) (q *fairrelay.Queue, in *inbox.Inbox, qdsn, idsn string) {
	t.Helper()
	ctx := context.Background()
	qdsn, idsn = pgtest.Schema(t, prefix+"_q"), pgtest.Schema(t, prefix+"_i")
	q, err := fairrelay.Open(ctx, qdsn, fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	in, err = inbox.Open(ctx, idsn, inbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	return q, in, qdsn, idsn
}

func openBoth(ctx context.Context) (*fairrelay.Queue, *inbox.Inbox, error) {
	q, err := fairrelay.Open(ctx, os.Getenv(queueEnv), fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		return nil, nil, err
	}
	in, err := inbox.Open(ctx, os.Getenv(inboxEnv), inbox.Options{})
	if err != nil {
		q.Close()
		return nil, nil, err
	}
	return q, in, nil
}

// record is one delivery as a drain child saw it: the claim, what the inbox
// answered, how the settle ended, and Before, the ticket counter when the
// settle committed (the head behind it became eligible then): exact when
// the same transaction went on to claim, an upper bound otherwise.
type record struct {
	ID         string                 `json:"id"`
	Flow       string                 `json:"flow"`
	Seq        int64                  `json:"seq"`
	Generation int64                  `json:"generation"`
	Attempts   int64                  `json:"attempts"`
	Ticket     int64                  `json:"ticket"`
	Received   fairrelay.Outcome      `json:"received"`
	Settled    fairrelay.SettleStatus `json:"settled"`
	Before     int64                  `json:"before"`
	Busy       int                    `json:"busy,omitempty"`
}

// childDrain runs FAIRRELAY_PGSTRESS_WORKERS goroutines (one pool
// connection each) that claim, deliver and settle at tick 0 until the
// ticket counter shows that every one of FAIRRELAY_PGSTRESS_TOTAL events was
// claimed and their own deliveries are settled, and prints one record per
// delivery. Tick 0 throughout: no lease
// runs out, so any second lease on a flow would be a real violation.
func childDrain(ctx context.Context) error {
	workers, err := strconv.Atoi(os.Getenv(workersEnv))
	if err != nil {
		return err
	}
	total, err := strconv.ParseInt(os.Getenv(totalEnv), 10, 64)
	if err != nil {
		return err
	}
	q, in, err := openBoth(ctx)
	if err != nil {
		return err
	}
	defer q.Close()
	defer in.Close()
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	var mu sync.Mutex
	emit := func(r record) {
		b, _ := json.Marshal(r)
		mu.Lock()
		out.Write(b)
		out.WriteByte('\n')
		mu.Unlock()
	}
	errc := make(chan error, workers)
	// A guard against a hang, not a measure: a loaded machine (CI runs
	// the chaos test beside it) has taken more than five minutes.
	deadline := time.Now().Add(10 * time.Minute)
	for w := range workers {
		go func() { errc <- drainWorker(ctx, q, in, w, total, deadline, emit) }()
	}
	var errs []error
	for range workers {
		errs = append(errs, <-errc)
	}
	return errors.Join(errs...)
}

// retryBusy calls fn until it returns something else than ErrBusy (SPEC §7:
// busy is an error the caller may retry, with no partial effect), and
// returns how many busy answers it saw.
func retryBusy(fn func() error) (int, error) {
	for busy := 0; ; busy++ {
		err := fn()
		if !errors.Is(err, fairrelay.ErrBusy) || busy >= 100 {
			return busy, err
		}
	}
}

func drainWorker(ctx context.Context, q *fairrelay.Queue, in *inbox.Inbox, w int, total int64, deadline time.Time, emit func(record)) error {
	// Workers claim 1 to 3 heads at a time, so claims of several sizes
	// compete. Each loop step settles the worker's last deliveries and
	// claims the next heads in one transaction (SettleAndClaim), as the
	// relay's workers do.
	k := 1 + w%3
	var recs []record
	var ps []fairrelay.Settlement
	idle := time.Millisecond
	for {
		if time.Now().After(deadline) {
			return errors.New("deadline passed before every event was claimed")
		}
		var rs []fairrelay.SettleResult
		var cs []fairrelay.Claim
		busy, err := retryBusy(func() (err error) {
			rs, cs, err = queuetest.SettleClaims(q.SettleMany(ctx, fairrelay.SettleManyParams{At: 0, Settles: ps, ClaimLimit: k}))
			return err
		})
		if err != nil {
			return fmt.Errorf("settle and claim: %w", err)
		}
		if len(rs) > 0 {
			// The settles ran first in the transaction: the heads behind
			// them became eligible at the ticket before its first claim.
			// Without a claim, read the ticket now (an upper bound).
			before := int64(-1)
			if len(cs) > 0 {
				before = cs[0].Ticket - 1
			} else {
				c, err := q.Clock(ctx)
				if err != nil {
					return err
				}
				before = c.Ticket
			}
			for i := range recs {
				recs[i].Settled, recs[i].Before = rs[i].Status, before
				emit(recs[i])
			}
		}
		recs, ps = recs[:0], ps[:0]
		if len(cs) == 0 {
			c, err := q.Clock(ctx)
			if err != nil {
				return err
			}
			if c.Ticket >= total {
				return nil
			}
			// Every runnable head is leased by another worker: poll the
			// real state again soon (processes have nothing to signal on).
			time.Sleep(idle)
			idle = min(2*idle, 20*time.Millisecond)
			continue
		}
		idle = time.Millisecond
		for _, c := range cs {
			o, err := in.Receive(ctx, inbox.Delivery{EventID: c.Token.EventID, Flow: c.Flow, Seq: c.Seq, Body: c.Body})
			if err != nil {
				return fmt.Errorf("receive %s: %w", c.Token.EventID, err)
			}
			recs = append(recs, record{ID: c.Token.EventID, Flow: c.Flow, Seq: c.Seq, Generation: c.Token.Generation,
				Attempts: c.Attempts, Ticket: c.Ticket, Received: o, Busy: busy})
			ps = append(ps, fairrelay.Settlement{Token: c.Token, Outcome: o})
		}
	}
}

// childRace opens the stores, prints "ready", waits for a line on stdin (the
// common starting line), claims once at tick 0 and prints the claimed id,
// "idle", or the error code.
func childRace(ctx context.Context) error {
	q, in, err := openBoth(ctx)
	if err != nil {
		return err
	}
	defer q.Close()
	defer in.Close()
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return err
	}
	c, err := queuetest.ClaimOne(ctx, q, 0)
	switch {
	case err != nil:
		fmt.Println("error:" + string(fairrelay.CodeOf(err)))
	case c == nil:
		fmt.Println("idle")
	default:
		fmt.Println(c.Token.EventID)
	}
	return nil
}

// childDeliver claims at tick 0, delivers to the inbox and settles with its
// answer: the path a crash point interrupts when FAIRRELAY_FAULT is set.
func childDeliver(ctx context.Context) error {
	q, in, err := openBoth(ctx)
	if err != nil {
		return err
	}
	defer q.Close()
	defer in.Close()
	_, err = deliver(ctx, q, in, 0)
	return err
}

// delivery is one claim → receive → settle.
type delivery struct {
	Claim      string
	Generation int64
	Received   fairrelay.Outcome
	Settled    fairrelay.SettleStatus
}

func deliver(ctx context.Context, q *fairrelay.Queue, in *inbox.Inbox, at int64) (delivery, error) {
	c, err := queuetest.ClaimOne(ctx, q, at)
	if err != nil || c == nil {
		return delivery{}, err
	}
	d := delivery{Claim: c.Token.EventID, Generation: c.Token.Generation}
	if d.Received, err = in.Receive(ctx, inbox.Delivery{EventID: c.Token.EventID, Flow: c.Flow, Seq: c.Seq, Body: c.Body}); err != nil {
		return d, err
	}
	r, err := q.Settle(ctx, fairrelay.SettleParams{Token: c.Token, Outcome: d.Received, At: at})
	d.Settled = r.Status
	return d, err
}
