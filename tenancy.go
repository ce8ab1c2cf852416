package fairrelay

import (
	"context"
	"time"

	"github.com/fairrelay/fairrelay/internal/store"
)

// MaxWeight is the largest group weight (SPEC §8).
const MaxWeight = 1000

// MaxGroupSlots is the largest ConfigureParams.MaxSlots: the most delivery
// slots (workers) a relay has (relay.MaxWorkers), so a larger cap would
// cap nothing, and was most likely a typo.
const MaxGroupSlots = 1024

// ConfigureParams changes the settings of SPEC §8, a write at a tick like
// any other: with Group, that group's Weight and MaxBacklog (the group is
// created when it does not exist, with no place in the rotation until its
// first flow); without, the store's MaxBacklog and MaxFlowBacklog. A nil
// field is left as it is. Limits count events not acked (ready, inflight
// and quarantined); 0 is no limit. Lowering a limit below the current
// backlog drops nothing: it only refuses new events.
type ConfigureParams struct {
	// At is the tick of the write; AtStored runs it at the store's tick.
	At int64
	// Floor as ClaimParams.Floor.
	Floor bool
	// Group names the group to configure (CheckID's rule); "" configures
	// the store.
	Group string
	// Weight is the group's share, 1 to MaxWeight: a saturated group of
	// weight w gets w claims for every claim of a saturated group of weight
	// 1. Only with Group.
	Weight *int64
	// MaxBacklog is the group's limit with Group, else the store's.
	MaxBacklog *int64
	// MaxFlowBacklog is every flow's limit; only without Group.
	MaxFlowBacklog *int64
	// MaxSlots caps the relay slots the group's deliveries may hold at
	// once (SPEC §11; 0: none, else 1 to MaxGroupSlots); only with Group.
	// The store keeps it for the relays (package relay), which read it;
	// claims ignore it.
	MaxSlots *int64
}

// Configure records p (SPEC §8) and returns the tick it ran at. On
// PostgreSQL, setting a store or group limit where there was none counts
// the backlog once, holding off the writers of the flows it counts (the
// whole store for a store limit) while it does; changing or removing a
// limit does not. Errors (SPEC §2 order): ErrClockRegressed;
// ErrInvalidInput naming at, group, weight (not an integer in 1 to
// MaxWeight, or without group), max_backlog (negative) or
// max_flow_backlog (negative, or with group) or max_slots (negative, above
// MaxGroupSlots, or without group); ErrBusy; ErrDatabase.
func (q *Queue) Configure(ctx context.Context, p ConfigureParams) (int64, error) {
	check := func() error {
		if p.Group != "" {
			if err := checkID("group", p.Group); err != nil {
				return err
			}
		}
		switch {
		case p.Weight != nil && p.Group == "":
			return invalid("weight", "is a group's: give group")
		case p.Weight != nil && (*p.Weight < 1 || *p.Weight > MaxWeight):
			return invalid("weight", "must be an integer in [1, %d], got %d", MaxWeight, *p.Weight)
		case p.MaxBacklog != nil && *p.MaxBacklog < 0:
			return invalid("max_backlog", "must not be negative, got %d", *p.MaxBacklog)
		case p.MaxFlowBacklog != nil && p.Group != "":
			return invalid("max_flow_backlog", "is the store's, for every flow: leave group out")
		case p.MaxFlowBacklog != nil && *p.MaxFlowBacklog < 0:
			return invalid("max_flow_backlog", "must not be negative, got %d", *p.MaxFlowBacklog)
		case p.MaxSlots != nil && p.Group == "":
			return invalid("max_slots", "is a group's: give group")
		case p.MaxSlots != nil && (*p.MaxSlots < 0 || *p.MaxSlots > MaxGroupSlots):
			return invalid("max_slots", "must be 0 (no cap) to %d (a relay's most workers), got %d", MaxGroupSlots, *p.MaxSlots)
		}
		return nil
	}
	tick, err := q.store.Configure(ctx, store.ConfigureParams{At: p.At, Floor: p.Floor, MaxTickJump: q.policy.MaxTickJump,
		Group: p.Group, Weight: p.Weight, MaxBacklog: p.MaxBacklog, MaxFlowBacklog: p.MaxFlowBacklog, MaxSlots: p.MaxSlots, Check: check})
	if err != nil {
		return 0, storeError("configure", err)
	}
	return tick, nil
}

