package sqlitestore

import (
	"cmp"
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fairrelay/fairrelay/internal/errs"
	"github.com/fairrelay/fairrelay/internal/store"
)

// Configure changes the settings of SPEC §8 in one transaction
// (store.Store). A group that does not exist is created, out of the
// rotation until its first flow; a group named like a flow that is its own
// group becomes that flow's group row first.
func (s *Store) Configure(ctx context.Context, p store.ConfigureParams) (int64, error) {
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return 0, Translate(fmt.Errorf("begin transaction: %w", err))
	}
	defer tx.Rollback()
	c := conn{q: tx, tx: tx.Tx, prepared: s.stmts}
	cl, err := c.clock(ctx)
	if err != nil {
		return 0, err
	}
	at, err := store.ResolveTick("configure", p.At, p.Floor, p.MaxTickJump, cl.Tick)
	if err != nil {
		return 0, err
	}
	if p.Check != nil {
		if err := p.Check(); err != nil {
			return 0, err
		}
	}
	if p.Group == "" {
		lim, err := c.settings(ctx)
		if err != nil {
			return 0, err
		}
		if p.MaxBacklog != nil {
			lim.MaxBacklog = *p.MaxBacklog
		}
		if p.MaxFlowBacklog != nil {
			lim.MaxFlowBacklog = *p.MaxFlowBacklog
		}
		if err := c.exec(ctx, "SettingsSetLimits", lim.MaxBacklog, lim.MaxFlowBacklog); err != nil {
			return 0, err
		}
	} else {
		b := batch{c: &c, cl: &cl, at: at, entry: s.entry, rows: map[string]*store.FlowRow{}, groups: map[string]*groupCols{},
			written: map[*store.FlowRow]bool{}, writtenG: map[*groupCols]bool{}}
		g, err := b.group(ctx, p.Group)
		if err != nil {
			return 0, err
		}
		if g == nil {
			own, err := b.flow(ctx, p.Group)
			if err != nil {
				return 0, err
			}
			if own != nil && own.Group == "" {
				g = b.adopt(own)
				b.touch(own)
			} else {
				g = &groupCols{g: store.GroupRow{Group: p.Group, Weight: 1}}
			}
			if err := c.insertGroup(ctx, g); err != nil {
				return 0, err
			}
		}
		if p.Weight != nil {
			g.g.Weight = *p.Weight
			g.g.Credit = min(g.g.Credit, g.g.Weight)
		}
		if p.MaxBacklog != nil {
			g.g.MaxBacklog = *p.MaxBacklog
		}
		b.touchGroup(g)
		if err := b.flush(ctx); err != nil {
			return 0, err
		}
		if p.MaxSlots != nil {
			if err := c.exec(ctx, "GroupSetMaxSlots", *p.MaxSlots, p.Group); err != nil {
				return 0, err
			}
		}
	}
	cl.Tick = at
	if err := c.setClock(ctx, cl); err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, Translate(fmt.Errorf("commit: %w", err))
	}
	s.commits.Add(1) // this store's own commit (changes.go, checkpointer.go)
	return at, nil
}

