// Package bench measures the claim path of the queue store against the
// physical reference of its disk (issue 4): first the raw single-row commit
// rate of SQLite with fairrelay's pragmas, then claim+settle rates with one
// worker and no delivery, at several flow counts over one large backlog. The
// command `fairrelay bench claim` prints what RunClaim returns.
package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/store/sqlitestore"
)

// DefaultDuration is how long each rate is measured unless told otherwise.
const DefaultDuration = 5 * time.Second

// DefaultRounds is how many interleaved rounds RunClaim measures in unless
// told otherwise.
const DefaultRounds = 10

// ClaimOptions configure RunClaim.
type ClaimOptions struct {
	// Dir is the directory that holds the database files while the benchmark
	// runs; it must exist, and it is the disk being measured. The files are
	// removed at the end.
	Dir string
	// Flows lists the flow counts to measure, each on a fresh store.
	// Defaults to 10, 1000, 100000.
	Flows []int
	// Groups lists the group counts each flow count is measured with: 0
	// leaves every flow its own group (SPEC §8: no group rows); g > 0 puts
	// flow i in group i mod g. Defaults to 0. A count above the flow count
	// is skipped.
	Groups []int
	// Backlog is the number of events loaded before measuring, spread evenly
	// over the flows. Defaults to 1000000.
	Backlog int
	// Batches lists the batch sizes measured at each flow count: k is one
	// SettleMany transaction (with a ClaimLimit) per step that settles the k events of the
	// previous step and claims k more (see Measure). Defaults to 1, 64.
	Batches []int
	// Duration is how long each rate (raw and each flow count × batch) is
	// measured in total. Defaults to 5s.
	Duration time.Duration
	// Rounds is how many interleaved rounds the measuring time of each rate
	// is split into (see RunClaim). Defaults to 10.
	Rounds int
	// Policy is the queue policy. Defaults to the daemon's (fair).
	Policy fairrelay.Policy
	// OnLoad, when set, is called while a store is loaded with the number of
	// events stored so far and the total, for a progress bar.
	OnLoad func(flows, done, total int)
}

func (o *ClaimOptions) defaults() {
	if len(o.Flows) == 0 {
		o.Flows = []int{10, 1000, 100000}
	}
	if o.Backlog == 0 {
		o.Backlog = 1000000
	}
	if len(o.Batches) == 0 {
		o.Batches = []int{1, 64}
	}
	if len(o.Groups) == 0 {
		o.Groups = []int{0}
	}
	if o.Duration == 0 {
		o.Duration = DefaultDuration
	}
	if o.Rounds == 0 {
		o.Rounds = DefaultRounds
	}
}

func (o *ClaimOptions) validate() error {
	if o.Dir == "" {
		return errors.New("dir: empty")
	}
	for _, n := range o.Flows {
		if n < 1 {
			return fmt.Errorf("flows: %d is not a positive count", n)
		}
		if n > o.Backlog {
			return fmt.Errorf("flows: %d flows need a backlog of at least %d events, got %d", n, n, o.Backlog)
		}
	}
	if o.Backlog < 1 {
		return fmt.Errorf("backlog: %d is not a positive count", o.Backlog)
	}
	for _, g := range o.Groups {
		if g < 0 {
			return fmt.Errorf("groups: %d is a negative count", g)
		}
	}
	for _, k := range o.Batches {
		if k < 1 {
			return fmt.Errorf("batch: %d is not a positive size", k)
		}
	}
	if o.Duration < 0 {
		return fmt.Errorf("duration: %v is negative", o.Duration)
	}
	if o.Rounds < 1 {
		return fmt.Errorf("rounds: %d is not a positive count", o.Rounds)
	}
	return o.Policy.Validate()
}

// ClaimReport is what RunClaim measured, in the JSON shape of
// `fairrelay bench claim --json`.
type ClaimReport struct {
	// RawCommitPerS is the physical reference: single-row INSERT
	// transactions committed per second on the same disk with the same
	// pragmas (WAL, synchronous=FULL, BEGIN IMMEDIATE).
	RawCommitPerS float64 `json:"raw_commit_per_s"`
	// Results holds one row per flow count and batch size, in that order.
	Results []ClaimResult `json:"results"`
}