// PruneParams is one prune (SPEC §8 retention).
type PruneParams struct {
	// At is the tick of the write; AtStored runs it at the store's tick.
	At int64
	// Floor as ClaimParams.Floor.
	Floor bool
	// AckedBefore: every event acked at a tick below it is deleted, with
	// its body and its attempt history.
	AckedBefore int64
	// IDsBefore: a deleted event acked at or after it leaves a tombstone
	// (its id, flow, seq, the SHA-256 of its body, the tick it was acked
	// at), so that enqueuing its id again still answers existing or
	// conflict; tombstones of events acked before it are deleted. At most
	// AckedBefore.
	IDsBefore int64
	// Limit, when positive, bounds the events and the tombstones one call
	// deletes, the oldest first: a prune of a large store runs as many
	// short transactions (PruneResult.More) that never hold the write lock
	// long. On SQLite such a call also ends, with More, once its
	// transaction has deleted for 2 ms (past its first 5 events: every
	// call makes progress), so that a slow disk does not lengthen what
	// dispatch waits behind it.
	// 0 deletes everything due in one transaction.
	Limit int
	// AckedMinAge and IDsMinAge, when positive, also hold back by the wall
	// clock what the ticks would delete: an event is deleted only if its
	// last claim was at least AckedMinAge ago by the queue's wall clock
	// (Config.Now; the claim's time is Attempt.ClaimedWall), and a
	// tombstone only if its event's last claim was at least IDsMinAge ago.
	// A retention counted back from the store's tick (the relay's
	// --retain-acked and --retain-ids) sets them to the same durations, so
	// that a tick that jumped ahead (wall-clock milliseconds given as a
	// tick, SPEC §7's max_tick_jump off) does not delete at once every
	// event and id acked before it: the prune keeps them, counts them in
	// PruneResult.WallKept, and deletes them once they are that old by the
	// wall clock too. A claim stamped later than the queue's wall clock
	// now (by a clock ahead of this one) holds nothing back: the ticks
	// alone decide it, so that one relay whose clock was years ahead does
	// not stall every prune. Events from before the wall-clock time was
	// kept (claimed_wall 0) are held back by nothing; the tombstones
	// written before it was kept (SQLite migration 007, PostgreSQL 036) are
	// dated, when a prune reads them, by that migration's epoch: its wall
	// time less their age in ticks then (a tick runs no faster than the
	// wall clock, so no earlier than their claim; the migration rewrites no
	// row). Not part of SPEC §8's prune (0: ticks alone).
	AckedMinAge, IDsMinAge time.Duration
}

// PruneResult counts what a prune deleted (SPEC §8: events, tombstones).
// An event acked before IDsBefore leaves no tombstone and counts in Events
// only, and in Forgotten: its id is forgotten with its body (enqueued
// again, it is a new event), as are the ids of the Tombstones deleted; the
// other Events - Forgotten ids stay idempotent by their new tombstones.
// Forgotten is not part of the SPEC §6 answer. More reports that Limit stopped the prune with more left to
// delete; Tick is the tick it ran at. WallKept counts the events and ids
// due by their ticks that AckedMinAge or IDsMinAge kept, of those the
// prune read: events not deleted, tombstones not deleted, and tombstones
// written for deleted events whose ids the ticks alone would have
// forgotten (on SQLite the first event held ends the prune's pass; on
// both, a call reads at most Limit of each): when positive, the store's
// tick runs ahead of the wall clock.
//
// Held is the longest this call held the store's writer in one write, in
// wall-clock time: on SQLite (one writer for the whole file, which
// dispatch waits for meanwhile) its transaction from BEGIN IMMEDIATE to the
// end of its commit, one step of the incremental vacuum that follows, or
// the checkpoint it may run on the write connection before its transaction
// so that the log starts over (these commits do not wait for the disk's
// flush: the prune flushes the log once, after its writes and before it
// answers, with the writer free);
// on PostgreSQL its transaction, which locks only the rows it deletes. What
// the call spent before that without holding anything (SQLite's wait for
// checkpoints beside the writers and their flush) is not in it, so Held, not the call's
// time, is what a dispatch step can wait behind a prune. The relay
// observes it in fairrelay_prune_write_seconds.
type PruneResult struct {
	Events     int64         `json:"events"`
	Tombstones int64         `json:"tombstones"`
	Forgotten  int64         `json:"-"`
	WallKept   int64         `json:"-"`
	More       bool          `json:"-"`
	Tick       int64         `json:"-"`
	Held       time.Duration `json:"-"`
}

