package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fairrelay/fairrelay/internal/store"
)

// adminLane is the clock row of configure and prune (row 2, the enqueue
// lane's until migration 005): they queue on its lock, record their tick on
// it, and wait for no claim or settle.
var adminLane = []int32{2}

// admin runs fn in a transaction of the admin lane at the tick op resolves
// (store.ResolveTick), after check, and records the tick.
func (s *Store) admin(ctx context.Context, op string, at int64, floor bool, maxJump int64, check func() error,
	fn func(tx pgx.Tx, at int64) error) (int64, error) {
	var tick int64
	err := inTx(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, q["ClockLock"], adminLane); err != nil {
			return fmt.Errorf("ClockLock: %w", err)
		}
		var c store.Clock
		var minWait *int64
		if err := tx.QueryRow(ctx, q["ClockGetForUpdate"], adminLane).Scan(&c.Tick, &c.Ticket, &minWait); err != nil {
			return fmt.Errorf("ClockGetForUpdate: %w", err)
		}
		var err error
		if tick, err = store.ResolveTick(op, at, floor, maxJump, c.Tick); err != nil {
			return err
		}
		if check != nil {
			if err := check(); err != nil {
				return err
			}
		}
		if err := fn(tx, tick); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, q["ClockSet"], tick, c.Ticket, adminLane)
		return err
	})
	if err != nil {
		var ce *store.ClockRegressedError
		var ie *store.InvalidError
		var ck checkError
		switch {
		case errors.As(err, &ck):
			return 0, ck.err
		case errors.As(err, &ce), errors.As(err, &ie):
			return 0, err
		}
		return 0, Translate(fmt.Errorf("%s: %w", op, err))
	}
	return tick, nil
}

// checkError carries the error of a caller's check through the
// transaction, to reach the caller as it was.
type checkError struct{ err error }

func (e checkError) Error() string { return e.err.Error() }

// checked wraps a caller's check so that admin returns its error as is.
func checked(check func() error) func() error {
	if check == nil {
		return nil
	}
	return func() error {
		if err := check(); err != nil {
			return checkError{err}
		}
		return nil
	}
}

// Configure changes the settings of SPEC §8 in one transaction of the admin
// lane (store.Store). Setting a limit where there was none counts the
// backlog once, exactly: a store limit holds the flow table EXCLUSIVE while
// it counts (every writer of a flow waits, and every enqueue either is
// counted or sees the limit: enqueue_many locks its flows before it reads
// the limits), taken in steps (lockFlowTable); a group limit locks the group's flows (FOR SHARE, in flow_id
// order) and its limit row (which a new flow of the group locks FOR SHARE),
// never holding one while it waits for the other (lockFirstGroupLimit).
// Changing or
// removing a limit counts nothing: while a limit is set, the enqueues under
// it count.
func (s *Store) Configure(ctx context.Context, p store.ConfigureParams) (int64, error) {
	tick, err := s.admin(ctx, "configure", p.At, p.Floor, p.MaxTickJump, checked(p.Check), func(tx pgx.Tx, at int64) error {
		if p.Group == "" {
			return configureStore(ctx, tx, p)
		}
		return configureGroup(ctx, tx, p, at, s.entry)
	})
	return tick, err
}

