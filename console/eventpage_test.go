package console_test

import (
	"encoding/hex"
	"html"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/console"
)

var bodyRE = regexp.MustCompile(`(?s)<h2>Body([^<]*)</h2>\s*<pre id="body">(.*?)</pre>`)

// An event's page shows its body as text only when it is text: bytes that
// are not UTF-8 as a hex dump, text with control or format characters
// quoted, JSON indented, other text as it is; the page itself stays
// valid UTF-8 without control characters. A body enqueued from SQL as
// '\x00ff10'::bytea went into the page as U+FFFD, 0xff and 0x10 (a fresh
// user's report), where inspect said "(3 bytes, not text)".
func TestEventPageShowsAnyBody(t *testing.T) {
	q, err := fairrelay.Open(bg, filepath.Join(t.TempDir(), "queue.db"), fairrelay.Config{Policy: fairrelay.DaemonPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	cases := []struct {
		id, body, kind, shown string
	}{
		{"bin", "\x00\xff\x10", " (3 bytes, not text: hex dump)", hex.Dump([]byte("\x00\xff\x10"))},
		{"latin1", "caf\xe9", " (4 bytes, not text: hex dump)", hex.Dump([]byte("caf\xe9"))},
		{"ctl", "{\"note\":\"a\x01b\"}", " (text with control or format characters, quoted)", strconv.Quote("{\"note\":\"a\x01b\"}")},
		{"bidi", "pay \u202eadmin", " (text with control or format characters, quoted)", strconv.Quote("pay \u202eadmin")},
		{"json", `{"b":[1,2]}`, " (JSON)", "{\n  \"b\": [\n    1,\n    2\n  ]\n}"},
		{"text", "line one\n\tline <two> é", "", "line one\n\tline <two> é"},
		{"big", strings.Repeat("\xff", 20<<10), " (20480 bytes, not text: hex dump of the first 16384)", hex.Dump([]byte(strings.Repeat("\xff", 16<<10)))},
	}
	for _, c := range cases {
		if _, err := q.Enqueue(bg, fairrelay.EnqueueParams{ID: c.id, Flow: c.id, Body: []byte(c.body), At: fairrelay.AtStored}); err != nil {
			t.Fatal(err)
		}
	}
	cl := reader(t, q)
	for _, c := range cases {
		page := cl.page(eventPathOf(c.id))
		if !utf8.ValidString(page) || strings.ContainsFunc(page, func(r rune) bool { return r < ' ' && r != '\n' && r != '\t' && r != '\r' }) {
			t.Errorf("event %s: the page is not UTF-8 text without control characters", c.id)
		}
		m := bodyRE.FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("event %s: no body on the page:\n%.500s", c.id, page)
		}
		if kind, shown := html.UnescapeString(m[1]), html.UnescapeString(m[2]); kind != c.kind || shown != c.shown {
			t.Errorf("event %s: body shown as %q %q, want %q %q", c.id, kind, shown, c.kind, c.shown)
		}
	}
}

var (
	detailRE = regexp.MustCompile(`<tr data-seq="(\d+)" data-state="[a-z]+">.*?\n<td>([^<]*)</td></tr>`)
	whyRE    = regexp.MustCompile(`<td id="why">([^<]*)</td>`)
)

// An event behind its flow's head is ready with its enqueue tick as its
// next_at, which the flow page listed as "next_at tick N" and the event page
// as "next_at tick N": due, to a reader, though it waits for the head (a
// fresh user's report, behind a quarantined head and in a paused flow).
// Both pages now say it waits behind the head, and the event page links
// it; the head says when it is due. A pause's reason reads as written, not
// Go-quoted ("customer \"hold\"").
func TestPagesSayAnEventWaitsBehindItsHead(t *testing.T) {
	q, err := fairrelay.Open(bg, filepath.Join(t.TempDir(), "queue.db"), fairrelay.Config{Policy: fairrelay.DaemonPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	var evs []fairrelay.NewEvent
	for _, f := range []string{"Q", "P"} {
		for i := 1; i <= 3; i++ {
			evs = append(evs, fairrelay.NewEvent{ID: f + strconv.Itoa(i), Flow: f, Body: []byte(`{"delta":1}`)})
		}
	}
	if _, err := q.EnqueueMany(bg, fairrelay.EnqueueManyParams{At: fairrelay.AtStored, Events: evs}); err != nil {
		t.Fatal(err)
	}
	// Q: Q1 acked, Q2 quarantined (the head), Q3 waiting. P: paused, P1 due.
	for _, out := range []fairrelay.Outcome{fairrelay.OutcomeAccepted, fairrelay.OutcomeInvalidBody} {
		cl, err := q.Claim(bg, fairrelay.ClaimParams{At: fairrelay.AtStored, Limit: 1, Exclude: []string{"P"}})
		if err != nil || len(cl.Claims) != 1 {
			t.Fatalf("claim: %+v %v", cl, err)
		}
		if _, err := q.Settle(bg, fairrelay.SettleParams{Token: cl.Claims[0].Token, Outcome: out, At: fairrelay.AtStored}); err != nil {
			t.Fatal(err)
		}
	}
	const reason = `customer <asked> "hold"`
	if _, err := q.Pause(bg, fairrelay.FlowActionParams{Flow: "P", Reason: reason, Operator: "op", At: fairrelay.AtStored}); err != nil {
		t.Fatal(err)
	}
	cl := reader(t, q)
	for _, c := range []struct {
		flow string
		want map[string]string // detail by seq
	}{
		{"Q", map[string]string{"1": "", "2": "quarantined because invalid_body", "3": "waits behind the flow's head, seq 2 (quarantined)"}},
		{"P", map[string]string{"1": "due, but its flow is paused", "2": "waits behind the flow's head, seq 1 (ready)", "3": "waits behind the flow's head, seq 1 (ready)"}},
	} {
		page := cl.page("/flow/" + c.flow)
		got := map[string]string{}
		for _, m := range detailRE.FindAllStringSubmatch(page, -1) {
			got[m[1]] = html.UnescapeString(m[2])
		}
		for seq, want := range c.want {
			if got[seq] != want {
				t.Errorf("flow %s's page, seq %s: %q, want %q", c.flow, seq, got[seq], want)
			}
		}
		if c.flow == "P" {
			m := whyRE.FindStringSubmatch(page)
			if m == nil || !strings.Contains(html.UnescapeString(m[1]), "because “"+reason+"”") {
				t.Errorf("flow P's page: why %q, want the reason as written, %q", m, reason)
			}
		}
	}
	page := cl.page(eventPathOf("Q3"))
	if !strings.Contains(page, `(waits behind the flow's head, seq 2: <a id="behind" href="`+eventPathOf("Q2")+`">Q2</a>, quarantined)`) {
		t.Errorf("event Q3's page does not say it waits behind Q2:\n%.1500s", page)
	}
	if strings.Contains(page, "<th>next_at</th>") {
		t.Error("event Q3's page shows a next_at, which reads as due")
	}
	if page := cl.page(eventPathOf("P1")); !strings.Contains(page, "<th>next_at</th>") || strings.Contains(page, `id="behind"`) {
		t.Errorf("event P1's page (the head): want its next_at and no waits-behind:\n%.1500s", page)
	}
}

// reader is a client of a console on q, logged in as a read-only user.
func reader(t *testing.T, q *fairrelay.Queue) *client {
	t.Helper()
	tk := tokenFile(t)
	ts, err := console.LoadTokens(tk.path)
	if err != nil {
		t.Fatal(err)
	}
	cl := newClient(t, serve(t, console.Config{Queue: q, Tokens: ts}))
	cl.login(tk.bob)
	return cl
}

// Deliveries settled in under a millisecond (recorded as 0) show their
// latency as <1ms, not 0s (a fresh user's report: "latency p50 0s").
func TestOverviewLatencyUnderAMillisecond(t *testing.T) {
	t.Parallel()
	q, err := fairrelay.Open(bg, filepath.Join(t.TempDir(), "q.db"), fairrelay.Config{Policy: fairrelay.DaemonPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	if _, err := q.Enqueue(bg, fairrelay.EnqueueParams{ID: "E1", Flow: "F", Body: []byte(`{"delta":1}`), At: 1}); err != nil {
		t.Fatal(err)
	}
	cl, err := q.Claim(bg, fairrelay.ClaimParams{At: 2, Limit: 1})
	if err != nil || len(cl.Claims) != 1 {
		t.Fatalf("claim: %+v %v", cl, err)
	}
	if _, err := q.Settle(bg, fairrelay.SettleParams{Token: cl.Claims[0].Token, Outcome: fairrelay.OutcomeAccepted, At: 3, Duration: 300 * time.Microsecond}); err != nil {
		t.Fatal(err)
	}
	page := newClient(t, serve(t, console.Config{Queue: q, LocalOperator: "op"})).page("/")
	if !strings.Contains(page, "latency p50 &lt;1ms, p99 &lt;1ms") {
		t.Errorf("the overview's latency of a sub-millisecond delivery:\n%.3000s", page)
	}
}
