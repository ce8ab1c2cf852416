package relay_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/relay"
)

// freezer is a TCP proxy on loopback to the PostgreSQL server that can
// stop forwarding while it keeps every connection open: a server that
// stops answering, or a partition without a reset.
type freezer struct {
	ln     net.Listener
	mu     sync.Mutex
	frozen bool
	cond   *sync.Cond
	conns  []net.Conn
	// afterCommit, when set, freezes the proxy right after it forwarded
	// a client's COMMIT to the server, and is closed then.
	afterCommit chan struct{}
}

func newFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{ln: ln}
	f.cond = sync.NewCond(&f.mu)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, c, s)
			f.mu.Unlock()
			go f.pipe(s, c, true)
			go f.pipe(c, s, false)
		}
	}()
	t.Cleanup(func() {
		f.freeze(false)
		ln.Close()
		f.mu.Lock()
		for _, c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
	})
	return f
}

func (f *freezer) pipe(dst, src net.Conn, toServer bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			f.mu.Lock()
			for f.frozen {
				f.cond.Wait()
			}
			f.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			if toServer && bytes.Contains(buf[:n], []byte("\x00COMMIT\x00")) {
				f.mu.Lock()
				if f.afterCommit != nil {
					f.frozen = true
					close(f.afterCommit)
					f.afterCommit = nil
				}
				f.mu.Unlock()
			}
		}
		if err != nil {
			if err != io.EOF {
				dst.Close()
			}
			dst.Close()
			return
		}
	}
}

func (f *freezer) freeze(v bool) {
	f.mu.Lock()
	f.frozen = v
	f.mu.Unlock()
	f.cond.Broadcast()
}

// via is dsn through the proxy.
func (f *freezer) via(t *testing.T, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = f.ln.Addr().String()
	return u.String()
}

// A relay told to stop while its store does not answer returns once a
// lease has passed after its shutdown deadline: its settles and claims ran
// on a ctx nothing cancelled, and Run waited for the store as long as the
// connections' TCP keepalive took, tens of minutes (a breaker's report).
// The settle it cut off was never sent: the event waits out its lease.
func TestRunReturnsWhileTheStoreDoesNotAnswer(t *testing.T) {
	t.Parallel()
	direct, proxy := frozenSchema(t, "frstorehang")
	cancel, done, release := runDelivering(t, proxy.via(t, direct))
	proxy.freeze(true) // the server stops answering
	close(release)     // the delivery ends; its settle goes to a silent server
	cancel()
	if err := proxy.waitRun(t, done, "(lease 2 s, shutdown timeout 200 ms) while the store did not answer"); err != nil {
		t.Errorf("Run: %v, want nil", err)
	}
}

// The same with the server silent right after a COMMIT was sent: the
// commit runs on past its caller's ctx for commitGrace (10 s), so that a
// slow flush still answers, and then gives up; Run returns. A reviewer
// found Run waiting for ever: the relay's store calls have no deadline,
// and the commit then ran on without one.
func TestRunReturnsWhileTheStoreDoesNotAnswerACommit(t *testing.T) {
	t.Parallel()
	direct, proxy := frozenSchema(t, "frcommithang")
	pu, err := url.Parse(proxy.via(t, direct))
	if err != nil {
		t.Fatal(err)
	}
	q := pu.Query()
	q.Set("default_query_exec_mode", "exec") // COMMIT's text on the wire each time
	pu.RawQuery = q.Encode()
	cancel, done, release := runDelivering(t, pu.String())
	froze := make(chan struct{})
	proxy.mu.Lock()
	proxy.afterCommit = froze // the next COMMIT sent, the server goes silent
	proxy.mu.Unlock()
	close(release) // the delivery ends; its settle's COMMIT goes out
	<-froze
	cancel()
	proxy.waitRun(t, done, "while the store did not answer a COMMIT")
}

// frozenSchema is a fresh schema of the tests' server (its URL) and a
// freezer in front of that server.
func frozenSchema(t *testing.T, prefix string) (direct string, proxy *freezer) {
	t.Helper()
	direct = pgtest.Schema(t, prefix)
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	return direct, newFreezer(t, u.Host)
}

// waitRun waits for Run's answer on done, after its ctx was cancelled,
// and returns it; the server answers again afterwards (for the cleanups).
// A minute without one — far past lease, shutdown deadline and commit
// grace — fails the test, saying what (why) the store was doing.
func (f *freezer) waitRun(t *testing.T, done chan error, why string) error {
	t.Helper()
	stopped := time.Now()
	defer f.freeze(false)
	select {
	case err := <-done:
		t.Logf("Run returned %v after %s", err, time.Since(stopped))
		return err
	case <-time.After(time.Minute):
		t.Fatalf("Run did not return within a minute of its ctx ending %s", why)
		return nil
	}
}

// runDelivering starts a relay (lease 2 s on the system's clock, shutdown
// deadline 200 ms) on the store at dsn with one event, and returns once
// its delivery has reached the receiver, which holds it until release is
// closed; cancel stops Run, whose answer comes on done.
func runDelivering(t *testing.T, dsn string) (cancel context.CancelFunc, done chan error, release chan struct{}) {
	t.Helper()
	h := newHarnessOn(t, testPolicy(), dsn, t.TempDir()+"/inbox.db")
	arrived, release := blockFirst(h, "A1")
	h.enqueue(t, "A", 1)
	cfg := h.config(t)
	cfg.Source = nil // the system's clock: the lease (2 s) runs in real time
	cfg.ShutdownTimeout = 200 * time.Millisecond
	cfg.MaxRetryWait = 100 * time.Millisecond
	r, err := relay.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done = make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	waitClosed(t, arrived)
	return cancel, done, release
}
