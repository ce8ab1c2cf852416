package console_test

import (
	"fmt"
	"html"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/console"
	"github.com/fairrelay/fairrelay/inbox"
)

// heldRowRE and waiverRowRE read the rows of the held and waivers tables.
var (
	heldRowRE   = regexp.MustCompile(`<tr><td>([^<]*)</td><td>(\d+)</td><td>([^<]*)</td><td>([^<]*)</td><td>([^<]*)</td></tr>`)
	waiverRowRE = regexp.MustCompile(`<tr><td>([^<]*)</td><td>(\d+)</td><td>([^<]*)</td><td>[^<]*</td><td class="operator">([^<]*)</td><td>([^<]*)</td></tr>`)
)

// rows returns the rows re finds in the page at path, each its submatches
// joined by spaces.
func rows(c *client, re *regexp.Regexp, path string) []string {
	var out []string
	for _, m := range re.FindAllStringSubmatch(c.page(path), -1) {
		out = append(out, strings.Join(m[1:], " "))
	}
	return out
}

// openInbox opens an inbox on a new SQLite file.
func openInbox(t *testing.T) *inbox.Inbox {
	t.Helper()
	in, err := inbox.Open(bg, filepath.Join(t.TempDir(), "inbox.db"), inbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	return in
}

// The inbox pages show what a broker consumer holds and what operators
// waived, not only the projection: a flow stuck at the receiver (its next
// event refused, or a gap before it) and the waivers that moved flows on
// were visible only through inspect --inbox (a fresh user's report: the
// console listed no waivers).
func TestInboxPagesShowHeldDeliveriesAndWaivers(t *testing.T) {
	q := scenario(t)
	in := openInbox(t)
	body := []byte(`{"delta":1}`)
	// F applied up to seq 1; a copy of seq 1 under another id (superseded),
	// seq 3 waiting for seq 2 (gap).
	if out, err := in.Receive(bg, inbox.Delivery{EventID: "F1", Flow: "F", Seq: 1, Body: body}); err != nil || out != fairrelay.OutcomeAccepted {
		t.Fatalf("receive F1: %v %v", out, err)
	}
	for _, h := range []struct {
		d      inbox.Delivery
		reason fairrelay.Outcome
	}{
		{inbox.Delivery{EventID: "X1", Flow: "F", Seq: 1, Body: body}, fairrelay.OutcomeSequenceConflict},
		{inbox.Delivery{EventID: "F3", Flow: "F", Seq: 3, Body: body}, fairrelay.OutcomeGap},
	} {
		if held, err := in.Hold(bg, h.d, h.reason); err != nil || !held {
			t.Fatalf("hold %s: %v %v", h.d.EventID, held, err)
		}
	}
	if err := in.Waive(bg, inbox.WaiveParams{EventID: "G1", Flow: "G", Seq: 1, Reason: "its id was reused", Operator: "carol"}); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, serve(t, console.Config{Queue: q, Inbox: in, LocalOperator: "op"}))

	if page := c.page("/inbox"); !strings.Contains(page, "1 waiting, 1 superseded") {
		t.Errorf("/inbox does not count the held deliveries:\n%s", page)
	}
	links := c.links("/inbox")
	for _, want := range []string{"/inbox/held", "/inbox/waivers"} {
		if !strings.Contains(strings.Join(links, " "), want) {
			t.Errorf("/inbox does not link %s: %q", want, links)
		}
	}
	if diff := cmp.Diff([]string{"F 1 X1 superseded sequence_conflict", "F 3 F3 waiting gap"}, rows(c, heldRowRE, "/inbox/held")); diff != "" {
		t.Errorf("/inbox/held rows (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"G 1 G1 carol its id was reused"}, rows(c, waiverRowRE, "/inbox/waivers")); diff != "" {
		t.Errorf("/inbox/waivers rows (-want +got):\n%s", diff)
	}
	// Both say where they belong: the Inbox tab is on.
	for _, path := range []string{"/inbox/held", "/inbox/waivers"} {
		if !strings.Contains(c.page(path), `<a href="/inbox" class="on">`) {
			t.Errorf("%s: the Inbox tab is not on", path)
		}
	}
	// Bad paging parameters are refused, naming them.
	for path, field := range map[string]string{
		"/inbox/held?seq=x":        "seq",
		"/inbox/held?seq=-1":       "seq",
		"/inbox/held?seq=2":        "after_seq", // a seq without its flow
		"/inbox/waivers?flow=%00":  "after_flow",
		"/inbox/waivers?seq=1":     "after_seq",
		"/inbox/held?flow=%ff&seq": "after_flow",
	} {
		if st, body := c.do("GET", path, nil); st != http.StatusBadRequest || !strings.Contains(body, field) {
			t.Errorf("GET %s: %d %q, want 400 naming %s", path, st, body, field)
		}
	}
}

// The held and waivers pages go a page at a time, and the next page's link
// leads to the rest, none missed or repeated.
func TestInboxHeldAndWaiversPages(t *testing.T) {
	q := scenario(t)
	in := openInbox(t)
	const n = 60 // more than a page
	var wantHeld, wantWaivers []string
	for i := range n {
		flow := fmt.Sprintf("f%02d", i)
		if held, err := in.Hold(bg, inbox.Delivery{EventID: flow + "-2", Flow: flow, Seq: 2, Body: []byte(`{"delta":1}`)}, fairrelay.OutcomeGap); err != nil || !held {
			t.Fatalf("hold: %v %v", held, err)
		}
		wantHeld = append(wantHeld, flow+" 2 "+flow+"-2 waiting gap")
		if err := in.Waive(bg, inbox.WaiveParams{EventID: flow + "-1", Flow: flow, Seq: 1, Reason: "r"}); err != nil {
			t.Fatal(err)
		}
		wantWaivers = append(wantWaivers, flow+" 1 "+flow+"-1 - r")
	}
	// The waivers made seq 2 applicable, but nothing applied it: the held
	// copies still wait.
	c := newClient(t, serve(t, console.Config{Queue: q, Inbox: in, LocalOperator: "op"}))
	for _, tc := range []struct {
		path string
		re   *regexp.Regexp
		want []string
	}{
		{"/inbox/held", heldRowRE, wantHeld},
		{"/inbox/waivers", waiverRowRE, wantWaivers},
	} {
		var got []string
		path := tc.path
		for pages := 0; path != ""; pages++ {
			if pages > n {
				t.Fatalf("%s: more pages than rows", tc.path)
			}
			page := c.page(path)
			for _, m := range tc.re.FindAllStringSubmatch(page, -1) {
				got = append(got, strings.Join(m[1:], " "))
			}
			path = ""
			if m := nextRE.FindStringSubmatch(page); m != nil {
				path = html.UnescapeString(m[1])
			}
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s, page by page (-want +got):\n%s", tc.path, diff)
		}
	}
}