// ClaimResult is one measured rate.
type ClaimResult struct {
	// Flows is the number of flows the backlog is spread over.
	Flows int `json:"flows"`
	// Groups is the number of groups the flows are in (0: each its own).
	Groups int `json:"groups"`
	// Backlog is the number of events waiting (not acked) when this
	// measurement started.
	Backlog int `json:"backlog"`
	// Batch is the batch size k: each transaction settles the k events of
	// the previous one and claims up to k more (at most one per flow).
	Batch int `json:"batch"`
	// ClaimSettlePerS is events claimed and settled acked per second.
	ClaimSettlePerS float64 `json:"claim_settle_per_s"`
	// RatioToRaw is ClaimSettlePerS / RawCommitPerS.
	RatioToRaw float64 `json:"ratio_to_raw"`
	// PeakRSSMB is the process's peak resident set size (VmHWM of
	// /proc/self/status) in MiB over the whole run, with every flow count's
	// store loaded and open at once: an upper bound for each.
	PeakRSSMB float64 `json:"peak_rss_mb"`
}

// RunClaim runs the whole benchmark in this process. It loads one fresh
// store per flow count, then measures in Rounds interleaved rounds: each
// round runs the raw commit rate and every flow count × batch size for
// Duration/Rounds each, in an order rotated by one slot per round, so that a
// change in the machine's load (it is shared) affects every figure alike and
// the ratios stay comparable. Each rate is
// the total over its rounds. Errors: bad options, any database error, and a
// settle that does not answer acked (the benchmark counts only real work).
func RunClaim(ctx context.Context, opts ClaimOptions) (*ClaimReport, error) {
	opts.defaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	raw, err := openRaw(ctx, opts.Dir, opts.Duration)
	if err != nil {
		return nil, err
	}
	defer raw.close()
	type figure struct {
		res     ClaimResult
		q       *fairrelay.Queue
		n       int
		elapsed time.Duration
	}
	var figs []*figure
	for _, flows := range opts.Flows {
		for _, groups := range opts.Groups {
			if groups > flows {
				continue
			}
			path := filepath.Join(opts.Dir, "bench-claim-"+strconv.Itoa(flows)+"-"+strconv.Itoa(groups)+".db")
			defer removeDB(path)
			q, err := fairrelay.Open(ctx, path, fairrelay.Config{Policy: opts.Policy})
			if err != nil {
				return nil, err
			}
			defer q.Close()
			var onLoad func(done, total int)
			if opts.OnLoad != nil {
				onLoad = func(done, total int) { opts.OnLoad(flows, done, total) }
			}
			if err := Load(ctx, q, flows, groups, opts.Backlog, onLoad); err != nil {
				return nil, err
			}
			for _, batch := range opts.Batches {
				figs = append(figs, &figure{res: ClaimResult{Flows: flows, Groups: groups, Backlog: -1, Batch: batch}, q: q})
			}
		}
	}
	// The load left up to hundreds of MiB of dirty pages in the file cache;
	// their writeback would slow the first rounds' fsyncs.
	FlushToDisk()
	// Events still waiting per store, for each figure's Backlog.
	waiting := map[*fairrelay.Queue]int{}
	for _, f := range figs {
		waiting[f.q] = opts.Backlog
	}
	const at = 1
	slice := opts.Duration / time.Duration(opts.Rounds)
	var rawN int
	var rawElapsed time.Duration
	// One slot per slice of a round: the raw rate, then every figure.
	slots := len(figs) + 1
	for round := range opts.Rounds {
		// Each round starts one slot later, so every figure follows every
		// other over the rounds: a slice right after a heavy one runs on a
		// disk still busy with its writes (after the guest's sync, the
		// host's cache), and no figure must always be the one that pays.
		for i := range slots {
			slot := (round + i) % slots
			// sync(2) first: on ext4 (data=ordered) an fsync also waits for
			// other files' dirty data.
			FlushToDisk()
			if slot == 0 {
				n, el, err := raw.measure(ctx, slice)
				if err != nil {
					return nil, err
				}
				rawN, rawElapsed = rawN+n, rawElapsed+el
				continue
			}
			f := figs[slot-1]
			if f.res.Backlog < 0 {
				f.res.Backlog = waiting[f.q]
			}
			n, el, err := Measure(ctx, f.q, at, f.res.Batch, slice)
			if err != nil {
				return nil, err
			}
			f.n, f.elapsed = f.n+n, f.elapsed+el
			// Measure also settled, untimed, what its last step claimed:
			// one head per flow up to the batch size.
			waiting[f.q] -= n + min(f.res.Batch, f.res.Flows)
		}
	}
	rss, err := PeakRSSMB()
	if err != nil {
		return nil, err
	}
	rep := &ClaimReport{RawCommitPerS: perSecond(rawN, rawElapsed), Results: []ClaimResult{}}
	for _, f := range figs {
		r := f.res
		r.ClaimSettlePerS = perSecond(f.n, f.elapsed)
		if rep.RawCommitPerS > 0 {
			r.RatioToRaw = r.ClaimSettlePerS / rep.RawCommitPerS
		}
		r.PeakRSSMB = rss
		rep.Results = append(rep.Results, r)
	}
	return rep, nil
}

