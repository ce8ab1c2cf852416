package console_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/console"
)

var updateScreenshots = flag.Bool("update-screenshots", false, "write the browser test's screenshots to docs/console/ (else to a temporary directory)")

// chromiumPath finds Debian's chromium; under CI=true its absence fails
// the test, elsewhere it skips it.
func chromiumPath(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is missing: install it (apt-get install -y chromium); under CI the browser test must run")
	}
	t.Skip("chromium is missing (apt-get install -y chromium): the browser test is skipped")
	return ""
}

// demoState is the demo's scenario built through the library: flow A's
// head A1 (a delta of 10 against a receiver that supports 5) quarantined
// with A2 behind it; B's head backing off after a 503; C waiting; and 20
// more flows delivered.
// (The test adds flow C later.)
func demoState(t *testing.T, q *fairrelay.Queue) {
	t.Helper()
	enq := func(id, flow string, delta int) {
		if _, err := q.Enqueue(bg, fairrelay.EnqueueParams{ID: id, Flow: flow, Body: fmt.Appendf(nil, `{"delta":%d}`, delta), At: fairrelay.AtStored}); err != nil {
			t.Fatal(err)
		}
	}
	enq("A1", "A", 10)
	enq("A2", "A", 1)
	enq("B1", "B", 2)
	for i := range 60 {
		enq(fmt.Sprintf("F%02d-%d", i%20, i/20), fmt.Sprintf("F%02d", i%20), 1+i%5)
	}
	// The relay's first pass: A1 is refused, B1 answered 503, the F flows
	// delivered.
	settleUntil(t, q, func(c fairrelay.Claim) (fairrelay.Outcome, bool) {
		switch c.Flow {
		case "A":
			return fairrelay.OutcomeUnsupportedDelta, true
		case "B":
			return fairrelay.OutcomeRetry, true
		}
		return fairrelay.OutcomeAccepted, true
	}, func(s *fairrelay.Snapshot) bool {
		for _, e := range s.Events {
			if strings.HasPrefix(e.ID, "F") && e.State != fairrelay.StateAcked {
				return false
			}
		}
		return true
	})
}