func configureStore(ctx context.Context, tx pgx.Tx, p store.ConfigureParams) error {
	var oldMax int64
	if err := tx.QueryRow(ctx, `SELECT max_backlog FROM settings WHERE id = 1 FOR NO KEY UPDATE`).Scan(&oldMax); err != nil {
		return err
	}
	if p.MaxBacklog != nil && oldMax == 0 && *p.MaxBacklog > 0 {
		if err := lockFlowTable(ctx, tx); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE settings SET enqueued = (SELECT coalesce(sum(seq - head_seq + 1), 0) FROM flow)
			+ (SELECT acked FROM clock WHERE id = 3) WHERE id = 1`)
		if err != nil {
			return err
		}
	}
	_, err := tx.Exec(ctx, `UPDATE settings SET max_backlog = coalesce($1, max_backlog), max_flow_backlog = coalesce($2, max_flow_backlog) WHERE id = 1`,
		p.MaxBacklog, p.MaxFlowBacklog)
	return err
}

// lockNotAvailable reports whether err is PostgreSQL's lock_not_available
// (55P03): a NOWAIT lock found the row held, or lock_timeout ran out.
func lockNotAvailable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "55P03"
}

// flowTableStep is how long one attempt of lockFlowTable waits for the
// flow table: the longest that every other writer of the store may queue
// behind the configure's request at a time.
const flowTableStep = 20 * time.Millisecond

// lockFlowTable takes the flow table EXCLUSIVE, for the count of the
// store's first backlog limit, in attempts that wait at most flowTableStep
// each (lock_timeout, behind a savepoint), with a pause of one to two
// steps between them, until the session's own lock_timeout (the store's
// busy timeout) has passed; then it answers that attempt's
// lock_not_available (busy). A LOCK TABLE that waits queues every later
// lock of the table behind its request: each enqueue's ROW SHARE, each
// claim's and settle's row locks. So one waiting for an open outbox
// transaction on one flow held every enqueue onto other flows and the
// relay's claims until that transaction ended or the configure gave up
// (SPEC §10: enqueues onto different flows never wait for each other; a
// breaker's report: 4.6 s of a 5 s busy timeout). Now they wait at most a
// step, and go on between steps.
func lockFlowTable(ctx context.Context, tx pgx.Tx) error {
	var budgetMS int64 // 0: no limit
	if err := tx.QueryRow(ctx, `SELECT setting::bigint FROM pg_settings WHERE name = 'lock_timeout'`).Scan(&budgetMS); err != nil {
		return err
	}
	deadline := time.Now().Add(time.Duration(budgetMS) * time.Millisecond)
	if _, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = %d`, flowTableStep.Milliseconds())); err != nil {
		return err
	}
	for {
		if _, err := tx.Exec(ctx, `SAVEPOINT flow_table_lock`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `LOCK TABLE flow IN EXCLUSIVE MODE`)
		if err == nil {
			if _, err := tx.Exec(ctx, `RELEASE SAVEPOINT flow_table_lock`); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = %d`, budgetMS))
			return err
		}
		if !lockNotAvailable(err) || (budgetMS > 0 && time.Now().After(deadline)) {
			return err
		}
		if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT flow_table_lock`); err != nil {
			return err
		}
		pause := time.NewTimer(flowTableStep + rand.N(flowTableStep))
		select {
		case <-ctx.Done():
			pause.Stop()
			return ctx.Err()
		case <-pause.C:
		}
	}
}