func perSecond(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// removeDB removes a SQLite file and its WAL and shared-memory files.
func removeDB(path string) {
	for _, suffix := range []string{"", "-wal", "-shm", "-journal"} {
		os.Remove(path + suffix)
	}
}

// FlowID and EventID name the benchmark's flows and events: flow i (0-based)
// holds events 1, 2, … in seq order.
func FlowID(i int) string { return fmt.Sprintf("f%07d", i) }

// GroupID names group j (0-based) of the benchmark.
func GroupID(j int) string { return fmt.Sprintf("g%05d", j) }

// EventID names event seq (1-based) of flow i.
func EventID(i, seq int) string { return fmt.Sprintf("f%07d.%08d", i, seq) }

// loadChunk is how many events one EnqueueMany transaction stores while
// loading: large enough that the commit is noise, small enough to keep the
// batch's memory a few MiB.
const loadChunk = 10000

// loadBlock is how many consecutive events of one flow Load stores before it
// moves to the next flow.
const loadBlock = 10

// Load enqueues backlog events spread evenly over flows flows (the first
// backlog%flows flows get one more) at tick 0, loadChunk events per
// EnqueueMany transaction, in passes over the flows of up to loadBlock
// events per flow — as a backlog that built up over time arrives, rather
// than one flow's whole history at a time. The physical order matters to
// what is measured: a claim rotation takes the flows' heads in turn, and
// with whole histories stored flow after flow the heads of 1000 flows would
// lie on 1000 distinct pages where arrival spreads them over a few dozen.
// With groups > 0, flow i is in group i mod groups (SPEC §8). onLoad, when
// set, is called after each chunk. Errors: any error of EnqueueMany, or an
// answer other than created (the store was not empty).
func Load(ctx context.Context, q *fairrelay.Queue, flows, groups, backlog int, onLoad func(done, total int)) error {
	body := []byte(`{"delta":1}`)
	ps := make([]fairrelay.NewEvent, 0, loadChunk)
	done := 0
	flush := func() error {
		if len(ps) == 0 {
			return nil
		}
		rs, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: 0, Events: ps})
		if err != nil {
			return fmt.Errorf("load: %w", err)
		}
		for i, r := range rs {
			if r.Status != fairrelay.EnqueueCreated {
				return fmt.Errorf("load: enqueue %s answered %s, want created: the store was not empty", ps[i].ID, r.Status)
			}
		}
		done += len(ps)
		ps = ps[:0]
		if onLoad != nil {
			onLoad(done, backlog)
		}
		return ctx.Err()
	}
	per, extra := backlog/flows, backlog%flows
	for from := 1; from <= per+1; from += loadBlock {
		for i := range flows {
			n := per
			if i < extra {
				n++
			}
			for seq := from; seq < from+loadBlock && seq <= n; seq++ {
				ev := fairrelay.NewEvent{ID: EventID(i, seq), Flow: FlowID(i), Body: body}
				if groups > 0 {
					ev.Group = GroupID(i % groups)
				}
				ps = append(ps, ev)
				if len(ps) == loadChunk {
					if err := flush(); err != nil {
						return err
					}
				}
			}
		}
	}
	return flush()
}

