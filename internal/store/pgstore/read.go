package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fairrelay/fairrelay/internal/store"
)

// ReadTx is a REPEATABLE READ READ ONLY transaction on the PostgreSQL
// store: one snapshot for all its statements, no lock taken.
type ReadTx struct {
	tx pgx.Tx
}

var _ store.ReadTx = (*ReadTx)(nil)

// BeginRead starts a read-only snapshot transaction.
func (s *Store) BeginRead(ctx context.Context) (store.ReadTx, error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, Translate(fmt.Errorf("begin read transaction: %w", err))
	}
	return &ReadTx{tx: tx}, nil
}

// query runs the named query and calls each for every row.
func (t *ReadTx) query(ctx context.Context, name string, each func(scanner) error, args ...any) error {
	rows, err := t.tx.Query(ctx, q[name], args...)
	if err != nil {
		return Translate(fmt.Errorf("%s: %w", name, err))
	}
	defer rows.Close()
	return eachRow(name, rows, each)
}

// Clock reads the stored clock.
func (t *ReadTx) Clock(ctx context.Context) (store.Clock, error) {
	var c store.Clock
	err := t.query(ctx, "ClockGet", func(r scanner) error { return r.Scan(&c.Tick, &c.Ticket) })
	return c, err
}

// FlowList lists flows by flow id after the given one.
func (t *ReadTx) FlowList(ctx context.Context, after string, limit int) ([]store.FlowRow, error) {
	return t.flows(ctx, "FlowList", after, limit)
}

// FlowSearch lists the flows whose id starts with prefix, after the given
// one.
func (t *ReadTx) FlowSearch(ctx context.Context, prefix, after string, limit int) ([]store.FlowRow, error) {
	if end := store.PrefixEnd(prefix); end != "" {
		return t.flows(ctx, "FlowSearch", prefix, end, after, limit)
	}
	return t.flows(ctx, "FlowSearchOpen", prefix, after, limit)
}

// PausedList lists the paused flows after the given one.
func (t *ReadTx) PausedList(ctx context.Context, after string, limit int) ([]store.FlowRow, error) {
	return t.flows(ctx, "PausedList", after, limit)
}

// Counts counts the inflight and quarantined heads and the paused flows,
// each up to max.
func (t *ReadTx) Counts(ctx context.Context, max int) (store.Counts, error) {
	var c store.Counts
	err := t.query(ctx, "Counts", func(r scanner) error { return r.Scan(&c.Inflight, &c.Quarantined, &c.Paused) }, max)
	return c, err
}

// OldestWaiting reads the event not acked that was enqueued first.
func (t *ReadTx) OldestWaiting(ctx context.Context) (*store.EventRow, error) {
	var out *store.EventRow
	err := t.query(ctx, "OldestWaiting", func(r scanner) error {
		e, err := scanEvent(r)
		out = &e
		return err
	})
	return out, err
}

// SettledSince lists the attempts settled since sinceWall, newest first.
func (t *ReadTx) SettledSince(ctx context.Context, sinceWall int64, limit int) ([]store.AttemptRow, error) {
	return t.attempts(ctx, "SettledSince", sinceWall, limit)
}

func (t *ReadTx) flows(ctx context.Context, name string, args ...any) ([]store.FlowRow, error) {
	var out []store.FlowRow
	err := t.query(ctx, name, func(r scanner) error {
		var fs flowScan
		if err := r.Scan(fs.targets(nil)...); err != nil {
			return err
		}
		f, _ := fs.row()
		out = append(out, f)
		return nil
	}, args...)
	return out, err
}

// FlowPick lists the first runnable flows in order, with their heads.
func (t *ReadTx) FlowPick(ctx context.Context, order store.Order, limit int) ([]store.FlowHead, error) {
	name := "PickFairRead"
	if order == store.OrderFlowID {
		name = "PickSeedRead"
	}
	var out []store.FlowHead
	err := t.query(ctx, name, func(r scanner) error {
		h, err := scanFlowHead(r)
		out = append(out, h)
		return err
	}, limit)
	return out, err
}

