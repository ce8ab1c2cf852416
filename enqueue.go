package fairrelay

import (
	"cmp"
	"context"
	"database/sql"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/fairrelay/fairrelay/internal/store"
)

// EnqueueParams is one event to enqueue in its own transaction, or in the
// caller's (SPEC §2 enqueue).
type EnqueueParams struct {
	// ID is the event id, unique in the store, following CheckID's rule
	// (1 to MaxIDBytes bytes of UTF-8, no control or format characters, no
	// white space at either end). The receiver deduplicates by it.
	ID string
	// Flow is the ordering key, following CheckID's rule.
	Flow string
	// Group is the tenant the flow belongs to (SPEC §8), following
	// CheckID's rule; optional. The enqueue that creates the flow fixes
	// its group: without one the flow joins the group named like itself.
	// Naming another group for an existing flow is ErrInvalidInput naming
	// "group", and nothing changes, not even the tick.
	Group string
	// Body is the immutable payload: 1 to Policy.MaxBodyBytes bytes, stored
	// and delivered byte for byte.
	Body []byte
	// At is the tick of the write (SPEC §2: at >= the stored tick). The event
	// is eligible from this tick on. Beside a running relay, whose clock
	// moves every millisecond, pass AtStored (the store's tick, read in the
	// same transaction) or the relay's own tick (relay.Relay.Do). The zero
	// value is tick 0, not the store's tick: once the store's tick has
	// moved past 0 it answers ErrClockRegressed (naming AtStored).
	At int64
	// Floor runs the write at the stored tick when At lies below it, instead
	// of failing with ErrClockRegressed (as ClaimParams.Floor);
	// EnqueueResult.Tick says the tick it ran at. It is for a daemon clock
	// (SPEC §7, relay.Relay.Do), so Policy.MaxTickJump does not apply to a
	// floor write: a relay's first write after an outage longer than the
	// limit would be refused. Do not set it for a tick a person or another
	// system typed; leave it false, or pass AtStored.
	Floor bool
}

// NewEvent is one event of an EnqueueMany: the fields of EnqueueParams but
// the tick, which is the batch's.
type NewEvent struct {
	ID    string
	Flow  string
	Group string
	Body  []byte
}

// EnqueueManyParams enqueues many events at one tick in one transaction.
type EnqueueManyParams struct {
	// At is the tick of the whole batch; AtStored runs it at the store's
	// tick.
	At int64
	// Floor as EnqueueParams.Floor.
	Floor bool
	// Events are the events to enqueue, in order.
	Events []NewEvent
}

// EnqueueStatus is the answer of enqueue.
type EnqueueStatus string

const (
	// EnqueueCreated: a new event was stored with the next seq of its flow.
	EnqueueCreated EnqueueStatus = "created"
	// EnqueueExisting: the same id, flow and body is already stored; nothing
	// changed. Seq is the stored seq.
	EnqueueExisting EnqueueStatus = "existing"
	// EnqueueConflict: the id is stored with another flow or body; nothing
	// changed.
	EnqueueConflict EnqueueStatus = "conflict"
	// EnqueueFull: the id is new, but storing it would go over a backlog
	// limit (SPEC §8); Limit names the first that applied. Nothing changed
	// but the tick. Not an error: the producer decides (drop, retry later,
	// shed load).
	EnqueueFull EnqueueStatus = "full"
)

// The limits an EnqueueFull names (SPEC §8), checked in this order.
const (
	LimitStore = "store"
	LimitGroup = "group"
	LimitFlow  = "flow"
)

// EnqueueResult is the answer of Enqueue. Seq is 0 for EnqueueConflict
// and EnqueueFull; Limit is set for EnqueueFull only.
type EnqueueResult struct {
	Status EnqueueStatus `json:"status"`
	Seq    int64         `json:"seq,omitempty"`
	Limit  string        `json:"limit,omitempty"`
	// Tick is the tick the write ran at (At, or the stored tick under
	// AtStored or Floor). Not part of the SPEC §6 answer.
	Tick int64 `json:"-"`
}

// Enqueue stores one event in its own transaction (SPEC §2): a new id gets
// the next seq of its flow (creating the flow), a repeated id with the same
// flow and body answers existing, a repeated id with anything else answers
// conflict; a new id that would go over a backlog limit answers full
// (SPEC §8). Errors (SPEC §2 order): ErrClockRegressed; ErrInvalidInput
// naming at, id, flow, group or body; ErrBusy; ErrDatabase. On error
// nothing changed (but for ErrCommitUnknown on PostgreSQL). A ctx that ends
// while the call waits — for a flow an open outbox transaction holds, say —
// ends it then, with ctx's error in the chain (errors.Is) and nothing
// written.
func (q *Queue) Enqueue(ctx context.Context, p EnqueueParams) (EnqueueResult, error) {
	rs, err := q.EnqueueMany(ctx, EnqueueManyParams{At: p.At, Floor: p.Floor, Events: []NewEvent{p.event()}})
	if err != nil {
		return EnqueueResult{}, single(err)
	}
	return rs[0], nil
}

