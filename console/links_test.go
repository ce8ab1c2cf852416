package console_test

import (
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/console"
)

// oddIDs are event ids (and, prefixed, flow ids) that CheckID allows and
// that a path segment must escape: a link built with only '%' escaped led
// "x/y?z#1%" to a 404 (a fresh user's report), "100%25" to event "100%",
// and ".." (which a browser removes from a path, %2e%2e too) to the
// overview.
var oddIDs = []string{"x/y?z#1%", "a b/c", "é/ü ñ", "100%25", "..", ".", "q&r=s;t,u:v@w", "/lead", "trail/"}

// browse resolves href against base as a browser does (WHATWG URL):
// "." and ".." segments, also spelt with %2e, are removed.
func browse(base *url.URL, href string) (*url.URL, error) {
	ref, err := url.Parse(href)
	if err != nil {
		return nil, err
	}
	u := base.ResolveReference(ref)
	segs := strings.Split(u.EscapedPath(), "/")
	for i, s := range segs {
		switch strings.ToLower(s) {
		case "%2e":
			segs[i] = "."
		case ".%2e", "%2e.", "%2e%2e":
			segs[i] = ".."
		}
	}
	p := strings.Join(segs, "/")
	if u.RawQuery != "" {
		p += "?" + u.RawQuery
	}
	if ref, err = url.Parse(p); err != nil {
		return nil, err
	}
	return u.ResolveReference(ref), nil
}

// follow fetches href, found on a page of base, as a browser would
// (browse): the URL it resolved to, the answer's status and body; an
// error when href does not resolve (nothing is fetched then).
func (c *client) follow(base *url.URL, href string) (*url.URL, int, string, error) {
	c.t.Helper()
	u, err := browse(base, href)
	if err != nil {
		return nil, 0, "", err
	}
	resp, err := c.hc.Get(u.String())
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return u, resp.StatusCode, string(b), nil
}

var (
	hrefRE      = regexp.MustCompile(`href="([^"]*)"`)
	eventH1RE   = regexp.MustCompile(`<h1>Event (.*)</h1>`)
	redriveForm = regexp.MustCompile(`(?s)<form method="post" action="([^"]*)" id="redrive">.*?name="sel" value="([^"]*)".*?name="back" value="([^"]*)"`)
)

// Every link to an event, on every page that has them, leads to that
// event's page, and an action taken there comes back to it, whatever
// the id holds: '/', '?', '#', '%', ' ', non-ASCII, or a dot segment.
func TestLinksCarryAnyID(t *testing.T) {
	q, err := fairrelay.Open(bg, filepath.Join(t.TempDir(), "queue.db"), fairrelay.Config{Policy: fairrelay.DaemonPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	for _, id := range oddIDs {
		if _, err := q.Enqueue(bg, fairrelay.EnqueueParams{ID: id, Flow: "f " + id, Body: []byte(`{"delta":1}`), At: fairrelay.AtStored}); err != nil {
			t.Fatalf("enqueue %q: %v", id, err)
		}
	}
	cl, err := q.Claim(bg, fairrelay.ClaimParams{At: fairrelay.AtStored, Limit: len(oddIDs)})
	if err != nil || len(cl.Claims) != len(oddIDs) {
		t.Fatalf("claim: %+v %v", cl, err)
	}
	for _, c := range cl.Claims {
		if _, err := q.Settle(bg, fairrelay.SettleParams{Token: c.Token, Outcome: fairrelay.OutcomeInvalidBody, At: fairrelay.AtStored}); err != nil {
			t.Fatal(err)
		}
	}
	base := serve(t, console.Config{Queue: q, LocalOperator: "op"})
	baseURL, _ := url.Parse(base)
	c := newClient(t, base)

	// get fetches href, found on page from, as a browser would.
	get := func(from, href string) (*url.URL, int, string) {
		t.Helper()
		u, st, body, err := c.follow(baseURL, href)
		if err != nil {
			t.Errorf("%s: link %q: %v", from, href, err)
		}
		return u, st, body
	}
	// crawl follows every link to an event or a flow of page, wants each
	// id of want linked from it, and returns the links by the event they
	// lead to.
	crawl := func(page string, want []string) map[string]string {
		t.Helper()
		seen := map[string]string{}
		for _, href := range c.links(page) {
			switch {
			case strings.HasPrefix(href, "/event"):
				u, st, body := get(page, href)
				h := eventH1RE.FindStringSubmatch(body)
				if st != http.StatusOK || h == nil {
					t.Errorf("GET %s: link %q (%v): %d, want an event's page", page, href, u, st)
					continue
				}
				id := html.UnescapeString(h[1])
				seen[id] = href
				if !strings.Contains(body, `">`+html.EscapeString("f "+id)+"</a></td>") {
					t.Errorf("GET %s: link %q: event %q's page does not show its flow", page, href, id)
				}
			case strings.HasPrefix(href, "/flow/"), strings.HasPrefix(href, "/flow?"):
				u, st, body := get(page, href)
				h := flowH1RE.FindStringSubmatch(body)
				if st != http.StatusOK || h == nil || !strings.HasPrefix(html.UnescapeString(h[1]), "f ") {
					t.Errorf("GET %s: link %q (%v): %d, want a flow's page", page, href, u, st)
				}
			}
		}
		for _, id := range want {
			if _, ok := seen[id]; !ok {
				t.Errorf("GET %s: no link leads to event %q", page, id)
			}
		}
		return seen
	}
	crawl("/", oddIDs) // the oldest, and the blocked flows' heads
	crawl("/flows", oddIDs)
	links := crawl("/quarantine", oddIDs)

	// Redrive each from its page: the redirect comes back to that page.
	for _, id := range oddIDs {
		href, ok := links[id]
		if !ok {
			continue
		}
		_, st, body := get("/quarantine", href)
		m := redriveForm.FindStringSubmatch(body)
		if st != http.StatusOK || m == nil {
			t.Errorf("GET %s: %d, want a redrive form", href, st)
			continue
		}
		form := url.Values{"csrf": {csrfRE.FindStringSubmatch(body)[1]}, "sel": {html.UnescapeString(m[2])},
			"back": {html.UnescapeString(m[3])}, "reason": {"fixed"}}
		if want := fmt.Sprintf("%s:1", id); form.Get("sel") != want {
			t.Errorf("GET %s: redrive selects %q, want %q", href, form.Get("sel"), want)
		}
		resp, err := c.hc.PostForm(base+html.UnescapeString(m[1]), form)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		loc := resp.Header.Get("Location")
		if resp.StatusCode != http.StatusSeeOther {
			t.Errorf("redrive %q: %d, want a redirect", id, resp.StatusCode)
			continue
		}
		_, st, body = get("redrive "+id, loc)
		h := eventH1RE.FindStringSubmatch(body)
		if st != http.StatusOK || h == nil || html.UnescapeString(h[1]) != id || !strings.Contains(body, `id="msg"`) {
			t.Errorf("redrive %q: the redirect to %q: %d, want event %q's page with the result:\n%.300s", id, loc, st, id, body)
		}
	}
	crawl("/audit", oddIDs)
	crawl("/flows", oddIDs)
}
