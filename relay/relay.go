// Package relay is the dispatch loop of fairrelay: the long-lived daemon that
// claims heads from a queue store, delivers them through a sink.Sink without
// holding any transaction, and settles the answers, with N concurrent
// workers. Time is the daemon clock of SPEC §7 (1 tick = 1 ms, see Clock).
//
// Shutdown (Run's ctx done) stops claiming at once, lets in-flight
// deliveries finish up to Config.ShutdownTimeout, settles them while their
// leases hold, and returns nil. A settle is never sent after its lease ran
// out: the event is left to the lease, and whoever claims it next
// re-delivers it (the receiver answers duplicate if it already applied it).
package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/sink"
)

// Config configures a Relay.
type Config struct {
	// Queue is the queue store to dispatch. Required. Its policy's Lease is
	// read in ticks = milliseconds.
	Queue *fairrelay.Queue
	// Sink delivers events to the receiver. Required.
	Sink sink.Sink
	// Workers is how many deliveries run at once (each on a distinct flow:
	// a flow has at most one inflight event). Defaults to 4; at most 1024.
	Workers int
	// DeliveryTimeout bounds one delivery. Defaults to 10s.
	DeliveryTimeout time.Duration
	// LeaseMargin is the time kept between the end of the longest delivery
	// and the end of its lease, for the settle to commit. The policy's lease
	// must exceed DeliveryTimeout + LeaseMargin. Defaults to 1s.
	LeaseMargin time.Duration
	// ShutdownTimeout is how long Run waits for in-flight deliveries after
	// its ctx is done before cutting them off. Defaults to DeliveryTimeout.
	ShutdownTimeout time.Duration
	// PollInterval is an idle worker's first wait before claiming again; the
	// wait doubles up to MaxPollInterval while the queue stays idle, and a
	// Wake (or Do) ends it early. Defaults to 10ms.
	PollInterval time.Duration
	// MaxPollInterval caps the idle wait. Defaults to 1s.
	MaxPollInterval time.Duration
	// Source is the monotonic time source of the daemon clock. Defaults to
	// SystemMonotonic().
	Source Monotonic
	// Logger receives the relay's logs. Defaults to discarding.
	Logger *slog.Logger
	// Metrics, when set, counts claims, settles and delivery latency (see
	// NewMetrics).
	Metrics *Metrics
	// OnSettle, when set, is called after every settle (and every settle
	// skipped because the lease ran out), from the worker that made it. It
	// must not block for long.
	OnSettle func(Settled)
}

// MaxWorkers is the largest Config.Workers accepted.
const MaxWorkers = 1024

func (c Config) withDefaults() Config {
	if c.Workers == 0 {
		c.Workers = 4
	}
	if c.DeliveryTimeout == 0 {
		c.DeliveryTimeout = 10 * time.Second
	}
	if c.LeaseMargin == 0 {
		c.LeaseMargin = time.Second
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = c.DeliveryTimeout
	}
	if c.PollInterval == 0 {
		c.PollInterval = 10 * time.Millisecond
	}
	if c.MaxPollInterval == 0 {
		c.MaxPollInterval = time.Second
	}
	if c.Source == nil {
		c.Source = SystemMonotonic()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func invalid(field, format string, args ...any) error {
	return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: field, Message: fmt.Sprintf(format, args...)}
}

// Validate reports the first field out of range as ErrInvalidInput naming
// it: "queue", "sink", "workers", "timeout", "lease_margin",
// "shutdown_timeout", "poll_interval", or "lease" when the policy's lease
// (ms) does not exceed DeliveryTimeout + LeaseMargin.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Queue == nil:
		return invalid("queue", "missing")
	case c.Sink == nil:
		return invalid("sink", "missing")
	case c.Workers < 1 || c.Workers > MaxWorkers:
		return invalid("workers", "must be 1 to %d, got %d", MaxWorkers, c.Workers)
	case c.DeliveryTimeout < time.Millisecond:
		return invalid("timeout", "must be at least 1ms, got %s", c.DeliveryTimeout)
	case c.LeaseMargin < 0:
		return invalid("lease_margin", "must not be negative, got %s", c.LeaseMargin)
	case c.ShutdownTimeout < 0:
		return invalid("shutdown_timeout", "must not be negative, got %s", c.ShutdownTimeout)
	case c.PollInterval < 0 || c.MaxPollInterval < c.PollInterval:
		return invalid("poll_interval", "need 0 <= poll interval (%s) <= max poll interval (%s)", c.PollInterval, c.MaxPollInterval)
	}
	lease := time.Duration(c.Queue.Policy().Lease) * time.Millisecond
	if lease <= c.DeliveryTimeout+c.LeaseMargin {
		return invalid("lease", "%s must exceed the delivery timeout %s plus the margin %s: a delivery could outlive its lease",
			lease, c.DeliveryTimeout, c.LeaseMargin)
	}
	return nil
}

