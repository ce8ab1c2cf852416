// Package relay is the dispatch loop of fairrelay: the long-lived daemon that
// claims heads from a queue store, delivers them through a sink.Sink without
// holding any transaction, and settles the answers, with up to
// Config.Workers deliveries at once. Time is the daemon clock of SPEC §7
// (1 tick = 1 ms, see Clock).
//
// One claimer claims as many heads as there are free delivery slots, in one
// transaction (Queue.Claim with a Limit), and starts a delivery for each; answers
// are settled many to a transaction. On PostgreSQL (concurrent writers) a
// settler settles them beside the claims (Queue.SettleMany), the way
// River's completer runs beside its producer, except while the claims wait
// for those very settles (ordered traffic: the heads claimed next are the
// events behind the ones just delivered); then, and always on SQLite (one
// writer), the claimer settles them with its next claim
// (Queue.SettleMany with a ClaimLimit). While deliveries are under way the claimer and
// the settler wait up to a millisecond for more of them to end, so that one
// transaction takes many.
//
// Several relays may dispatch one store (on PostgreSQL, from many
// machines). Their writes set Floor (fairrelay.ClaimParams.Floor): a write that
// waited for a lock while another relay stored a later tick runs at that
// tick, and the clock follows. An idle relay only reads, except that it
// writes its clock (a claim) once it runs (lease - DeliveryTimeout -
// LeaseMargin) / 2 ahead of the stored tick: a relay started beside it
// starts at the stored tick, and the leases it grants must not look
// expired to this one.
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
	// a flow has at most one inflight event), and so the most heads one
	// claim transaction takes. Defaults to 4; at most 1024. An answer
	// waiting for its settle does not hold a slot, but no new head is
	// claimed while 2 × Workers answers wait.
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
	// PollInterval is the idle claimer's first wait before claiming again; the
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
	// OnSettle, when set, is called for every answer after its settle
	// committed (and for every settle skipped because the lease ran out),
	// from the goroutine that settled it (the claimer or the settler), one
	// call at a time per goroutine. It must not block for long: the
	// dispatch waits for it.
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
	return CheckLease(c.Queue.Policy().Lease, c.DeliveryTimeout, c.LeaseMargin)
}

// CheckLease reports ErrInvalidInput (field "lease") unless a policy's lease
// (ticks = ms) exceeds the delivery timeout plus the lease margin: a
// delivery must not outlive its lease. Config.Validate runs it; a caller
// may run it before it opens (or creates) the queue store.
func CheckLease(lease int64, timeout, margin time.Duration) error {
	if l := time.Duration(lease) * time.Millisecond; l <= timeout+margin {
		return invalid("lease", "%s must exceed the delivery timeout %s plus the margin %s: a delivery could outlive its lease",
			l, timeout, margin)
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
	// Result is settle's answer; zero when LeaseLost, but for Held.
	Result fairrelay.SettleResult
	// LeaseLost: the settle was not made and the event is left to its
	// lease: the lease ran out before the settle could be sent, the
	// database stayed busy, or at the shutdown deadline another transaction
	// still held the event's flow (Result.Held is then set).
	LeaseLost bool
	// At is the tick of the settle.
	At int64
	// Latency is the delivery's wall time.
	Latency time.Duration
}

// Relay is the dispatch daemon. Create it with New, run it once with Run.
type Relay struct {
	cfg    Config
	q      *fairrelay.Queue
	clock  *Clock
	log    *slog.Logger
	serial bool // the store has one writer at a time (see write)
	// heartbeat (ticks) is how far an idle relay's clock may run ahead of
	// the stored tick before it writes it: half the lease's slack over a
	// delivery, so that a lease another relay grants at a clock that far
	// behind still outlasts its delivery (claimLoop).
	heartbeat int64
	writeMu   sync.Mutex    // orders this process's writes by tick when serial
	wake      chan struct{} // a token that ends the claimer's idle wait
	running   atomic.Bool
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
		serial: !cfg.Queue.ConcurrentWriters(), wake: make(chan struct{}, 1),
		heartbeat: max(1, (cfg.Queue.Policy().Lease-(cfg.DeliveryTimeout+cfg.LeaseMargin).Milliseconds())/2),
	}, nil
}

