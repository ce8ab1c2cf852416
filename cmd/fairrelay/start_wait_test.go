package main

import (
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/fairrelay/fairrelay/internal/pgtest"
)

// relay, receive and console whose store's database server cannot be
// reached at start wait for it, as a running daemon does, instead of exiting 2 into a
// supervisor's crash loop; meanwhile /healthz answers 200 and /readyz 503
// "starting" (both hung until the start ended: an SRE's report), and a
// signal stops the wait with exit 0.
func TestDaemonsWaitForAnUnreachableStoreAtStart(t *testing.T) {
	t.Parallel()
	const unreachable = "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2&schema=fr_nowhere"
	for _, c := range []struct {
		name string
		args []string
	}{
		{"relay", []string{"relay", "--queue", unreachable, "--sink", "http://127.0.0.1:1/"}},
		{"receive", []string{"receive", "--inbox", unreachable, "--addr", "127.0.0.1:0"}},
		{"console", []string{"console", "--queue", unreachable, "--addr", "127.0.0.1:0"}}, // it serves no probes
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			metrics := ""
			if c.name != "console" {
				metrics = freeAddr(t)
				c.args = append(c.args, "--metrics-addr", metrics)
			}
			cmd, stderr, exited := startDaemon(t, c.args...)
			waitStderr(t, stderr, c.name+": the store does not answer yet; trying again until it does")
			if metrics != "" {
				if code, body := get(t, "http://"+metrics+"/healthz"); code != http.StatusOK {
					t.Errorf("/healthz while waiting for the store: %d %s, want 200", code, body)
				}
				if code, body := get(t, "http://"+metrics+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "starting") {
					t.Errorf("/readyz while waiting for the store: %d %s, want 503 starting", code, body)
				}
			}
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if code := <-exited; code != 0 || !strings.Contains(stderr.String(), `msg="stopped before it started" command=`+c.name) {
				t.Errorf("SIGTERM while waiting for the store: exit %d, want 0 and a stop before the start:\n%s", code, stderr.String())
			}
		})
	}
}

// A relay that starts while its PostgreSQL store is locked (a migration or
// a VACUUM FULL holding the flow table) waits for the lock and starts once
// it is gone; it exited 2 on the lock timeout's busy (an SRE's report).
func TestRelayWaitsForALockedStoreAtStart(t *testing.T) {
	t.Parallel()
	dsn := pgtest.Schema(t, "frstartlock")
	if out, errOut, code := cli(t, "", "migrate", "--queue", dsn); code != 0 {
		t.Fatalf("migrate: exit %d: %s%s", code, out, errOut)
	}
	release := pgtest.LockTable(t, dsn, "flow")
	cmd, stderr, exited := startDaemon(t, "relay", "--queue", dsn, "--sink", "http://127.0.0.1:1/")
	waitStderr(t, stderr, "relay: the store does not answer yet; trying again until it does")
	release()
	waitStderr(t, stderr, "relay: started")
	if !strings.Contains(stderr.String(), "relay: the store answers") {
		t.Errorf("the relay did not say the store answers after its wait:\n%s", stderr.String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := <-exited; code != 0 {
		t.Errorf("SIGTERM: exit %d:\n%s", code, stderr.String())
	}
}

// The daemons name their PostgreSQL connections by command unless the URL
// names them: relays, receivers and consoles all showed as "fairrelay" in
// pg_stat_activity, so an operator's query that terminated one kind's
// connections hit the others' too (an SRE's report).
func TestDaemonsNameTheirConnections(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"queue.db":                              "queue.db",
		"postgres://h/db":                       "postgres://h/db?application_name=fairrelay%20relay",
		"postgres://h/db?schema=s":              "postgres://h/db?schema=s&application_name=fairrelay%20relay",
		"postgres://h/db?Application_Name=mine": "postgres://h/db?Application_Name=mine",
	} {
		if got := namedFor(in, "relay"); got != want {
			t.Errorf("namedFor(%q) = %q, want %q", in, got, want)
		}
	}
	dsn := pgtest.Schema(t, "frappname")
	if out, errOut, code := cli(t, "", "migrate", "--queue", dsn); code != 0 {
		t.Fatalf("migrate: exit %d: %s%s", code, out, errOut)
	}
	cmd, stderr, exited := startDaemon(t, "relay", "--queue", dsn, "--sink", "http://127.0.0.1:1/")
	waitStderr(t, stderr, "relay: started")
	var n int
	pgtest.QueryRow(t, pgtest.URL(t), `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'fairrelay relay'`, &n)
	if n == 0 {
		t.Errorf("no connection named 'fairrelay relay' while a relay runs")
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := <-exited; code != 0 {
		t.Errorf("SIGTERM: exit %d:\n%s", code, stderr.String())
	}
}

// A relay whose store's connection fails midway while it opens the store
// (the server crashing, a network reset: the connection made, then cut at
// its first query) waits and starts once the connection holds; it exited 2
// with invalid_input "queue: cannot open: … connection reset by peer" (a
// breaker's report).
func TestRelayWaitsForAConnectionCutWhileItOpens(t *testing.T) {
	t.Parallel()
	dsn := pgtest.Schema(t, "frstartcut")
	if out, errOut, code := cli(t, "", "migrate", "--queue", dsn); code != 0 {
		t.Fatalf("migrate: exit %d: %s%s", code, out, errOut)
	}
	proxy, via := pgtest.NewCutProxy(t, dsn)
	proxy.Arm(true)
	cmd, stderr, exited := startDaemon(t, "relay", "--queue", via, "--sink", "http://127.0.0.1:1/")
	waitStderr(t, stderr, "relay: the store does not answer yet; trying again until it does")
	proxy.Arm(false)
	waitStderr(t, stderr, "relay: started")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := <-exited; code != 0 {
		t.Errorf("SIGTERM: exit %d:\n%s", code, stderr.String())
	}
}