// settleUntil plays the relay: claims what is eligible and settles each
// claim as answer says, until done holds or a deadline passes.
func settleUntil(t *testing.T, q *fairrelay.Queue, answer func(fairrelay.Claim) (fairrelay.Outcome, bool), done func(*fairrelay.Snapshot) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		s, err := q.Snapshot(bg)
		if err != nil {
			t.Fatal(err)
		}
		if done(s) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store did not settle in time: %+v", s.Events)
		}
		cl, err := q.Claim(bg, fairrelay.ClaimParams{At: fairrelay.AtStored, Limit: 50})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cl.Claims {
			out, ok := answer(c)
			if !ok {
				continue
			}
			d := time.Duration(3+len(c.Flow)*i%40) * time.Millisecond
			if _, err := q.Settle(bg, fairrelay.SettleParams{Token: c.Token, Outcome: out, At: fairrelay.AtStored, Duration: d}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestBrowser(t *testing.T) {
	exe := chromiumPath(t)
	q, err := fairrelay.Open(bg, filepath.Join(t.TempDir(), "queue.db"), fairrelay.Config{Policy: fairrelay.DaemonPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	demoState(t, q)
	tk := tokenFile(t)
	ts, err := console.LoadTokens(tk.path)
	if err != nil {
		t.Fatal(err)
	}
	base := serve(t, console.Config{Queue: q, Tokens: ts})
	shots := t.TempDir()
	if *updateScreenshots {
		shots = filepath.Join("..", "docs", "console")
		if err := os.MkdirAll(shots, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.WindowSize(1200, 800), chromedp.Headless)
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			buf, err := chromedp.CaptureScreenshot()(ctx, tg)
			if err != nil {
				return chromedp.Void{}, err
			}
			return chromedp.Void{}, os.WriteFile(filepath.Join(shots, name+".png"), buf, 0o644)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("read %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	submit := func(what, form, reason string) string {
		t.Helper()
		run(what,
			chromedp.SendKeys(chromedp.CSS(form+` input[name=reason]`), reason),
			chromedp.Click(chromedp.CSS(form+` button`)),
			chromedp.WaitVisible(chromedp.CSS(`#msg`)))
		return text(`#msg`)
	}

	// Sign in.
	run("sign in", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`#token`)), shot("login"),
		chromedp.SendKeys(chromedp.CSS(`#token`), tk.alice), chromedp.Click(chromedp.CSS(`#signin`)),
		chromedp.WaitVisible(chromedp.CSS(`#backlog`)))
	if who := text(`#who`); who != "alice" {
		t.Fatalf("signed in as %q", who)
	}
	if n := text(`#quarantined`); n != "1" {
		t.Fatalf("overview: %s quarantined, want 1", n)
	}
	run("overview", shot("overview"))

	// Find A's quarantined head and read why.
	run("quarantine", chromedp.Navigate(base+"/quarantine?reason=unsupported_delta"), chromedp.WaitVisible(chromedp.CSS(`#sel-A1`)), shot("quarantine"),
		chromedp.Click(chromedp.CSS(`a[href="/event/A1"]`)), chromedp.WaitVisible(chromedp.CSS(`#reason`)))
	if r := text(`#reason`); r != "unsupported_delta" {
		t.Fatalf("A1 quarantined because %q", r)
	}
	if w := text(`#why`); !strings.Contains(w, "quarantined because unsupported_delta") {
		t.Fatalf("why A does not move: %q", w)
	}
	run("event", shot("event"))

	// Fix the cause, then redrive A1 from the quarantine, selected, with a reason.
	run("select A1", chromedp.Navigate(base+"/quarantine"), chromedp.WaitVisible(chromedp.CSS(`#sel-A1`)), chromedp.Click(chromedp.CSS(`#sel-A1`)))
	if m := submit("redrive", `#redrive-many`, "receiver limit raised"); !strings.Contains(m, "1 redriven") {
		t.Fatalf("redrive: %q", m)
	}
	// The relay's next pass (played here) drains A; the flows page shows it.
	settleUntil(t, q, func(c fairrelay.Claim) (fairrelay.Outcome, bool) {
		return fairrelay.OutcomeAccepted, c.Flow == "A"
	}, func(s *fairrelay.Snapshot) bool {
		for _, e := range s.Events {
			if e.Flow == "A" && e.State != fairrelay.StateAcked {
				return false
			}
		}
		return true
	})
	run("A drained", chromedp.Navigate(base+"/flows?prefix=A"),
		chromedp.Poll[chromedp.Void](`document.querySelector('tr[data-flow="A"] .why').textContent.includes('drained')`, chromedp.WithPollingTimeout(10*time.Second)))
	// A's page, from its link on the flows page, lists both its events.
	run("flow A", chromedp.Click(chromedp.CSS(`tr[data-flow="A"] a.flow`)), chromedp.WaitVisible(chromedp.CSS(`#events`)))
	states, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('#events tr[data-seq]')).map(e => e.dataset.seq + ':' + e.querySelector('a').textContent + ':' + e.dataset.state)`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(states, ",") != "1:A1:acked,2:A2:acked" {
		t.Fatalf("flow A's page lists %v", states)
	}

	// Expedite B's backing-off head.
	run("B1", chromedp.Navigate(base+"/event/B1"), chromedp.WaitVisible(chromedp.CSS(`#expedite`)))
	if w := text(`#why`); !strings.Contains(w, "backing off until tick") {
		t.Fatalf("why B does not move: %q", w)
	}
	if m := submit("expedite", `#expedite`, "receiver back"); m != "expedite B1: ready" {
		t.Fatalf("expedite: %q", m)
	}

	// Pause and resume C, whose events arrive now and wait.
	for i, id := range []string{"C1", "C2"} {
		if _, err := q.Enqueue(bg, fairrelay.EnqueueParams{ID: id, Flow: "C", Body: fmt.Appendf(nil, `{"delta":%d}`, i+3), At: fairrelay.AtStored}); err != nil {
			t.Fatal(err)
		}
	}
	run("C1", chromedp.Navigate(base+"/event/C1"), chromedp.WaitVisible(chromedp.CSS(`#pause`)))
	if m := submit("pause", `#pause`, "maintenance window"); m != "pause C: paused" {
		t.Fatalf("pause: %q", m)
	}
	run("flows", chromedp.Navigate(base+"/flows"), chromedp.WaitVisible(chromedp.CSS(`tr[data-flow="C"]`)), shot("flows"))
	if w := text(`tr[data-flow="C"] .why`); !strings.Contains(w, `paused by alice because “maintenance window”`) {
		t.Fatalf("why C does not move: %q", w)
	}
	run("C1 again", chromedp.Navigate(base+"/event/C1"), chromedp.WaitVisible(chromedp.CSS(`#resume`)))
	if m := submit("resume", `#resume`, "window over"); m != "resume C: resumed" {
		t.Fatalf("resume: %q", m)
	}

	// The audit log names alice on every row.
	run("audit", chromedp.Navigate(base+"/audit"), chromedp.WaitVisible(chromedp.CSS(`#audit`)), shot("audit"))
	ops, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('#audit td.operator')).map(e => e.textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(ops, ",") != "alice,alice,alice,alice" {
		t.Fatalf("audit operators: %v", ops)
	}
	audit, err := q.Audit(bg, 0, 10)
	if err != nil || len(audit) != 4 {
		t.Fatalf("audit: %+v %v", audit, err)
	}
	for _, a := range audit {
		if a.Operator == nil || *a.Operator != "alice" {
			t.Fatalf("audit row %+v: want operator alice", a)
		}
	}
	run("overview after", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`#backlog`)), shot("overview-after"))
}