// Settled reports one settle to Config.OnSettle.
type Settled struct {
	// Claim is what was delivered.
	Claim fairrelay.Claim
	// Outcome is the outcome settled: the receiver's answer, or retry when
	// no answer came.
	Outcome fairrelay.Outcome
	// Detail is the sink's note, or the delivery error.
	Detail string
	// Result is settle's answer; zero when LeaseLost.
	Result fairrelay.SettleResult
	// LeaseLost: the lease ran out before the settle, which was not sent.
	LeaseLost bool
	// At is the tick of the settle.
	At int64
	// Latency is the delivery's wall time.
	Latency time.Duration
}

// Relay is the dispatch daemon. Create it with New, run it once with Run.
type Relay struct {
	cfg     Config
	q       *fairrelay.Queue
	clock   *Clock
	log     *slog.Logger
	writeMu sync.Mutex    // orders this process's writes by tick (see write)
	wake    chan struct{} // tokens that end idle waits
	running atomic.Bool
}

// New validates cfg and starts the daemon clock at the queue's stored tick
// (SPEC §7). Errors: ErrInvalidInput naming the field (see
// Config.Validate); ErrBusy or ErrDatabase reading the clock.
func New(ctx context.Context, cfg Config) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c, err := cfg.Queue.Clock(ctx)
	if err != nil {
		return nil, fmt.Errorf("relay: read the stored tick: %w", err)
	}
	return &Relay{
		cfg: cfg, q: cfg.Queue, clock: NewClock(cfg.Source, c.Tick), log: cfg.Logger,
		wake: make(chan struct{}, cfg.Workers),
	}, nil
}

// Now returns the daemon clock's current tick.
func (r *Relay) Now() int64 { return r.clock.Now() }

// Wake ends the idle wait of every idle worker, so they claim at once (call
// it after enqueueing from this process; Do calls it).
func (r *Relay) Wake() {
	for range cap(r.wake) {
		select {
		case r.wake <- struct{}{}:
		default:
			return
		}
	}
}

// wakeOne ends one idle worker's wait: a settle made a new head eligible.
func (r *Relay) wakeOne() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Do runs fn with the daemon clock's current tick, in order with the
// relay's own writes, so an enqueue or redrive from this process never
// regresses the clock; then it wakes idle workers. fn typically calls
// Queue.EnqueueBatch or Queue.Redrive at that tick. fn's error is returned.
func (r *Relay) Do(ctx context.Context, fn func(at int64) error) error {
	err := r.write(ctx, fn)
	r.Wake()
	return err
}

// write runs fn at the current tick under writeMu: in this process ticks are
// written in order. When another process wrote a later tick (fn fails with
// ErrClockRegressed), the clock is raised to the stored tick and fn runs
// again (SPEC §7: never below the stored tick).
func (r *Relay) write(ctx context.Context, fn func(at int64) error) error {
	for i := 0; ; i++ {
		r.writeMu.Lock()
		err := fn(r.clock.Now())
		r.writeMu.Unlock()
		if !errors.Is(err, fairrelay.ErrClockRegressed) || i == 3 {
			return err
		}
		c, cerr := r.q.Clock(ctx)
		if cerr != nil {
			return cerr
		}
		r.clock.Observe(c.Tick)
	}
}