// Now returns the daemon clock's current tick.
func (r *Relay) Now() int64 { return r.clock.Now() }

// Wake ends the claimer's idle wait, so it claims at once (call it after
// enqueueing from this process; Do calls it).
func (r *Relay) Wake() { kick(r.wake) }

// Do runs fn with the daemon clock's current tick, retried at the stored
// tick when another write overtook it (see write), so an enqueue or redrive
// from this process never fails with ErrClockRegressed for the relay's own
// writes; then it wakes the claimer. fn typically calls
// Queue.EnqueueMany or Queue.Redrive at that tick. fn's error is returned.
func (r *Relay) Do(ctx context.Context, fn func(at int64) error) error {
	_, err := r.write(ctx, func(at int64) (int64, error) { return at, fn(at) })
	r.Wake()
	return err
}

// write runs fn at the daemon clock's current tick. fn's own writes (the
// claimer's and the settler's) pass Floor: a write whose tick lies below the
// stored tick runs at the stored tick instead (SPEC §7: never below the
// stored tick), and fn returns the tick it ran at, which the clock then
// follows. Several relays on one PostgreSQL queue commit later ticks while a
// write waits for its lane's lock, and a write retried at a fresher tick
// would lose that race again. On a store with one writer at a time (SQLite)
// write holds writeMu, so this process's writes reach the store in tick
// order. A write of fn without the floor (Do) that fails with
// ErrClockRegressed (the failed write changed nothing) raises the clock to
// the stored tick, and fn runs again, at most clockRetries more times.
//
// fn returns the tick its last write ran at, or at itself when it wrote
// nothing.
func (r *Relay) write(ctx context.Context, fn func(at int64) (ran int64, err error)) (ran int64, err error) {
	for i := 0; ; i++ {
		if r.serial {
			r.writeMu.Lock()
		}
		at := r.clock.Now()
		ran, err = fn(at)
		if r.serial {
			r.writeMu.Unlock()
		}
		if err == nil {
			r.clock.Observe(ran)
		}
		if !errors.Is(err, fairrelay.ErrClockRegressed) || i == clockRetries {
			return ran, err
		}
		c, cerr := r.q.Clock(ctx)
		if cerr != nil {
			return ran, cerr
		}
		r.clock.Observe(c.Tick)
	}
}

// clockRetries bounds the retries of one write overtaken by later ticks.
const clockRetries = 10

// answer is a delivery's result, waiting for its settle.
type answer struct {
	s          Settled // Claim, Outcome, Detail and Latency are set
	retryAfter time.Duration
}

// pipeline is what one Run's claimer, deliveries and settler share. The
// claimer claims as many heads as there are free delivery slots and starts
// a delivery for each; every answer waits in answers until a settle takes
// it. Who settles depends on the store and the traffic:
//   - beside the claims: the settler settles every answer waiting in one
//     transaction (SettleMany) while the claimer claims, like River's
//     completer beside its producer. Only on a store with concurrent
//     writers; the default there.
//   - with the claims (combine): the claimer settles the answers waiting
//     with its next claim, in one transaction (SettleMany with a ClaimLimit). Always on a
//     one-writer store (SQLite); on the others while the heads the claims
//     need wait for those very settles (a claim came back short while
//     settles were waiting), which is ordered traffic: the claims then see
//     the acks at once instead of one transaction later.
//
// mu guards every field but the channels.
type pipeline struct {
	mu         sync.Mutex
	delivering int      // deliveries under way (at most Workers)
	answers    []answer // answered, waiting for a settle
	spare      []answer // an emptied answers slice, for the next batch
	settling   int      // answers in the settler's transaction under way
	combine    bool     // the claimer settles the answers with its claims
	claimDone  bool     // the claimer has stopped: the settler settles the rest
	claimKick  chan struct{}
	settleKick chan struct{}
}

// takeAnswers returns the answers waiting and leaves an empty slice in
// their place (the spare one, when there is one). mu must be held.
func (p *pipeline) takeAnswers() []answer {
	as := p.answers
	p.answers, p.spare = p.spare, nil
	return as
}

// recycle keeps as, whose answers have been settled and reported, as the
// spare slice: the batches reuse two slices instead of growing a new one
// each. mu must be held.
func (p *pipeline) recycle(as []answer) {
	if cap(as) > cap(p.spare) {
		clear(as)
		p.spare = as[:0]
	}
}