// Prune deletes acked events and tombstones as p says (SPEC §8). Heads,
// seqs, served and the audit are untouched; an event that is not acked is
// never deleted. What it deleted is durable when it answers (SPEC §4): on
// SQLite its transactions commit under synchronous=NORMAL, so that the
// writer is free before the disk has flushed them, and the log is flushed
// (fsync) before Prune returns; any other writer's commit after them
// flushes them too. On PostgreSQL it skips the acked events, and the flows
// whose last acked event it would take, that another transaction holds
// locked (FOR UPDATE SKIP LOCKED, so that a prune does not wait for a
// business transaction's flow), leaves them for the next prune, and does
// not count them: PruneResult says what it deleted, not that nothing is
// left. An enqueue locks no tombstone: a prune may delete a due tombstone
// that an open transaction's enqueue answered existing or conflict from.
// Errors (SPEC §2 order): ErrClockRegressed;
// ErrInvalidInput naming at, acked_before or ids_before (not a tick in
// [0, MaxTick]), ids_before (above acked_before), limit, acked_min_age or
// ids_min_age (negative), or
// acked_before or ids_before further ahead of the prune's tick than the
// policy's MaxTickJump (when positive, and not under Floor: wall-clock
// milliseconds given for a tick would delete every tombstone; the
// prune's tick + 1 prunes everything acked so far);
// ErrBusy; ErrDatabase. An error whose result counts deletions came after
// they committed (on SQLite, the flush or the incremental vacuum that
// follows them); a ctx that ends during that vacuum stops it without an
// error.
func (q *Queue) Prune(ctx context.Context, p PruneParams) (PruneResult, error) {
	check := func() error {
		// Ticks are non-negative (SPEC §1) and at most MaxTick: -1 or a
		// tick beyond the range is a typo, not "nothing" or "everything".
		for _, f := range []struct {
			name string
			v    int64
		}{{"acked_before", p.AckedBefore}, {"ids_before", p.IDsBefore}} {
			if f.v < 0 || f.v > MaxTick {
				return invalid(f.name, "must be a tick in [0, %d], got %d", int64(MaxTick), f.v)
			}
		}
		if p.IDsBefore > p.AckedBefore {
			return invalid("ids_before", "must be at most acked_before (%d), got %d: a tombstone outlives its event", p.AckedBefore, p.IDsBefore)
		}
		if p.Limit < 0 {
			return invalid("limit", "must not be negative, got %d", p.Limit)
		}
		if p.AckedMinAge < 0 {
			return invalid("acked_min_age", "must not be negative, got %s", p.AckedMinAge)
		}
		if p.IDsMinAge < 0 {
			return invalid("ids_min_age", "must not be negative, got %s", p.IDsMinAge)
		}
		return nil
	}
	now := q.now()
	wallBefore := func(age time.Duration) int64 {
		if age <= 0 {
			return 0 // no wall-clock check (store.PruneParams.Walls)
		}
		return max(1, now.Add(-age).UnixMilli())
	}
	r, err := q.store.Prune(ctx, store.PruneParams{At: p.At, Floor: p.Floor, MaxTickJump: q.policy.MaxTickJump,
		AckedBefore: p.AckedBefore, IDsBefore: p.IDsBefore, Limit: p.Limit, Check: check,
		AckedWallBefore: wallBefore(p.AckedMinAge), IDsWallBefore: wallBefore(p.IDsMinAge), WallNow: now.UnixMilli()})
	res := PruneResult{Events: r.Events, Tombstones: r.Tombstones, Forgotten: r.Forgotten, WallKept: r.WallKept, More: r.More, Tick: r.Tick, Held: r.Held}
	if err != nil {
		// Deleted, then an error of the housekeeping after the commit:
		// the result still says what was deleted.
		return res, storeError("prune", err)
	}
	return res, nil
}

// GroupSetting is a group's settings without its counts, as GroupSettings
// lists it.
type GroupSetting struct {
	Group string `json:"group"`
	// Weight is the group's share of claims (SPEC §8) and of worker time
	// (SPEC §11): 1 to MaxWeight.
	Weight int64 `json:"weight"`
	// MaxBacklog is the group's limit on events not acked (0: none).
	MaxBacklog int64 `json:"max_backlog"`
	// MaxSlots caps the relay slots the group's deliveries hold at once
	// (0: none).
	MaxSlots int64 `json:"max_slots"`
}