// Prune deletes acked events and tombstones (SPEC §8) in one transaction,
// the oldest first, at most p.Limit of each when positive; the events'
// attempt rows go with them (foreign key). On a store created with
// incremental auto-vacuum it then returns the freed pages to the file
// system; elsewhere SQLite reuses them for new rows.
// Its commits are flushed (syncLog) before it answers, also when the
// vacuum after them fails; a failed flush or vacuum is an error although
// the deletions were committed, and comes with the result that says what
// they deleted (a prune run again deletes what is left).
func (s *Store) Prune(ctx context.Context, p store.PruneParams) (store.PruneResult, error) {
	checkpointed, err := s.checkpointBeside(ctx)
	if err != nil {
		return store.PruneResult{}, err
	}
	w, err := s.lazyWrite(ctx)
	if err != nil {
		return store.PruneResult{}, err
	}
	defer w.release()
	tx := w.tx
	// BEGIN IMMEDIATE has returned: this connection holds the writer
	// until the commit has returned.
	began := time.Now()
	c := conn{q: tx, tx: tx, prepared: s.stmts}
	cl, err := c.clock(ctx)
	if err != nil {
		return store.PruneResult{}, err
	}
	at, err := store.ResolveTick("prune", p.At, p.Floor, p.MaxTickJump, cl.Tick)
	if err != nil {
		return store.PruneResult{}, err
	}
	if p.Check != nil {
		if err := p.Check(); err != nil {
			return store.PruneResult{}, err
		}
	}
	if err := store.CheckHorizons(p, at); err != nil {
		return store.PruneResult{}, err
	}
	limit := int64(p.Limit)
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	res := store.PruneResult{Tick: at}
	ackedWall, idsWall, wallNow := p.Walls()
	// held: the wall clock keeps a row claimed at wall that the ticks
	// make due (store.PruneParams.Walls).
	held := func(wall, before int64) bool { return wall >= before && wall <= wallNow }
	if idsWall != math.MaxInt64 {
		if err := c.queryRow(ctx, "TombstoneWallKept", p.IDsBefore, limit, idsWall, wallNow).Scan(&res.WallKept); err != nil {
			return store.PruneResult{}, Translate(fmt.Errorf("TombstoneWallKept: %w", err))
		}
	}
	r, err := tx.ExecContext(ctx, q["TombstonePrune"], p.IDsBefore, limit, idsWall, wallNow)
	if err != nil {
		return store.PruneResult{}, Translate(fmt.Errorf("TombstonePrune: %w", err))
	}
	if res.Tombstones, err = r.RowsAffected(); err != nil {
		return store.PruneResult{}, Translate(err)
	}
	type acked struct {
		id, flow string
		seq      int64
		sum      [sha256.Size]byte
		at, wall int64
	}
	// The due events are read a chunk at a time, each deleted before the
	// next chunk is read: a batched prune (Limit) ends its transaction
	// once it has held the writer s.pruneHold, whatever is left of its
	// batch, so that what a dispatch step waits behind it is bounded by
	// time, not by how slowly this disk deletes rows today; reading the
	// whole batch first (up to Limit bodies, hashed) spent that time
	// before the first delete (a breaker: fairrelay prune's batches of
	// 1 000 fell to one event each). The first chunk goes whatever the
	// time (every call makes progress).
	chunk := int64(pruneChunk)
	if limit < 0 {
		chunk = 1000 // one transaction for everything: fewer reads
	}
	stopped := false
	var due []acked
scan:
	for limit < 0 || res.Events < limit {
		n := chunk
		if limit > 0 {
			n = min(n, limit-res.Events)
		}
		due = due[:0]
		err = c.each(ctx, "AckedBefore", func(r scanner) error {
			var a acked
			var body []byte
			if err := r.Scan(&a.id, &a.flow, &a.seq, &body, &a.at, &a.wall); err != nil {
				return err
			}
			a.sum = sha256.Sum256(body)
			due = append(due, a)
			return nil
		}, p.AckedBefore, n)
		if err != nil {
			return store.PruneResult{}, err
		}
		for _, a := range due {
			if limit > 0 && res.Events >= pruneChunk && time.Since(began) >= s.pruneHold {
				stopped = true
				break scan
			}
			if held(a.wall, ackedWall) {
				// Due by its tick, claimed too recently by the wall
				// clock: the store's tick ran ahead. The events after it
				// were acked later still; this pass ends here, without
				// reading them (a pass that skipped it would read it
				// again with every chunk).
				res.WallKept++
				break scan
			}
			if idKept := held(a.wall, idsWall); a.at >= p.IDsBefore || idKept {
				// Its id is kept unless it is old by both clocks.
				if a.at < p.IDsBefore {
					res.WallKept++ // the ticks alone would forget it
				}
				if err := c.exec(ctx, "TombstoneInsert", a.id, a.flow, a.seq, a.sum[:], a.at, a.wall); err != nil {
					return store.PruneResult{}, err
				}
			} else {
				res.Forgotten++
			}
			if err := c.exec(ctx, "EventDelete", a.id); err != nil {
				return store.PruneResult{}, err
			}
			res.Events++
		}
		if int64(len(due)) < n {
			break // nothing more is due
		}
	}
	res.More = limit > 0 && (stopped || res.Events == limit || res.Tombstones == limit)
	cl.Tick = at
	if err := c.setClock(ctx, cl); err != nil {
		return store.PruneResult{}, err
	}
	if err := tx.Commit(); err != nil {
		return store.PruneResult{}, Translate(fmt.Errorf("commit: %w", err))
	}
	res.Held = max(time.Since(began), checkpointed)
	w.release()      // the writer is free for dispatch again
	s.commits.Add(1) // this store's own commit (changes.go, checkpointer.go)
	if s.afterPruneCommit != nil {
		s.afterPruneCommit()
	}
	// Whatever the vacuum answers, the prune's commits are flushed before
	// it does: they are committed, and the answer must not outrun them.
	// The vacuum is the file's housekeeping after the prune, not part of
	// it: a ctx that ends during it stops it (the next prune goes on with
	// it; until then SQLite reuses the free pages), and the prune answers
	// what it deleted (a breaker's report: it answered ctx's error and an
	// empty result for deletions that had committed). Any other error of
	// the vacuum comes with that result (store.Store.Prune).
	err = s.vacuum(ctx, &res)
	if err != nil && ctx.Err() != nil {
		err = nil
	}
	if err != nil {
		err = fmt.Errorf("the prune's deletions committed (%d events, %d tombstones); the incremental vacuum after them failed: %w", res.Events, res.Tombstones, err)
	}
	if serr := s.syncLog(); serr != nil {
		return res, errs.Join(err, serr)
	}
	return res, err
}

