package main

import (
	"bufio"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/fairrelay/fairrelay/sink/webhook"
)

// A receiver stopped by a signal while a client is still sending its body
// cuts that request off once --shutdown-timeout has passed, says so, and
// exits 0 as any stop by a signal (docs/cli.md): it exited 2 with a bare
// "shutdown: context deadline exceeded", a failed stop to a supervisor for
// whatever any client that reaches the port does (an SRE's report).
func TestReceiveStoppedBesideASlowClientExitsZero(t *testing.T) {
	t.Parallel()
	d, addr := startReceiver(t, filepath.Join(t.TempDir(), "inbox.db"), "--shutdown-timeout", "300ms")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Expect: 100-continue: the server answers 100 once the handler reads
	// the body, so the request is in flight when the signal comes.
	fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\nExpect: 100-continue\r\n%s: %s\r\n\r\n",
		addr, webhook.HeaderID, webhook.MessageID("T1", "T", 1))
	status, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || !strings.Contains(status, "100") {
		t.Fatalf("the receiver answered %q (%v), want 100 Continue", status, err)
	}
	conn.Write([]byte(`{"delta":`)) // and nothing more
	if code := d.signal(t, syscall.SIGTERM); code != 0 {
		t.Errorf("receive exited %d beside a slow client, want 0; stderr:\n%s", code, d.stderr())
	}
	if d.line("requests still open after the grace were cut off") == "" {
		t.Errorf("no warning of the request cut off; stderr:\n%s", d.stderr())
	}
}