// Run dispatches until ctx is done, then shuts down gracefully (package
// doc) and returns nil. It returns early with an error only for a database
// error other than ErrBusy (which is retried), after the same graceful
// shutdown; database errors are never taken for idle or for an outcome.
// Run may be called once.
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("relay: Run called twice")
	}
	// Settles must outlive ctx: in-flight work is finished after a signal.
	settleCtx := context.WithoutCancel(ctx)
	deliverCtx, cutDeliveries := context.WithCancel(settleCtx)
	defer cutDeliveries()
	claimCtx, stopClaiming := context.WithCancel(ctx)
	defer stopClaiming()

	var (
		fatalOnce sync.Once
		fatal     error
		wg        sync.WaitGroup
	)
	r.log.Info("relay: started", "workers", r.cfg.Workers, "tick", r.clock.Now(),
		"lease_ms", r.q.Policy().Lease, "timeout", r.cfg.DeliveryTimeout, "policy", r.q.Policy().Entry)
	for i := range r.cfg.Workers {
		wg.Go(func() {
			if err := r.work(claimCtx, deliverCtx, settleCtx, i); err != nil {
				fatalOnce.Do(func() {
					fatal = err
					r.log.Error("relay: stopping on error", "err", err)
					stopClaiming()
				})
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	<-claimCtx.Done()
	r.log.Info("relay: stopping: no new claims; waiting for in-flight deliveries", "deadline", r.cfg.ShutdownTimeout)
	deadline := time.NewTimer(r.cfg.ShutdownTimeout)
	defer deadline.Stop()
	select {
	case <-done:
	case <-deadline.C:
		r.log.Warn("relay: shutdown deadline: cutting off in-flight deliveries")
		cutDeliveries()
		<-done
	}
	r.log.Info("relay: stopped", "tick", r.clock.Now())
	return fatal
}

// work is one worker: claim, deliver, settle, until claimCtx is done.
func (r *Relay) work(claimCtx, deliverCtx, settleCtx context.Context, id int) error {
	wait := r.cfg.PollInterval
	idle := false
	for claimCtx.Err() == nil {
		if idle {
			// Idle: ask, with a read, whether anything can be claimed before
			// running a claim, which is a write (it advances the stored
			// tick) and would cost an fsync on every poll of an idle relay.
			stored, due, ok, err := r.q.NextDue(claimCtx)
			if claimCtx.Err() != nil {
				break // stopping: no claim after the signal
			}
			if err == nil {
				// Another process may have written a later tick: the clock
				// never stays below the stored tick (SPEC §7).
				r.clock.Observe(stored)
			}
			if err == nil && (!ok || due > r.clock.Now()) {
				d := wait
				if ok {
					d = min(wait, time.Duration(due-r.clock.Now())*time.Millisecond)
				}
				r.idle(claimCtx, d)
				wait = min(max(2*wait, time.Millisecond), r.cfg.MaxPollInterval)
				continue
			}
			// Due now, or the read failed: the claim decides (and reports a
			// database error the way it always does).
		}
		var cl *fairrelay.Claim
		// The claim itself runs on settleCtx: a signal arriving mid-claim
		// must not leave us unsure whether it committed.
		err := r.write(settleCtx, func(at int64) (err error) {
			cl, err = r.q.Claim(settleCtx, at)
			return err
		})
		switch {
		case errors.Is(err, fairrelay.ErrBusy):
			r.log.Warn("relay: claim: database busy; retrying", "worker", id, "err", err)
			r.idle(claimCtx, wait)
			wait = min(2*wait, r.cfg.MaxPollInterval)
			continue
		case err != nil:
			return fmt.Errorf("claim: %w", err)
		case cl == nil:
			r.cfg.Metrics.idle()
			idle = true
			r.idle(claimCtx, wait)
			wait = min(max(2*wait, time.Millisecond), r.cfg.MaxPollInterval)
			continue
		}
		idle = false
		wait = r.cfg.PollInterval
		r.cfg.Metrics.claim()
		if err := r.deliver(deliverCtx, settleCtx, cl); err != nil {
			return err
		}
	}
	return nil
}

// idle waits d, or until a wake token or ctx is done — never a busy poll.
func (r *Relay) idle(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-r.wake:
	case <-t.C:
	}
}

// deliver sends one claim through the sink, with no transaction open, and
// settles the answer.
func (r *Relay) deliver(deliverCtx, settleCtx context.Context, cl *fairrelay.Claim) error {
	// The delivery must end before the lease does, with the margin left
	// for the settle.
	left := time.Duration(cl.LeaseUntil-r.clock.Now())*time.Millisecond - r.cfg.LeaseMargin
	timeout := min(r.cfg.DeliveryTimeout, left)
	start := time.Now()
	var res sink.Result
	var err error
	if timeout > 0 {
		ctx, cancel := context.WithTimeout(deliverCtx, timeout)
		res, err = r.cfg.Sink.Deliver(ctx, sink.Delivery{
			EventID: cl.Token.EventID, Flow: cl.Flow, Seq: cl.Seq, Generation: cl.Token.Generation,
			Attempt: cl.Attempts, Body: cl.Body,
		})
		cancel()
	} else {
		err = errors.New("no time left in the lease to deliver")
	}
	latency := time.Since(start)
	r.cfg.Metrics.delivered(latency)
	outcome, detail := res.Outcome, res.Detail
	switch {
	case err != nil:
		// No answer: the receiver may or may not have applied the event;
		// a retry is safe because it deduplicates by id.
		outcome, detail, res.RetryAfter = fairrelay.OutcomeRetry, err.Error(), 0
	case outcome == "":
		outcome, detail = fairrelay.OutcomeRetry, "the sink returned no outcome"
	}
	return r.settle(settleCtx, cl, outcome, res.RetryAfter, detail, latency)
}

// busyRetries bounds the settle attempts on a busy database; after them
// the event is left to its lease.
const busyRetries = 20

func (r *Relay) settle(ctx context.Context, cl *fairrelay.Claim, outcome fairrelay.Outcome, retryAfter time.Duration, detail string, latency time.Duration) error {
	s := Settled{Claim: *cl, Outcome: outcome, Detail: detail, Latency: latency}
	for attempt := 1; ; attempt++ {
		err := r.write(ctx, func(at int64) error {
			s.At = at
			// Never settle after the lease ran out: the answer would be
			// expired anyway, and someone may hold a newer lease.
			if at >= cl.LeaseUntil {
				s.LeaseLost = true
				return nil
			}
			p := fairrelay.SettleParams{Token: cl.Token, Outcome: outcome}
			if retryAfter > 0 {
				p.NotBefore = at + retryAfter.Milliseconds()
			}
			rs, err := r.q.SettleBatch(ctx, at, []fairrelay.SettleParams{p})
			if err == nil {
				s.Result = rs[0]
			}
			return err
		})
		if errors.Is(err, fairrelay.ErrBusy) && attempt < busyRetries {
			r.idle(ctx, time.Duration(attempt)*10*time.Millisecond)
			continue
		}
		if errors.Is(err, fairrelay.ErrBusy) {
			r.log.Warn("relay: settle: database busy; leaving the event to its lease", "id", cl.Token.EventID, "err", err)
			s.LeaseLost = true
			break
		}
		if err != nil {
			return fmt.Errorf("settle %s: %w", cl.Token.EventID, err)
		}
		break
	}
	r.report(s)
	return nil
}

func (r *Relay) report(s Settled) {
	r.cfg.Metrics.settled(s)
	attrs := []any{"id", s.Claim.Token.EventID, "flow", s.Claim.Flow, "seq", s.Claim.Seq,
		"generation", s.Claim.Token.Generation, "attempt", s.Claim.Attempts, "outcome", s.Outcome,
		"detail", s.Detail, "tick", s.At, "latency", s.Latency}
	switch {
	case s.LeaseLost:
		r.log.Warn("relay: lease ran out before the settle; not settled", attrs...)
	case s.Result.Status == fairrelay.SettleQuarantined:
		r.log.Warn("relay: quarantined", attrs...)
	case s.Result.Status == fairrelay.SettleReady:
		// A failed delivery is worth an operator's eye: repeated, it ends in
		// budget_exhausted.
		r.log.Warn("relay: delivery failed; will retry", append(attrs, "next_at", s.Result.NextAt)...)
	default:
		r.log.Debug("relay: settled", append(attrs, "status", s.Result.Status)...)
	}
	if s.Result.Status == fairrelay.SettleAcked {
		r.wakeOne() // the flow's next event is now its head, eligible now
	}
	if r.cfg.OnSettle != nil {
		r.cfg.OnSettle(s)
	}
}