// kick wakes the goroutine waiting on c, now or at its next wait.
func kick(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// batchWait is how long the claimer waits for more free delivery slots, and
// the settler for more answers, while deliveries are under way, so that one
// transaction claims or settles many events (group commit).
const batchWait = time.Millisecond

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
	)
	fail := func(err error) {
		fatalOnce.Do(func() {
			fatal = err
			r.log.Error("relay: stopping on error", "err", err)
			stopClaiming()
		})
	}
	p := &pipeline{combine: r.serial, claimKick: make(chan struct{}, 1), settleKick: make(chan struct{}, 1)}
	r.log.Info("relay: started", "workers", r.cfg.Workers, "tick", r.clock.Now(),
		"lease_ms", r.q.Policy().Lease, "timeout", r.cfg.DeliveryTimeout, "policy", r.q.Policy().Entry,
		"settler", !r.serial)
	var deliveries sync.WaitGroup
	claimerDone, settlerDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(claimerDone)
		if err := r.claimLoop(claimCtx, deliverCtx, settleCtx, p, &deliveries); err != nil {
			fail(err)
		}
		p.mu.Lock()
		p.claimDone, p.combine = true, false
		p.mu.Unlock()
		kick(p.settleKick)
	}()
	go func() {
		defer close(settlerDone)
		if err := r.settleLoop(settleCtx, deliverCtx, p); err != nil {
			fail(err)
		}
	}()
	<-claimCtx.Done()
	r.log.Info("relay: stopping: no new claims; waiting for in-flight deliveries", "deadline", r.cfg.ShutdownTimeout)
	done := make(chan struct{})
	go func() {
		<-claimerDone
		<-settlerDone
		deliveries.Wait()
		close(done)
	}()
	deadline := time.NewTimer(r.cfg.ShutdownTimeout)
	defer deadline.Stop()
	select {
	case <-done:
	case <-deadline.C:
		r.log.Warn("relay: shutdown deadline: cutting off in-flight deliveries")
		cutDeliveries()
		<-done
	}
	p.mu.Lock()
	if n := len(p.answers); n > 0 {
		// Only after a database error stopped the settler.
		r.log.Warn("relay: answers not settled; their events wait out their leases", "count", n)
	}
	p.mu.Unlock()
	r.log.Info("relay: stopped", "tick", r.clock.Now())
	return fatal
}

