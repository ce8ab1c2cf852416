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
		body := []byte(`{"delta":1}`)
		for _, e := range []fairrelay.EnqueueParams{
			{ID: "a1", Flow: "a", Group: "acme"}, {ID: "b1", Flow: "b", Group: "beta"},
			{ID: "c1", Flow: "c", Group: "acme"}, {ID: "solo1", Flow: "solo"},
			{ID: "d1", Flow: "d", Group: "acme"},
		} {
			e.Body, e.At = body, 1
			if _, err := q.Enqueue(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
		// Every head but d1's quarantined.
		for range 5 {
			r, err := q.Claim(ctx, fairrelay.ClaimParams{At: 2})
			if err != nil || len(r.Claims) != 1 {
				t.Fatalf("claim: %+v %v", r, err)
			}
			if r.Claims[0].Flow == "d" {
				continue
			}
			if _, err := q.Settle(ctx, fairrelay.SettleParams{Token: r.Claims[0].Token, Outcome: fairrelay.OutcomeRejected, At: 2}); err != nil {
				t.Fatal(err)
			}
		}
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
