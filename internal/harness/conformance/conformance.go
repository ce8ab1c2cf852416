// Package conformance is the one conformance suite of the queue-store and
// inbox seam (STYLE §3): the same tests run unchanged against every backend.
// A backend is done when Run passes, not when it compiles.
//
// The suite covers the shared vectors of SPEC §6, the rules of SPEC §2–§3
// one by one, bad input that must change nothing, trigger-injected write
// failures (SPEC §5 item 9) and concurrent claimers.
package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
)

// Backend describes one storage backend to the suite.
type Backend struct {
	// Name labels the subtests.
	Name string
	// New returns a fresh, empty queue DSN and inbox DSN for one test; the
	// backend cleans them up with t.Cleanup.
	New func(t *testing.T) (queueDSN, inboxDSN string)
	// RejectInserts installs, on the database at dsn, a trigger that makes
	// every INSERT into table fail with an error.
	RejectInserts func(t *testing.T, dsn, table string)
}

// VectorDir is the folder of the vector copies, relative to this package.
const VectorDir = "../../../testdata/vectors"

// Run runs the whole suite against b.
func Run(t *testing.T, b Backend) {
	t.Run("rules", func(t *testing.T) { t.Parallel(); runRules(t, b) })
	t.Run("bad_input", func(t *testing.T) { t.Parallel(); runBadInput(t, b) })
	t.Run("tick_jump", func(t *testing.T) { t.Parallel(); runTickJump(t, b) })
	t.Run("triggers", func(t *testing.T) { t.Parallel(); runTriggers(t, b) })
	t.Run("concurrency", func(t *testing.T) { t.Parallel(); runConcurrency(t, b) })
}

// Unchanged runs fn and fails t when fn changed the queue store or the
// inbox (the tick too, unless tickMayMove): for bad input, which must change
// nothing.
func (e *Env) Unchanged(t *testing.T, name string, tickMayMove bool, fn func()) {
	t.Helper()
	h{t: t, Env: e}.unchanged(name, tickMayMove, fn)
}

// Env is one test's queue and inbox.
type Env struct {
	Queue    *fairrelay.Queue
	Inbox    *inbox.Inbox
	QueueDSN string
	InboxDSN string
}

// Open opens a fresh queue and inbox of b with the given policy.
func Open(t *testing.T, b Backend, pol fairrelay.Policy) *Env {
	t.Helper()
	qd, id := b.New(t)
	ctx := context.Background()
	q, err := fairrelay.Open(ctx, qd, fairrelay.Config{Policy: pol, Now: Now})
	if err != nil {
		t.Fatalf("open queue: %v", err)
	}
	t.Cleanup(func() { q.Close() })
	in, err := inbox.Open(ctx, id, inbox.Options{})
	if err != nil {
		t.Fatalf("open inbox: %v", err)
	}
	t.Cleanup(func() { in.Close() })
	return &Env{Queue: q, Inbox: in, QueueDSN: qd, InboxDSN: id}
}

// Match reports why got does not match want ("" when it does): objects match
// when every key of want is in got with a matching value; lists item by item
// with equal lengths; anything else by equality.
func Match(want, got any, path string) string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s: want an object, got %v", path, got)
		}
		keys := make([]string, 0, len(w))
		for k := range w {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			gv, ok := g[k]
			if !ok {
				return fmt.Sprintf("%s.%s: missing (want %v)", path, k, w[k])
			}
			if why := Match(w[k], gv, path+"."+k); why != "" {
				return why
			}
		}
		return ""
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Sprintf("%s: want %d items, got %v", path, len(w), got)
		}
		for i := range w {
			if why := Match(w[i], g[i], fmt.Sprintf("%s[%d]", path, i)); why != "" {
				return why
			}
		}
		return ""
	}
	wj, _ := json.Marshal(want)
	gj, _ := json.Marshal(got)
	if !bytes.Equal(wj, gj) {
		return fmt.Sprintf("%s: want %s, got %s", path, wj, gj)
	}
	return ""
}

// Now is the wall clock of every queue the suite opens: fixed, so attempt
// and audit rows can be compared whole.
func Now() time.Time { return time.UnixMilli(1_800_000_000_000) }