// vacuum hands free pages back to the file system once there are enough
// of them to matter (a write of its own, so not after every small prune),
// after a prune that deleted something: a no-op unless the file was
// created with auto_vacuum=INCREMENTAL (a new store is). In steps of
// vacuumStep pages, each its own write, so that another writer (the
// relay's dispatch) waits for one step, not for all of them; res.Held
// takes the longest. A file in another auto_vacuum mode keeps its free
// pages for reuse: the loop ends when a step freed nothing. Errors: the
// database's, translated.
func (s *Store) vacuum(ctx context.Context, res *store.PruneResult) error {
	if res.Events == 0 && res.Tombstones == 0 {
		return nil
	}
	for last := int64(-1); ; {
		var free int64
		if err := s.write.QueryRowContext(ctx, "PRAGMA freelist_count").Scan(&free); err != nil {
			return Translate(fmt.Errorf("freelist_count: %w", err))
		}
		if free < vacuumPages || free == last {
			return nil
		}
		last = free
		held, err := s.vacuumStep(ctx)
		if err != nil {
			return err
		}
		res.Held = max(res.Held, held)
	}
}

// vacuumStep runs one step of the incremental vacuum, a write transaction
// of its own, and returns how long it held the writer: timed from its
// BEGIN IMMEDIATE's return, so that a wait for another writer (of this
// process or another one) is not counted.
func (s *Store) vacuumStep(ctx context.Context) (time.Duration, error) {
	w, err := s.lazyWrite(ctx)
	if err != nil {
		return 0, fmt.Errorf("incremental vacuum: %w", err)
	}
	defer w.release()
	began := time.Now()
	if _, err := w.tx.ExecContext(ctx, fmt.Sprintf("PRAGMA incremental_vacuum(%d)", vacuumStep)); err != nil {
		return 0, Translate(fmt.Errorf("incremental vacuum: %w", err))
	}
	if err := w.tx.Commit(); err != nil {
		return 0, Translate(fmt.Errorf("incremental vacuum: commit: %w", err))
	}
	return time.Since(began), nil
}

// lazy is a write transaction of a prune on the write connection, begun
// by lazyWrite; release ends it (a rollback unless committed) and gives
// the connection back, once.
type lazy struct {
	conn  *sql.Conn
	apart *sync.Mutex
	tx    *sql.Tx
	done  bool
}

