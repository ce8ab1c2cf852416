// Package relay is the dispatch loop of fairrelay: the long-lived daemon that
// claims heads from a queue store, delivers them through a sink.Sink without
// holding any transaction, and settles the answers, with up to
// Config.Workers deliveries at once. Time is the daemon clock of SPEC §7
// (1 tick = 1 ms, see Clock), read from Config.Source.
//
// One claimer claims as many heads as there are free delivery slots, in one
// transaction (Queue.Claim with a Limit), and starts a delivery for each;
// answers are settled many to a transaction. An idle claimer waits for
// the queue's change signal (Queue.Changes: LISTEN/NOTIFY on PostgreSQL,
// PRAGMA data_version on SQLite), so an event committed by another process
// is claimed within milliseconds of its commit, or for its poll interval,
// whichever ends first. On PostgreSQL (concurrent
// writers) a settler settles them beside the claims (Queue.SettleMany), the
// way River's completer runs beside its producer, except while the claims
// wait for those very settles (ordered traffic: the heads claimed next are
// the events behind the ones just delivered); then, and always on SQLite
// (one writer), the claimer settles them with its next claim
// (Queue.SettleMany with a ClaimLimit). While deliveries are under way the
// claimer and the settler wait up to a millisecond for more of them to
// end, so that one transaction takes many.
//
// The slots are shared by time, not by claims (SPEC §11): each group
// (a flow without one is its own) is charged the time its deliveries hold
// a slot, from claim to answer, divided by its weight; while slots are
// scarce a claim leaves out (fairrelay.ClaimParams.Exclude) the groups
// charged more than Config.Quantum ahead of a fair share, and those at
// their slot cap (Config.MaxGroupSlots, or the group's own max_slots), and
// claims them after all only when nothing else is runnable. So a receiver
// that takes 2 s does not hold every slot beside one that answers at once.
// The charges are per relay; docs/relay.md gives the bound for several
// relays and every rule (and the comment at the top of the source file
// timeshare.go), and Relay.GroupTimes reports the accounts.
//
// Several relays may dispatch one store: on PostgreSQL from many machines,
// on SQLite from processes of one machine (they take the file's write lock
// in turn, so they add no throughput). They share nothing but the store.
// The rotation is the store's (each claim takes the next ticket, SPEC §2),
// the same however many relays claim. Their writes set Floor
// (fairrelay.ClaimParams.Floor): a write that waited for a lock while
// another relay stored a later tick runs at that tick, and the clock
// follows. An idle relay only reads, except that it writes its clock (a
// claim) once it runs (lease - DeliveryTimeout - LeaseMargin) / 2 ahead of
// the stored tick: a relay started beside it starts at the stored tick,
// and the leases it grants must not look expired to this one. Between
// relays the lease is the only guard: a relay that stalls past a lease (a
// paused process) may still be delivering an event when another relay,
// seeing the lease run out, claims and delivers it again. The receiver's
// deduplication by event id and its sequence check keep the effect once
// and in order, and the stalled relay's settle is skipped or answered
// stale.
//
// Within one relay, a flow never has two deliveries at once, whatever the
// clock says. The store grants a new claim of a flow whose lease looks
// expired at the claim's tick; if this relay is still delivering that flow
// (its clock jumped ahead with a stored tick another process wrote far
// ahead, or a delivery outlived its lease), the new claim waits for the
// first delivery to end and is delivered then, while its own lease allows.
// The first delivery's settle is skipped (its lease ran out) or answered
// stale.
//
// The relay rides out a store that fails — a full disk, a PostgreSQL
// restart, dropped connections, a lock held past the busy timeout: each
// failed round trip is tried again after a pause that doubles from
// Config.RetryWait up to Config.MaxRetryWait, with jitter, and the relay
// resumes by itself once the store answers. Answers whose settles fail are
// kept and settled later, while their leases hold. A write whose commit the
// relay never heard of (a connection dropped during the commit) counts as
// failed: its claims, if they committed, wait out their leases and are
// delivered by a later claim; its settles are sent again, and answer stale
// if they had committed. The first failure of an error streak is logged,
// then a reminder once a minute while it lasts, and the write that ends it
// (a read does not: a full disk still serves reads); Relay.Health and
// Relay.Ready report
// it (the CLI serves Ready at /readyz). Run returns early only for the
// store errors waiting does not cure (Run lists them).
//
// Shutdown (Run's ctx done) stops claiming at once, lets in-flight
// deliveries finish up to Config.ShutdownTimeout, settles them while their
// leases hold, and returns nil. A settle is never sent after its lease ran
// out: the event is left to the lease, and whoever claims it next
// re-delivers it (the receiver answers duplicate if it already applied it).
// A store that has not answered a settle or claim for one lease past
// ShutdownTimeout has its calls cut off (a commit already sent gets 10 s
// more to answer: the store's commit grace), so that Run returns by then
// whatever the store does.
package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/logcap"
	"github.com/fairrelay/fairrelay/sink"
)

