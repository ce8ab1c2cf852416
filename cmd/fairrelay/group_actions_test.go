package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fairrelay/fairrelay"
)

// groupedStore makes a SQLite queue store whose heads are: a1 (group acme)
// and b1 (group beta) quarantined, e1 (flow e, no group: its own)
// quarantined, c1 (acme) and d1 (beta) backing off.
func groupedStore(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "q.db")
	ctx := context.Background()
	q, err := fairrelay.Open(ctx, path, fairrelay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for _, e := range []fairrelay.EnqueueParams{
		{ID: "a1", Flow: "a", Group: "acme"}, {ID: "b1", Flow: "b", Group: "beta"}, {ID: "c1", Flow: "c", Group: "acme"},
		{ID: "d1", Flow: "d", Group: "beta"}, {ID: "e1", Flow: "e"},
	} {
		e.Body, e.At = []byte(`{"delta":1}`), 1
		if _, err := q.Enqueue(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	for range 5 {
		r, err := q.Claim(ctx, fairrelay.ClaimParams{At: 2})
		if err != nil || len(r.Claims) != 1 {
			t.Fatalf("claim: %+v %v", r, err)
		}
		out := fairrelay.OutcomeRejected
		if f := r.Claims[0].Flow; f == "c" || f == "d" {
			out = fairrelay.OutcomeRetry
		}
		if _, err := q.Settle(ctx, fairrelay.SettleParams{Token: r.Claims[0].Token, Outcome: out, At: 2}); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// redrive --all --group G and expedite --all --group G act on the heads of
// G's flows only (a tenant's, after its endpoint's outage), a flow without
// a group being its own; an unknown group is not_found naming group, and
// --group without --all is refused, nothing changed.
func TestRedriveAndExpediteAllByGroup(t *testing.T) {
	t.Parallel()
	q := groupedStore(t)
	before := headsOf(t, q)
	if before["d"].NextAt == nil || before["c"].NextAt == nil {
		t.Fatalf("c and d are not backing off: %+v %+v", before["c"], before["d"])
	}
	ids := func(out string) string {
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if i := strings.Index(l, `"id":"`); i >= 0 {
				got = append(got, l[i+6:i+6+strings.IndexByte(l[i+6:], '"')])
			}
		}
		return strings.Join(got, " ")
	}
	for _, c := range []struct {
		args    []string
		code    int
		errWant string
	}{
		{[]string{"redrive", "--all", "--group", "nosuch"}, 2, "not_found: group: no group \"nosuch\""},
		{[]string{"expedite", "--all", "--group", "nosuch"}, 2, "not_found: group: no group \"nosuch\""},
		{[]string{"redrive", "--all", "--group", "ac\tme"}, 2, "invalid_input: group:"},
		{[]string{"redrive", "--id", "a1", "--expected-generation", "1", "--group", "acme"}, 2, "invalid_input: group: narrows --all only"},
		{[]string{"expedite", "--id", "c1", "--expected-generation", "1", "--group", "acme"}, 2, "invalid_input: group: narrows --all only"},
		{[]string{"redrive", "--all", "--group", "acme", "--flow", "b"}, 1, "no quarantined head matched"},
	} {
		args := append(append([]string{}, c.args...), "--queue", q, "--reason", "endpoint fixed")
		out, errOut, code := cli(t, "", args...)
		if code != c.code || !strings.Contains(errOut, c.errWant) || ids(out) != "" {
			t.Errorf("%v: exit %d, %q, %q; want exit %d, %q, nothing acted on", c.args, code, out, errOut, c.code, c.errWant)
		}
	}
	run := func(args ...string) string {
		t.Helper()
		out, errOut, code := cli(t, "", append(args, "--queue", q, "--reason", "endpoint fixed")...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s%s", args, code, out, errOut)
		}
		return ids(out)
	}
	if got := run("redrive", "--all", "--group", "acme"); got != "a1" {
		t.Errorf("redrive --all --group acme acted on %q, want a1", got)
	}
	if got := run("expedite", "--all", "--group", "acme"); got != "c1" {
		t.Errorf("expedite --all --group acme acted on %q, want c1", got)
	}
	if got := run("redrive", "--all", "--group", "e"); got != "e1" {
		t.Errorf("redrive --all --group e (flow e's own group) acted on %q, want e1", got)
	}
	// beta's heads are as they were: b1 quarantined, d1 backing off
	// until the tick its retry set.
	after := headsOf(t, q)
	if after["b"].State != fairrelay.StateQuarantined || after["d"].NextAt == nil || *after["d"].NextAt != *before["d"].NextAt {
		t.Errorf("beta's heads changed: b %+v, d %+v (d's next_at was %d)", after["b"], after["d"], *before["d"].NextAt)
	}
}

// headsOf reads each flow's head of the SQLite store at path.
func headsOf(t *testing.T, path string) map[string]fairrelay.EventState {
	t.Helper()
	q, err := fairrelay.Open(context.Background(), path, fairrelay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	hs, err := q.Heads(context.Background(), "", 100)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]fairrelay.EventState{}
	for _, h := range hs {
		if h.Head != nil {
			out[h.Flow] = *h.Head
		}
	}
	return out
}