func configureGroup(ctx context.Context, tx pgx.Tx, p store.ConfigureParams, at int64, entry string) error {
	g := p.Group
	// The group name's claim (lock_name, migrations 011, 012 and 029: a
	// row of name_claim keyed 'g:' || name, inserted or row-locked, held to
	// commit): an enqueue making a group of this name, or a flow of no
	// group of this name (which makes the group), holds it until it
	// commits, so the group read next sees what it made, and one that
	// starts later sees this configure. A flow of the name that has no
	// group, which is the group's own state until the group has a row, is
	// locked first, as an enqueue locks its flows before any name: the same
	// order, no deadlock. A flow of the name in another group is not this
	// group's: locked too, an enqueue holding it made this configure wait
	// (SPEC §10; migration 029).
	if _, err := tx.Exec(ctx, `SELECT 1 FROM flow WHERE flow_id = $1 AND group_id IS NULL FOR NO KEY UPDATE`, g); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `SELECT lock_name('g:' || $1::text)`, g); err != nil {
		return err
	}
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM grp WHERE group_id = $1)`, g).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		// A flow named like the group that is its own group becomes its
		// first member, and the group takes its place in the rotation (its
		// head, if runnable, goes to the due index: only claims count a
		// group's runnable flows); else the group starts empty, with no
		// place in the rotation until its first flow.
		tag, err := tx.Exec(ctx, `WITH own AS (
				SELECT flow_id, ord, served, runnable FROM flow WHERE flow_id = $1 AND group_id IS NULL FOR NO KEY UPDATE
			), made AS (
				INSERT INTO grp (group_id, ord, served) SELECT flow_id, ord, served FROM own ON CONFLICT DO NOTHING
			)
			UPDATE flow f SET group_id = $1, runnable = false,
				wait_until = CASE WHEN own.runnable THEN $2 ELSE f.wait_until END
			FROM own WHERE f.flow_id = own.flow_id`, g, at)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			if _, err := tx.Exec(ctx, `INSERT INTO grp (group_id) VALUES ($1) ON CONFLICT DO NOTHING`, g); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO grp_limit (group_id) VALUES ($1) ON CONFLICT DO NOTHING`, g); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO grp_acked (group_id) VALUES ($1) ON CONFLICT DO NOTHING`, g); err != nil {
			return err
		}
	}
	if p.MaxBacklog != nil {
		var oldMax int64
		if err := tx.QueryRow(ctx, `SELECT max_backlog FROM grp_limit WHERE group_id = $1`, g).Scan(&oldMax); err != nil {
			return err
		}
		first := oldMax == 0 && *p.MaxBacklog > 0
		if !first {
			// A change of the limit (or its removal) counts nothing: the
			// limit row alone. Another configure may have removed the limit
			// meanwhile, which makes this the first limit after all: then
			// the row is let go and taken as below.
			if _, err := tx.Exec(ctx, `SAVEPOINT group_limit`); err != nil {
				return err
			}
			if err := tx.QueryRow(ctx, `SELECT max_backlog FROM grp_limit WHERE group_id = $1 FOR NO KEY UPDATE`, g).Scan(&oldMax); err != nil {
				return err
			}
			release := `RELEASE SAVEPOINT group_limit`
			if first = oldMax == 0 && *p.MaxBacklog > 0; first {
				release = `ROLLBACK TO SAVEPOINT group_limit`
			}
			if _, err := tx.Exec(ctx, release); err != nil {
				return err
			}
		}
		if first {
			if err := lockFirstGroupLimit(ctx, tx, g); err != nil {
				return err
			}
			if err := tx.QueryRow(ctx, `SELECT max_backlog FROM grp_limit WHERE group_id = $1`, g).Scan(&oldMax); err != nil {
				return err
			}
		}
		if oldMax == 0 && *p.MaxBacklog > 0 {
			_, err := tx.Exec(ctx, `UPDATE grp_limit SET enqueued = (SELECT coalesce(sum(seq - head_seq + 1), 0) FROM flow WHERE group_id = $1)
				+ coalesce((SELECT acked FROM grp_acked WHERE group_id = $1), 0) WHERE group_id = $1`, g)
			if err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE grp_limit SET max_backlog = $2 WHERE group_id = $1`, g, *p.MaxBacklog); err != nil {
			return err
		}
	}
	if p.Weight != nil {
		if _, err := tx.Exec(ctx, `UPDATE grp SET weight = $2, credit = least(credit, $2) WHERE group_id = $1`, g, *p.Weight); err != nil {
			return err
		}
	}
	if p.MaxSlots != nil {
		if _, err := tx.Exec(ctx, `UPDATE grp SET max_slots = $2 WHERE group_id = $1`, g, *p.MaxSlots); err != nil {
			return err
		}
	}
	return nil
}

