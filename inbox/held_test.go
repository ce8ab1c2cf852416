package inbox_test

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/pgtest"
)

// eachBackend runs test on a fresh inbox of each backend (a SQLite file, a
// PostgreSQL schema named from prefix), in parallel.
func eachBackend(t *testing.T, prefix string, opts inbox.Options, test func(t *testing.T, in *inbox.Inbox)) {
	eachDSN(t, prefix, func(t *testing.T, dsn string) {
		in, err := inbox.Open(t.Context(), dsn, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		test(t, in)
	})
}

// eachDSN runs test with the DSN of a fresh inbox of each backend, in
// parallel: a SQLite file's path, a PostgreSQL schema named from prefix.
func eachDSN(t *testing.T, prefix string, test func(t *testing.T, dsn string)) {
	t.Parallel()
	pgtest.EachBackend(t, "inbox.db", prefix, test)
}

// Hold keeps what the inbox cannot apply yet (a gap, a permanent answer)
// and ReceiveHeld applies a flow's held deliveries in seq order once each
// is the flow's next, stopping at one that is refused, which stays held;
// both backends.
func TestHoldAndReceiveHeld(t *testing.T) {
	eachBackend(t, "frinheld", inbox.Options{MaxDelta: 5}, func(t *testing.T, in *inbox.Inbox) {
		ctx := t.Context()
		d := func(flow string, seq, delta int) inbox.Delivery {
			return inbox.Delivery{EventID: fmt.Sprint(flow, seq), Flow: flow, Seq: int64(seq), Body: fmt.Appendf(nil, `{"delta":%d}`, delta)}
		}
		hold := func(x inbox.Delivery, want bool) {
			t.Helper()
			if held, err := in.Hold(ctx, x, fairrelay.OutcomeGap); err != nil || held != want {
				t.Fatalf("hold %s: %v %v, want held %v", x.EventID, held, err, want)
			}
		}
		// A3 and A2 wait for A1; a second hold of A3 keeps one copy.
		hold(d("A", 3, 1), true)
		hold(d("A", 2, 2), true)
		hold(d("A", 3, 1), true)
		r, err := in.ReceiveHeld(ctx, "A", 100)
		if err != nil || len(r.Applied) != 0 || r.Stopped != "" || !r.Remaining {
			t.Fatalf("before A1: %+v %v, want nothing applied and A's deliveries still held", r, err)
		}
		if out, err := in.Receive(ctx, d("A", 1, 1)); err != nil || out != fairrelay.OutcomeAccepted {
			t.Fatalf("A1: %q %v", out, err)
		}
		r, err = in.ReceiveHeld(ctx, "A", 100)
		want := []inbox.Receipt{{ID: "A2", Flow: "A", Seq: 2}, {ID: "A3", Flow: "A", Seq: 3}}
		if err != nil || !cmp.Equal(r.Applied, want) || r.Stopped != "" || r.Remaining {
			t.Fatalf("after A1: %+v %v, want %v applied and nothing left", r, err, want)
		}
		// An applied id is not held again.
		hold(d("A", 3, 1), false)
		// A permanent answer stays held, and so does what follows it,
		// until the cause is fixed.
		hold(d("B", 1, 100), true)
		hold(d("B", 2, 1), true)
		r, err = in.ReceiveHeld(ctx, "B", 100)
		if err != nil || len(r.Applied) != 0 || r.Stopped != fairrelay.OutcomeUnsupportedDelta || r.StoppedID != "B1" || !r.Remaining {
			t.Fatalf("B with a delta over the limit: %+v %v, want stopped at B1 with unsupported_delta", r, err)
		}
		if fs, err := in.HeldFlows(ctx, "", 10); err != nil || !cmp.Equal(fs, []string{"B"}) {
			t.Fatalf("held flows %v %v, want [B]", fs, err)
		}
		// Held says what holds each: B1 was held for a gap, and is
		// refused now.
		hs, err := in.Held(ctx, "", 0, 10)
		wantHeld := []inbox.HeldDelivery{{ID: "B1", Flow: "B", Seq: 1, Reason: fairrelay.OutcomeUnsupportedDelta, State: inbox.HeldWaiting},
			{ID: "B2", Flow: "B", Seq: 2, Reason: fairrelay.OutcomeGap, State: inbox.HeldWaiting}}
		if err != nil || !cmp.Equal(hs, wantHeld) {
			t.Fatalf("held %+v %v, want %+v", hs, err, wantHeld)
		}
		in.SetMaxDelta(1000)
		r, err = in.ReceiveHeld(ctx, "B", 100)
		if err != nil || len(r.Applied) != 2 || r.Remaining {
			t.Fatalf("B after the fix: %+v %v, want B1 and B2 applied", r, err)
		}
		// A held copy of an event another copy of which was applied
		// meanwhile goes at the flow's next ReceiveHeld.
		hold(d("C", 1, 1), true)
		if out, err := in.Receive(ctx, d("C", 1, 1)); err != nil || out != fairrelay.OutcomeAccepted {
			t.Fatalf("C1: %q %v", out, err)
		}
		r, err = in.ReceiveHeld(ctx, "C", 100)
		if err != nil || len(r.Applied) != 0 || r.Remaining {
			t.Fatalf("C after C1 was applied: %+v %v, want its held copy gone", r, err)
		}
		s, err := in.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p := s.ByFlow()
		if p["A"].Seq != 3 || p["A"].Total != 4 || p["B"].Seq != 2 || p["B"].Total != 101 {
			t.Errorf("projection %+v, want A at 3 with 4, B at 2 with 101", p)
		}
		if n, err := in.HeldCount(ctx); err != nil || n != 0 {
			t.Errorf("%d held (%v), want 0", n, err)
		}
		// Bad input names its field and holds nothing.
		if _, err := in.Hold(ctx, inbox.Delivery{EventID: "C1", Flow: "C", Seq: 0, Body: []byte("{}")}, fairrelay.OutcomeGap); fairrelay.CodeOf(err) != fairrelay.CodeInvalidInput {
			t.Errorf("hold with seq 0: %v, want invalid_input", err)
		}
		if _, err := in.Hold(ctx, d("D", 1, 1), fairrelay.OutcomeAccepted); fairrelay.CodeOf(err) != fairrelay.CodeInvalidInput {
			t.Errorf("hold with reason accepted: %v, want invalid_input", err)
		}
		if _, err := in.ReceiveHeld(ctx, "", 100); fairrelay.CodeOf(err) != fairrelay.CodeInvalidInput {
			t.Errorf("receive held of flow \"\": %v, want invalid_input", err)
		}
		if _, err := in.ReceiveHeld(ctx, "A", 0); fairrelay.CodeOf(err) != fairrelay.CodeInvalidInput {
			t.Errorf("receive held with limit 0: %v, want invalid_input", err)
		}
		if _, err := in.HeldFlows(ctx, "", 0); fairrelay.CodeOf(err) != fairrelay.CodeInvalidInput {
			t.Errorf("held flows with limit 0: %v, want invalid_input", err)
		}
		if n, err := in.HeldCount(ctx); err != nil || n != 0 {
			t.Errorf("%d held after the refusals (%v), want 0", n, err)
		}
	})
}

// Held copies of one seq that a faulty publisher sent under one id with
// two bodies, or under two ids, are kept apart and each tried in turn: a
// bad copy held first neither shadows the good one nor blocks its flow (a
// breaker's report: Hold kept the first copy of an id, and ReceiveHeld
// tried only the first id of a seq). Held lists every copy's id, and its
// pages do not split a seq. Both backends.
func TestHeldCopiesOfOneSeq(t *testing.T) {
	eachBackend(t, "frinheldcopies", inbox.Options{MaxDelta: 5}, func(t *testing.T, in *inbox.Inbox) {
		ctx := t.Context()
		hold := func(id, flow string, seq int64, body string) {
			t.Helper()
			if held, err := in.Hold(ctx, inbox.Delivery{EventID: id, Flow: flow, Seq: seq, Body: []byte(body)}, fairrelay.OutcomeGap); err != nil || !held {
				t.Fatalf("hold %s %s: %v %v", id, body, held, err)
			}
		}
		hold("A2", "A", 2, `not json`)
		hold("A2", "A", 2, `{"delta":1}`)
		hold("B2-a", "B", 2, `{"delta":9}`) // over the max delta
		hold("B2-b", "B", 2, `{"delta":1}`)
		for _, f := range []string{"A", "B"} {
			if out, err := in.Receive(ctx, inbox.Delivery{EventID: f + "1", Flow: f, Seq: 1, Body: []byte(`{"delta":1}`)}); err != nil || out != fairrelay.OutcomeAccepted {
				t.Fatalf("%s1: %q %v", f, out, err)
			}
			r, err := in.ReceiveHeld(ctx, f, 100)
			if err != nil || len(r.Applied) != 1 || r.Applied[0].Seq != 2 || r.Remaining {
				t.Errorf("%s: %+v %v, want its good copy of seq 2 applied, nothing left to apply", f, r, err)
			}
		}
		s, err := in.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if p := s.ByFlow(); p["A"].Total != 2 || p["B"].Total != 2 {
			t.Errorf("projection %+v, want A and B at total 2", p)
		}
		// The bad copies stay, listed; a page of one row takes its
		// seq's other copies along.
		hold("C2-a", "C", 2, `{"delta":1}`)
		hold("C2-b", "C", 2, `{"delta":1}`)
		hold("C3", "C", 3, `{"delta":1}`)
		page, err := in.Held(ctx, "C", 0, 1)
		if err != nil || len(page) != 2 || page[0].ID != "C2-a" || page[1].ID != "C2-b" {
			t.Fatalf("held page of 1 from C: %+v %v, want C2-a and C2-b", page, err)
		}
		page, err = in.Held(ctx, "C", 2, 10)
		if err != nil || len(page) != 1 || page[0].ID != "C3" {
			t.Fatalf("held page after C 2: %+v %v, want C3", page, err)
		}
		all, err := in.Held(ctx, "", 0, 100)
		if err != nil || len(all) != 5 {
			t.Errorf("held: %+v %v, want A2 (its bad copy), B2-a, C2-a, C2-b, C3", all, err)
		}
	})
}

// A receipt keeps its body's SHA-256, not the body (inbox migration 003):
// the inbox no longer grows by every body received. A copy is still told
// from a conflict by its body — by hash for a new receipt, as it is for
// one written before the migration — and a held copy of an applied event
// is dropped either way. Both backends.
func TestReceiptKeepsTheBodyHash(t *testing.T) {
	eachBackend(t, "frinsha", inbox.Options{}, func(t *testing.T, in *inbox.Inbox) {
		ctx := t.Context()
		big := []byte(`{"delta":1,"pad":"` + strings.Repeat("x", 64<<10) + `"}`)
		other := []byte(`{"delta":2}`)
		receive := func(id, flow string, seq int64, body []byte) fairrelay.Outcome {
			t.Helper()
			out, err := in.Receive(ctx, inbox.Delivery{EventID: id, Flow: flow, Seq: seq, Body: body})
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		if out := receive("A1", "A", 1, big); out != fairrelay.OutcomeAccepted {
			t.Fatalf("A1: %s", out)
		}
		var stored, sumLen int64
		if err := in.DB().QueryRowContext(ctx, `SELECT length(body), length(body_sha256) FROM receipt WHERE event_id = 'A1'`).Scan(&stored, &sumLen); err != nil {
			t.Fatal(err)
		}
		if stored != 0 || sumLen != 32 {
			t.Errorf("A1's receipt keeps %d body bytes and a %d-byte hash, want 0 and 32", stored, sumLen)
		}
		// A receipt an inbox wrote before migration 003: the body, no hash.
		if _, err := in.DB().ExecContext(ctx, `INSERT INTO receipt (event_id, flow_id, seq, body) VALUES ('B1', 'B', 1, $1)`, other); err != nil {
			t.Fatal(err)
		}
		if _, err := in.DB().ExecContext(ctx, `INSERT INTO projection (flow_id, seq, total) VALUES ('B', 1, 2)`); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			id, flow string
			seq      int64
			body     []byte
			want     fairrelay.Outcome
		}{
			{"A1", "A", 1, big, fairrelay.OutcomeDuplicate},
			{"A1", "A", 1, other, fairrelay.OutcomeIDConflict},
			{"A1", "A", 2, big, fairrelay.OutcomeIDConflict},
			{"B1", "B", 1, other, fairrelay.OutcomeDuplicate},
			{"B1", "B", 1, big, fairrelay.OutcomeIDConflict},
		} {
			if got := receive(c.id, c.flow, c.seq, c.body); got != c.want {
				t.Errorf("%s (%s, %d, %d bytes): %s, want %s", c.id, c.flow, c.seq, len(c.body), got, c.want)
			}
		}
		// Held copies of both applied events (as a consumer that held them
		// before their receipt landed leaves them) go at the next drain.
		for _, h := range []struct {
			id, flow string
			body     []byte
		}{{"A1", "A", big}, {"B1", "B", other}} {
			sum := sha256.Sum256(h.body)
			if _, err := in.DB().ExecContext(ctx, `INSERT INTO held (event_id, flow_id, seq, body, body_sha256, reason) VALUES ($1, $2, 1, $3, $4, 'gap')`,
				h.id, h.flow, h.body, sum[:]); err != nil {
				t.Fatal(err)
			}
			if _, err := in.ReceiveHeld(ctx, h.flow, 10); err != nil {
				t.Fatal(err)
			}
		}
		if n, err := in.HeldCount(ctx); err != nil || n != 0 {
			t.Errorf("%d held copies of applied events left (%v), want 0", n, err)
		}
	})
}

// DropSuperseded deletes the held copies of applied seqs (which never
// apply) and nothing that may still apply; HeldCounts tells the two apart.
// Both backends.
func TestDropSuperseded(t *testing.T) {
	eachBackend(t, "frinsup", inbox.Options{}, func(t *testing.T, in *inbox.Inbox) {
		ctx := t.Context()
		body := []byte(`{"delta":1}`)
		if out, err := in.Receive(ctx, inbox.Delivery{EventID: "A1", Flow: "A", Seq: 1, Body: body}); err != nil || out != fairrelay.OutcomeAccepted {
			t.Fatalf("A1: %s %v", out, err)
		}
		for _, h := range []struct {
			d      inbox.Delivery
			reason fairrelay.Outcome
		}{
			{inbox.Delivery{EventID: "X1", Flow: "A", Seq: 1, Body: body}, fairrelay.OutcomeSequenceConflict}, // superseded
			{inbox.Delivery{EventID: "A3", Flow: "A", Seq: 3, Body: body}, fairrelay.OutcomeGap},              // waiting
			{inbox.Delivery{EventID: "B2", Flow: "B", Seq: 2, Body: body}, fairrelay.OutcomeGap},              // waiting, no projection yet
		} {
			if held, err := in.Hold(ctx, h.d, h.reason); err != nil || !held {
				t.Fatalf("hold %s: %v %v", h.d.EventID, held, err)
			}
		}
		if w, s, err := in.HeldCounts(ctx); err != nil || w != 2 || s != 1 {
			t.Fatalf("HeldCounts: %d waiting, %d superseded, %v; want 2 and 1", w, s, err)
		}
		// Held says which is which, as HeldCounts counts them: a
		// superseded copy looked like a stuck flow (an SRE's report).
		states := map[string]string{}
		all, err := in.Held(ctx, "", 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range all {
			states[r.ID] = r.State
		}
		if diff := cmp.Diff(map[string]string{"X1": inbox.HeldSuperseded, "A3": inbox.HeldWaiting, "B2": inbox.HeldWaiting}, states); diff != "" {
			t.Errorf("held states (-want +got):\n%s", diff)
		}
		if n, err := in.DropSuperseded(ctx); err != nil || n != 1 {
			t.Fatalf("DropSuperseded: %d, %v; want 1", n, err)
		}
		rows, err := in.Held(ctx, "", 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range rows {
			ids = append(ids, r.ID)
		}
		if diff := cmp.Diff([]string{"A3", "B2"}, ids); diff != "" {
			t.Errorf("held after DropSuperseded (-want +got):\n%s", diff)
		}
		if n, err := in.DropSuperseded(ctx); err != nil || n != 0 {
			t.Errorf("a second DropSuperseded: %d, %v; want 0", n, err)
		}
	})
}

// A copy of an id and body held at one place (flow and seq) does not hide a
// copy of the same id and body at another: a stray X claiming seq 9 of
// flow A was held, then the genuine X at seq 2; the second Hold answered
// held and stored nothing (the key was the id and the body), the consumer
// acked the broker's copy, and X never applied: flow A stuck at 1 for good
// (a breaker's report). Both backends.
func TestHeldCopyAtAnotherPlaceIsKept(t *testing.T) {
	eachBackend(t, "frinheldplace", inbox.Options{MaxDelta: 5}, func(t *testing.T, in *inbox.Inbox) {
		ctx := t.Context()
		body := []byte(`{"delta":5}`)
		for _, d := range []inbox.Delivery{
			{EventID: "X", Flow: "A", Seq: 9, Body: body}, // stray
			{EventID: "X", Flow: "A", Seq: 2, Body: body}, // genuine, before A's seq 1
		} {
			if held, err := in.Hold(ctx, d, fairrelay.OutcomeGap); err != nil || !held {
				t.Fatalf("hold X at A %d: %v %v", d.Seq, held, err)
			}
		}
		all, err := in.Held(ctx, "", 0, 100)
		if err != nil || len(all) != 2 {
			t.Fatalf("held: %+v %v, want X at A 2 and at A 9", all, err)
		}
		if out, err := in.Receive(ctx, inbox.Delivery{EventID: "W", Flow: "A", Seq: 1, Body: []byte(`{"delta":1}`)}); err != nil || out != fairrelay.OutcomeAccepted {
			t.Fatalf("A1: %q %v", out, err)
		}
		r, err := in.ReceiveHeld(ctx, "A", 100)
		if err != nil || len(r.Applied) != 1 || r.Applied[0].Seq != 2 {
			t.Fatalf("receive held: %+v %v, want X applied at seq 2", r, err)
		}
		s, err := in.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if p := s.ByFlow()["A"]; p.Seq != 2 || p.Total != 6 {
			t.Errorf("A's projection %+v, want seq 2, total 6", p)
		}
	})
}