// single clears Error.Item for a call of one item, which has no position
// to give.
func single(err error) error {
	var e *Error
	if errors.As(err, &e) && e.Item != 0 {
		c := *e
		c.Item = 0
		return &c
	}
	return err
}

func (p EnqueueParams) event() NewEvent {
	return NewEvent{ID: p.ID, Flow: p.Flow, Group: p.Group, Body: p.Body}
}

// EnqueueMany stores p.Events in one transaction at one tick, each with the
// answer Enqueue would give in that order, but for one rule: a flow refused
// as full (SPEC §8) is refused again, with a limit that applies then or
// else the one it met, for its later events of the batch that join the
// same group, so a flow's later event never overtakes a refused one even
// when acks commit while the batch waits for a lock (PostgreSQL). A later
// event naming the flow in another group, when the refused one made no
// flow, is weighed as Enqueue would. A bad event fails the whole batch
// and nothing is written (the error names the field). An empty batch writes
// nothing, not even the tick, and answers only the clock's checks. The
// caller's slices are not changed. Errors as Enqueue; an ErrInvalidInput
// about one event gives its position in p.Events (Error.Item).
func (q *Queue) EnqueueMany(ctx context.Context, p EnqueueManyParams) ([]EnqueueResult, error) {
	return q.enqueue(ctx, nil, p)
}

// EnqueueTx stores one event inside a *sql.Tx the caller owns — the
// transactional outbox: the business write and the event commit or roll
// back together. On SQLite, tx is a transaction on the same file (open its
// pool with fairrelay.SQLiteDSN); on PostgreSQL, a transaction of pgx's
// database/sql driver (github.com/jackc/pgx/v5/stdlib) on the same database
// (EnqueuePgxTx takes a pgx.Tx). The caller commits. p.At is usually
// AtStored: a producer does not know the relay's clock. Until the caller
// commits, the caller's transaction holds a write lock: on SQLite the
// file's (every other writer waits); on PostgreSQL only the row of p.Flow
// (SPEC §10: another transaction that enqueues to the same flow waits, so
// seq order is commit order; every other flow goes on, and the relay puts
// off a settle of that flow's head — SettleManyParams.SkipHeld). On
// PostgreSQL a wait for a flow another transaction holds lasts as long as
// the caller's session allows (its lock_timeout; PostgreSQL's default: no
// limit), not Config.BusyTimeout, which bounds fairrelay's own
// transactions: set it in the transaction (SET LOCAL lock_timeout = '5s')
// and a longer wait fails with ErrBusy. A new flow takes its place in the
// fair rotation (SPEC §7: the claim ticket) when the caller commits, on
// PostgreSQL from the ticket committed then under READ COMMITTED, or the
// one of the transaction's snapshot under REPEATABLE READ (docs/outbox.md).
// Under REPEATABLE READ or SERIALIZABLE an enqueue onto a flow the relay
// claimed or settled after the snapshot fails with ErrBusy (40001): enqueue
// under READ COMMITTED, or retry. In a PostgreSQL transaction the caller
// will PREPARE (two-phase commit), run SET LOCAL fairrelay.notify = off
// first: an enqueue that makes a head claimable notifies the relay, and
// PostgreSQL refuses to prepare a transaction that notified (migration
// 033; the relay then finds the event at its next poll); a value of
// fairrelay.notify other than on or off (true, yes, 1; false, no, 0; any
// case) or empty fails with ErrInvalidInput naming fairrelay.notify
// (migration 034).
// Answers and errors as Enqueue, plus ErrInvalidInput (field "tx") for a transaction
// that is not on the Queue's store — on SQLite another file; on PostgreSQL
// another database, whether or not it holds a store in a schema of the same
// name (checked in the same statement, before anything is written), or the
// store's schema made again since Open, or (SQLite) a transaction SQLite
// has already rolled back, or a transaction of another driver (a SQLite
// one to a PostgreSQL queue, a PostgreSQL one to a SQLite queue); an error
// leaves the caller's transaction to be rolled back by the caller. Nothing
// of the call stays in the caller's transaction after an error (on SQLite
// a savepoint of its own). On PostgreSQL the transaction is then unusable
// whenever the server raised the error (ErrClockRegressed, a refused
// field, ErrBusy, ErrDatabase): every later statement fails with "current
// transaction is aborted" until the caller rolls back; only the errors
// found before anything is sent (an empty id, a bad tick) leave it usable.
// On SQLite it stays usable, but a ctx that ends while one of its writes
// runs interrupts it, and SQLite then rolls back the caller's whole
// transaction (the error says so): the caller's later statements would run
// outside any transaction.
func (q *Queue) EnqueueTx(ctx context.Context, tx *sql.Tx, p EnqueueParams) (EnqueueResult, error) {
	if tx == nil {
		return EnqueueResult{}, invalid("tx", "nil *sql.Tx")
	}
	return q.enqueueOne(ctx, tx, p)
}

