package fairrelay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/fairrelay/fairrelay"
)

// Under the fair entry rule a new flow joins at the back of the rotation
// (SPEC §7: served = the ticket), and on PostgreSQL that is the ticket when
// its transaction commits, not when its enqueue ran: an outbox transaction
// that enqueues to a new flow and stays open while the relay claims must
// not join ahead of the flows those claims rotated past (SPEC §7's bound:
// new flows cannot push a waiting flow back). Flows A, B and C hold three
// events each; a transaction makes the new flow (or group) and stays open
// over four claim+settle rounds; flow P is made and committed; the
// transaction commits; five more rounds follow. The claims must be those of
// the same store where the enqueue ran after P's: the new flow ties on
// served with A and P, and comes after both, made after both. Before
// migration 031 the new flow took the ticket of round 0 and was claimed
// next: A1 B1 C1 A2 N1 B2 C2 A3; with its ticket alone placed at commit it
// kept the creation order its enqueue drew and came before P (two
// breakers' reports).
//
// Each case goes through another of the paths that make a flow or place a
// group: the one-event outbox call, a batch of new flows, a new group, a
// group configured before its first flow, a flow made in the same
// transaction that becomes its group's first member, and a batch under a
// store limit.
func TestPostgresNewFlowJoinsTheRotationAtItsCommit(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		configure []fairrelay.ConfigureParams
		enqueue   []outboxEvent
		oneCall   bool // through EnqueuePgxTx (the function enqueue), else enqueue_many
		// alone: no flow P beside the transaction (under a store limit
		// enqueues take turns, SPEC §10, so P would wait for its commit).
		alone bool
	}{
		{name: "one_event", enqueue: []outboxEvent{{"N1", "N", ""}}, oneCall: true},
		{name: "batch_of_new_flows", enqueue: []outboxEvent{{"N1", "N", ""}, {"O1", "O", ""}}},
		{name: "new_group", enqueue: []outboxEvent{{"N1", "N", "G"}}},
		{name: "group_configured_first", configure: []fairrelay.ConfigureParams{{At: 1, Group: "G", Weight: ptr(1)}},
			enqueue: []outboxEvent{{"N1", "N", "G"}}},
		{name: "flow_becomes_first_member", enqueue: []outboxEvent{{"G1", "G", ""}, {"M1", "M", "G"}}},
		{name: "under_store_limit", configure: []fairrelay.ConfigureParams{{At: 1, MaxBacklog: ptr(100)}},
			enqueue: []outboxEvent{{"N1", "N", ""}, {"O1", "O", ""}}, alone: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			pol := fairrelay.ReferencePolicy()
			pol.Entry = fairrelay.EntryFair
			// run returns the claims of eight rounds; held says whether
			// the enqueue's transaction opens before the first round and
			// commits after the fourth, or runs after the fourth.
			run := func(held bool) []string {
				q, pool, schema := outboxStore(t, "frjoin", pol)
				for _, p := range c.configure {
					if _, err := q.Configure(ctx, p); err != nil {
						t.Fatal(err)
					}
				}
				for _, f := range []string{"A", "B", "C"} {
					for i := 1; i <= 3; i++ {
						if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: fmt.Sprint(f, i), Flow: f, Body: []byte(`{"delta":1}`), At: 1}); err != nil {
							t.Fatal(err)
						}
					}
				}
				var got []string
				rounds := func(from, to int64) {
					for at := from; at <= to; at++ {
						r, err := q.Claim(ctx, fairrelay.ClaimParams{At: at})
						if err != nil || len(r.Claims) != 1 {
							t.Fatalf("claim at %d: %+v, %v", at, r, err)
						}
						cl := r.Claims[0]
						got = append(got, fmt.Sprint(cl.Flow, cl.Seq))
						if s, err := q.Settle(ctx, fairrelay.SettleParams{At: at, Token: cl.Token, Outcome: fairrelay.OutcomeAccepted}); err != nil || s.Status != fairrelay.SettleAcked {
							t.Fatalf("settle at %d: %+v, %v", at, s, err)
						}
					}
				}
				tx, err := pool.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback(context.WithoutCancel(ctx))
				if held {
					outboxEnqueue(t, ctx, q, tx, schema, 1, c.oneCall, c.enqueue)
				}
				rounds(2, 5)
				// A flow made and committed after the rounds, before the
				// commit: it ties on served with the transaction's, and
				// comes first, as it was made first.
				if !c.alone {
					if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "P1", Flow: "P", Body: []byte(`{"delta":1}`), At: 5}); err != nil {
						t.Fatal(err)
					}
				}
				if !held {
					outboxEnqueue(t, ctx, q, tx, schema, 5, c.oneCall, c.enqueue)
				}
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				rounds(6, 10)
				return got
			}
			want, got := run(false), run(true)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("claims with the enqueue's transaction open over four rounds differ from those with the enqueue after them (-after +held):\n%s", diff)
			}
			if c.name == "one_event" && strings.Join(want, " ") != "A1 B1 C1 A2 B2 C2 A3 P1 N1" {
				t.Errorf("claims %v, want A1 B1 C1 A2 B2 C2 A3 P1 N1 (N at the back, after A and P on the tie by creation)", want)
			}
		})
	}
}

// outboxEvent is one event of outboxEnqueue: its id, flow and group ("":
// none named).
type outboxEvent struct{ id, flow, group string }

// outboxEnqueue enqueues evs in tx at tick at: one event through
// EnqueuePgxTx, else one call of the schema's SQL function enqueue_many
// (with the groups), each answering created.
func outboxEnqueue(t *testing.T, ctx context.Context, q *fairrelay.Queue, tx pgx.Tx, schema string, at int64, oneCall bool, evs []outboxEvent) {
	t.Helper()
	if oneCall {
		e := evs[0]
		r, err := q.EnqueuePgxTx(ctx, tx, fairrelay.EnqueueParams{ID: e.id, Flow: e.flow, Group: e.group, Body: []byte(`{"delta":1}`), At: at})
		if err != nil || r.Status != fairrelay.EnqueueCreated {
			t.Fatalf("EnqueuePgxTx: %+v, %v", r, err)
		}
		return
	}
	var ids, flows []string
	var groups []*string
	var bodies [][]byte
	for _, e := range evs {
		ids, flows, bodies = append(ids, e.id), append(flows, e.flow), append(bodies, []byte(`{"delta":1}`))
		if e.group == "" {
			groups = append(groups, nil)
		} else {
			groups = append(groups, &e.group)
		}
	}
	rows, err := tx.Query(ctx, "SELECT status FROM "+pgx.Identifier{schema, "enqueue_many"}.Sanitize()+
		"($1, $2, $3, p_at => $4, p_groups => $5)", ids, flows, bodies, at, groups)
	if err != nil {
		t.Fatal(err)
	}
	statuses, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range statuses {
		if s != string(fairrelay.EnqueueCreated) {
			t.Fatalf("enqueue_many: event %d answered %s, want created", i+1, s)
		}
	}
}
