package console_test

import (
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/console"
)

var bg = context.Background()

// scenario opens a queue on a SQLite file and leaves it as the demo's
// first table: flow A's head A1 quarantined (unsupported_delta) with A2
// behind it, B's head B1 backing off after a retry, C1 acked.
func scenario(t *testing.T) *fairrelay.Queue {
	t.Helper()
	q, err := fairrelay.Open(bg, filepath.Join(t.TempDir(), "queue.db"), fairrelay.Config{Policy: fairrelay.DaemonPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	for _, e := range []struct{ id, flow, body string }{
		{"A1", "A", `{"delta":10}`}, {"A2", "A", `{"delta":1}`}, {"B1", "B", `{"delta":2}`}, {"C1", "C", `{"delta":3}`},
	} {
		if _, err := q.Enqueue(bg, fairrelay.EnqueueParams{ID: e.id, Flow: e.flow, Body: []byte(e.body), At: 1}); err != nil {
			t.Fatal(err)
		}
	}
	cl, err := q.Claim(bg, fairrelay.ClaimParams{At: 2, Limit: 3})
	if err != nil || len(cl.Claims) != 3 {
		t.Fatalf("claim: %+v %v", cl, err)
	}
	for _, c := range cl.Claims {
		out := map[string]fairrelay.Outcome{"A1": fairrelay.OutcomeUnsupportedDelta, "B1": fairrelay.OutcomeRetry, "C1": fairrelay.OutcomeAccepted}[c.Token.EventID]
		if _, err := q.Settle(bg, fairrelay.SettleParams{Token: c.Token, Outcome: out, At: 3, Duration: 7 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	return q
}

// client is a browser: a cookie jar, no redirects followed.
type client struct {
	t    *testing.T
	base string
	hc   *http.Client
	hdr  http.Header
}

func newClient(t *testing.T, base string) *client {
	jar, _ := cookiejar.New(nil)
	return &client{t: t, base: base, hdr: http.Header{}, hc: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

func (c *client) do(method, path string, form url.Values) (int, string) {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, c.base+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range c.hdr {
		req.Header[k] = v
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// page GETs path and returns the page, failing the test unless it answers
// 200.
func (c *client) page(path string) string {
	c.t.Helper()
	st, body := c.do("GET", path, nil)
	if st != http.StatusOK {
		c.t.Fatalf("GET %s: %d %.300s", path, st, body)
	}
	return body
}

// links returns every href of the page at path, unescaped, in page order.
func (c *client) links(path string) []string {
	c.t.Helper()
	var hrefs []string
	for _, m := range hrefRE.FindAllStringSubmatch(c.page(path), -1) {
		hrefs = append(hrefs, html.UnescapeString(m[1]))
	}
	return hrefs
}

var csrfRE = regexp.MustCompile(`name="csrf(?:" value|-token" content)="([^"]+)"`)

// csrf reads the CSRF token of a page.
func (c *client) csrf(path string) string {
	c.t.Helper()
	st, body := c.do("GET", path, nil)
	m := csrfRE.FindStringSubmatch(body)
	if st != http.StatusOK || m == nil {
		c.t.Fatalf("GET %s: %d, no csrf token in %.300s", path, st, body)
	}
	return m[1]
}

func (c *client) login(token string) {
	c.t.Helper()
	tok := c.csrf("/login")
	st, body := c.do("POST", "/login", url.Values{"csrf": {tok}, "token": {token}})
	if st != http.StatusSeeOther {
		c.t.Fatalf("sign in: %d %.300s", st, body)
	}
}

type tokens struct{ path, alice, bob string }

func tokenFile(t *testing.T) tokens {
	p := filepath.Join(t.TempDir(), "tokens")
	a, err := console.AddToken(p, "alice", false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := console.AddToken(p, "bob", true)
	if err != nil {
		t.Fatal(err)
	}
	return tokens{p, a, b}
}

func serve(t *testing.T, cfg console.Config) string {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := console.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s) // loopback
	t.Cleanup(ts.Close)
	return ts.URL
}

// actions are one request of each action that would change the store.
func actions(csrf string) map[string]url.Values {
	return map[string]url.Values{
		"redrive":  {"csrf": {csrf}, "sel": {"A1:1"}, "reason": {"fixed"}},
		"expedite": {"csrf": {csrf}, "id": {"B1"}, "generation": {"1"}, "reason": {"now"}},
		"pause":    {"csrf": {csrf}, "flow": {"B"}, "reason": {"hold"}},
		"resume":   {"csrf": {csrf}, "flow": {"A"}, "reason": {"go"}}, // A is not paused: would be rejected anyway
		"logout":   {"csrf": {csrf}},
	}
}

func snapshot(t *testing.T, q *fairrelay.Queue) *fairrelay.Snapshot {
	t.Helper()
	s, err := q.Snapshot(bg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRefusedRequestsChangeNothing(t *testing.T) {
	q := scenario(t)
	tk := tokenFile(t)
	ts, err := console.LoadTokens(tk.path)
	if err != nil {
		t.Fatal(err)
	}
	base := serve(t, console.Config{Queue: q, Tokens: ts})
	before := snapshot(t, q)

	anon := newClient(t, base)
	if st, _ := anon.do("GET", "/", nil); st != http.StatusSeeOther {
		t.Fatalf("anonymous GET /: %d, want a redirect to /login", st)
	}
	bob := newClient(t, base)
	bob.login(tk.bob)
	bobCSRF := bob.csrf("/")
	alice := newClient(t, base)
	alice.login(tk.alice)
	aliceCSRF := alice.csrf("/")
	for name, form := range actions("x") {
		path := "/action/" + name
		if name == "logout" {
			continue
		}
		if st, body := anon.do("POST", path, form); st != http.StatusUnauthorized {
			t.Errorf("anonymous %s: %d %s, want 401", name, st, body)
		}
		form.Set("csrf", bobCSRF)
		if st, body := bob.do("POST", path, form); st != http.StatusForbidden || !strings.Contains(body, "read-only") {
			t.Errorf("read-only %s: %d %s, want 403", name, st, body)
		}
		form.Del("csrf")
		if st, body := alice.do("POST", path, form); st != http.StatusForbidden || !strings.Contains(body, "csrf") {
			t.Errorf("operator %s without csrf: %d %s, want 403", name, st, body)
		}
		form.Set("csrf", aliceCSRF+"x")
		if st, body := alice.do("POST", path, form); st != http.StatusForbidden {
			t.Errorf("operator %s with a wrong csrf: %d %s, want 403", name, st, body)
		}
		form.Set("csrf", bobCSRF) // another session's token
		if st, body := alice.do("POST", path, form); st != http.StatusForbidden {
			t.Errorf("operator %s with another session's csrf: %d %s, want 403", name, st, body)
		}
	}
	if st, _ := alice.do("POST", "/logout", url.Values{}); st != http.StatusForbidden {
		t.Errorf("logout without csrf: %d, want 403", st)
	}
	if st, _ := anon.do("POST", "/login", url.Values{"token": {tk.alice}}); st != http.StatusForbidden {
		t.Errorf("sign-in without the form's csrf: %d, want 403", st)
	}
	if diff := cmp.Diff(before, snapshot(t, q)); diff != "" {
		t.Fatalf("refused requests changed the store (-before +after):\n%s", diff)
	}
	// A read-only user is offered nothing to select: no checkbox beside
	// the quarantined A1, as no button below it.
	if st, body := bob.do("GET", "/quarantine", nil); st != 200 || !strings.Contains(body, "A1") || strings.Contains(body, `type="checkbox"`) {
		t.Errorf("read-only /quarantine: %d, want A1 listed without a checkbox:\n%s", st, body)
	}
	if st, body := alice.do("GET", "/quarantine", nil); st != 200 || !strings.Contains(body, `id="sel-A1"`) {
		t.Errorf("operator /quarantine: %d, want A1's checkbox:\n%s", st, body)
	}
}

func TestOperatorActionsAreAudited(t *testing.T) {
	q := scenario(t)
	tk := tokenFile(t)
	ts, _ := console.LoadTokens(tk.path)
	base := serve(t, console.Config{Queue: q, Tokens: ts})
	alice := newClient(t, base)
	alice.login(tk.alice)
	csrf := alice.csrf("/event/A1")
	steps := []struct {
		action string
		form   url.Values
		msg    string
	}{
		{"redrive", url.Values{"sel": {"A1:1"}, "reason": {"receiver fixed"}, "operator": {"mallory"}}, "1 redriven"},
		{"expedite", url.Values{"id": {"B1"}, "generation": {"1"}, "reason": {"try now"}}, "expedite B1: ready"},
		{"pause", url.Values{"flow": {"C"}, "reason": {"hold"}}, "pause C: paused"},
		{"resume", url.Values{"flow": {"C"}, "reason": {"go"}}, "resume C: resumed"},
		{"redrive", url.Values{"sel": {"A1:1"}, "reason": {"again"}}, "1 rejected (not_quarantined: A1)"},
		// A head gone since the page was read (pruned) is counted like
		// one that changed; the batch goes on.
		{"redrive", url.Values{"sel": {"NOPE:1", "A1:1"}, "reason": {"again"}}, "0 redriven, 1 rejected (not_found: NOPE), 1 rejected (not_quarantined: A1)"},
	}
	for _, s := range steps {
		s.form.Set("csrf", csrf)
		s.form.Set("back", "/flows")
		req, _ := http.NewRequest("POST", base+"/action/"+s.action, strings.NewReader(s.form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := alice.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		loc, _ := url.Parse(resp.Header.Get("Location"))
		if resp.StatusCode != http.StatusSeeOther || loc.Path != "/flows" || !strings.Contains(loc.Query().Get("msg"), s.msg) {
			t.Fatalf("%s: %d %s, want a redirect to /flows saying %q", s.action, resp.StatusCode, loc, s.msg)
		}
		// The page the redirect leads to shows the result; the same
		// message in a link made elsewhere (no signature, or another
		// message's) is not shown.
		if _, body := alice.do("GET", loc.RequestURI(), nil); !strings.Contains(body, `id="msg"`) || !strings.Contains(body, html.EscapeString(s.msg)) {
			t.Errorf("%s: the page after the redirect does not show %q", s.action, s.msg)
		}
		forged := loc.Query()
		forged.Set("msg", "All events deleted")
		for _, u := range []string{"/flows?msg=All+events+deleted", "/flows?" + forged.Encode()} {
			if _, body := alice.do("GET", u, nil); strings.Contains(body, "All events deleted") {
				t.Errorf("GET %s shows a message the console did not write", u)
			}
		}
	}
	audit, err := q.Audit(bg, 0, 10)
	if err != nil || len(audit) != 4 {
		t.Fatalf("audit: %+v %v", audit, err)
	}
	for i, want := range []string{"redrive", "expedite", "pause", "resume"} {
		if a := audit[i]; a.Action != want || a.Operator == nil || *a.Operator != "alice" || a.Wall == 0 {
			t.Errorf("audit row %d: %+v, want %s by alice with its wall time", i, a, want)
		}
	}
	if st, body := alice.do("GET", "/audit", nil); st != 200 || strings.Count(body, `<td class="operator">alice</td>`) != 4 {
		t.Errorf("audit page: %d, want 4 rows by alice", st)
	}
}

func TestProxyHeader(t *testing.T) {
	q := scenario(t)
	base := serve(t, console.Config{Queue: q, AuthHeader: "X-Forwarded-User", ReadOnlyUsers: []string{"dave"}})
	before := snapshot(t, q)
	none := newClient(t, base)
	if st, _ := none.do("GET", "/", nil); st != http.StatusUnauthorized {
		t.Fatalf("no header: %d, want 401", st)
	}
	if st, _ := none.do("POST", "/action/pause", url.Values{"flow": {"B"}, "reason": {"x"}}); st != http.StatusUnauthorized {
		t.Fatalf("no header, pause: %d, want 401", st)
	}
	dave := newClient(t, base)
	dave.hdr.Set("X-Forwarded-User", "dave")
	for name, form := range actions(dave.csrf("/")) {
		if name == "logout" {
			continue
		}
		if st, _ := dave.do("POST", "/action/"+name, form); st != http.StatusForbidden {
			t.Errorf("read-only dave, %s: %d, want 403", name, st)
		}
	}
	if diff := cmp.Diff(before, snapshot(t, q)); diff != "" {
		t.Fatalf("refused requests changed the store:\n%s", diff)
	}
	carol := newClient(t, base)
	carol.hdr.Set("X-Forwarded-User", "carol")
	csrf := carol.csrf("/")
	// The session follows the header: another name is another session.
	carol.hdr.Set("X-Forwarded-User", "erin")
	if st, _ := carol.do("POST", "/action/pause", url.Values{"csrf": {csrf}, "flow": {"B"}, "reason": {"hold"}}); st != http.StatusForbidden {
		t.Fatalf("carol's csrf under erin's name: %d, want 403", st)
	}
	carol.hdr.Set("X-Forwarded-User", "carol")
	csrf = carol.csrf("/")
	if st, _ := carol.do("POST", "/action/pause", url.Values{"csrf": {csrf}, "flow": {"B"}, "reason": {"hold"}}); st != http.StatusSeeOther {
		t.Fatalf("carol pauses B: %d", st)
	}
	audit, _ := q.Audit(bg, 0, 10)
	if len(audit) != 1 || *audit[0].Operator != "carol" {
		t.Fatalf("audit: %+v, want carol's pause", audit)
	}
}

func TestPages(t *testing.T) {
	q := scenario(t)
	base := serve(t, console.Config{Queue: q, LocalOperator: "local-op"})
	c := newClient(t, base)
	for path, want := range map[string][]string{
		"/":                                    {`id="quarantined">1<`, `href="/event/A1"`, "local-op", "<svg", `id="last-settle">The last settled `},
		"/flows":                               {"quarantined because unsupported_delta", "backing off until tick", "s), after 1 attempt", "drained"},
		"/flows?prefix=B":                      {`data-flow="B"`},
		"/event/A1":                            {`&#34;delta&#34;: 10`, `id="redrive"`, "unsupported_delta"},
		"/event/B1":                            {`id="expedite"`, `id="pause"`},
		"/quarantine?reason=rejected":          {"no quarantined head"},
		"/quarantine?prefix=A":                 {`value="A1:1"`},
		"/audit":                               {"no row"},
		"/inbox":                               {"No inbox"},
		"/flows?paused=1":                      {"no flow"},
		"/quarantine?reason=unsupported_delta": {`value="A1:1"`},
	} {
		st, body := c.do("GET", path, nil)
		if st != http.StatusOK {
			t.Errorf("GET %s: %d %.200s", path, st, body)
			continue
		}
		for _, w := range want {
			if !strings.Contains(body, w) {
				t.Errorf("GET %s: no %q", path, w)
			}
		}
		if strings.Contains(body, "flows?prefix=B") && strings.Contains(body, `data-flow="A"`) && path == "/flows?prefix=B" {
			t.Errorf("GET %s lists flow A", path)
		}
	}
	for path, want := range map[string]int{"/audit?after=-1": 400, "/event/nope": 404, "/event/%20x": 400, "/event": 400, "/event?id=nope": 404,
		"/quarantine?reason=bogus": 400, "/flows?prefix=%00": 400, "/quarantine?prefix=%1b": 400, "/flows?after=%ff": 400,
		"/flows?paused=yes": 400, "/flows?paused=1&prefix=A": 400} {
		if st, body := c.do("GET", path, nil); st != want {
			t.Errorf("GET %s: %d %s, want %d", path, st, body, want)
		}
	}
	csrf := c.csrf("/")
	if st, body := c.do("POST", "/action/redrive", url.Values{"csrf": {csrf}, "sel": {"A1"}, "reason": {"r"}}); st != 400 || !strings.Contains(body, "sel") {
		t.Errorf("redrive of a bad selection: %d %s, want 400 naming sel", st, body)
	}
	// A database error is a 500, never an empty page, and its text stays
	// in the log.
	q.Close()
	if st, body := c.do("GET", "/", nil); st != http.StatusInternalServerError || strings.Contains(body, "database") || strings.Contains(body, "sql") {
		t.Errorf("GET / on a closed store: %d %q, want 500 without the store's error text", st, body)
	}
}

// The overview says when a delivery was last settled, and, when none was
// in the last hour while events wait, asks whether a relay runs: the
// store's clock stands still without one, so its ticks alone read as a
// store at work (an operator's report).
func TestOverviewSaysWhetherDeliveriesAreSettled(t *testing.T) {
	q := scenario(t)
	later := time.Now().Add(2 * time.Hour)
	c := newClient(t, serve(t, console.Config{Queue: q, LocalOperator: "op", Now: func() time.Time { return later }}))
	if st, body := c.do("GET", "/", nil); st != http.StatusOK || !strings.Contains(body, `id="last-settle">None settled in the last hour, while events wait: is a relay running on this store?`) {
		t.Errorf("GET / two hours after the last settle: %d, want it to ask whether a relay runs:\n%.3000s", st, body)
	}
	empty, err := fairrelay.Open(bg, filepath.Join(t.TempDir(), "empty.db"), fairrelay.Config{Policy: fairrelay.DaemonPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { empty.Close() })
	c = newClient(t, serve(t, console.Config{Queue: empty, LocalOperator: "op"}))
	if st, body := c.do("GET", "/", nil); st != http.StatusOK || !strings.Contains(body, `id="last-settle">None settled in the last hour</p>`) {
		t.Errorf("GET / on an empty store: %d, want none settled and no question:\n%.3000s", st, body)
	} else if !strings.Contains(body, `id="settled">0 settled: no latency to show.</p>`) || strings.Contains(body, "latency p50") {
		// A p50 of "<1ms" over no delivery read as measured (a fresh
		// user's report).
		t.Errorf("GET / on an empty store: want no latency over no delivery:\n%.3000s", body)
	}
}

// Without sign-in the console answers only to loopback host names: a page
// elsewhere that resolves its own name to 127.0.0.1 (DNS rebinding) gets
// 421 and changes nothing; and any POST from another origin is refused.
func TestConsoleRefusesOtherHostsAndOrigins(t *testing.T) {
	q := scenario(t)
	base := serve(t, console.Config{Queue: q, LocalOperator: "local-op"})
	c := newClient(t, base)
	csrf := c.csrf("/")
	before := snapshot(t, q)
	_, port, _ := strings.Cut(strings.TrimPrefix(base, "http://"), ":")
	for _, host := range []string{"evil.example:" + port, "evil.example", "192.168.1.7:" + port} {
		req, _ := http.NewRequest("GET", base+"/flows", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("GET /flows with Host %s: %d, want 421", host, resp.StatusCode)
		}
		req, _ = http.NewRequest("POST", base+"/action/pause", strings.NewReader(url.Values{"csrf": {csrf}, "flow": {"B"}, "reason": {"x"}}.Encode()))
		req.Host = host
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for _, ck := range c.hc.Jar.Cookies(req.URL) {
			req.AddCookie(ck)
		}
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("POST pause with Host %s: %d, want 421", host, resp.StatusCode)
		}
	}
	c.hdr.Del("Host")
	c.hdr.Set("Origin", "http://evil.example")
	if st, _ := c.do("POST", "/action/pause", url.Values{"csrf": {csrf}, "flow": {"B"}, "reason": {"x"}}); st != http.StatusForbidden {
		t.Errorf("POST from another origin: %d, want 403", st)
	}
	if diff := cmp.Diff(before, snapshot(t, q)); diff != "" {
		t.Errorf("the store changed (-before +after):\n%s", diff)
	}
	c.hdr.Set("Origin", base)
	if st, body := c.do("POST", "/action/pause", url.Values{"csrf": {csrf}, "flow": {"B"}, "reason": {"x"}}); st != http.StatusSeeOther {
		t.Errorf("POST from the console's own origin: %d %.200s, want 303", st, body)
	}
}

func TestCheckAddr(t *testing.T) {
	for addr, ok := range map[string]bool{"127.0.0.1:8081": true, "[::1]:8081": true, "localhost:1": true, "0.0.0.0:8081": false, "10.1.2.3:80": false, ":8081": false} {
		if err := console.CheckAddr(addr, console.Config{}); (err == nil) != ok {
			t.Errorf("CheckAddr(%s) without credentials: %v", addr, err)
		}
	}
	if err := console.CheckAddr("0.0.0.0:8081", console.Config{AuthHeader: "X-User"}); err != nil {
		t.Errorf("with a proxy header: %v", err)
	}
}

func TestTokenFile(t *testing.T) {
	tk := tokenFile(t)
	ts, err := console.LoadTokens(tk.path)
	if err != nil || ts.Len() != 2 {
		t.Fatalf("load: %v", err)
	}
	if u, ok := ts.Lookup(tk.bob); !ok || u.Name != "bob" || !u.ReadOnly {
		t.Fatalf("bob: %+v %v", u, ok)
	}
	if _, ok := ts.Lookup(tk.bob + "x"); ok {
		t.Fatal("a wrong token was accepted")
	}
	if _, err := console.AddToken(tk.path, "alice", false); err == nil {
		t.Fatal("alice added twice")
	}
	if _, err := console.AddToken(tk.path, " bad", false); err == nil || !strings.Contains(err.Error(), "name") {
		t.Fatalf("bad name: %v", err)
	}
	// A name the file's format cannot hold is refused, and the file stays
	// as it was: every user can still sign in.
	before, _ := os.ReadFile(tk.path)
	for _, name := range []string{"al ice", "al\tice", "#carol"} {
		if _, err := console.AddToken(tk.path, name, false); !errors.Is(err, fairrelay.ErrInvalidInput) || !strings.Contains(err.Error(), "name") {
			t.Errorf("name %q: %v, want invalid_input naming name", name, err)
		}
	}
	if after, _ := os.ReadFile(tk.path); string(after) != string(before) {
		t.Errorf("refused names changed the file:\n%s", after)
	}
	if ts, err := console.LoadTokens(tk.path); err != nil || ts.Len() != 2 {
		t.Errorf("load after the refused names: %v", err)
	}
}

// Cookies are HttpOnly and SameSite=Strict, and Secure over TLS.
func TestCookies(t *testing.T) {
	q := scenario(t)
	tk := tokenFile(t)
	ts, _ := console.LoadTokens(tk.path)
	s, err := console.New(console.Config{Queue: q, Tokens: ts, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for _, tls := range []bool{false, true} {
		var srv *httptest.Server
		if tls {
			srv = httptest.NewTLSServer(s)
		} else {
			srv = httptest.NewServer(s)
		}
		resp, err := srv.Client().Get(srv.URL + "/login")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		cs := resp.Cookies()
		if len(cs) != 1 || !cs[0].HttpOnly || cs[0].SameSite != http.SameSiteStrictMode || cs[0].Secure != tls {
			t.Errorf("tls %v: cookies %+v, want one HttpOnly, SameSite=Strict, Secure only over TLS", tls, cs)
		}
		srv.Close()
	}
}

// The groups page (SPEC §8) lists each group's weight, limits, flows,
// backlog and quarantined heads (linked to the quarantine page filtered by
// group), fifty to a page, and refuses a bad after.
func TestGroupsPage(t *testing.T) {
	t.Parallel()
	q, err := fairrelay.Open(bg, filepath.Join(t.TempDir(), "queue.db"), fairrelay.Config{Policy: fairrelay.DaemonPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	w, mb, slots := int64(5), int64(100), int64(2)
	if _, err := q.Configure(bg, fairrelay.ConfigureParams{At: fairrelay.AtStored, Group: "gold", Weight: &w, MaxBacklog: &mb, MaxSlots: &slots}); err != nil {
		t.Fatal(err)
	}
	for i, e := range []struct{ flow, group string }{{"o1", "gold"}, {"o1", "gold"}, {"o2", "gold"}, {"f1", "free"}} {
		if _, err := q.Enqueue(bg, fairrelay.EnqueueParams{ID: fmt.Sprintf("E%d", i), Flow: e.flow, Group: e.group, Body: []byte(`{"delta":1}`), At: fairrelay.AtStored}); err != nil {
			t.Fatal(err)
		}
	}
	// 50 more groups, named after gold: the first page ends inside them.
	one := int64(1)
	for i := range 50 {
		if _, err := q.Configure(bg, fairrelay.ConfigureParams{At: fairrelay.AtStored, Group: fmt.Sprintf("z%02d", i), Weight: &one}); err != nil {
			t.Fatal(err)
		}
	}
	// f1's head (E3) rejected for good: free has a quarantined head.
	cr, err := q.Claim(bg, fairrelay.ClaimParams{At: fairrelay.AtStored, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range cr.Claims {
		if cl.Flow != "f1" {
			continue
		}
		if r, err := q.Settle(bg, fairrelay.SettleParams{Token: cl.Token, Outcome: fairrelay.OutcomeRejected, At: fairrelay.AtStored}); err != nil || r.Status != fairrelay.SettleQuarantined {
			t.Fatalf("settle f1: %+v %v", r, err)
		}
	}
	c := newClient(t, serve(t, console.Config{Queue: q, LocalOperator: "op"}))
	st, body := c.do("GET", "/groups", nil)
	if st != http.StatusOK {
		t.Fatalf("GET /groups: %d %.200s", st, body)
	}
	row := func(body, g string) string {
		i := strings.Index(body, `<tr data-group="`+g+`">`)
		if i < 0 {
			return ""
		}
		return body[i : i+strings.Index(body[i:], "</tr>")]
	}
	// gold: weight 5, max backlog 100, 2 slots, 2 flows, 3 events not
	// acked, no quarantined head; free: one, linked to its quarantine page.
	if r := row(body, "gold"); !strings.Contains(r, "<td>5</td><td>100</td><td>2</td><td>2</td><td>3</td><td>0</td>") {
		t.Errorf("gold's row: %q", r)
	}
	if r := row(body, "free"); !strings.Contains(r, `<td>1</td><td>none</td><td>none</td><td>1</td><td>1</td><td><a href="/quarantine?group=free">1</a></td>`) {
		t.Errorf("free's row: %q", r)
	}
	if _, body := c.do("GET", "/quarantine?group=free", nil); !strings.Contains(body, `value="E3:1"`) {
		t.Errorf("GET /quarantine?group=free: no E3:\n%.400s", body)
	}
	if _, body := c.do("GET", "/quarantine?group=gold", nil); !strings.Contains(body, "no quarantined head") || !strings.Contains(body, `id="fgroup" value="gold"`) {
		t.Errorf("GET /quarantine?group=gold: want none, the filter kept:\n%.600s", body)
	}
	if st, body := c.do("GET", "/quarantine?group=%1b", nil); st != 400 || !strings.Contains(body, "group") {
		t.Errorf("GET /quarantine?group=%%1b: %d %.200s, want 400 naming group", st, body)
	}
	if got := strings.Count(body, "<tr data-group="); got != 50 || !strings.Contains(body, `href="/groups?after=z47"`) {
		t.Errorf("first page: %d rows, want 50 and a link after z47", got)
	}
	if _, body := c.do("GET", "/groups?after=z47", nil); strings.Count(body, "<tr data-group=") != 2 || row(body, "z49") == "" {
		t.Errorf("second page: want z48 and z49:\n%.400s", body)
	}
	if st, body := c.do("GET", "/groups?after=%00", nil); st != 400 || !strings.Contains(body, "after") {
		t.Errorf("GET /groups?after=%%00: %d %.200s, want 400 naming after", st, body)
	}
}

// A proxy header no request can carry is refused at New, naming it: the
// console answered every request 401 (a breaker's report).
func TestNewRefusesAnAuthHeaderThatIsNotAName(t *testing.T) {
	q := scenario(t)
	for _, h := range []string{"X User", "X-User:", "X-Üser", "\t"} {
		_, err := console.New(console.Config{Queue: q, AuthHeader: h})
		var fe *fairrelay.Error
		if !errors.As(err, &fe) || fe.Field != "auth-header" {
			t.Errorf("AuthHeader %q: %v, want invalid_input naming auth-header", h, err)
		}
	}
	if _, err := console.New(console.Config{Queue: q, AuthHeader: "X-Forwarded-User"}); err != nil {
		t.Errorf("X-Forwarded-User: %v", err)
	}
}

// A token file written by hand without a newline after its last entry is
// appended to on a line of its own: AddToken wrote the new entry onto the
// last one's line, so neither loaded, every later add and the console's
// start failed, and the printed token never worked (a breaker's report).
func TestAddTokenAfterALastLineWithoutNewline(t *testing.T) {
	t.Parallel()
	tk := tokenFile(t)
	b, err := os.ReadFile(tk.path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tk.path, []byte(strings.TrimRight(string(b), "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	carol, err := console.AddToken(tk.path, "carol", false)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := console.LoadTokens(tk.path)
	if err != nil {
		t.Fatalf("load after the add: %v", err)
	}
	for name, token := range map[string]string{"alice": tk.alice, "bob": tk.bob, "carol": carol} {
		if u, ok := ts.Lookup(token); !ok || u.Name != name {
			t.Errorf("%s's token: %+v %v", name, u, ok)
		}
	}
}

// A token file saved with a UTF-8 byte order mark (Notepad) loads, and a
// token can be added to it: the mark is not part of the first name (a
// breaker's report: "name: format character U+FEFF at byte 0").
func TestTokenFileWithAByteOrderMark(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tokens")
	if _, err := console.AddToken(path, "alice", false); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append([]byte("\ufeff"), b...), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := console.AddToken(path, "bob", false); err != nil {
		t.Fatalf("add to a file with a byte order mark: %v", err)
	}
	if _, err := console.AddToken(path, "alice", false); err == nil {
		t.Error("alice, the first name after the mark, added twice")
	}
	if ts, err := console.LoadTokens(path); err != nil || ts.Len() != 2 {
		t.Fatalf("load: %v, want alice and bob", err)
	}
}
