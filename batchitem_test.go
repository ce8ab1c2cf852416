package fairrelay_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/harness/conformance"
)

// A bad event or settlement in a call of many says which one it is
// (Error.Item, and the message), the same on both backends: a relay's
// SettleMany of 100 settlements, or an import's EnqueueMany of 500 events,
// answered only "flow: …" or "detail: …", and the caller could not tell
// which item to drop. Nothing of the call is written. A single-item call
// has no position to give (Item 0, the message as before).
func TestBatchErrorsNameTheItem(t *testing.T) {
	t.Parallel()
	for _, b := range conformance.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			q := referenceQueue(t, b)
			ev := func(id, flow, body string) fairrelay.NewEvent {
				return fairrelay.NewEvent{ID: id, Flow: flow, Body: []byte(body)}
			}
			type want struct {
				Field, Lead string
				Item        int
			}
			got := func(err error) want {
				t.Helper()
				var e *fairrelay.Error
				if !errors.As(err, &e) || e.Code != fairrelay.CodeInvalidInput {
					t.Fatalf("want invalid_input, got %v", err)
				}
				lead, _, _ := strings.Cut(e.Message, ":")
				return want{Field: e.Field, Lead: lead, Item: e.Item}
			}
			// A flow of group G1, for the refusal only the store can make.
			if _, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: 1, Events: []fairrelay.NewEvent{{ID: "o1", Flow: "owned", Group: "G1", Body: []byte("{}")}}}); err != nil {
				t.Fatal(err)
			}
			before, err := q.Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				name   string
				events []fairrelay.NewEvent
				want   want
			}{
				{"a bad flow third of five", []fairrelay.NewEvent{ev("e1", "f1", "{}"), ev("e2", "f2", "{}"), ev("e3", "bad flow ", "{}"), ev("e4", "f4", "{}"), ev("e5", "f5", "{}")},
					want{Field: "flow", Lead: "event 3 of 5", Item: 3}},
				{"an empty body last of three", []fairrelay.NewEvent{ev("e1", "f1", "{}"), ev("e2", "f2", "{}"), ev("e3", "f3", "")},
					want{Field: "body", Lead: "event 3 of 3", Item: 3}},
				{"an id no row can hold second of two", []fairrelay.NewEvent{ev("e1", "f1", "{}"), ev("e\x00", "f2", "{}")},
					want{Field: "id", Lead: "event 2 of 2", Item: 2}},
				{"a bad group first of two", []fairrelay.NewEvent{{ID: "e1", Flow: "f1", Group: "\tg", Body: []byte("{}")}, ev("e2", "f2", "{}")},
					want{Field: "group", Lead: "event 1 of 2", Item: 1}},
				{"another group for an existing flow second of three", []fairrelay.NewEvent{ev("e1", "f1", "{}"), {ID: "e2", Flow: "owned", Group: "G2", Body: []byte("{}")}, ev("e3", "f3", "{}")},
					want{Field: "group", Lead: "event 2 of 3", Item: 2}},
				{"another group for a flow the call made", []fairrelay.NewEvent{{ID: "e1", Flow: "fresh", Group: "G1", Body: []byte("{}")}, {ID: "e2", Flow: "fresh", Group: "G2", Body: []byte("{}")}},
					want{Field: "group", Lead: "event 2 of 2", Item: 2}},
			} {
				_, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: 5, Events: c.events})
				if diff := cmp.Diff(c.want, got(err)); diff != "" {
					t.Errorf("%s: EnqueueMany's error (-want +got):\n%s\n%v", c.name, diff, err)
				}
			}
			// One event: its position is no news; the message is the field's.
			_, err = q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: 5, Events: []fairrelay.NewEvent{ev("e1", "f1", "")}})
			if diff := cmp.Diff(want{Field: "body", Lead: "empty", Item: 1}, got(err)); diff != "" {
				t.Errorf("EnqueueMany of one (-want +got):\n%s", diff)
			}
			_, err = q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "e1", Flow: "bad flow ", Body: []byte("{}"), At: 5})
			if w := got(err); w.Item != 0 || w.Field != "flow" || strings.HasPrefix(w.Lead, "event") {
				t.Errorf("Enqueue: %+v (%v), want field flow, no item", w, err)
			}
			after, err := q.Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(before, after); diff != "" {
				t.Fatalf("a refused enqueue changed the store (-before +after):\n%s", diff)
			}

			// SettleMany: the second of three settlements is bad; the first,
			// good, is not applied either.
			if _, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: 10, Events: []fairrelay.NewEvent{ev("a", "fa", "{}"), ev("b", "fb", "{}"), ev("c", "fc", "{}")}}); err != nil {
				t.Fatal(err)
			}
			cr, err := q.Claim(ctx, fairrelay.ClaimParams{At: 10, Limit: 3})
			if err != nil || len(cr.Claims) != 3 {
				t.Fatalf("claim: %+v %v", cr, err)
			}
			before, err = q.Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			settles := []fairrelay.Settlement{
				{Token: cr.Claims[0].Token, Outcome: fairrelay.Outcome("accepted")},
				{Token: cr.Claims[1].Token, Outcome: fairrelay.Outcome("accepted"), Detail: "bad\x00detail"},
				{Token: cr.Claims[2].Token, Outcome: fairrelay.Outcome("accepted")},
			}
			_, err = q.SettleMany(ctx, fairrelay.SettleManyParams{At: 11, Settles: settles})
			if diff := cmp.Diff(want{Field: "detail", Lead: "settlement 2 of 3", Item: 2}, got(err)); diff != "" {
				t.Errorf("SettleMany (-want +got):\n%s\n%v", diff, err)
			}
			_, err = q.Settle(ctx, fairrelay.SettleParams{At: 11, Token: cr.Claims[1].Token, Outcome: fairrelay.Outcome("accepted"), Detail: "bad\x00detail"})
			if w := got(err); w.Item != 0 || w.Field != "detail" || strings.HasPrefix(w.Lead, "settlement") {
				t.Errorf("Settle: %+v (%v), want field detail, no item", w, err)
			}
			// A retry due after MaxTick could never be claimed: its flow
			// would stay blocked, neither due nor quarantined.
			_, err = q.Settle(ctx, fairrelay.SettleParams{At: 11, Token: cr.Claims[1].Token, Outcome: fairrelay.OutcomeRetry, NotBefore: fairrelay.MaxTick + 1})
			if w := got(err); w.Field != "not_before" {
				t.Errorf("Settle with NotBefore MaxTick+1: %+v (%v), want field not_before", w, err)
			}
			after, err = q.Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(before, after); diff != "" {
				t.Fatalf("a refused settle changed the store (-before +after):\n%s", diff)
			}
		})
	}
}