// GroupSettings lists up to limit groups by name after the given one (""
// starts at the first) whose settings differ from a new group's — a weight
// other than 1, a backlog limit or a slot cap — in one read transaction
// that reads the group rows and no flow. It is what a relay needs of the
// groups, at a cost that does not grow with the flows (Groups counts each
// group's flows and backlog). Errors: ErrInvalidInput (field "limit" below
// 1; "after" not valid UTF-8 or holding a control character, CheckSearch),
// ErrBusy, ErrDatabase.
func (q *Queue) GroupSettings(ctx context.Context, after string, limit int) ([]GroupSetting, error) {
	if limit < 1 {
		return nil, invalid("limit", "must be at least 1, got %d", limit)
	}
	if err := checkSearch("after", after); err != nil {
		return nil, err
	}
	tx, err := q.store.BeginRead(ctx)
	if err != nil {
		return nil, dbError("group settings", err)
	}
	defer tx.Rollback(ctx)
	gs, err := tx.GroupSettings(ctx, after, limit)
	if err != nil {
		return nil, dbError("group settings", err)
	}
	out := make([]GroupSetting, len(gs))
	for i, g := range gs {
		out[i] = GroupSetting{Group: g.Group, Weight: g.Weight, MaxBacklog: g.MaxBacklog, MaxSlots: g.MaxSlots}
	}
	return out, nil
}

// Settings are the store-wide settings and backlog (SPEC §8).
type Settings struct {
	// MaxBacklog and MaxFlowBacklog are the store's limits (0: none).
	MaxBacklog     int64 `json:"max_backlog"`
	MaxFlowBacklog int64 `json:"max_flow_backlog"`
	// Backlog counts the events not acked, as the store's limit does. On
	// PostgreSQL it is counted on each call.
	Backlog int64 `json:"backlog"`
}

// Settings reads the store-wide settings and backlog in one read
// transaction. Errors: ErrBusy, ErrDatabase.
func (q *Queue) Settings(ctx context.Context) (Settings, error) {
	tx, err := q.store.BeginRead(ctx)
	if err != nil {
		return Settings{}, dbError("settings", err)
	}
	defer tx.Rollback(ctx)
	s, err := tx.Settings(ctx)
	if err != nil {
		return Settings{}, dbError("settings", err)
	}
	n, err := tx.Backlog(ctx)
	if err != nil {
		return Settings{}, dbError("settings", err)
	}
	return Settings{MaxBacklog: s.MaxBacklog, MaxFlowBacklog: s.MaxFlowBacklog, Backlog: n}, nil
}

// GroupInfo is a group as Groups lists it: its settings, place in the
// rotation, flow count, backlog (events not acked) and quarantined heads.
type GroupInfo struct {
	GroupState
	Flows   int64 `json:"flows"`
	Backlog int64 `json:"backlog"`
	// MaxSlots caps the relay slots the group's deliveries hold at once
	// (0: none; ConfigureParams.MaxSlots).
	MaxSlots int64 `json:"max_slots"`
	// Quarantined counts the quarantined heads of the group's flows: the
	// heads `redrive --all --group` (QuarantinedParams.Group) would take,
	// one per flow at most (SPEC §2, §8).
	Quarantined int64 `json:"quarantined"`
}

// Groups lists up to limit groups by name after the given one ("" starts
// at the first), in one read transaction: the groups that have a row — a
// group some flow named, a configured one, or the own group of a flow
// another flow joined. A flow that is its own group (every flow, in a store
// where groups are not used) is not listed. Errors: ErrInvalidInput (field
// "limit" below 1; "after" not valid UTF-8 or holding a control character,
// CheckSearch), ErrBusy, ErrDatabase.
func (q *Queue) Groups(ctx context.Context, after string, limit int) ([]GroupInfo, error) {
	if limit < 1 {
		return nil, invalid("limit", "must be at least 1, got %d", limit)
	}
	if err := checkSearch("after", after); err != nil {
		return nil, err
	}
	tx, err := q.store.BeginRead(ctx)
	if err != nil {
		return nil, dbError("groups", err)
	}
	defer tx.Rollback(ctx)
	gs, err := tx.GroupList(ctx, after, limit)
	if err != nil {
		return nil, dbError("groups", err)
	}
	out := make([]GroupInfo, 0, len(gs))
	for _, g := range gs {
		out = append(out, GroupInfo{GroupState: groupState(g.GroupRow), Flows: g.Flows, Backlog: g.Backlog, MaxSlots: g.MaxSlots, Quarantined: g.Quarantined})
	}
	return out, nil
}
