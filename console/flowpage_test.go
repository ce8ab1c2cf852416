package console_test

import (
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/console"
)

var (
	flowH1RE     = regexp.MustCompile(`<h1>Flow (.*)</h1>`)
	flowRowRE    = regexp.MustCompile(`<tr data-seq="(\d+)" data-state="([a-z]+)"><td>\d+</td><td><a href="([^"]*)">([^<]*)</a></td>`)
	nextRE       = regexp.MustCompile(`<a id="next" href="([^"]*)">`)
	flowActionRE = regexp.MustCompile(`(?s)<form method="post" action="([^"]*)" id="(pause|resume)">.*?name="flow" value="([^"]*)".*?name="back" value="([^"]*)"`)
)

// Every flow shown (flows, quarantine, the overview's blocked heads and
// oldest event, an event's flow, the audit log) links to the flow's page,
// whatever its id holds, and that page lists its events by seq, acked,
// quarantined and waiting alike, each linking to its event's page, 50 a
// page. Before it, a flow's events other than its head could be reached
// only by typing their URL (a fresh user's report).
func TestFlowPageListsItsEvents(t *testing.T) {
	q, err := fairrelay.Open(bg, filepath.Join(t.TempDir(), "queue.db"), fairrelay.Config{Policy: fairrelay.DaemonPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	// Ten flows (the overview lists the first ten blocked): nine awkward
	// ids, the dot segments bare, and one with more events than two pages.
	const long = "long/flow ?#%"
	flows := []string{".", "..", "x/y?z#1%", "a b/c", "é/ü ñ", "100%25", "q&r=s;t,u:v@w", "/lead", "trail/", long}
	count := map[string]int{}
	var evs []fairrelay.NewEvent
	for _, f := range flows {
		count[f] = 4
		if f == long {
			count[f] = 2*50 + 7
		}
		for i := 1; i <= count[f]; i++ {
			evs = append(evs, fairrelay.NewEvent{ID: fmt.Sprintf("%s/e%d", f, i), Flow: f, Body: []byte(`{"delta":1}`)})
		}
	}
	if _, err := q.EnqueueMany(bg, fairrelay.EnqueueManyParams{At: fairrelay.AtStored, Events: evs}); err != nil {
		t.Fatal(err)
	}
	// Each flow's first event acked, its second quarantined (its head);
	// the others wait behind it.
	for _, out := range []fairrelay.Outcome{fairrelay.OutcomeAccepted, fairrelay.OutcomeInvalidBody} {
		cl, err := q.Claim(bg, fairrelay.ClaimParams{At: fairrelay.AtStored, Limit: len(flows)})
		if err != nil || len(cl.Claims) != len(flows) {
			t.Fatalf("claim: %+v %v", cl, err)
		}
		for _, c := range cl.Claims {
			if _, err := q.Settle(bg, fairrelay.SettleParams{Token: c.Token, Outcome: out, At: fairrelay.AtStored}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// An operator's pause, so that the audit log shows a flow.
	if _, err := q.Pause(bg, fairrelay.FlowActionParams{Flow: "a b/c", Reason: "hold", Operator: "op", At: fairrelay.AtStored}); err != nil {
		t.Fatal(err)
	}
	tk := tokenFile(t)
	ts, err := console.LoadTokens(tk.path)
	if err != nil {
		t.Fatal(err)
	}
	base := serve(t, console.Config{Queue: q, Tokens: ts})
	baseURL, _ := url.Parse(base)
	c := newClient(t, base)
	c.login(tk.bob) // read-only: every page is for reading

	get := func(from, href string) (*url.URL, int, string) {
		t.Helper()
		u, st, body, err := c.follow(baseURL, href)
		if err != nil {
			t.Fatalf("%s: link %q: %v", from, href, err)
		}
		return u, st, body
	}
	// flowLinks follows every link to a flow's page from page and returns
	// them by the flow whose page each led to.
	flowLinks := func(page string) map[string]string {
		t.Helper()
		seen := map[string]string{}
		for _, href := range c.links(page) {
			if !strings.HasPrefix(href, "/flow/") && !strings.HasPrefix(href, "/flow?") {
				continue
			}
			u, st, body := get(page, href)
			h := flowH1RE.FindStringSubmatch(body)
			if st != http.StatusOK || h == nil {
				t.Errorf("GET %s: link %q (%v): %d, want a flow's page:\n%.300s", page, href, u, st, body)
				continue
			}
			seen[html.UnescapeString(h[1])] = href
		}
		return seen
	}
	wantLinks := func(page string, want ...string) {
		t.Helper()
		seen := flowLinks(page)
		for _, f := range want {
			if _, ok := seen[f]; !ok {
				t.Errorf("GET %s: no link leads to flow %q's page (links: %q)", page, f, seen)
			}
		}
	}
	wantLinks("/", flows...) // the blocked heads
	wantLinks("/flows", flows...)
	wantLinks("/quarantine", flows...)
	wantLinks("/audit", "a b/c")

	// From each flow's page: its events by seq, every one linking to its
	// page; from each event's page, back to its flow.
	type row struct {
		seq   int
		state string
		id    string
	}
	for _, f := range flows {
		links := flowLinks(eventPathOf(f + "/e3")) // waiting behind the head
		href, ok := links[f]
		if !ok {
			t.Errorf("event %q's page: no link to flow %q (links: %q)", f+"/e3", f, links)
			continue
		}
		var rows []row
		pages := 0
		for href != "" {
			pages++
			if pages > 5 {
				t.Fatalf("flow %q: more than 5 pages", f)
			}
			_, st, body := get("flow "+f, href)
			if h := flowH1RE.FindStringSubmatch(body); st != http.StatusOK || h == nil || html.UnescapeString(h[1]) != f {
				t.Fatalf("GET %q: %d, want flow %q's page:\n%.300s", href, st, f, body)
			}
			if strings.Contains(body, `id="pause"`) || strings.Contains(body, `id="resume"`) {
				t.Errorf("GET %q: a form for a read-only user", href)
			}
			for _, m := range flowRowRE.FindAllStringSubmatch(body, -1) {
				seq, _ := strconv.Atoi(m[1])
				id := html.UnescapeString(m[4])
				rows = append(rows, row{seq, m[2], id})
				// Each event's link leads to that event (the first and
				// last of a page, to keep the test short).
				if seq%50 == 1 || seq%50 == 0 || seq == count[f] {
					_, st, ebody := get(href, html.UnescapeString(m[3]))
					if h := eventH1RE.FindStringSubmatch(ebody); st != http.StatusOK || h == nil || html.UnescapeString(h[1]) != id {
						t.Errorf("flow %q: link %q of event %q: %d, want its page", f, m[3], id, st)
					}
				}
			}
			href = ""
			if m := nextRE.FindStringSubmatch(body); m != nil {
				href = html.UnescapeString(m[1])
			}
		}
		var want []row
		for i := 1; i <= count[f]; i++ {
			st := "ready"
			switch i {
			case 1:
				st = "acked"
			case 2:
				st = "quarantined"
			}
			want = append(want, row{i, st, fmt.Sprintf("%s/e%d", f, i)})
		}
		if fmt.Sprint(rows) != fmt.Sprint(want) {
			t.Errorf("flow %q: listed\n%v\nwant\n%v", f, rows, want)
		}
		if wantPages := (count[f] + 49) / 50; pages != wantPages {
			t.Errorf("flow %q: %d pages, want %d", f, pages, wantPages)
		}
	}

	for path, want := range map[string]int{"/flow/nope": 404, "/flow": 400, "/flow?flow=": 400, "/flow/%20x": 400,
		"/flow/A?after=-1": 400, "/flow/a%20b%2Fc?after=x": 400, "/flow/a%20b%2Fc?after=4": 200, "/flow?flow=..&after=99": 200} {
		if st, body := c.do("GET", path, nil); st != want {
			t.Errorf("GET %s: %d %.200s, want %d", path, st, body, want)
		}
	}

	// An operator pauses and resumes a flow from its page, and each
	// action's redirect comes back to that page.
	op := newClient(t, base)
	op.login(tk.alice)
	opGet := func(u *url.URL) (int, string) {
		t.Helper()
		resp, err := op.hc.Get(u.String())
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, f := range []string{"..", "x/y?z#1%"} {
		u, err := browse(baseURL, flowLinks("/flows")[f])
		if err != nil {
			t.Fatal(err)
		}
		for _, action := range []string{"pause", "resume"} {
			st, body := opGet(u)
			m := flowActionRE.FindStringSubmatch(body)
			if st != http.StatusOK || m == nil || m[2] != action || html.UnescapeString(m[3]) != f {
				t.Fatalf("GET %v as an operator: %d, want a form to %s flow %q:\n%.300s", u, st, action, f, body)
			}
			form := url.Values{"csrf": {csrfRE.FindStringSubmatch(body)[1]}, "flow": {f}, "back": {html.UnescapeString(m[4])}, "reason": {"r"}}
			resp, err := op.hc.PostForm(base+m[1], form)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			loc, err := browse(baseURL, resp.Header.Get("Location"))
			if resp.StatusCode != http.StatusSeeOther || err != nil {
				t.Fatalf("%s %q: %d %v, want a redirect", action, f, resp.StatusCode, err)
			}
			st, body = opGet(loc)
			if h := flowH1RE.FindStringSubmatch(body); st != http.StatusOK || h == nil || html.UnescapeString(h[1]) != f || !strings.Contains(body, `id="msg"`) {
				t.Errorf("%s %q: the redirect to %v: %d, want the flow's page with the result:\n%.300s", action, f, loc, st, body)
			}
		}
	}
}

// eventPathOf is the escaped path of event id's page, as the console
// links it.
func eventPathOf(id string) string {
	if id == "." || id == ".." {
		return "/event?id=" + url.QueryEscape(id)
	}
	return "/event/" + url.PathEscape(id)
}