// claimLoop is the claimer: it claims heads for the free delivery slots,
// starts their deliveries, and (combine) settles the answers with its
// claims, until claimCtx is done.
func (r *Relay) claimLoop(claimCtx, deliverCtx, settleCtx context.Context, p *pipeline, deliveries *sync.WaitGroup) error {
	wait := r.cfg.PollInterval
	idle := false
	var batchUntil time.Time
	var held heldStreak
	for claimCtx.Err() == nil {
		p.mu.Lock()
		k := r.cfg.Workers - p.delivering
		if !p.combine && len(p.answers) >= 2*r.cfg.Workers {
			k = 0 // the settler is behind: let it catch up first
		}
		if k > 0 && p.delivering > 0 {
			// Deliveries are under way: wait a moment for more of them to
			// end, to claim their slots (and, combine, settle their
			// answers) in one transaction.
			if batchUntil.IsZero() {
				batchUntil = time.Now().Add(batchWait)
			}
			if d := time.Until(batchUntil); d > 0 {
				p.mu.Unlock()
				r.idle(claimCtx, p, d)
				continue
			}
		}
		batchUntil = time.Time{}
		var ans []answer
		if p.combine {
			ans = p.takeAnswers()
		}
		p.mu.Unlock()
		if k == 0 && len(ans) == 0 {
			r.idle(claimCtx, p, r.cfg.MaxPollInterval)
			continue
		}
		if idle && len(ans) == 0 {
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
			// A relay's clock moves while it only reads, and another relay
			// that starts now starts at the stored tick: its leases would
			// look expired to this one early. So an idle relay whose clock
			// ran a heartbeat ahead of the stored tick writes it (a claim,
			// which claims whatever is due): the clocks of the relays on
			// one store stay within a heartbeat of each other.
			behind := err == nil && r.clock.Now()-stored >= r.heartbeat
			if err == nil && !behind && (!ok || due > r.clock.Now()) {
				d := wait
				if ok {
					d = min(wait, time.Duration(due-r.clock.Now())*time.Millisecond)
				}
				r.idle(claimCtx, p, d)
				wait = min(max(2*wait, time.Millisecond), r.cfg.MaxPollInterval)
				continue
			}
			// Due now, the heartbeat, or the read failed: the claim decides
			// (and reports a database error the way it always does).
		}
		var cs []fairrelay.Claim
		var settled []Settled
		kind := ""
		// The claim itself runs on settleCtx: a signal arriving mid-claim
		// must not leave us unsure whether it committed.
		ran, err := r.write(settleCtx, func(at int64) (int64, error) {
			var ps []fairrelay.Settlement
			ps, settled = settleParams(at, ans)
			switch {
			case len(ps) > 0:
				// A settle does not wait for a flow an outbox transaction
				// holds: the other answers of its batch would wait with it.
				res, err := r.q.SettleMany(settleCtx, fairrelay.SettleManyParams{At: at, Floor: true, SkipHeld: true, Settles: ps, ClaimLimit: k})
				if err != nil {
					return at, err
				}
				kind, cs = txSettleAndClaim, res.Claims
				setResults(settled, res.Results)
				return res.Tick, nil
			case k > 0:
				res, err := r.q.Claim(settleCtx, fairrelay.ClaimParams{At: at, Limit: k, Floor: true})
				if err != nil {
					return at, err
				}
				kind, cs = txClaim, res.Claims
				return res.Tick, nil
			}
			cs = nil // every answer's lease ran out: nothing to write
			return at, nil
		})
		if errors.Is(err, fairrelay.ErrBusy) {
			r.log.Warn("relay: claim: database busy; retrying", "err", err, "answers", len(ans))
			if len(ans) > 0 {
				p.mu.Lock()
				p.answers = append(ans, p.answers...)
				p.mu.Unlock()
			}
			r.idle(claimCtx, p, wait)
			wait = min(2*wait, r.cfg.MaxPollInterval)
			continue
		}
		if err != nil {
			if len(ans) > 0 {
				r.log.Warn("relay: answers not settled; their events wait out their leases", "count", len(ans))
			}
			return fmt.Errorf("claim: %w", err)
		}
		if kind != "" {
			r.cfg.Metrics.transaction(kind)
		}
		var heldAns []answer
		heldAns, settled = r.reportSettles(ans, settled, ran)
		p.mu.Lock()
		p.recycle(ans)
		p.answers = append(p.answers, heldAns...)
		if !r.serial {
			p.combine = combineNext(p.combine, settled, k, cs, len(p.answers)+p.settling)
			if !p.combine {
				kick(p.settleKick)
			}
		}
		p.delivering += len(cs)
		p.mu.Unlock()
		heldOnly := len(heldAns) > 0 && len(settled) == 0 && len(cs) == 0
		if len(heldAns) == 0 {
			held = heldStreak{}
		}
		for _, cl := range cs {
			r.cfg.Metrics.claim()
			deliveries.Add(1)
			go func() {
				defer deliveries.Done()
				a := r.deliver(deliverCtx, &cl)
				p.mu.Lock()
				full := p.delivering == r.cfg.Workers
				p.delivering--
				first := len(p.answers) == 0
				p.answers = append(p.answers, a)
				last := p.delivering == 0
				p.mu.Unlock()
				// Observed once the answer waits for its settle.
				r.cfg.Metrics.delivered(a.s.Latency)
				// Wake-ups cost a context switch each: only the answers a
				// waiting claimer or settler acts on wake it (the first
				// slot freed, the first answer, the last delivery); the
				// others it finds when its batch wait ends.
				if full || first || last {
					kick(p.claimKick)
				}
				if first || last {
					kick(p.settleKick)
				}
			}()
		}
		switch {
		case heldOnly:
			// Only held flows' answers came back (and no claim): wait
			// before asking again — this pause instead of the idle one.
			if k > 0 {
				r.cfg.Metrics.idle()
			}
			r.idle(claimCtx, p, r.heldPause(&held, heldAns))
		case k > 0 && len(cs) == 0:
			r.cfg.Metrics.idle()
			idle = true
			r.idle(claimCtx, p, wait)
			wait = min(max(2*wait, time.Millisecond), r.cfg.MaxPollInterval)
		case len(cs) > 0:
			idle = false
			wait = r.cfg.PollInterval
			if len(cs) < k {
				// Nothing else is eligible now: more becomes so with an
				// ack, an enqueue (Wake) or time (a backoff, a lease).
				r.idle(claimCtx, p, wait)
			}
		}
	}
	return nil
}