// Config configures a Relay.
type Config struct {
	// Queue is the queue store to dispatch. Required. Its policy's Lease is
	// read in ticks = milliseconds.
	Queue *fairrelay.Queue
	// Sink delivers events to the receiver. Required. A panic in its
	// Deliver is logged at ERROR with the stack and taken as no answer:
	// the delivery is retried.
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
	// A delivery cut off is settled retry while its lease holds (it spends
	// one claim of its head's budget, and is logged at WARN as a failed
	// delivery with "context canceled"), and delivered again after the
	// restart.
	ShutdownTimeout time.Duration
	// PollInterval is the idle claimer's first wait before claiming again; the
	// wait doubles up to MaxPollInterval while the queue stays idle, and a
	// Wake (or Do) ends it early, as does every change the queue signals
	// (Queue.Changes: an event another process committed). Polling finds
	// what is not signalled (a redrive, another relay's settle), and every
	// new event while the signal is lost. Defaults to 10ms.
	PollInterval time.Duration
	// MaxPollInterval caps the idle wait. Defaults to 1s.
	MaxPollInterval time.Duration
	// RetryWait is the first pause after a store round trip failed (the
	// database unreachable, restarting, busy or out of space): the relay
	// rides such errors out, trying again after a pause that doubles with
	// each failure in a row up to MaxRetryWait, drawn at random between
	// half and all of it. Defaults to 10ms.
	RetryWait time.Duration
	// MaxRetryWait caps that pause. Defaults to 5s.
	MaxRetryWait time.Duration
	// Source is the relay's time source: the daemon clock's ticks, the
	// delivery latency and how long settles have waited for a held flow
	// are all read from it, so a test that advances it by hand controls
	// them. (Waits — poll intervals, timeouts, the pauses between tries —
	// are timers of the runtime.) Defaults to SystemMonotonic().
	Source Monotonic
	// Name names this relay in the attempt history of every event it
	// delivers (fairrelay.Attempt.Relay; CheckID's rule), and with each of
	// its claims, so that an attempt whose lease ran out unsettled
	// (fairrelay.AttemptLeaseExpired, recorded by a later claim, perhaps
	// another relay's) names this one. Defaults to HOST:PID, the host name
	// and the process id.
	Name string
	// Logger receives the relay's logs: its start and stop (info), each
	// quarantine and exhausted budget (warn), a store that stops answering
	// and answers again (error, info), retention's passes (info). Defaults
	// to slog.Default(), so that no failure goes unseen; give
	// slog.New(slog.DiscardHandler) to drop them.
	Logger *slog.Logger
	// Metrics, when set, counts claims, settles and delivery latency (see
	// NewMetrics).
	Metrics *Metrics
	// RetainAcked, when positive, makes the relay prune on its own (SPEC §8
	// retention): every PruneInterval it deletes the events acked more than
	// RetainAcked ago (by its clock, 1 tick = 1 ms), PruneBatch at a time,
	// each batch its own short transaction. 0 keeps acked events forever.
	// A whole number of milliseconds (else New answers invalid_input).
	RetainAcked time.Duration
	// RetainIDs is how long a pruned event's id stays idempotent (its
	// tombstone; SPEC §8): tombstones older are deleted, and an event acked
	// longer ago leaves none. 0 keeps tombstones forever. When both are
	// set, at least RetainAcked. Used only while RetainAcked is positive:
	// with RetainAcked 0 the relay prunes nothing, tombstones included (a
	// tombstone left by a manual prune stays until another prune deletes
	// it). A whole number of milliseconds.
	RetainIDs time.Duration
	// PruneInterval is the pause between prunes. Defaults to 1 minute.
	PruneInterval time.Duration
	// PruneBatch bounds the events (and tombstones) one prune transaction
	// deletes. Defaults to 20 (a few milliseconds of the write lock; see
	// BENCHMARKS.md, "Retention"); on SQLite a transaction also ends after
	// 2 ms of deletes, past its first 5 events (fairrelay.PruneParams.Limit).
	PruneBatch int
	// OnSettle, when set, is called for every answer after its settle
	// committed (and for every settle skipped because the lease ran out),
	// from the goroutine that settled it (the claimer or the settler), one
	// call at a time per goroutine. It must not block for long: the
	// dispatch waits for it. A panic in it is logged at ERROR with the
	// stack, and the relay goes on.
	OnSettle func(Settled)
	// OnQuarantine, when set, is called for every head this relay's writes
	// quarantined, after the write committed: by a settle (a permanent
	// outcome, or a transient one with the budget spent; also reported to
	// OnSettle) and by a claim (an inflight head whose lease ran out after
	// its round used the whole budget, reason budget_exhausted, SPEC §2: no
	// settle answers it, so OnSettle never sees it). One hook for an
	// application that pages someone or opens a ticket per quarantine. It
	// is called from the goroutine that wrote, as OnSettle, and must not
	// block for long; a panic in it is logged, as OnSettle's.
	OnQuarantine func(Quarantine)
	// Quantum is how far a group's charge (its slot time over its weight)
	// may run ahead of the floor (the charge of a fair share) and the group
	// still be claimed while slots are scarce (SPEC §11, fair by worker
	// time; the package doc): the smaller, the closer the slot-time shares
	// follow the weights over short windows, at the cost of more claims
	// that leave groups out. It also bounds how long a free slot waits for
	// a group that is not ahead before the relay gives it to one that is.
	// Defaults to 100ms.
	Quantum time.Duration
	// MaxGroupSlots caps the delivery slots one group's deliveries hold at
	// once on this relay, for every group whose own cap (fairrelay
	// ConfigureParams.MaxSlots) is 0; 0 is no cap (the default). At most
	// Workers.
	MaxGroupSlots int
	// GroupsRefresh is how often the relay reads the groups' weights and
	// slot caps again (fairrelay.Queue.Groups); New reads them first.
	// Defaults to 10s.
	GroupsRefresh time.Duration
}

