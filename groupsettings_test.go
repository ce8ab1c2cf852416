package fairrelay_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/harness/conformance"
)

// GroupSettings lists exactly the groups whose weight, backlog limit or
// slot cap differs from a new group's, with those values as Groups reports
// them, by name and page by page; a setting put back to its default drops
// the group from the list, and a group with flows but no setting is not in
// it. The relay reads its weights and slot caps from it (SPEC §8, §11).
func TestGroupSettingsListsTheGroupsSetApart(t *testing.T) {
	for _, b := range conformance.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			q := referenceQueue(t, b)
			at := int64(1)
			configure := func(p fairrelay.ConfigureParams) {
				t.Helper()
				at++
				p.At = at
				if _, err := q.Configure(ctx, p); err != nil {
					t.Fatalf("configure %+v: %v", p, err)
				}
			}
			// Flows in every group, settings on some.
			for i, g := range []string{"plain", "heavy", "capped", "limited", "back", "lifted", "joined"} {
				for k := range 3 {
					at++
					p := fairrelay.EnqueueParams{ID: fmt.Sprintf("e-%d-%d", i, k), Flow: fmt.Sprintf("%s-%d", g, k), Group: g, Body: []byte(`{}`), At: at}
					if _, err := q.Enqueue(ctx, p); err != nil {
						t.Fatal(err)
					}
				}
			}
			configure(fairrelay.ConfigureParams{Group: "heavy", Weight: ptr(int64(5))})
			configure(fairrelay.ConfigureParams{Group: "capped", MaxSlots: ptr(int64(2))})
			configure(fairrelay.ConfigureParams{Group: "limited", MaxBacklog: ptr(int64(40))})
			configure(fairrelay.ConfigureParams{Group: "back", Weight: ptr(int64(3))})
			configure(fairrelay.ConfigureParams{Group: "back", Weight: ptr(int64(1))})
			configure(fairrelay.ConfigureParams{Group: "lifted", MaxBacklog: ptr(int64(7)), MaxSlots: ptr(int64(4))})
			configure(fairrelay.ConfigureParams{Group: "lifted", MaxBacklog: ptr(int64(0)), MaxSlots: ptr(int64(0))})
			configure(fairrelay.ConfigureParams{Group: "unused", Weight: ptr(int64(2))}) // no flow yet

			want := []fairrelay.GroupSetting{
				{Group: "capped", Weight: 1, MaxSlots: 2},
				{Group: "heavy", Weight: 5},
				{Group: "limited", Weight: 1, MaxBacklog: 40},
				{Group: "unused", Weight: 2},
			}
			got, err := q.GroupSettings(ctx, "", 100)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Fatalf("GroupSettings (-want +got):\n%s", d)
			}

			// The same values as Groups, for every group Groups lists.
			all, err := q.Groups(ctx, "", 100)
			if err != nil {
				t.Fatal(err)
			}
			var fromGroups []fairrelay.GroupSetting
			for _, g := range all {
				mb := int64(0)
				if g.MaxBacklog != nil {
					mb = *g.MaxBacklog
				}
				if g.Weight != 1 || mb > 0 || g.MaxSlots > 0 {
					fromGroups = append(fromGroups, fairrelay.GroupSetting{Group: g.Group, Weight: g.Weight, MaxBacklog: mb, MaxSlots: g.MaxSlots})
				}
			}
			if d := cmp.Diff(fromGroups, got); d != "" {
				t.Fatalf("GroupSettings against Groups (-Groups +GroupSettings):\n%s", d)
			}

			// Page by page.
			var paged []fairrelay.GroupSetting
			for after := ""; ; {
				page, err := q.GroupSettings(ctx, after, 1)
				if err != nil {
					t.Fatal(err)
				}
				if len(page) == 0 {
					break
				}
				if len(page) > 1 {
					t.Fatalf("a page of 1 held %d groups", len(page))
				}
				paged = append(paged, page...)
				after = page[0].Group
			}
			if d := cmp.Diff(want, paged); d != "" {
				t.Fatalf("GroupSettings by pages of 1 (-want +got):\n%s", d)
			}

			_, err = q.GroupSettings(ctx, "", 0)
			var fe *fairrelay.Error
			if !errors.Is(err, fairrelay.ErrInvalidInput) || !errors.As(err, &fe) || fe.Field != "limit" {
				t.Fatalf("a limit of 0: %v, want invalid input naming limit", err)
			}
		})
	}
}

// A group's slot cap goes no higher than a relay's most workers
// (MaxGroupSlots = relay.MaxWorkers): a larger one caps nothing and was a
// typo, which configure answered ok and stored (an SRE's report). It is
// refused naming max_slots, and nothing changes, not even the tick.
func TestConfigureRefusesASlotCapNoRelayHas(t *testing.T) {
	for _, b := range conformance.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			q := referenceQueue(t, b)
			if _, err := q.Configure(ctx, fairrelay.ConfigureParams{At: 1, Group: "g", MaxSlots: ptr(int64(fairrelay.MaxGroupSlots))}); err != nil {
				t.Fatalf("a cap of MaxGroupSlots: %v", err)
			}
			before, err := q.Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range []int64{fairrelay.MaxGroupSlots + 1, 99999999999, -1} {
				_, err := q.Configure(ctx, fairrelay.ConfigureParams{At: 2, Group: "g", MaxSlots: ptr(n)})
				if fieldOf(err) != "max_slots" {
					t.Errorf("max_slots %d: %v, want invalid_input naming max_slots", n, err)
				}
			}
			after, err := q.Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(before, after); d != "" {
				t.Errorf("a refused configure changed the store (-before +after):\n%s", d)
			}
			gs, err := q.GroupSettings(ctx, "", 10)
			if err != nil || len(gs) != 1 || gs[0].MaxSlots != fairrelay.MaxGroupSlots {
				t.Errorf("group settings %+v (%v), want g's cap of %d kept", gs, err, fairrelay.MaxGroupSlots)
			}
		})
	}
}