// combineNext returns whether the claimer settles the answers with its
// claims from now on (pipeline.combine, on a store with concurrent
// writers), after a write that settled settled (none for a plain claim) and
// claimed cs of the k heads it asked for, with waiting answers waiting for
// or in the settler's transaction:
//   - a plain claim came back short while answers wait: the heads it did
//     not find may be the events behind them, eligible once they are acked
//     (ordered traffic), so the claimer settles them with its next claim;
//   - a SettleAndClaim took all k heads, most of them of flows it did not
//     just ack: the claims did not need those settles, so the settler
//     settles beside the claims again;
//   - otherwise, as before.
func combineNext(combine bool, settled []Settled, k int, cs []fairrelay.Claim, waiting int) bool {
	switch {
	case len(settled) == 0 && len(cs) < k && waiting > 0:
		return true
	case len(settled) > 0 && k > 0 && len(cs) == k && 2*behind(settled, cs) < len(cs):
		return false
	}
	return combine
}

// behind counts the claims of flows whose answers settled says were acked:
// heads that waited for those acks.
func behind(settled []Settled, cs []fairrelay.Claim) int {
	acked := make(map[string]bool, len(settled))
	for _, s := range settled {
		if s.Result.Status == fairrelay.SettleAcked {
			acked[s.Claim.Flow] = true
		}
	}
	n := 0
	for _, c := range cs {
		if acked[c.Flow] {
			n++
		}
	}
	return n
}

// settleParams returns the settles of as at tick at, and their reports: an
// answer whose lease ran out by at is not sent (LeaseLost), since it would
// be expired anyway and someone may hold a newer lease.
func settleParams(at int64, as []answer) ([]fairrelay.Settlement, []Settled) {
	var ps []fairrelay.Settlement
	out := make([]Settled, len(as))
	for i, a := range as {
		out[i] = a.s
		out[i].At = at
		if at >= a.s.Claim.LeaseUntil {
			out[i].LeaseLost = true
			continue
		}
		p := fairrelay.Settlement{Token: a.s.Claim.Token, Outcome: a.s.Outcome}
		if a.retryAfter > 0 {
			p.NotBefore = at + a.retryAfter.Milliseconds()
		}
		ps = append(ps, p)
	}
	return ps, out
}

// setResults gives the reports that were sent their results, in order.
func setResults(out []Settled, rs []fairrelay.SettleResult) {
	j := 0
	for i := range out {
		if !out[i].LeaseLost {
			out[i].Result = rs[j]
			j++
		}
	}
}