// MaxWorkers is the largest Config.Workers accepted; a group's slot cap
// (fairrelay.ConfigureParams.MaxSlots) goes no higher.
const MaxWorkers = fairrelay.MaxGroupSlots

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
	if c.RetryWait == 0 {
		c.RetryWait = 10 * time.Millisecond
	}
	if c.MaxRetryWait == 0 {
		c.MaxRetryWait = 5 * time.Second
	}
	if c.PruneInterval == 0 {
		c.PruneInterval = time.Minute
	}
	if c.PruneBatch == 0 {
		c.PruneBatch = 20
	}
	if c.Quantum == 0 {
		c.Quantum = 100 * time.Millisecond
	}
	if c.GroupsRefresh == 0 {
		c.GroupsRefresh = 10 * time.Second
	}
	if c.Source == nil {
		c.Source = SystemMonotonic()
	}
	if c.Name == "" {
		c.Name = defaultName()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func invalid(field, format string, args ...any) error {
	return fairrelay.InvalidInput(field, format, args...)
}

// Validate reports the first field out of range as ErrInvalidInput naming
// it, the Config field in snake case: "queue", "sink", "workers",
// "delivery_timeout", "lease_margin", "shutdown_timeout", "poll_interval",
// "max_poll_interval", "retry_wait", "max_retry_wait", "retain_acked",
// "retain_ids", "prune_interval", "prune_batch", "quantum",
// "max_group_slots", "groups_refresh", or "lease" when the
// policy's lease (ms) does not exceed DeliveryTimeout + LeaseMargin.
func (c Config) Validate() error {
	switch {
	case c.Queue == nil:
		return invalid("queue", "missing")
	case c.Sink == nil:
		return invalid("sink", "missing")
	}
	if err := c.ValidateSettings(); err != nil {
		return err
	}
	// The timeout and the margin the relay will run with: a margin left
	// at 0 is 1s (withDefaults), and a check against 0 let through a lease
	// the relay could not keep.
	d := c.withDefaults()
	return CheckLease(c.Queue.Policy().Lease, d.DeliveryTimeout, d.LeaseMargin)
}

// ValidateSettings is Validate without the queue, the sink and the lease
// check (CheckLease): for a caller that checks its settings before it
// opens, or creates, the queue store, so that a refused configuration
// leaves nothing behind. Errors: as Validate's.
func (c Config) ValidateSettings() error {
	c = c.withDefaults()
	switch {
	case c.Workers < 1 || c.Workers > MaxWorkers:
		return invalid("workers", "must be 1 to %d, got %d", MaxWorkers, c.Workers)
	case c.DeliveryTimeout < time.Millisecond:
		return invalid("delivery_timeout", "must be at least 1ms, got %s", c.DeliveryTimeout)
	case c.LeaseMargin < 0:
		return invalid("lease_margin", "must not be negative, got %s", c.LeaseMargin)
	case c.ShutdownTimeout < 0:
		return invalid("shutdown_timeout", "must not be negative, got %s", c.ShutdownTimeout)
	case c.PollInterval < 0:
		return invalid("poll_interval", "need 0 <= poll interval (%s) <= max poll interval (%s)", c.PollInterval, c.MaxPollInterval)
	case c.MaxPollInterval < c.PollInterval:
		return invalid("max_poll_interval", "need 0 <= poll interval (%s) <= max poll interval (%s)", c.PollInterval, c.MaxPollInterval)
	case c.RetryWait <= 0:
		return invalid("retry_wait", "need 0 < retry wait (%s) <= max retry wait (%s)", c.RetryWait, c.MaxRetryWait)
	case c.MaxRetryWait < c.RetryWait:
		return invalid("max_retry_wait", "need 0 < retry wait (%s) <= max retry wait (%s)", c.RetryWait, c.MaxRetryWait)
	case c.RetainAcked < 0:
		return invalid("retain_acked", "must not be negative, got %s", c.RetainAcked)
	case c.RetainIDs < 0:
		return invalid("retain_ids", "must not be negative, got %s", c.RetainIDs)
	// A retention counts ticks (1 tick = 1 ms): 500µs would be 0 ticks,
	// which prunes everything acked (or every tombstone) at once — the
	// opposite of 0, which keeps them forever.
	case c.RetainAcked%time.Millisecond != 0:
		return invalid("retain_acked", "must be a whole number of milliseconds (the relay's tick), got %s", c.RetainAcked)
	case c.RetainIDs%time.Millisecond != 0:
		return invalid("retain_ids", "must be a whole number of milliseconds (the relay's tick), got %s", c.RetainIDs)
	case c.RetainAcked > 0 && c.RetainIDs > 0 && c.RetainIDs < c.RetainAcked:
		return invalid("retain_ids", "%s is shorter than retain_acked %s: a pruned event's id must stay idempotent at least as long as its body is kept", c.RetainIDs, c.RetainAcked)
	case c.PruneInterval < 0:
		return invalid("prune_interval", "must not be negative, got %s", c.PruneInterval)
	case c.PruneBatch < 0:
		return invalid("prune_batch", "must not be negative, got %d", c.PruneBatch)
	case c.Quantum < 0:
		return invalid("quantum", "must not be negative, got %s", c.Quantum)
	case c.MaxGroupSlots < 0 || c.MaxGroupSlots > c.Workers:
		return invalid("max_group_slots", "must be 0 (no cap) to workers (%d), got %d", c.Workers, c.MaxGroupSlots)
	case c.GroupsRefresh < 0:
		return invalid("groups_refresh", "must not be negative, got %s", c.GroupsRefresh)
	}
	if c.Name != "" {
		if err := fairrelay.CheckID("name", c.Name); err != nil {
			return err
		}
	}
	return nil
}

// CheckLease reports ErrInvalidInput (field "lease") unless a policy's lease
// (ticks = ms) exceeds the delivery timeout plus the lease margin: a
// delivery must not outlive its lease. Config.Validate runs it; a caller
// may run it before it opens (or creates) the queue store.
//
// The error's Hint names fairrelay.DaemonPolicy: a Config{} without a
// Policy has the reference policy's lease of 5 ticks, made for scripts.
func CheckLease(lease int64, timeout, margin time.Duration) error {
	if l := time.Duration(lease) * time.Millisecond; l <= timeout+margin {
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "lease",
			Message: fmt.Sprintf("%s must exceed the delivery timeout %s plus the margin %s: a delivery could outlive its lease", l, timeout, margin),
			Hint:    fmt.Sprintf("the lease is the queue's Policy.Lease, in ms; fairrelay.DaemonPolicy() gives one for a daemon, %s", time.Duration(fairrelay.DaemonPolicy().Lease)*time.Millisecond)}
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
	// lease: the lease ran out before the settle could be sent (tried
	// again while the store failed), or at the shutdown deadline the store
	// still failed or another transaction still held the event's flow
	// (Result.Held is then set).
	LeaseLost bool
	// At is the tick of the settle.
	At int64
	// Latency is the delivery's duration, from send to answer, as
	// Config.Source measures it.
	Latency time.Duration
}

// Quarantine reports one head quarantined to Config.OnQuarantine.
type Quarantine struct {
	// Head is the quarantined event, with the reason (SPEC §2: a permanent
	// outcome is its own reason; budget_exhausted otherwise) and its
	// generation and attempts at the write.
	Head fairrelay.Quarantined
	// At is the tick of the write that quarantined it.
	At int64
	// ByClaim: a claim quarantined it (no answer was settled); else a
	// settle of Outcome did, with the sink's Detail.
	ByClaim bool
	Outcome fairrelay.Outcome
	Detail  string
}

// Relay is the dispatch daemon. Create it with New, run it once with Run.
type Relay struct {
	cfg    Config
	q      *fairrelay.Queue
	clock  *Clock
	log    *slog.Logger
	serial bool       // the store has one writer at a time (see write)
	mode   settleMode // who settles the answers (pipeline)
	// heartbeat (ticks) is how far an idle relay's clock may run ahead of
	// the stored tick before it writes it: half the lease's slack over a
	// delivery, so that a lease another relay grants at a clock that far
	// behind still outlasts its delivery (claimLoop).
	heartbeat int64
	writeMu   sync.Mutex    // orders this process's writes by tick when serial
	failLog   *logcap.Cap   // bounds the WARN lines of failed deliveries (report)
	wake      chan struct{} // a token that ends the claimer's idle wait
	changed   chan struct{} // the same, from the queue's change signal
	running   atomic.Bool
	pipe      atomic.Pointer[pipeline] // Run's, while it runs: Leased
	phase     atomic.Int32             // phaseNew … phaseStopped, for Ready
	health    *health                  // the store round trips: error streaks, readiness
	ts        *timeshare               // fair by worker time (SPEC §11)
	// pruneWallKept: the last prune kept back by the wall clock what its
	// ticks made due (warned once per streak; pruneLoop's goroutine only).
	pruneWallKept bool
}

// New validates cfg, starts the daemon clock at the queue's stored tick
// (SPEC §7) and reads the groups' weights and slot caps (SPEC §11).
// Errors: ErrInvalidInput naming the field (see Config.Validate); ErrBusy
// or ErrDatabase reading the clock or the groups (New does not retry: a
// store that cannot be read at start may as well be misnamed).
func New(ctx context.Context, cfg Config) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c, err := cfg.Queue.Clock(ctx)
	if err != nil {
		return nil, fmt.Errorf("relay: read the stored tick: %w", err)
	}
	r := &Relay{
		cfg: cfg, q: cfg.Queue, clock: NewClock(cfg.Source, c.Tick), log: cfg.Logger,
		serial: !cfg.Queue.ConcurrentWriters(), mode: besideClaims{}, wake: make(chan struct{}, 1), changed: make(chan struct{}, 1),
		heartbeat: max(1, (cfg.Queue.Policy().Lease-(cfg.DeliveryTimeout+cfg.LeaseMargin).Milliseconds())/2),
		health:    newHealth(cfg.Source, cfg.Logger, cfg.Metrics),
		failLog:   logcap.New(),
		ts:        newTimeshare(cfg.Source, cfg.Workers, cfg.Quantum, cfg.MaxGroupSlots, cfg.Metrics),
	}
	if err := r.ts.refresh(ctx, cfg.Queue); err != nil {
		return nil, fmt.Errorf("relay: read the groups' weights: %w", err)
	}
	if r.serial {
		r.mode = withClaims{}
	}
	if span := retrySpan(cfg.Queue.Policy()); span < minRetrySpan {
		// A library user's report: a Queue opened with Policy{Lease:
		// 30_000}, its other fields the reference policy's (budget 3,
		// backoff 2 to 8 ticks), quarantined a head after 3 failures in
		// 10 ms: a receiver restarting for a second quarantined every head
		// it was sent.
		r.log.Warn("relay: the queue's policy gives a failing head all its retries within a second, so a receiver down for a moment gets its heads quarantined (budget_exhausted); fairrelay.DaemonPolicy() retries for about an hour",
			"retries_within", time.Duration(span)*time.Millisecond, "budget", cfg.Queue.Policy().Budget,
			"backoff_base_ticks", cfg.Queue.Policy().BackoffBase, "backoff_cap_ticks", cfg.Queue.Policy().BackoffCap)
	}
	return r, nil
}

