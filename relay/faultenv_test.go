package relay_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	_ "modernc.org/sqlite" // the driver of the store's own files
)

// The environments of the fault tests: a PostgreSQL cluster the test may
// stop and start (the small file system they fill and empty is
// disktest.SmallDisk).

// pgCluster is a PostgreSQL cluster of the test's own, on a loopback port,
// that the test may stop and start; it is removed when the test ends.
type pgCluster struct {
	bin, dir, data string
	port           int
	asPostgres     bool // run the server programs as the postgres user
	url            string
}

// privateCluster creates and starts a cluster with initdb and pg_ctl (the
// newest under /usr/lib/postgresql/*/bin), trusting local connections of
// user postgres. They refuse to run as root: as root it runs them as the
// postgres user (runuser), in a directory it gives that user. Without the
// server programs (a machine that reaches PostgreSQL over the network
// only) the test skips, saying so; when they are there but the cluster
// cannot be made, it skips too, saying why — or fails under CI=true, as
// the other PostgreSQL tests do.
func privateCluster(t *testing.T) *pgCluster {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(bins) == 0 {
		t.Skip("no private PostgreSQL cluster: no server programs under /usr/lib/postgresql/*/bin")
	}
	slices.Sort(bins)
	c := &pgCluster{bin: filepath.Dir(bins[len(bins)-1])}
	var err error
	if c.dir, err = os.MkdirTemp("", "fairrelay-pg-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(c.dir) })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			pgUnavailable(t, "running as root, and no postgres user to run the server as: "+err.Error())
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(c.dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		c.asPostgres = true
	}
	c.data = filepath.Join(c.dir, "data")
	if out, err := c.command("initdb", "-D", c.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		pgUnavailable(t, fmt.Sprintf("initdb: %v\n%s", err, out))
	}
	c.port = freePort(t)
	c.url = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
	c.start(t)
	t.Cleanup(func() { c.command("pg_ctl", "-D", c.data, "-m", "immediate", "-w", "stop").Run() })
	return c
}

func (c *pgCluster) command(name string, args ...string) *exec.Cmd {
	path := filepath.Join(c.bin, name)
	if c.asPostgres {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	}
	return exec.Command(path, args...)
}

// start starts the server and waits until it takes connections.
func (c *pgCluster) start(t *testing.T) {
	t.Helper()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1", c.port, c.dir)
	if out, err := c.command("pg_ctl", "-D", c.data, "-l", filepath.Join(c.dir, "server.log"), "-o", opts, "-w", "-t", "60", "start").CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(c.dir, "server.log"))
		t.Fatalf("pg_ctl start: %v\n%s\n%s", err, out, log)
	}
}

// stop stops the server with a fast shutdown (every session is
// disconnected) and waits until it is down.
func (c *pgCluster) stop(t *testing.T) {
	t.Helper()
	if out, err := c.command("pg_ctl", "-D", c.data, "-m", "fast", "-w", "-t", "60", "stop").CombinedOutput(); err != nil {
		t.Fatalf("pg_ctl stop: %v\n%s", err, out)
	}
}

// pgUnavailable skips the test, or fails it under CI=true.
func pgUnavailable(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("a private PostgreSQL cluster is needed under CI=true: %s", why)
	}
	t.Skipf("no private PostgreSQL cluster: %s", why)
}

// freePort returns a TCP port free on the loopback interface just now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
