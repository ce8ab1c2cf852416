package fairrelay_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fairrelay/fairrelay"
)

// QuarantinedWhere's Group keeps the quarantined heads of that group's
// flows, a flow created without a group being in the group named like
// itself; pages hold matching heads only; a bad group name is refused
// naming "group". Both backends.
func TestQuarantinedWhereByGroup(t *testing.T) {
	eachReferenceQueue(t, func(t *testing.T, q *fairrelay.Queue) {
		ctx := context.Background()
		enqueueAt(t, q, 1, []fairrelay.EnqueueParams{
			{ID: "a1", Flow: "a", Group: "acme"}, {ID: "b1", Flow: "b", Group: "beta"},
			{ID: "c1", Flow: "c", Group: "acme"}, {ID: "solo1", Flow: "solo"},
			{ID: "d1", Flow: "d", Group: "acme"},
		})
		rejectHeads(t, q, 2, 5, "d") // every head but d1's quarantined
		ids := func(p fairrelay.QuarantinedParams) string {
			t.Helper()
			es, err := q.QuarantinedWhere(ctx, p)
			if err != nil {
				t.Fatalf("%+v: %v", p, err)
			}
			var out []string
			for _, e := range es {
				out = append(out, e.ID)
			}
			return strings.Join(out, " ")
		}
		for _, c := range []struct {
			p    fairrelay.QuarantinedParams
			want string
		}{
			{fairrelay.QuarantinedParams{Limit: 10}, "a1 b1 c1 solo1"},
			{fairrelay.QuarantinedParams{Group: "acme", Limit: 10}, "a1 c1"},
			{fairrelay.QuarantinedParams{Group: "acme", Limit: 1}, "a1"},
			{fairrelay.QuarantinedParams{Group: "acme", After: "a", Limit: 1}, "c1"},
			{fairrelay.QuarantinedParams{Group: "acme", After: "c", Limit: 1}, ""},
			{fairrelay.QuarantinedParams{Group: "beta", Limit: 10}, "b1"},
			{fairrelay.QuarantinedParams{Group: "solo", Limit: 10}, "solo1"},
			{fairrelay.QuarantinedParams{Group: "b", Limit: 10}, ""}, // flow b is in beta
			{fairrelay.QuarantinedParams{Group: "acme", Prefix: "c", Limit: 10}, "c1"},
			{fairrelay.QuarantinedParams{Group: "acme", Flow: "b", Limit: 10}, ""},
			{fairrelay.QuarantinedParams{Group: "acme", Reason: "budget_exhausted", Limit: 10}, ""},
		} {
			if diff := cmp.Diff(c.want, ids(c.p)); diff != "" {
				t.Errorf("%+v (-want +got):\n%s", c.p, diff)
			}
		}
		_, err := q.QuarantinedWhere(ctx, fairrelay.QuarantinedParams{Group: "ac\tme", Limit: 10})
		var fe *fairrelay.Error
		if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != "group" {
			t.Errorf("a group with a TAB: %v, want invalid_input naming group", err)
		}
	})
}

// Groups counts each group's quarantined heads (GroupInfo.Quarantined):
// the heads QuarantinedWhere's Group takes, the flow named like a group
// counting in it when it was created without one (SPEC §8); ready,
// inflight and paused heads do not count, and a redrive takes its head
// out of the count. Both backends.
func TestGroupsCountQuarantinedHeads(t *testing.T) {
	eachReferenceQueue(t, func(t *testing.T, q *fairrelay.Queue) {
		ctx := context.Background()
		// acme: a1, c1 quarantined, d1 inflight, e1 ready in a paused flow.
		// solo: the flow solo (created without a group, quarantined) and
		// s2 (joined it, quarantined). beta: b1 ready.
		enqueueAt(t, q, 1, []fairrelay.EnqueueParams{
			{ID: "a1", Flow: "a", Group: "acme"}, {ID: "c1", Flow: "c", Group: "acme"},
			{ID: "d1", Flow: "d", Group: "acme"}, {ID: "solo1", Flow: "solo"},
			{ID: "s21", Flow: "s2", Group: "solo"},
		})
		rejectHeads(t, q, 2, 5, "d") // d1 stays inflight
		enqueueAt(t, q, 3, []fairrelay.EnqueueParams{{ID: "e1", Flow: "e", Group: "acme"}, {ID: "b1", Flow: "b", Group: "beta"}})
		if r, err := q.Pause(ctx, fairrelay.FlowActionParams{Flow: "e", Reason: "test", At: 3}); err != nil || r.Status != "paused" {
			t.Fatalf("pause: %+v %v", r, err)
		}
		counts := func() map[string]int64 {
			t.Helper()
			gs, err := q.Groups(ctx, "", 100)
			if err != nil {
				t.Fatal(err)
			}
			out := map[string]int64{}
			for _, g := range gs {
				out[g.Group] = g.Quarantined
				// The count is what the group's quarantine list holds.
				es, err := q.QuarantinedWhere(ctx, fairrelay.QuarantinedParams{Group: g.Group, Limit: 100})
				if err != nil {
					t.Fatal(err)
				}
				if int64(len(es)) != g.Quarantined {
					t.Errorf("group %s: Quarantined %d, QuarantinedWhere lists %d", g.Group, g.Quarantined, len(es))
				}
			}
			return out
		}
		if diff := cmp.Diff(map[string]int64{"acme": 2, "beta": 0, "solo": 2}, counts()); diff != "" {
			t.Errorf("quarantined heads by group (-want +got):\n%s", diff)
		}
		es, err := q.QuarantinedWhere(ctx, fairrelay.QuarantinedParams{Flow: "solo", Limit: 1})
		if err != nil || len(es) != 1 {
			t.Fatalf("solo's head: %+v %v", es, err)
		}
		if r, err := q.Redrive(ctx, fairrelay.RedriveParams{EventID: es[0].ID, ExpectedGeneration: es[0].Generation, Reason: "fixed", At: 4}); err != nil || r.Status != "ready" {
			t.Fatalf("redrive: %+v %v", r, err)
		}
		if diff := cmp.Diff(map[string]int64{"acme": 2, "beta": 0, "solo": 1}, counts()); diff != "" {
			t.Errorf("after solo's redrive (-want +got):\n%s", diff)
		}
	})
}

// enqueueAt enqueues each event with the body {"delta":1} at tick at.
func enqueueAt(t *testing.T, q *fairrelay.Queue, at int64, es []fairrelay.EnqueueParams) {
	t.Helper()
	for _, e := range es {
		e.Body, e.At = []byte(`{"delta":1}`), at
		if _, err := q.Enqueue(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
}

// rejectHeads makes n claims of one head each at tick at and settles each
// rejected (quarantined), but for the head of flow keep, left inflight.
func rejectHeads(t *testing.T, q *fairrelay.Queue, at int64, n int, keep string) {
	t.Helper()
	ctx := context.Background()
	for range n {
		r, err := q.Claim(ctx, fairrelay.ClaimParams{At: at})
		if err != nil || len(r.Claims) != 1 {
			t.Fatalf("claim: %+v %v", r, err)
		}
		if r.Claims[0].Flow == keep {
			continue
		}
		if _, err := q.Settle(ctx, fairrelay.SettleParams{Token: r.Claims[0].Token, Outcome: fairrelay.OutcomeRejected, At: at}); err != nil {
			t.Fatal(err)
		}
	}
}