// minRetrySpan is the shortest span of retries, in ticks (ms), that New
// takes without a warning: 1 s.
const minRetrySpan = 1_000

// retrySpan returns the ticks a head that keeps failing transiently waits
// in backoff before its round's budget quarantines it (SPEC §2: attempt n
// waits min(BackoffBase·2^(n-1), BackoffCap), before jitter), over the
// Budget-1 waits between its Budget claims.
func retrySpan(p fairrelay.Policy) int64 {
	var span int64
	d := p.BackoffBase
	for n := int64(1); n < p.Budget && span < minRetrySpan; n++ {
		span += min(d, p.BackoffCap)
		if d < p.BackoffCap {
			d *= 2
		}
	}
	return span
}

// Now returns the daemon clock's current tick.
func (r *Relay) Now() int64 { return r.clock.Now() }

// Wake ends the claimer's idle wait, so it claims at once (call it after
// enqueueing from this process; Do calls it).
func (r *Relay) Wake() { kick(r.wake) }

// Do runs fn with the daemon clock's current tick; when another process's
// write overtook it (fn got ErrClockRegressed, which changed nothing), the
// clock moves up to the stored tick and fn runs again, up to 10 more
// times, so an enqueue or redrive
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

// Run dispatches until ctx is done, then shuts down gracefully (package
// doc) and returns nil. It rides out store errors (the database
// unreachable, restarting, busy or out of space): each failed round trip is
// tried again after a pause (Config.RetryWait), and the relay resumes by
// itself once the store answers (Health, Ready). It returns early, after
// the same graceful shutdown, only for the store errors waiting does not
// cure, with the error: fairrelay.ErrInvalidInput (a configuration the
// store refuses, or a stored tick beyond the range of ticks),
// fairrelay.ErrFileReplaced (a SQLite store's file removed or replaced
// under the relay), fairrelay.ErrNotDatabase (the store's tables or
// schema gone), and fairrelay.ErrClosed (Config.Queue closed before Run
// returned: close the Queue after Run). A supervisor restarts the process
// on any of them. Store errors are never taken for idle or for an
// outcome. Run may be called once.
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("relay: Run called twice")
	}
	r.phase.Store(phaseRunning)
	defer r.phase.Store(phaseStopped)
	// Settles must outlive ctx: in-flight work is finished after a signal.
	// Only a store that has not answered for a lease past the shutdown
	// deadline cuts them off (below).
	settleCtx, cutStore := context.WithCancel(context.WithoutCancel(ctx))
	defer cutStore()
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
	p := &pipeline{combine: r.mode.start(), inDelivery: map[string]chan struct{}{}, claimKick: make(chan struct{}, 1), settleKick: make(chan struct{}, 1)}
	r.pipe.Store(p)
	defer r.pipe.Store(nil)
	r.log.Info("relay: started", "name", r.cfg.Name, "workers", r.cfg.Workers, "tick", r.clock.Now(),
		"lease_ms", r.q.Policy().Lease, "timeout", r.cfg.DeliveryTimeout, "policy", r.q.Policy().Entry,
		"budget", r.q.Policy().Budget, "backoff_base_ms", r.q.Policy().BackoffBase, "backoff_cap_ms", r.q.Policy().BackoffCap,
		"retain_acked", retention(r.cfg.RetainAcked), "retain_ids", retention(r.cfg.RetainIDs), "settles", r.mode)
	r.logLeasedAtStart(claimCtx)
	watchDone := r.watchChanges(claimCtx)
	var deliveries sync.WaitGroup
	claimerDone, settlerDone, prunerDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(prunerDone)
		groupsDone := make(chan struct{})
		go func() {
			defer close(groupsDone)
			r.refreshLoop(claimCtx)
		}()
		r.pruneLoop(claimCtx)
		<-groupsDone
	}()
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
	r.phase.Store(phaseStopping)
	r.log.Info("relay: stopping: no new claims; waiting for in-flight deliveries", "deadline", r.cfg.ShutdownTimeout)
	done := make(chan struct{})
	go func() {
		<-claimerDone
		<-settlerDone
		<-prunerDone
		<-watchDone
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
		// The settles and claims under way wait for the store. One that
		// does not answer (a server that stopped answering, a partition
		// without a reset) held Run for as long as the connection's TCP
		// keepalive took, tens of minutes (a breaker's report). A lease
		// later their answers could no longer settle anyway: cut them off.
		grace := time.NewTimer(time.Duration(r.q.Policy().Lease) * time.Millisecond)
		defer grace.Stop()
		select {
		case <-done:
		case <-grace.C:
			r.log.Error("relay: shutdown: the store has not answered for a lease past the deadline; cutting off its calls (their events wait out their leases)")
			cutStore()
			<-done
		}
	}
	p.mu.Lock()
	if n := len(p.answers); n > 0 {
		// Only after an error the relay does not ride out stopped the
		// settler.
		r.log.Warn("relay: answers not settled; their events wait out their leases", "count", n)
	}
	p.mu.Unlock()
	// The relay's own clock, not the store's: the store keeps the tick of
	// its last write, which an idle relay makes only every heartbeat, so a
	// restart starts from there (a fresh user read tick= as saved).
	if fatal != nil {
		// Said with the stop, not after it: the error that stopped the
		// relay came in a later line only, the caller's (a fresh user's
		// report: "relay: stopped" first, then why).
		r.log.Error("relay: stopped on an error", "clock_tick", r.clock.Now(), "err", fatal)
		return fatal
	}
	r.log.Info("relay: stopped", "clock_tick", r.clock.Now())
	return nil
}

