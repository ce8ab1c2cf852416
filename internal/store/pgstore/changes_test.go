package pgstore_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/internal/store"
	"github.com/fairrelay/fairrelay/internal/store/pgstore"
	"github.com/fairrelay/fairrelay/internal/store/storetest"
)

func open(t *testing.T, dsn string) *pgstore.Store {
	t.Helper()
	s, err := pgstore.Open(t.Context(), dsn, pgstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func enqueueOne(t *testing.T, s *pgstore.Store, id, flow string) string {
	t.Helper()
	r, err := s.Enqueue(t.Context(), nil, store.EnqueueParams{At: store.AtStored, MaxBodyBytes: 1 << 20,
		Events: []store.NewEvent{{ID: id, Flow: flow, Body: []byte(`{"delta":1}`)}}})
	if err != nil {
		t.Fatalf("enqueue %s: %v", id, err)
	}
	return r.Answers[0].Status
}

// enqueue_many notifies the store's channel only when it made a flow's
// head claimable — an event onto a new flow, or onto a flow without a head —
// and once per transaction: an event behind a head, an existing id and a
// conflict send nothing (a notifying commit holds a server-wide lock from
// its start to its end, so notifications are sent only where a relay
// needs one). PostgreSQL delivers notifications in commit order, so the
// test's own marker, committed last, comes after every notification of
// the enqueues before it.
func TestNotifiesOnlyForAClaimableHead(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dsn := pgtest.Schema(t, "frnotify")
	s := open(t, dsn)
	lis := pgtest.Connect(t, dsn)
	defer lis.Close(ctx)
	channel := pgx.Identifier{pgstore.Channel(s.Schema())}.Sanitize()
	if _, err := lis.Exec(ctx, "LISTEN "+channel); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		id, flow, want string
		notifies       bool
	}{
		{"A1", "A", "created", true},   // a new flow
		{"A2", "A", "created", false},  // behind A1
		{"A1", "A", "existing", false}, // nothing changes
		{"A1", "B", "conflict", false}, // nothing changes
		{"B1", "B", "created", true},   // a new flow
		{"B2", "B", "created", false},  // behind B1
		{"A3", "A", "created", false},  // behind A1
		{"C1", "C", "created", true},   // a new flow
	}
	want := 0
	for _, st := range steps {
		if got := enqueueOne(t, s, st.id, st.flow); got != st.want {
			t.Fatalf("enqueue %s onto %s: %s, want %s", st.id, st.flow, got, st.want)
		}
		if st.notifies {
			want++
		}
	}
	// Several claimable heads in one transaction (a batch, then another
	// call): one notification.
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ids := range [][2]string{{"S1", "T1"}, {"U1", "V1"}} {
		if _, err := s.Enqueue(ctx, tx, store.EnqueueParams{At: store.AtStored, MaxBodyBytes: 1 << 20, Events: []store.NewEvent{
			{ID: ids[0], Flow: ids[0][:1], Body: []byte("1")}, {ID: ids[1], Flow: ids[1][:1], Body: []byte("1")}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	want++
	// A rolled-back enqueue notifies nobody.
	tx, err = s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(ctx, tx, store.EnqueueParams{At: store.AtStored, MaxBodyBytes: 1 << 20, Events: []store.NewEvent{{ID: "W1", Flow: "W", Body: []byte("1")}}}); err != nil {
		t.Fatal(err)
	}
	tx.Rollback(ctx)
	pgtest.Exec(t, dsn, "NOTIFY "+channel+", 'end'")
	got := 0
	for {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		n, err := lis.WaitForNotification(wctx)
		cancel()
		if err != nil {
			t.Fatalf("after %d notifications, want %d and the marker: %v", got, want, err)
		}
		if n.Payload == "end" {
			break
		}
		if n.Payload != "" {
			t.Fatalf("payload %q, want empty", n.Payload)
		}
		got++
	}
	if got != want {
		t.Fatalf("%d notifications, want %d: one per transaction that made a head claimable", got, want)
	}
}

// A schema whose name is longer than 53 bytes gets the channel
// "fairrelay_" + the md5 of its name (a channel holds 63 bytes): the SQL
// function and the Go listener compute the same one.
func TestChangesInALongSchema(t *testing.T) {
	t.Parallel()
	dsn := pgtest.Schema(t, "frnotify_"+strings.Repeat("x", 40)) // 62 bytes with the suffix
	s := open(t, dsn)
	if len(s.Schema()) <= 53 {
		t.Fatalf("schema %q is not long enough to test the md5 channel", s.Schema())
	}
	if ch := pgstore.Channel(s.Schema()); len(ch) > 63 || strings.Contains(ch, "xxxx") {
		t.Fatalf("channel %q: want fairrelay_ and 32 hex digits", ch)
	}
	c := s.Changes(t.Context(), nil)
	storetest.WaitChange(t, c, "once the watch holds")
	storetest.Drain(c)
	enqueueOne(t, open(t, dsn), "A1", "A")
	storetest.WaitChange(t, c, "after an enqueue in the long schema")
}

// The listening connection is the watch's own, outside the pool; when its
// server process is terminated (a restart, an administrator, a proxy
// dropping it) the watch reports the error, listens again with backoff,
// reports nil and sends a value (what was committed meanwhile is unknown),
// and then signals enqueues as before.
func TestChangesListenAgainAfterTheConnectionDrops(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dsn := pgtest.Schema(t, "frlisten")
	s := open(t, dsn)
	statuses := make(chan error, 16)
	c := s.Changes(ctx, func(err error) { statuses <- err })
	storetest.WaitChange(t, c, "once the watch holds")
	storetest.Drain(c)
	listen := "LISTEN " + pgx.Identifier{pgstore.Channel(s.Schema())}.Sanitize()
	var pid int
	pgtest.QueryRow(t, dsn, "SELECT pid FROM pg_stat_activity WHERE query = '"+listen+"'", &pid)
	var killed bool
	pgtest.QueryRow(t, dsn, "SELECT pg_terminate_backend("+strconv.Itoa(pid)+")", &killed)
	if !killed {
		t.Fatalf("could not terminate the listener's server process %d", pid)
	}
	for i, want := range []bool{true, false} {
		select {
		case err := <-statuses:
			if (err != nil) != want {
				t.Fatalf("status %d: %v, want an error, then nil", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("status %d: nothing within 10s of the listener's server process ending", i)
		}
	}
	storetest.WaitChange(t, c, "once the watch holds again")
	storetest.Drain(c)
	var again int
	pgtest.QueryRow(t, dsn, "SELECT count(*) FROM pg_stat_activity WHERE query = '"+listen+"' AND pid <> "+strconv.Itoa(pid), &again)
	if again != 1 {
		t.Fatalf("%d listening connections after the drop, want 1 new one", again)
	}
	enqueueOne(t, open(t, dsn), "A1", "A")
	storetest.WaitChange(t, c, "after an enqueue once listening again")
}