// EnqueuePgxTx is EnqueueTx for a pgx.Tx on the PostgreSQL database of the
// store (the pgx-native outbox): one statement, a call of the store's SQL
// function enqueue (SPEC §10). Answers and errors as EnqueueTx; on a
// SQLite store it fails with ErrInvalidInput (field "tx").
func (q *Queue) EnqueuePgxTx(ctx context.Context, tx pgx.Tx, p EnqueueParams) (EnqueueResult, error) {
	if tx == nil {
		return EnqueueResult{}, invalid("tx", "nil pgx.Tx")
	}
	return q.enqueueOne(ctx, tx, p)
}

// EnqueueManyTx is EnqueueMany inside a *sql.Tx the caller owns (the
// transactional outbox, as EnqueueTx): a business transaction's events in
// one call, one statement on PostgreSQL (the SQL function enqueue_many,
// SPEC §10), which locks the flows it writes in one order — several
// EnqueueTx calls in one transaction lock them in call order, and two
// transactions taking two flows in opposite orders wait for each other
// (docs/outbox.md) — and costs one subtransaction instead of one a call.
// The transaction's rules and errors are EnqueueTx's; the answers and the
// batch's are EnqueueMany's. An empty p.Events writes nothing.
func (q *Queue) EnqueueManyTx(ctx context.Context, tx *sql.Tx, p EnqueueManyParams) ([]EnqueueResult, error) {
	if tx == nil {
		return nil, invalid("tx", "nil *sql.Tx")
	}
	return q.enqueue(ctx, tx, p)
}

// EnqueueManyPgxTx is EnqueueManyTx for a pgx.Tx on the store's PostgreSQL
// database (as EnqueuePgxTx). On a SQLite store it fails with
// ErrInvalidInput (field "tx").
func (q *Queue) EnqueueManyPgxTx(ctx context.Context, tx pgx.Tx, p EnqueueManyParams) ([]EnqueueResult, error) {
	if tx == nil {
		return nil, invalid("tx", "nil pgx.Tx")
	}
	return q.enqueue(ctx, tx, p)
}

func (q *Queue) enqueueOne(ctx context.Context, caller any, p EnqueueParams) (EnqueueResult, error) {
	rs, err := q.enqueue(ctx, caller, EnqueueManyParams{At: p.At, Floor: p.Floor, Events: []NewEvent{p.event()}})
	if err != nil {
		return EnqueueResult{}, single(err)
	}
	return rs[0], nil
}

// enqueue runs the backend's enqueue (store.Store.Enqueue: the SQL function
// on PostgreSQL) in its own transaction (caller nil) or the caller's, and
// translates its answers and errors.
func (q *Queue) enqueue(ctx context.Context, caller any, p EnqueueManyParams) ([]EnqueueResult, error) {
	if len(p.Events) == 0 {
		// Nothing to write: the clock's checks answer, and the tick stays
		// (on every backend alike; a tick is recorded on rows an enqueue
		// writes, SPEC §10, and an empty one writes none).
		if err := q.CheckTick(ctx, "enqueue", p.At, p.Floor); err != nil {
			return nil, err
		}
		return []EnqueueResult{}, nil
	}
	evs := make([]store.NewEvent, len(p.Events))
	for i, e := range p.Events {
		evs[i] = store.NewEvent{ID: e.ID, Flow: e.Flow, Group: e.Group, Body: e.Body}
	}
	sp := store.EnqueueParams{At: p.At, Floor: p.Floor, MaxTickJump: q.policy.MaxTickJump, MaxBodyBytes: q.policy.MaxBodyBytes, Events: evs}
	res, err := q.store.Enqueue(ctx, caller, sp)
	if err != nil {
		return nil, storeError("enqueue", err)
	}
	out := make([]EnqueueResult, len(res.Answers))
	for i, a := range res.Answers {
		out[i] = EnqueueResult{Status: EnqueueStatus(a.Status), Seq: a.Seq, Limit: a.Limit, Tick: res.Tick}
	}
	return out, nil
}

// storeError translates an error of a write the backend carries out whole
// (enqueue, configure, prune).
func storeError(op string, err error) error {
	var ce *store.ClockRegressedError
	var ie *store.InvalidError
	switch {
	case errors.As(err, &ce):
		return clockRegressed(cmp.Or(ce.Op, op), ce.At, ce.Stored)
	case errors.As(err, &ie):
		return &Error{Code: CodeInvalidInput, Field: ie.Field, Item: ie.Item, Message: ie.Message}
	}
	return dbError(op, err)
}