// Leased returns how many heads this relay holds under its leases while
// Run runs: claimed and not yet settled (deliveries under way, answers
// waiting for their settle or in its transaction); 0 before Run and after
// it returns. A process that ends now (a second signal, a supervisor's
// kill) leaves them leased: each is delivered again, by any relay, once its
// lease runs out (SPEC §2), up to Policy.Lease milliseconds later. Safe for
// concurrent use.
func (r *Relay) Leased() int {
	p := r.pipe.Load()
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delivering + len(p.answers) + p.settling + p.combining
}

// logLeasedAtStart says, when heads are leased as the relay starts, how
// many and why they may wait: after a relay was killed its claims are
// delivered again only once their leases run out, up to a lease, and a
// restart said nothing of it, so the wait read as a hang (an operator's
// report). They may as well be another running relay's. A failed read is
// left to the claims, which report the store's errors.
func (r *Relay) logLeasedAtStart(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	o, err := r.q.Overview(rctx, fairrelay.OverviewParams{})
	if err != nil || o.Inflight == 0 {
		return
	}
	r.log.Info("relay: heads leased at start, by another relay on this store or by one that stopped without settling them: those wait out their leases (up to lease_ms), then are delivered again",
		"leased", o.Inflight, "lease_ms", r.q.Policy().Lease)
}

// defaultName is HOST:PID, the relay's name in the attempt history when
// Config.Name is not set; a host name that is not a valid id gives
// "relay:PID".
func defaultName() string {
	pid := strconv.Itoa(os.Getpid())
	if h, err := os.Hostname(); err == nil && fairrelay.CheckID("name", h+":"+pid) == nil {
		return h + ":" + pid
	}
	return "relay:" + pid
}

// retention is a retention period as the start line logs it: 0 keeps for
// ever ("forever"), which "0s" would read as "prune at once".
func retention(d time.Duration) string {
	if d <= 0 {
		return "forever"
	}
	return d.String()
}
