package pgtest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PgBouncer starts a PgBouncer (the pgbouncer program, Debian's package of
// that name) in poolMode ("session" or "transaction") in front of URL(t)'s
// server, on a free loopback port, with trust authentication for URL(t)'s
// user, and returns dsn (a URL of URL(t)'s server, schema=NAME and all)
// pointing at it instead. It stops when the test ends. Without the
// program it fails the test under CI=true and skips it elsewhere.
// settings are more lines of its [pgbouncer] section ("default_pool_size =
// 1"). Run as
// root, it runs as nobody: PgBouncer refuses to run as root.
func PgBouncer(t testing.TB, dsn, poolMode string, settings ...string) string {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("pgbouncer is missing under CI=true: install it (apt-get install -y pgbouncer): %v", err)
		}
		t.Skipf("pgbouncer is missing (apt-get install -y pgbouncer): %v", err)
	}
	server, err := url.Parse(URL(t))
	if err != nil {
		t.Fatal(err)
	}
	user := server.User.Username()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := t.TempDir()
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
auth_type = trust
auth_file = %s
pool_mode = %s
unix_socket_dir =
%s
`, server.Hostname(), server.Port(), port, filepath.Join(dir, "users.txt"), poolMode, strings.Join(settings, "\n"))
	if err := os.WriteFile(filepath.Join(dir, "pgbouncer.ini"), []byte(ini), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "users.txt"), []byte(fmt.Sprintf("%q \"\"\n", user)), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{filepath.Join(dir, "pgbouncer.ini")}
	if os.Geteuid() == 0 {
		args = append([]string{"-u", "nobody"}, args...) // it reads its files before it drops root
	}
	cmd := exec.Command(bin, args...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = net.JoinHostPort("127.0.0.1", fmt.Sprint(port))
	ready := *server // without dsn's schema=, which is no server setting
	ready.Host = u.Host
	// Ready when a connection through it answers; bounded, and ended at
	// once when the program exits.
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, ready.String())
		if err == nil {
			err = conn.Ping(ctx)
			conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return u.String()
		}
		select {
		case werr := <-exited:
			exited <- werr
			t.Fatalf("pgbouncer exited (%v):\n%s", werr, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgbouncer did not answer in 20s: %v\n%s", err, out.String())
		}
		time.Sleep(50 * time.Millisecond) // a poll for a program's start, not synchronisation between the test's own parts
	}
}