// settleLoop is the settler: it settles the answers waiting, all in one
// transaction, whenever the claimer does not (pipeline). After the claimer
// stopped, it settles what is left and returns once no delivery is under
// way and no answer waits. Answers whose flows another transaction holds it
// tries again until cutoff is done (the shutdown deadline), then leaves
// their events to their leases.
func (r *Relay) settleLoop(ctx, cutoff context.Context, p *pipeline) error {
	var batchUntil time.Time
	var heldRun heldStreak
	for {
		p.mu.Lock()
		if p.claimDone && p.delivering == 0 && len(p.answers) == 0 {
			p.mu.Unlock()
			return nil
		}
		if len(p.answers) == 0 || p.combine {
			p.mu.Unlock()
			<-p.settleKick
			continue
		}
		if p.delivering > 0 {
			// More answers are coming: wait a moment for them, to settle
			// them along.
			if batchUntil.IsZero() {
				batchUntil = time.Now().Add(batchWait)
			}
			if d := time.Until(batchUntil); d > 0 {
				p.mu.Unlock()
				t := time.NewTimer(d)
				select {
				case <-p.settleKick:
				case <-t.C:
				}
				t.Stop()
				continue
			}
		}
		batchUntil = time.Time{}
		as := p.takeAnswers()
		p.settling = len(as)
		p.mu.Unlock()
		held, err := r.settle(ctx, as)
		if len(held) > 0 && cutoff.Err() != nil {
			// Past the shutdown deadline: no more waiting for those flows.
			// Reported as not settled, as when the database stays busy.
			r.log.Warn("relay: shutdown deadline: answers of flows another transaction holds not settled; their events wait out their leases", "count", len(held))
			for _, a := range held {
				s := a.s
				s.LeaseLost, s.Result, s.At = true, fairrelay.SettleResult{Held: true}, r.clock.Now()
				r.report(s)
			}
			held = nil
		}
		p.mu.Lock()
		p.settling = 0
		p.recycle(as)
		p.answers = append(p.answers, held...)
		p.mu.Unlock()
		kick(p.claimKick) // the acks may have made heads eligible
		if err != nil {
			return err
		}
		if len(held) == len(as) {
			// Only held flows' answers: wait before asking again, unless
			// new answers arrive.
			t := time.NewTimer(r.heldPause(&heldRun, held))
			select {
			case <-p.settleKick:
			case <-t.C:
			case <-cutoff.Done():
			}
			t.Stop()
		} else {
			heldRun = heldStreak{}
		}
	}
}

// The pause before settling again answers whose flows another transaction
// held (an open outbox transaction, fairrelay.SettleManyParams.SkipHeld) while
// nothing else was settled: it doubles from minHeldWait up to maxHeldWait
// as long as they stay held.
const (
	minHeldWait = 2 * time.Millisecond
	maxHeldWait = time.Second
)

// heldStreak paces the retries of answers whose flows another
// transaction holds, while nothing else is settled: the pause doubles from
// minHeldWait to maxHeldWait. The zero value starts a streak.
type heldStreak struct {
	wait   time.Duration
	since  time.Time // the streak's first pause
	warned bool
}

// heldPause returns the next pause of streak h, and warns once, about a
// second into the streak, that those flows have been held for a while (an
// outbox transaction left open?).
func (r *Relay) heldPause(h *heldStreak, held []answer) time.Duration {
	if h.since.IsZero() {
		h.since, h.wait = time.Now(), minHeldWait
	}
	if !h.warned && time.Since(h.since) >= time.Second {
		h.warned = true
		flows := make([]string, 0, min(len(held), 5))
		for _, a := range held[:min(len(held), 5)] {
			flows = append(flows, a.s.Claim.Flow)
		}
		r.log.Warn("relay: settles wait for flows another transaction holds (an outbox transaction left open?); trying again up to every second",
			"count", len(held), "flows", flows)
	}
	d := h.wait
	h.wait = min(2*h.wait, maxHeldWait)
	return d
}

// heldBack splits the answers as settled (settled[i] reports as[i]) into
// those whose settles came back Held — to settle again later — and the
// reports of the others, which it returns in settled's place (reusing its
// memory).
func heldBack(as []answer, settled []Settled) (held []answer, reports []Settled) {
	reports = settled[:0]
	for i, s := range settled {
		if s.Result.Held {
			held = append(held, as[i])
			continue
		}
		reports = append(reports, s)
	}
	return held, reports
}

// idle waits d, or until a wake token (Wake), a kick of the pipeline or ctx
// is done — never a busy poll.
func (r *Relay) idle(ctx context.Context, p *pipeline, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-r.wake:
	case <-p.claimKick:
	case <-t.C:
	}
}

// deliver sends one claim through the sink, with no transaction open, and
// returns the answer to settle.
func (r *Relay) deliver(deliverCtx context.Context, cl *fairrelay.Claim) answer {
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
	outcome, detail := res.Outcome, res.Detail
	switch {
	case err != nil:
		// No answer: the receiver may or may not have applied the event;
		// a retry is safe because it deduplicates by id.
		outcome, detail, res.RetryAfter = fairrelay.OutcomeRetry, err.Error(), 0
	case outcome == "":
		outcome, detail = fairrelay.OutcomeRetry, "the sink returned no outcome"
	}
	return answer{s: Settled{Claim: *cl, Outcome: outcome, Detail: detail, Latency: latency}, retryAfter: res.RetryAfter}
}

