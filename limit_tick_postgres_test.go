package fairrelay_test

import (
	"context"
	"testing"

	"github.com/fairrelay/fairrelay"
)

// A group's limit configured at a later tick while an enqueue at the
// store's tick is between its read of the tick and its read of the limit:
// the enqueue that answers full because of that limit (it depended on the
// configure, which committed before it went on) must answer at the
// configure's tick or later (SPEC §2: whatever its answer, at >= the stored
// tick; migration 038's rule: never answer at a tick older than a row it
// met). Before migration 039 a new flow of an existing group read the tick
// again after its names and the group's limit row, and started over; the
// event already on an existing flow of the group never did.
func TestPostgresFullAnsweredAtTheLimitsTick(t *testing.T) {
	t.Parallel()
	const later = 1000
	cases := []struct {
		name  string
		first bool // the group's first limit (else lowered from 5 to 1)
		fill  bool // the limit is 2 from the start; meanwhile another enqueue takes the last place
		id    string
		flow  string
	}{
		{"new flow of an existing group, first limit", true, false, "b1", "b"},
		{"new flow of an existing group, limit lowered", false, false, "b1", "b"},
		{"existing flow of the group, limit lowered", false, false, "a2", "a"},
		{"new flow of an existing group, the last place taken", false, true, "b1", "b"},
		{"existing flow of the group, the last place taken", false, true, "a2", "a"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			q, pool, schema := outboxStore(t, "frlimtick", fairrelay.DaemonPolicy())
			if _, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: 1, Events: []fairrelay.NewEvent{
				{ID: "a1", Flow: "a", Group: "G", Body: []byte(`{"delta":1}`)}}}); err != nil {
				t.Fatal(err)
			}
			if !tc.first {
				five := int64(5)
				if tc.fill {
					five = 2
				}
				if _, err := q.Configure(ctx, fairrelay.ConfigureParams{At: 1, Group: "G", MaxBacklog: &five}); err != nil {
					t.Fatal(err)
				}
			}
			a := runGated(t, pool, schema, 2,
				[]string{tc.id}, []string{tc.flow}, []string{"G"},
				func() error {
					if tc.fill {
						_, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: later, Events: []fairrelay.NewEvent{
							{ID: "c1", Flow: "c", Group: "G", Body: []byte(`{"delta":1}`)}}})
						return err
					}
					one := int64(1)
					_, err := q.Configure(ctx, fairrelay.ConfigureParams{At: later, Group: "G", MaxBacklog: &one})
					return err
				})
			if a.err != nil {
				t.Fatalf("the call: %v", a.err)
			}
			if len(a.status) != 1 {
				t.Fatalf("answers %v", a.status)
			}
			lim := ""
			if a.limit[0] != nil {
				lim = *a.limit[0]
			}
			t.Logf("answered %s (limit %q) at tick %d; the other write committed first: %v", a.status[0], lim, a.tick[0], a.committedFirst)
			if a.committedFirst && a.status[0] == "full" && a.tick[0] < later {
				t.Errorf("answered full at tick %d, below the tick %d of the write (configure or enqueue) that made the group full, committed before the call went on", a.tick[0], later)
			}
		})
	}
}
