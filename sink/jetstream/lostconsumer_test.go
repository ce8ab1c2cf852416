package jetstream_test

import (
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/fairrelay/fairrelay/consume"
	"github.com/fairrelay/fairrelay/internal/harness/brokertest"
	"github.com/fairrelay/fairrelay/sink/jetstream"
)

// cutter is a TCP proxy on loopback whose connections can be cut, and
// new ones refused, until it is restored.
type cutter struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  []net.Conn
}

func newCutter(t *testing.T, target string) *cutter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &cutter{ln: ln, target: target}
	go func() {
		for {
			a, err := ln.Accept()
			if err != nil {
				return
			}
			c.mu.Lock()
			refused := c.cut
			c.mu.Unlock()
			if refused {
				a.Close()
				continue
			}
			b, err := net.Dial("tcp", target)
			if err != nil {
				a.Close()
				continue
			}
			c.mu.Lock()
			c.conns = append(c.conns, a, b)
			c.mu.Unlock()
			go func() { io.Copy(a, b); a.Close() }()
			go func() { io.Copy(b, a); b.Close() }()
		}
	}()
	t.Cleanup(func() { ln.Close(); c.set(true) })
	return c
}

// set cuts every connection and refuses new ones (true), or takes new
// ones again (false).
func (c *cutter) set(cut bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut = cut
	if cut {
		for _, n := range c.conns {
			n.Close()
		}
		c.conns = nil
	}
}

// A durable consumer deleted while the consumer's connection was down
// sends it no notice: Consume pulled from a consumer that no longer
// existed and waited for ever while its stream filled (a breaker's report:
// a server that came back without it). It now ends with an error naming
// the consumer, as for a deletion seen while connected.
func TestConsumeEndsWhenItsConsumerWentAwayWhileDisconnected(t *testing.T) {
	t.Parallel()
	direct := connect(t, brokertest.NATS(t), jetstream.Credentials{})
	name := strings.ToUpper(brokertest.Name("lost"))
	stream(t, direct, name, strings.ToLower(name), js.StreamConfig{})
	proxy := newCutter(t, strings.TrimPrefix(brokertest.NATS(t), "nats://"))
	nc := connect(t, "nats://"+proxy.ln.Addr().String(), jetstream.Credentials{})
	in := brokertest.OpenInbox(t)
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- jetstream.Consume(t.Context(), jetstream.ConsumerOptions{Conn: nc, Stream: name, Durable: "d", Ready: func() { close(ready) }},
			consume.Options{Inbox: in})
	}()
	<-ready
	down := make(chan struct{}, 1)
	nc.SetDisconnectErrHandler(func(*nats.Conn, error) {
		select {
		case down <- struct{}{}:
		default:
		}
	})
	proxy.set(true) // the consumer's connection is down
	<-down
	j, err := js.New(direct)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.DeleteConsumer(t.Context(), name, "d"); err != nil {
		t.Fatal(err)
	}
	proxy.set(false) // back, without its consumer
	select {
	case err := <-done:
		if err == nil || !errors.Is(err, js.ErrConsumerNotFound) || !strings.Contains(err.Error(), "consumer d on "+name+" is gone") {
			t.Fatalf("Consume returned %v, want the consumer's absence", err)
		}
	case <-time.After(time.Minute): // a bound for the failure, far past the 5 s check
		t.Fatal("a minute after the connection came back without its consumer, Consume still waited")
	}
}