// busyRetries bounds the settle attempts on a busy database; after them
// the events are left to their leases.
const busyRetries = 20

// settle settles as in one transaction (SettleMany) and reports each,
// but for the answers it returns: those whose flows another transaction
// held (SettleManyParams.SkipHeld), to settle again later. ErrBusy is retried with
// a growing pause, busyRetries times; any other error is returned, and the
// events are left to their leases.
func (r *Relay) settle(ctx context.Context, as []answer) (held []answer, err error) {
	var settled []Settled
	var ran int64
	for attempt := 1; ; attempt++ {
		ran, err = r.write(ctx, func(at int64) (int64, error) {
			var ps []fairrelay.Settlement
			ps, settled = settleParams(at, as)
			if len(ps) == 0 {
				return at, nil
			}
			res, err := r.q.SettleMany(ctx, fairrelay.SettleManyParams{At: at, Floor: true, SkipHeld: true, Settles: ps}) // as the claimer's
			if err != nil {
				return at, err
			}
			setResults(settled, res.Results)
			r.cfg.Metrics.transaction(txSettle)
			return res.Tick, nil
		})
		if errors.Is(err, fairrelay.ErrBusy) && attempt < busyRetries {
			t := time.NewTimer(time.Duration(attempt) * 10 * time.Millisecond)
			<-t.C
			continue
		}
		if errors.Is(err, fairrelay.ErrBusy) {
			r.log.Warn("relay: settle: database busy; leaving the events to their leases", "count", len(as), "err", err)
			for i := range settled {
				settled[i].LeaseLost = true
			}
			break
		}
		if err != nil {
			r.log.Warn("relay: answers not settled; their events wait out their leases", "count", len(as))
			return nil, fmt.Errorf("settle: %w", err)
		}
		break
	}
	held, _ = r.reportSettles(as, settled, ran)
	return held, nil
}

// reportSettles reports the settles of a transaction that ran at tick ran
// (settled[i] reports as[i]), but for those that came back Held, whose
// answers it returns to settle again later (heldBack); reports are the
// settles it reported.
func (r *Relay) reportSettles(as []answer, settled []Settled, ran int64) (held []answer, reports []Settled) {
	held, reports = heldBack(as, settled)
	r.cfg.Metrics.heldSettles(len(held))
	for _, s := range reports {
		s.At = ran // the floor may have raised the tick
		r.report(s)
	}
	return held, reports
}

func (r *Relay) report(s Settled) {
	r.cfg.Metrics.settled(s)
	level, msg := slog.LevelDebug, "relay: settled"
	switch {
	case s.LeaseLost && s.Result.Held:
		level, msg = slog.LevelWarn, "relay: another transaction held the flow until the shutdown deadline; not settled"
	case s.LeaseLost:
		level, msg = slog.LevelWarn, "relay: lease ran out before the settle; not settled"
	case s.Result.Status == fairrelay.SettleQuarantined:
		level, msg = slog.LevelWarn, "relay: quarantined"
	case s.Result.Status == fairrelay.SettleReady:
		// A failed delivery is worth an operator's eye: repeated, it ends in
		// budget_exhausted.
		level, msg = slog.LevelWarn, "relay: delivery failed; will retry"
	}
	// The attributes are built only for a record the logger keeps: the
	// acks of a busy relay are not logged at the default level.
	if r.log.Enabled(context.Background(), level) {
		attrs := []any{"id", s.Claim.Token.EventID, "flow", s.Claim.Flow, "seq", s.Claim.Seq,
			"generation", s.Claim.Token.Generation, "attempt", s.Claim.Attempts, "outcome", s.Outcome,
			"detail", s.Detail, "tick", s.At, "latency", s.Latency}
		switch {
		case s.LeaseLost, s.Result.Status == fairrelay.SettleQuarantined:
		case s.Result.Status == fairrelay.SettleReady:
			attrs = append(attrs, "next_at", s.Result.NextAt)
		default:
			attrs = append(attrs, "status", s.Result.Status)
		}
		r.log.Log(context.Background(), level, msg, attrs...)
	}
	if r.cfg.OnSettle != nil {
		r.cfg.OnSettle(s)
	}
}
