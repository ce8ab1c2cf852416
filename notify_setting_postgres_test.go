package fairrelay_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fairrelay/fairrelay"
)

// An enqueue that makes a flow's head claimable notifies the relay, and a
// transaction that notified cannot be prepared (two-phase commit:
// PostgreSQL refuses PREPARE TRANSACTION after NOTIFY), so SET LOCAL
// fairrelay.notify = off leaves the notification out (migration 033; a
// breaker's report: an XA transaction failed at PREPARE whenever its
// enqueue made a head). Each of the enqueue's ways that notifies is run
// twice, committed and followed by a sentinel notification: with the
// setting off the listener's next notification is the sentinel, without it
// the enqueue's own (so the way does notify).
func TestPostgresNotifyOffSendsNoNotification(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, pool, schema := outboxStore(t, "frnotifyoff", fairrelay.DaemonPolicy())
	channel := "fairrelay_" + schema
	lis, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Release()
	if _, err := lis.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"delta":1}`)
	// A flow whose head was acked: its next event becomes its head.
	headless := func(flow string) {
		t.Helper()
		if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: flow + "-0", Flow: flow, Body: body, At: fairrelay.AtStored}); err != nil {
			t.Fatal(err)
		}
		// Every head (the earlier ways' flows too), acked.
		cr, err := q.Claim(ctx, fairrelay.ClaimParams{At: fairrelay.AtStored, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cr.Claims {
			if _, err := q.Settle(ctx, fairrelay.SettleParams{Token: c.Token, Outcome: fairrelay.OutcomeAccepted, At: fairrelay.AtStored}); err != nil {
				t.Fatal(err)
			}
		}
		if e, err := q.Event(ctx, flow+"-0"); err != nil || e.State != fairrelay.StateAcked {
			t.Fatalf("%s's head: %+v %v, want it acked", flow, e, err)
		}
	}
	ways := []struct {
		name    string
		prepare func(suffix string)
		enqueue func(tx pgx.Tx, suffix string) error
	}{
		{"one event onto a new flow", func(string) {}, func(tx pgx.Tx, s string) error {
			_, err := q.EnqueuePgxTx(ctx, tx, fairrelay.EnqueueParams{ID: "n" + s, Flow: "N" + s, Body: body, At: fairrelay.AtStored})
			return err
		}},
		{"one event onto a flow without a head", func(s string) { headless("H" + s) }, func(tx pgx.Tx, s string) error {
			_, err := q.EnqueuePgxTx(ctx, tx, fairrelay.EnqueueParams{ID: "h" + s, Flow: "H" + s, Body: body, At: fairrelay.AtStored})
			return err
		}},
		{"one event onto a flow without a head that another transaction holds", func(s string) { headless("W" + s) }, func(tx pgx.Tx, s string) error {
			// The common call's statement skips a held flow; the general
			// way waits for it.
			holder, err := pool.Begin(ctx)
			if err != nil {
				return err
			}
			defer holder.Rollback(ctx)
			if _, err := holder.Exec(ctx, `SELECT 1 FROM `+pgx.Identifier{schema, "flow"}.Sanitize()+` WHERE flow_id = $1 FOR SHARE`, "W"+s); err != nil {
				return err
			}
			done := make(chan error, 1)
			go func() {
				_, err := q.EnqueuePgxTx(ctx, tx, fairrelay.EnqueueParams{ID: "w" + s, Flow: "W" + s, Body: body, At: fairrelay.AtStored})
				done <- err
			}()
			waitBlockedBy(t, pool, holder)
			if err := holder.Commit(ctx); err != nil {
				return err
			}
			return <-done
		}},
		{"a batch", func(string) {}, func(tx pgx.Tx, s string) error {
			_, err := tx.Exec(ctx, `SELECT * FROM `+pgx.Identifier{schema, "enqueue_many"}.Sanitize()+`($1, $2, $3)`,
				[]string{"b1" + s, "b2" + s}, []string{"B1" + s, "B2" + s}, [][]byte{body, body})
			return err
		}},
		{"a batch naming groups", func(string) {}, func(tx pgx.Tx, s string) error {
			_, err := tx.Exec(ctx, `SELECT * FROM `+pgx.Identifier{schema, "enqueue_many"}.Sanitize()+`($1, $2, $3, p_groups => $4)`,
				[]string{"g1" + s, "g2" + s}, []string{"G1" + s, "G2" + s}, [][]byte{body, body}, []string{"tenant" + s, "tenant" + s})
			return err
		}},
	}
	next := func() string {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := lis.Conn().WaitForNotification(wctx)
		if err != nil {
			t.Fatalf("no notification within 10 s: %v", err)
		}
		return n.Payload
	}
	// before sends the sentinel and returns the payloads that came before it.
	before := func() []string {
		t.Helper()
		if _, err := pool.Exec(ctx, `SELECT pg_notify($1, 'sentinel')`, channel); err != nil {
			t.Fatal(err)
		}
		var got []string
		for p := next(); p != "sentinel"; p = next() {
			got = append(got, p)
		}
		return got
	}
	for i, w := range ways {
		for _, off := range []bool{true, false} {
			suffix := string(rune('a'+i)) + map[bool]string{true: "off", false: "on"}[off]
			w.prepare(suffix)
			before() // the preparation's own notifications
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if off {
				if _, err := tx.Exec(ctx, `SET LOCAL fairrelay.notify = 'OFF'`); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.enqueue(tx, suffix); err != nil {
				t.Fatalf("%s: %v", w.name, err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			got := before()
			switch {
			case off && len(got) > 0:
				t.Errorf("%s with fairrelay.notify off: notification %q before the sentinel, want none", w.name, got[0])
			case !off && (len(got) == 0 || got[0] != ""):
				t.Errorf("%s: notifications %q before the sentinel, want the enqueue's first (empty payload)", w.name, got)
			}
		}
	}
}

// A value of fairrelay.notify that is neither on nor off is refused at the
// enqueue, naming the setting, whether or not the call would notify:
// before migration 034 a misspelt "off" notified silently, and a
// two-phase-commit transaction failed only at PREPARE, with PostgreSQL's
// message that names no setting (a fresh user's report). The values on
// and off take, in any case, enqueue as before.
func TestPostgresNotifySettingMisspeltIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, pool, _ := outboxStore(t, "frnotifybad", fairrelay.DaemonPolicy())
	body := []byte(`{"delta":1}`)
	// A flow with a head: an enqueue onto it does not notify.
	if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "head", Flow: "held", Body: body, At: fairrelay.AtStored}); err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		value string
		ok    bool
	}{
		{"of", false}, {"offf", false}, {" off", false}, {"nope", false}, {"2", false},
		{"", true}, {"On", true}, {"TRUE", true}, {"yes", true}, {"1", true}, {"Off", true}, {"false", true}, {"NO", true}, {"0", true},
	} {
		for _, flow := range []string{"new" + strconv.Itoa(i), "held"} { // notifies, does not
			id := fmt.Sprintf("e%d-%s", i, flow)
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, `SELECT set_config('fairrelay.notify', $1, true)`, c.value); err != nil {
				t.Fatal(err)
			}
			r, err := q.EnqueuePgxTx(ctx, tx, fairrelay.EnqueueParams{ID: id, Flow: flow, Body: body, At: fairrelay.AtStored})
			var fe *fairrelay.Error
			switch {
			case c.ok && (err != nil || r.Status != fairrelay.EnqueueCreated):
				t.Errorf("fairrelay.notify %q, flow %s: %+v %v, want created", c.value, flow, r, err)
			case !c.ok && !(errors.As(err, &fe) && fe.Code == fairrelay.CodeInvalidInput && fe.Field == "fairrelay.notify" && strings.Contains(fe.Message, "'"+c.value+"'")):
				t.Errorf("fairrelay.notify %q, flow %s: %+v %v, want invalid_input naming fairrelay.notify and its value", c.value, flow, r, err)
			}
			if c.ok {
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
			} else {
				tx.Rollback(ctx)
			}
			if _, err := q.Event(ctx, id); c.ok != (err == nil) {
				t.Errorf("fairrelay.notify %q, flow %s: the event stored %v (%v), want %v", c.value, flow, err == nil, err, c.ok)
			}
		}
	}
}