// lazyWrite begins a write transaction (BEGIN IMMEDIATE) on the store's
// write connection with synchronous=NORMAL: its commit appends to the log
// without an fsync, so the writer is free again as soon as the commit's
// pages are written, not after the disk has flushed them. A prune's
// writes are the only ones made so (SPEC §4 asks synchronous=FULL of the
// store: every answer durable when it is given): Prune calls syncLog
// before it answers, outside the write lock, and any commit of another
// writer after the prune's (FULL, the log's frames in order) flushes the
// prune's frames with its own. Why: under FULL the commit's fsync held
// the writer, and on the disk of BENCHMARKS.md a commit's fsync stalls
// for 10-55 ms now and then; a dispatch step behind a prune's commit
// waited that long ("Retention"). The connection is set back to FULL
// when released; if that fails it leaves the pool (closed), so no other
// write runs under NORMAL. From before its BEGIN until it is released it
// holds s.apart, so no checkpoint of this process runs beside it
// (startCheckpointer); it waits for one that is running before it takes
// the write connection. Errors: the database's, translated, and
// CheckFile's.
func (s *Store) lazyWrite(ctx context.Context) (*lazy, error) {
	if err := CheckFile(s.path, s.file); err != nil {
		return nil, err
	}
	// apart before the write connection: waiting for a checkpoint of the
	// checkpointer (its fsync of the database file) with the write
	// connection held made dispatch wait as long, and Held counted none
	// of it (a breaker: a dispatch write waited 300 ms, Held 0.4 ms).
	s.lockApart()
	c, err := s.write.Conn(ctx)
	if err != nil {
		s.apart.Unlock()
		return nil, Translate(fmt.Errorf("write connection: %w", err))
	}
	w := &lazy{conn: c, apart: &s.apart}
	if _, err := c.ExecContext(ctx, "PRAGMA synchronous = NORMAL"); err != nil {
		w.release()
		return nil, Translate(fmt.Errorf("synchronous=NORMAL for a prune: %w", err))
	}
	if w.tx, err = beginOn(ctx, ctx, c, s.busy, s.lockBusy); err != nil {
		w.release()
		return nil, Translate(fmt.Errorf("begin transaction: %w", err))
	}
	return w, nil
}