// Measure runs one worker with no delivery at tick at for about d: each
// step is one SettleMany transaction (with a ClaimLimit) that settles (outcome accepted) the
// events the previous step claimed and claims up to batch new heads — one
// commit per step, the group commit of issue 4. It returns how many events
// were settled acked within d and the time it took; the events still held
// when d ends are settled afterwards, untimed. Errors: any queue error; idle
// (the backlog ran out); a settle that does not answer acked.
func Measure(ctx context.Context, q *fairrelay.Queue, at int64, batch int, d time.Duration) (int, time.Duration, error) {
	var held []fairrelay.Settlement
	step := func(k int) (int, error) {
		res, err := q.SettleMany(ctx, fairrelay.SettleManyParams{At: at, Settles: held, ClaimLimit: k})
		if err != nil {
			return 0, err
		}
		rs, cs := res.Results, res.Claims
		for i, r := range rs {
			if r.Status != fairrelay.SettleAcked {
				return 0, fmt.Errorf("measure: settle %s answered %s, want acked", held[i].Token.EventID, r.Status)
			}
		}
		if k > 0 && len(cs) == 0 {
			return 0, errors.New("measure: claim answered idle: the backlog ran out; load more events or shorten the duration")
		}
		held = held[:0]
		for _, c := range cs {
			held = append(held, fairrelay.Settlement{Token: c.Token, Outcome: fairrelay.OutcomeAccepted})
		}
		return len(rs), nil
	}
	if _, err := step(batch); err != nil {
		return 0, 0, err
	}
	n := 0
	start := time.Now()
	deadline := start.Add(d)
	for time.Now().Before(deadline) {
		if err := ctx.Err(); err != nil {
			return n, time.Since(start), err
		}
		k, err := step(batch)
		if err != nil {
			return n, time.Since(start), err
		}
		n += k
	}
	elapsed := time.Since(start)
	_, err := step(0)
	return n, elapsed, err
}

// rawStore is the physical reference: a fresh SQLite file with fairrelay's
// DSN (WAL, synchronous=FULL, BEGIN IMMEDIATE) and one connection, where
// every transaction INSERTs one row.
type rawStore struct {
	path string
	db   *sql.DB
	ins  *sql.Stmt
	body []byte
}

// openRaw creates the raw store in dir and warms it up for at most
// rawWarmupCommits commits or d, whichever ends first.
func openRaw(ctx context.Context, dir string, d time.Duration) (*rawStore, error) {
	path := filepath.Join(dir, "bench-raw.db")
	db, err := sql.Open("sqlite", sqlitestore.DSN(path, 5*time.Second, true))
	if err != nil {
		return nil, fmt.Errorf("raw commit: %w", err)
	}
	db.SetMaxOpenConns(1)
	r := &rawStore{path: path, db: db, body: []byte(`{"delta":1}`)}
	if _, err := db.ExecContext(ctx, `CREATE TABLE raw (id INTEGER PRIMARY KEY, body BLOB NOT NULL)`); err != nil {
		r.close()
		return nil, fmt.Errorf("raw commit: %w", err)
	}
	if r.ins, err = db.PrepareContext(ctx, `INSERT INTO raw (body) VALUES (?)`); err != nil {
		r.close()
		return nil, fmt.Errorf("raw commit: %w", err)
	}
	// Warm up past the first WAL checkpoint (1000 pages by default): until
	// then every commit grows the WAL file, which costs the file system a
	// metadata update per fsync that a store in steady state does not pay.
	warm := time.Now().Add(d)
	for i := 0; i < rawWarmupCommits && time.Now().Before(warm); i++ {
		if err := r.commit(ctx); err != nil {
			r.close()
			return nil, err
		}
	}
	return r, nil
}

func (r *rawStore) commit(ctx context.Context) error {
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("raw commit: %w", err)
	}
	if _, err := tx.StmtContext(ctx, r.ins).ExecContext(ctx, r.body); err != nil {
		tx.Rollback()
		return fmt.Errorf("raw commit: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("raw commit: %w", err)
	}
	return nil
}

// measure commits single-row transactions for about d and returns how many
// and the time they took.
func (r *rawStore) measure(ctx context.Context, d time.Duration) (int, time.Duration, error) {
	n := 0
	start := time.Now()
	for deadline := start.Add(d); time.Now().Before(deadline); n++ {
		if err := r.commit(ctx); err != nil {
			return n, time.Since(start), err
		}
	}
	return n, time.Since(start), nil
}

func (r *rawStore) close() {
	if r.ins != nil {
		r.ins.Close()
	}
	r.db.Close()
	removeDB(r.path)
}

// rawWarmupCommits is how many commits RawCommitRate runs before it starts
// counting: more than one WAL checkpoint's worth of single-page commits.
const rawWarmupCommits = 1200

// WriteTable prints the report as an aligned table with the ratios.
func WriteTable(w io.Writer, rep *ClaimReport) error {
	if _, err := fmt.Fprintf(w, "raw single-row commits: %.0f/s\n\n", rep.RawCommitPerS); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "flows\tgroups\tbacklog\tbatch\tclaim+settle/s\t× raw\tpeak RSS MiB\t")
	for _, r := range rep.Results {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%.0f\t%.2f\t%.1f\t\n", r.Flows, r.Groups, r.Backlog, r.Batch, r.ClaimSettlePerS, r.RatioToRaw, r.PeakRSSMB)
	}
	return tw.Flush()
}