// lockFirstGroupLimit locks what a group's first backlog limit counts: the
// group's flows (FOR SHARE, in flow_id order) and its limit row (FOR NO KEY
// UPDATE), without ever holding one while it waits for the other. An
// outbox transaction may hold a flow of the group (its enqueue) and then
// want the limit row (a new flow of the group locks it FOR SHARE), or hold
// the limit row (a new flow) and then want a flow: either order of taking
// the two would meet one of them in a deadlock (the first order failed
// TestPostgresFirstGroupLimitBesideAnOpenOutbox, the second
// TestPostgresFirstGroupLimitBesideANewFlow). So the flows are taken first,
// waiting for their holders, then the limit row and the flows again (those
// made since the first statement's snapshot) without waiting; when a
// transaction holds one, the flows are let go (the savepoint), the limit
// row waited for alone and let go too, and all taken again. Each round
// waits for a transaction to end, so the rounds end unless new flows of
// the group keep coming; past 100 rounds the configure answers busy.
func lockFirstGroupLimit(ctx context.Context, tx pgx.Tx, g string) error {
	for range 100 {
		if _, err := tx.Exec(ctx, `SAVEPOINT first_group_limit`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT 1 FROM flow WHERE group_id = $1 ORDER BY flow_id FOR SHARE`, g); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT 1 FROM grp_limit WHERE group_id = $1 FOR NO KEY UPDATE NOWAIT`, g)
		if err == nil {
			// The flows the first statement locked are the ones its
			// snapshot saw; a flow of the group made and committed since
			// (its maker held the limit row until its commit) is locked
			// too, without waiting, or an enqueue onto it could read no
			// limit while this counts without it (a hunter's reproduction:
			// the counter one below the backlog). No new flow of the group
			// comes while the limit row is held.
			_, err = tx.Exec(ctx, `SELECT 1 FROM flow WHERE group_id = $1 ORDER BY flow_id FOR SHARE NOWAIT`, g)
		}
		if !lockNotAvailable(err) {
			if err == nil {
				_, err = tx.Exec(ctx, `RELEASE SAVEPOINT first_group_limit`)
			}
			return err
		}
		if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT first_group_limit`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT 1 FROM grp_limit WHERE group_id = $1 FOR NO KEY UPDATE`, g); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT first_group_limit`); err != nil {
			return err
		}
	}
	return fmt.Errorf("%w: configure: group %q's first backlog limit: enqueues making new flows of the group held its limit row through 100 tries", store.ErrBusy, g)
}

// Prune deletes acked events and tombstones (SPEC §8) in one transaction of
// the admin lane, the oldest first, at most p.Limit of each when positive:
// events whose rows record their ack, then the acked events whose state
// their flow rows hold (migration 004: a flow's last acked event while it
// has no newer state), whose flows stop holding it. Rows another
// transaction holds are left for the next prune. The events' attempt rows
// go with them (foreign key). PostgreSQL reuses the space once vacuumed
// (autovacuum does it); it shrinks the files only under VACUUM FULL.
func (s *Store) Prune(ctx context.Context, p store.PruneParams) (store.PruneResult, error) {
	var res store.PruneResult
	var limit *int64
	if p.Limit > 0 {
		l := int64(p.Limit)
		limit = &l
	}
	var began time.Time
	tick, err := s.admin(ctx, "prune", p.At, p.Floor, p.MaxTickJump, checked(p.Check), func(tx pgx.Tx, at int64) error {
		// The admin lane is this transaction's now: what it waited for
		// before (a pool connection, another prune or a configure on the
		// lane) held nothing of dispatch's, and is not counted (a
		// breaker's report).
		began = time.Now()
		res = store.PruneResult{}
		if err := store.CheckHorizons(p, at); err != nil {
			return err
		}
		// Each statement reads a batch in tick order and deletes those of
		// it that the wall clock lets go (p.AckedWallBefore,
		// p.IDsWallBefore: their event's last claim before it), counting
		// the others (WallKept): never a scan past the batch. A deleted
		// event's id is forgotten only when it is old by both clocks.
		ackedWall, idsWall, wallNow := p.Walls()
		var kept int64
		err := tx.QueryRow(ctx, `WITH due AS (
				-- claimed_wall 0: written before migration 036, dated by its epoch
				SELECT event_id, CASE WHEN claimed_wall <> 0 THEN claimed_wall
				                      ELSE coalesce((SELECT migrated_ms - (migrated_tick - acked_at) FROM tombstone_epoch), 0) END AS claimed_wall
				FROM tombstone WHERE acked_at < $1 ORDER BY acked_at LIMIT $2
			), del AS (
				DELETE FROM tombstone t USING due WHERE t.event_id = due.event_id AND (due.claimed_wall < $3 OR due.claimed_wall > $4) RETURNING 1
			)
			SELECT (SELECT count(*) FROM del), (SELECT count(*) FROM due WHERE claimed_wall >= $3 AND claimed_wall <= $4)`,
			p.IDsBefore, limit, idsWall, wallNow).Scan(&res.Tombstones, &kept)
		if err != nil {
			return err
		}
		res.WallKept = kept
		// $4 and $5: the events' and the ids' wall-clock bounds, $6 the
		// pruner's wall clock (store.PruneParams.Walls): a row is held
		// when bound <= claimed_wall <= $6. kept counts the events held
		// and the ids kept by the wall clock alone.
		var n, forgotten int64
		err = tx.QueryRow(ctx, `WITH due AS (
				SELECT event_id, claimed_wall FROM event WHERE acked_at IS NOT NULL AND acked_at < $1 ORDER BY acked_at LIMIT $2 FOR UPDATE SKIP LOCKED
			), del AS (
				DELETE FROM event e USING due WHERE e.event_id = due.event_id AND (due.claimed_wall < $4 OR due.claimed_wall > $6)
				RETURNING e.event_id, e.flow_id, e.seq, e.body, e.acked_at, e.claimed_wall,
				          e.claimed_wall >= $5 AND e.claimed_wall <= $6 AS id_held
			`+pruneTombstonesAndCount("due"),
			p.AckedBefore, limit, p.IDsBefore, ackedWall, idsWall, wallNow).Scan(&n, &forgotten, &kept)
		if err != nil {
			return err
		}
		res.Events, res.Forgotten = n, forgotten
		res.WallKept += kept
		var rest *int64
		if limit != nil {
			r := *limit - n
			if r <= 0 {
				return nil
			}
			rest = &r
		}
		err = tx.QueryRow(ctx, `WITH fl AS (
				SELECT flow_id, head_state_seq, head_acked_at, coalesce(head_claimed_wall, 0) AS claimed_wall FROM flow
				WHERE head_state = 'acked' AND head_acked_at < $1 ORDER BY head_acked_at LIMIT $2 FOR NO KEY UPDATE SKIP LOCKED
			), cleared AS (
				UPDATE flow f SET head_state_seq = NULL, head_state = NULL FROM fl
				WHERE f.flow_id = fl.flow_id AND (fl.claimed_wall < $4 OR fl.claimed_wall > $6)
				RETURNING fl.flow_id, fl.head_state_seq AS seq, fl.head_acked_at AS acked_at, fl.claimed_wall,
				          fl.claimed_wall >= $5 AND fl.claimed_wall <= $6 AS id_held
			), del AS (
				DELETE FROM event e USING cleared c WHERE e.flow_id = c.flow_id AND e.seq = c.seq
				RETURNING e.event_id, e.flow_id, e.seq, e.body, c.acked_at, c.claimed_wall, c.id_held
			`+pruneTombstonesAndCount("fl"),
			p.AckedBefore, rest, p.IDsBefore, ackedWall, idsWall, wallNow).Scan(&n, &forgotten, &kept)
		if err != nil {
			return err
		}
		res.Events += n
		res.Forgotten += forgotten
		res.WallKept += kept
		return nil
	})
	if err != nil {
		return store.PruneResult{}, err
	}
	res.Tick = tick
	res.More = limit != nil && (res.Events == *limit || res.Tombstones == *limit)
	res.Held = time.Since(began)
	return res, nil
}

// pruneTombstonesAndCount ends Prune's two deleting statements, whose del
// returns the deleted events (event_id, flow_id, seq, body, acked_at,
// claimed_wall, id_held) and batch names the CTE of the rows they read
// (with their claimed_wall): it writes the tombstone of each event
// whose id stays ($3: IDsBefore; id_held: the wall clock keeps it) and
// answers the events deleted, the ids forgotten, and what the wall clock
// kept ($4 to $6: store.PruneParams.Walls): the batch's rows held, and the
// ids kept by the wall clock alone.
func pruneTombstonesAndCount(batch string) string {
	return `), tomb AS (
				INSERT INTO tombstone (event_id, flow_id, seq, body_sha256, acked_at, claimed_wall)
				SELECT event_id, flow_id, seq, sha256(body), acked_at, claimed_wall FROM del WHERE acked_at >= $3 OR id_held ON CONFLICT DO NOTHING
			)
			SELECT count(*), count(*) FILTER (WHERE acked_at < $3 AND NOT id_held),
			       (SELECT count(*) FROM ` + batch + ` WHERE claimed_wall >= $4 AND claimed_wall <= $6) + count(*) FILTER (WHERE acked_at < $3 AND id_held)
			FROM del`
}
