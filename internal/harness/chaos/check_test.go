//go:build unix

package chaos

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
)

// findings collects what a check found, by kind, and reports each kind
// with its count and first few cases, the kinds in the order they were
// first seen.
type findings struct {
	kinds []string
	cases map[string][]string
}

func (f *findings) add(kind, format string, args ...any) {
	if f.cases == nil {
		f.cases = map[string][]string{}
	}
	if _, ok := f.cases[kind]; !ok {
		f.kinds = append(f.kinds, kind)
	}
	f.cases[kind] = append(f.cases[kind], fmt.Sprintf(format, args...))
}

func (f *findings) report(t *testing.T) {
	t.Helper()
	for _, k := range f.kinds {
		cs := f.cases[k]
		shown := cs[:min(len(cs), 5)]
		more := ""
		if len(cs) > len(shown) {
			more = fmt.Sprintf("\n\t… and %d more", len(cs)-len(shown))
		}
		t.Errorf("%s: %d\n\t%s%s", k, len(cs), strings.Join(shown, "\n\t"), more)
	}
}

// checkStores holds the stores to the events the producer wrote (in the
// order written): every event acked and none quarantined, no audit row;
// one receipt per event, at its flow and seq; each flow's receipts seqs
// 1..n with its ledger at seq n and the sum of its deltas.
func checkStores(t *testing.T, events []event, qs *fairrelay.Snapshot, is *inbox.Snapshot) {
	t.Helper()
	var f findings
	defer f.report(t)
	want := make(map[string]event, len(events))
	type ledger struct{ n, total int64 }
	flows := map[string]ledger{}
	for _, e := range events {
		want[e.ID] = e
		l := flows[e.Flow]
		flows[e.Flow] = ledger{n: l.n + 1, total: l.total + e.Delta}
	}

	// The queue: every event, acked, where it was written. Events not
	// acked are reported last: they wait behind a cause reported before.
	var notAcked []fairrelay.EventState
	if len(qs.Events) != len(events) {
		f.add("queue: events missing or extra", "%d events, the producer stored %d", len(qs.Events), len(events))
	}
	for _, e := range qs.Events {
		w, ok := want[e.ID]
		switch {
		case !ok:
			f.add("queue: events never written", "%s", e.ID)
		case e.Flow != w.Flow || e.Seq != w.Seq:
			f.add("queue: events out of place", "%s is flow %s seq %d, written as flow %s seq %d", e.ID, e.Flow, e.Seq, w.Flow, w.Seq)
		}
		switch e.State {
		case fairrelay.StateAcked:
		case fairrelay.StateQuarantined:
			f.add("queue: events quarantined", "%s (flow %s seq %d): %s after %d attempts (%d in all, generation %d)",
				e.ID, e.Flow, e.Seq, deref(e.Reason), e.Attempts, e.LifetimeAttempts, e.Generation)
		default:
			notAcked = append(notAcked, e)
		}
	}
	for _, a := range qs.Audit {
		f.add("queue: audit rows, though nobody redrove anything", "%+v", a)
	}

	// The inbox: one receipt per event, at its place; each flow 1..n.
	if len(is.Receipts) != len(events) {
		f.add("inbox: receipts missing or extra", "%d receipts for %d events", len(is.Receipts), len(events))
	}
	seen := map[string]bool{}
	seqs := map[string][]int64{}
	for _, r := range is.Receipts {
		w, ok := want[r.ID]
		switch {
		case seen[r.ID]:
			f.add("inbox: events applied twice", "a second receipt of %s", r.ID)
		case !ok:
			f.add("inbox: receipts of events never written", "%s", r.ID)
		case r.Flow != w.Flow || r.Seq != w.Seq:
			f.add("inbox: receipts out of place", "%s at flow %s seq %d, written as flow %s seq %d", r.ID, r.Flow, r.Seq, w.Flow, w.Seq)
		}
		seen[r.ID] = true
		seqs[r.Flow] = append(seqs[r.Flow], r.Seq)
	}
	for flow, l := range flows {
		got := slices.Sorted(slices.Values(seqs[flow]))
		for i, s := range got {
			if s != int64(i+1) {
				f.add("inbox: flows with receipts not 1..n (lost or out of order)", "flow %s has receipts at seqs %s, want 1..%d", flow, short(got), l.n)
				break
			}
		}
	}
	byFlow := is.ByFlow()
	if len(byFlow) != len(flows) {
		f.add("inbox: ledgers missing or extra", "a ledger for %d flows, the producer wrote %d", len(byFlow), len(flows))
	}
	for flow, l := range flows {
		if g := byFlow[flow]; g.Seq != l.n || g.Total != l.total {
			f.add("inbox: ledgers wrong (lost or applied twice)", "flow %s is at seq %d with total %d, want seq %d total %d", flow, g.Seq, g.Total, l.n, l.total)
		}
	}
	for _, e := range notAcked {
		f.add("queue: events not acked", "%s (flow %s seq %d) is %s after %d attempts", e.ID, e.Flow, e.Seq, e.State, e.LifetimeAttempts)
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// short prints a list of seqs, cut after 30.
func short(s []int64) string {
	if len(s) > 30 {
		return fmt.Sprint(s[:30]) + "…"
	}
	return fmt.Sprint(s)
}
