// Package conformance is the one conformance suite of the queue-store and
// inbox seam (STYLE §3): the same tests run unchanged against every backend.
// A backend is done when Run passes, not when it compiles.
//
// The suite covers the shared vectors of SPEC §6, the rules of SPEC §2–§3
// one by one, bad input that must change nothing, trigger-injected write
// failures (SPEC §5 item 9) and concurrent claimers.
package conformance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/script"
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
const VectorDir = "../../testdata/vectors"

// Run runs the whole suite against b.
func Run(t *testing.T, b Backend) {
	t.Run("vectors", func(t *testing.T) { t.Parallel(); runVectors(t, b) })
	t.Run("rules", func(t *testing.T) { t.Parallel(); runRules(t, b) })
	t.Run("bad_input", func(t *testing.T) { t.Parallel(); runBadInput(t, b) })
	t.Run("triggers", func(t *testing.T) { t.Parallel(); runTriggers(t, b) })
	t.Run("concurrency", func(t *testing.T) { t.Parallel(); runConcurrency(t, b) })
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
	q, err := fairrelay.Open(ctx, qd, fairrelay.Config{Policy: pol})
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

func runVectors(t *testing.T, b Backend) {
	files, err := filepath.Glob(filepath.Join(VectorDir, "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var ops []string
	for _, f := range files {
		if !strings.HasSuffix(f, ".expected.jsonl") {
			ops = append(ops, f)
		}
	}
	if len(ops) == 0 {
		t.Fatalf("no vectors in %s", VectorDir)
	}
	for _, f := range ops {
		name := filepath.Base(f)
		t.Run(strings.TrimSuffix(name, ".jsonl"), func(t *testing.T) {
			t.Parallel()
			pol := fairrelay.ReferencePolicy()
			if strings.HasSuffix(name, ".fair.jsonl") {
				pol.Entry = fairrelay.EntryFair
			}
			env := Open(t, b, pol)
			RunVector(t, env, f)
		})
	}
}

// RunVector runs the ops file path through the script runner on env and
// compares each result with the same line of the .expected.jsonl file: every
// expected key must be present with an equal value (SPEC §6).
func RunVector(t *testing.T, env *Env, path string) {
	t.Helper()
	opsLines := readLines(t, path)
	want := readLines(t, strings.TrimSuffix(path, ".jsonl")+".expected.jsonl")
	if len(opsLines) != len(want) {
		t.Fatalf("%d ops but %d expected results", len(opsLines), len(want))
	}
	r := &script.Runner{Queue: env.Queue, Inbox: env.Inbox}
	for i, line := range opsLines {
		res := r.Do(context.Background(), []byte(line))
		gotJSON, err := json.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		var got, w any
		if err := json.Unmarshal(gotJSON, &got); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(want[i]), &w); err != nil {
			t.Fatalf("expected line %d: %v", i+1, err)
		}
		if why := Match(w, got, "$"); why != "" {
			t.Fatalf("op %d %s\n  %s\n  got: %s", i+1, line, why, gotJSON)
		}
	}
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			out = append(out, l)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
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