// NextWait reads the smallest wait_until.
func (t *ReadTx) NextWait(ctx context.Context) (int64, bool, error) {
	var w *int64
	err := t.query(ctx, "NextWait", func(r scanner) error { return r.Scan(&w) })
	if err != nil || w == nil {
		return 0, false, err
	}
	return *w, true, nil
}

// scanEvent scans the event columns of event_now.
func scanEvent(r scanner) (store.EventRow, error) {
	var es eventScan
	err := r.Scan(es.targets(nil)...)
	return es.row(), err
}

// EventGet reads one event.
func (t *ReadTx) EventGet(ctx context.Context, id string) (*store.EventRow, error) {
	var out *store.EventRow
	err := t.query(ctx, "EventGet", func(r scanner) error {
		e, err := scanEvent(r)
		out = &e
		return err
	}, id)
	return out, err
}

// Tombstone reads the tombstone of a pruned event's id.
func (t *ReadTx) Tombstone(ctx context.Context, id string) (*store.TombstoneRow, error) {
	var out *store.TombstoneRow
	err := t.query(ctx, "TombstoneRead", func(r scanner) error {
		var ts store.TombstoneRow
		out = &ts
		return r.Scan(&ts.Flow, &ts.Seq, &ts.AckedAt)
	}, id)
	return out, err
}

// Heads reads the head events of flows that have one, in one query.
func (t *ReadTx) Heads(ctx context.Context, flows []store.FlowRow) (map[string]*store.EventRow, error) {
	var ids []string
	var seqs []int64
	for _, f := range flows {
		if f.HeadSeq <= f.Seq {
			ids, seqs = append(ids, f.Flow), append(seqs, f.HeadSeq)
		}
	}
	out := map[string]*store.EventRow{}
	if len(ids) == 0 {
		return out, nil
	}
	err := t.query(ctx, "EventsAt", func(r scanner) error {
		e, err := scanEvent(r)
		out[e.Flow] = &e
		return err
	}, ids, seqs)
	return out, err
}

// EventList lists events by flow then seq.
func (t *ReadTx) EventList(ctx context.Context, afterFlow string, afterSeq int64, limit int) ([]store.EventRow, error) {
	return t.events(ctx, "EventList", afterFlow, afterSeq, limit)
}

// QuarantinedList lists quarantined events by flow.
func (t *ReadTx) QuarantinedList(ctx context.Context, afterFlow string, f store.QuarantinedFilter, limit int) ([]store.EventRow, error) {
	if end := store.PrefixEnd(f.Prefix); end != "" {
		return t.events(ctx, "QuarantinedRange", afterFlow, limit, f.Flow, f.Reason, f.Prefix, end, f.Group)
	}
	return t.events(ctx, "QuarantinedList", afterFlow, limit, f.Flow, f.Reason, f.Prefix, f.Group)
}

func (t *ReadTx) events(ctx context.Context, name string, args ...any) ([]store.EventRow, error) {
	var out []store.EventRow
	err := t.query(ctx, name, func(r scanner) error {
		e, err := scanEvent(r)
		out = append(out, e)
		return err
	}, args...)
	return out, err
}

// AuditList lists audit rows after the given row number.
func (t *ReadTx) AuditList(ctx context.Context, after int64, limit int) ([]store.AuditRow, error) {
	var out []store.AuditRow
	err := t.query(ctx, "AuditList", func(r scanner) error {
		var a store.AuditRow
		if err := r.Scan(&a.No, &a.EventID, &a.Flow, &a.Action, &a.Reason, &a.Operator, &a.PreviousReason, &a.Generation, &a.At, &a.Wall); err != nil {
			return err
		}
		out = append(out, a)
		return nil
	}, after, limit)
	return out, err
}

// Attempts lists an event's attempts by generation.
func (t *ReadTx) Attempts(ctx context.Context, eventID string) ([]store.AttemptRow, error) {
	return t.attempts(ctx, "AttemptList", eventID)
}

