package brokertest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// NATSBinary is the nats-server the tests start (Debian's package).
const NATSBinary = "/usr/sbin/nats-server"

// NATSServer is a nats-server process of the test's own, with JetStream
// storing in a temporary directory, on a free loopback port. Stop and Start
// restart it on the same port and directory (the streams survive).
type NATSServer struct {
	Port   int
	dir    string
	config string
	cmd    *exec.Cmd
	exited chan error // cmd's Wait result
	log    string
}

// StartNATS starts a server; config, when not empty, is the text of a
// configuration file given with -c (its listen and store settings are
// overridden). The server is killed when the test ends. Under CI=true a
// missing binary fails the test; elsewhere it skips.
func StartNATS(t testing.TB, config string) *NATSServer {
	t.Helper()
	if _, err := os.Stat(NATSBinary); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing under CI=true: %v", NATSBinary, err)
		}
		t.Skipf("%s is missing (apt-get install nats-server): %v", NATSBinary, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &NATSServer{Port: ln.Addr().(*net.TCPAddr).Port, dir: t.TempDir()}
	ln.Close()
	s.log = filepath.Join(s.dir, "server.log")
	if config != "" {
		s.config = filepath.Join(s.dir, "server.conf")
		if err := os.WriteFile(s.config, []byte(config), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if s.cmd != nil {
			s.cmd.Process.Kill()
			<-s.exited
		}
	})
	s.Start(t)
	return s
}

// URL is the server's nats:// URL.
func (s *NATSServer) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.Port) }

// Start starts the server (again) and waits up to 10s until it accepts
// connections.
func (s *NATSServer) Start(t testing.TB) {
	t.Helper()
	args := []string{"-a", "127.0.0.1", "-p", strconv.Itoa(s.Port), "-js", "-sd", filepath.Join(s.dir, "js"), "-l", s.log}
	if s.config != "" {
		args = append(args, "-c", s.config)
	}
	s.cmd = exec.Command(NATSBinary, args...)
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- s.cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-exited:
			log, _ := os.ReadFile(s.log)
			s.cmd = nil
			t.Fatalf("nats-server exited at start: %v\n%s", err, log)
		default:
		}
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.Port), time.Second); err == nil {
			c.Close()
			s.exited = exited
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server on port %d did not accept connections within 10s", s.Port)
		}
		time.Sleep(20 * time.Millisecond) // polling another process's port, not synchronising
	}
}

// Stop stops the server with SIGTERM (a clean shutdown that keeps the
// streams on disk) and waits for it to exit.
func (s *NATSServer) Stop(t testing.TB) {
	t.Helper()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(15 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
	s.cmd = nil
}