func (w *lazy) release() {
	if w.done {
		return
	}
	w.done = true
	if w.tx != nil {
		w.tx.Rollback() // a no-op once committed
	}
	if _, err := w.conn.ExecContext(context.Background(), "PRAGMA synchronous = FULL"); err != nil {
		// Not back to FULL: the connection must not serve another
		// write. driver.ErrBadConn makes database/sql close it.
		w.conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	w.conn.Close()
	w.apart.Unlock()
}

// lockApart takes s.apart, the prune's and the checkpointer's turn
// (startCheckpointer), calling s.beforeApart first when set (tests).
func (s *Store) lockApart() {
	if s.beforeApart != nil {
		s.beforeApart()
	}
	s.apart.Lock()
}

// syncLog flushes the store's log file to the disk (fsync), which makes
// every commit appended to it so far durable: Prune's, committed under
// synchronous=NORMAL (lazyWrite). It holds no lock; writers go on beside
// it. A log that does not exist has nothing to flush (a checkpoint that
// removed or emptied it synced the database file first). Errors: the
// file system's.
func (s *Store) syncLog() error {
	if err := s.syncFile("-wal"); err != nil {
		return fmt.Errorf("sync the log after a prune: %w", err)
	}
	return nil
}

// syncFile flushes (fsync) the store's file with suffix ("": the database
// file, "-wal": its log), found beside the file a symbolic link names
// (filePath); a file that does not exist has nothing to flush. Errors: the
// file system's.
func (s *Store) syncFile(suffix string) error {
	path, err := s.filePath(suffix)
	if err != nil {
		// The file (or the link to it) is gone: the store's own error
		// for it, which stops a relay (a breaker's report: a bare lstat
		// error left the relay's prune retrying).
		return cmp.Or(CheckFile(s.path, s.file), err)
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// filePath is the path of the store's file with suffix ("-wal": its log).
// SQLite keeps the log beside the file a symbolic link names, not beside
// the link (a breaker: through a link syncLog flushed nothing). Errors:
// the file system's.
func (s *Store) filePath(suffix string) (string, error) {
	path, err := filepath.EvalSymlinks(s.path)
	if err != nil {
		return "", err
	}
	return path + suffix, nil
}

// vacuumPages is how many free pages (of 4 KiB) a prune leaves before it
// hands them back to the file system: 1 MiB. vacuumStep is how many one
// write of the vacuum hands back.
const (
	vacuumPages = 256
	vacuumStep  = 64
)

// checkpointBeside makes the log start over before a prune transaction
// when it holds more than s.pruneLogFrames frames, so that no commit of a
// prune grows it to checkpointSafety frames: there the write connection's
// own checkpoint runs inside the commit (SQLite's wal_autocheckpoint hook)
// and ends with an fsync of every page copied since the last complete
// checkpoint, with the writer held — 40-90 ms on the 2-core machine of
// BENCHMARKS.md, and still 6-15 ms inside the longest prune writes of a
// runtime/trace in "Retention", which the next dispatch step waited out.
// SQLite starts the log over only at a write transaction that began with
// the log wholly copied, and beside continuous writers a checkpoint on
// another connection seldom leaves it so: a transaction begun before the
// checkpoint ended commits after it. So, in three steps, the prune (which
// can wait) waiting and dispatch going on through the first two:
//
//  1. PASSIVE checkpoints on a read connection until one copies all the log
//     it saw (at most pruneCheckpointTries), beside the writers;
//  2. an fsync of the database file, holding nothing: the pages those
//     checkpoints copied are written out now, not inside step 3;
//  3. one PASSIVE checkpoint on the write connection, which no commit of
//     this process can land beside: it copies the frames appended since
//     step 1 and syncs only those pages, and the next write starts the
//     log over.
//
// When no checkpoint of step 1 copied all it saw (a reader of another
// process holds an old snapshot), step 3 could not either: the prune goes
// on without steps 2 and 3.
//
// It returns how long step 3 held the write connection (what a dispatch
// step can wait behind; Prune counts it in PruneResult.Held). Errors: the
// checkpoints', translated; the fsync's; CheckFile's.
func (s *Store) checkpointBeside(ctx context.Context) (time.Duration, error) {
	var busy, log, copied int64
	for range pruneCheckpointTries {
		if err := s.read.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &log, &copied); err != nil {
			return 0, Translate(fmt.Errorf("checkpoint before a prune: %w", err))
		}
		if log <= s.pruneLogFrames {
			return 0, nil
		}
		if copied >= log {
			break
		}
	}
	if copied < log {
		return 0, nil
	}
	if s.afterCheckpointBeside != nil {
		s.afterCheckpointBeside()
	}
	if err := CheckFile(s.path, s.file); err != nil {
		return 0, err
	}
	if err := s.syncFile(""); err != nil {
		return 0, fmt.Errorf("checkpoint before a prune: %w", err)
	}
	// Not beside the checkpointer's own checkpoint, which would make this
	// one answer busy without copying; waited for before the write
	// connection is taken, as in lazyWrite.
	s.lockApart()
	defer s.apart.Unlock()
	c, err := s.write.Conn(ctx)
	if err != nil {
		return 0, Translate(fmt.Errorf("checkpoint before a prune: write connection: %w", err))
	}
	defer c.Close()
	began := time.Now()
	if err := c.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &log, &copied); err != nil {
		return 0, Translate(fmt.Errorf("checkpoint before a prune: %w", err))
	}
	return time.Since(began), nil
}

// pruneLogFrames is Store.pruneLogFrames's default: 4096 frames, 16 MiB of
// 4 KiB pages, a quarter of checkpointSafety. pruneCheckpointTries bounds
// checkpointBeside's checkpoints: each after the first copies what the
// writers appended meanwhile, a few frames.
const (
	pruneLogFrames       = 4096
	pruneCheckpointTries = 100
)

// pruneChunk is how many due events a batched prune reads at a time
// (Prune), and deletes at least: a quarter of the relay's batch.
const pruneChunk = 5

// pruneHold is Store.pruneHold's default: how long a batched prune's
// transaction (PruneParams.Limit > 0) deletes events before it commits and
// answers More, 2 ms. With batches of 20 a transaction on the
// 1 000 000-event store of BENCHMARKS.md held the writer 3-6 ms at the
// 99th percentile and up to 16 ms, most of it the deletes' own page
// reads and writes; the bound makes that a matter of time ("Retention").
const pruneHold = 2 * time.Millisecond