func (t *ReadTx) attempts(ctx context.Context, name string, args ...any) ([]store.AttemptRow, error) {
	var out []store.AttemptRow
	err := t.query(ctx, name, func(r scanner) error {
		var a store.AttemptRow
		if err := r.Scan(&a.EventID, &a.Generation, &a.Flow, &a.LeaseUntil, &a.ClaimedWall, &a.SettledAt, &a.SettledWall,
			&a.Outcome, &a.Status, &a.Detail, &a.DurationMs, &a.Relay); err != nil {
			return err
		}
		out = append(out, a)
		return nil
	}, args...)
	return out, err
}

// Rollback ends the read transaction.
func (t *ReadTx) Rollback(ctx context.Context) error {
	err := t.tx.Rollback(ctx)
	if err == pgx.ErrTxClosed {
		return nil
	}
	return Translate(err)
}

// GroupPick lists the first groups of the group runnable index.
func (t *ReadTx) GroupPick(ctx context.Context, order store.Order, limit int) ([]store.GroupRow, error) {
	name := "GroupPickFairRead"
	if order == store.OrderFlowID {
		name = "GroupPickSeedRead"
	}
	var out []store.GroupRow
	err := t.query(ctx, name, func(r scanner) error {
		var g store.GroupRow
		if err := r.Scan(groupTargets(&g)...); err != nil {
			return err
		}
		out = append(out, g)
		return nil
	}, limit)
	return out, err
}

// GroupList lists group rows by name, with flow counts and backlogs
// (counted from the flows: seq - head_seq + 1 each).
func (t *ReadTx) GroupList(ctx context.Context, after string, limit int) ([]store.GroupInfo, error) {
	var out []store.GroupInfo
	err := t.query(ctx, "GroupList", func(r scanner) error {
		var g store.GroupInfo
		if err := r.Scan(append(groupTargets(&g.GroupRow), &g.Flows, &g.Backlog, &g.MaxSlots)...); err != nil {
			return err
		}
		out = append(out, g)
		return nil
	}, after, limit)
	if err != nil || len(out) == 0 {
		return out, err
	}
	n := map[string]int64{}
	err = t.query(ctx, "GroupQuarantined", func(r scanner) error {
		var g string
		var c int64
		if err := r.Scan(&g, &c); err != nil {
			return err
		}
		n[g] = c
		return nil
	}, out[0].Group, out[len(out)-1].Group)
	for i := range out {
		out[i].Quarantined = n[out[i].Group]
	}
	return out, err
}

// GroupSettings lists the groups whose weight, backlog limit or slot cap
// is set, by name, from the group rows alone.
func (t *ReadTx) GroupSettings(ctx context.Context, after string, limit int) ([]store.GroupSetting, error) {
	var out []store.GroupSetting
	err := t.query(ctx, "GroupSettings", func(r scanner) error {
		var g store.GroupSetting
		if err := r.Scan(&g.Group, &g.Weight, &g.MaxBacklog, &g.MaxSlots); err != nil {
			return err
		}
		out = append(out, g)
		return nil
	}, after, limit)
	return out, err
}

// Settings reads the store-wide limits.
func (t *ReadTx) Settings(ctx context.Context) (store.Settings, error) {
	var s store.Settings
	err := t.query(ctx, "SettingsLimits", func(r scanner) error { return r.Scan(&s.MaxBacklog, &s.MaxFlowBacklog) })
	return s, err
}

// FlowTotals counts the flows and the events not acked, in one pass.
func (t *ReadTx) FlowTotals(ctx context.Context) (flows, backlog int64, err error) {
	err = t.query(ctx, "FlowTotals", func(r scanner) error { return r.Scan(&flows, &backlog) })
	return flows, backlog, err
}

// Backlog counts the events not acked, from the flows.
func (t *ReadTx) Backlog(ctx context.Context) (int64, error) {
	var n int64
	err := t.query(ctx, "Backlog", func(r scanner) error { return r.Scan(&n) })
	return n, err
}
