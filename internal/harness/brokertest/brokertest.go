// Package brokertest gives the broker sinks' tests real brokers: the shared
// NATS JetStream and RabbitMQ servers of the machine, NATS servers of the
// test's own, fresh names for streams, exchanges and queues, and the
// scenarios every broker sink must pass (a relay over the broker into an
// inbox). When a shared broker is unreachable, tests fail under CI=true and
// skip, saying why, otherwise — as internal/pgtest does for PostgreSQL.
package brokertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"
)

// The shared brokers, and the environment variables that name others.
const (
	// DefaultNATS is the NATS server with JetStream the tests use when
	// NATSEnv is not set.
	DefaultNATS = "nats://127.0.0.1:4222"
	// NATSEnv names another NATS server (a nats:// URL).
	NATSEnv = "FAIRRELAY_NATS_URL"
	// DefaultAMQP is the RabbitMQ server the tests use when AMQPEnv is
	// not set; its user is guest, password guest (AMQPUser, AMQPPassword).
	DefaultAMQP = "amqp://127.0.0.1:5672/"
	// AMQPEnv names another RabbitMQ (an amqp:// URL without credentials).
	AMQPEnv = "FAIRRELAY_AMQP_URL"
)

// AMQPUser and AMQPPassword log in to the shared RabbitMQ (its default
// account, which RabbitMQ accepts from loopback only).
const (
	AMQPUser     = "guest"
	AMQPPassword = "guest"
)

// NATS returns the shared NATS server's URL after checking that it accepts
// a TCP connection within 3s; otherwise it fails the test under CI=true and
// skips it elsewhere. It also makes sure the server holds the anchor stream
// (AnchorStream) before any test creates or deletes a stream of its own.
func NATS(t testing.TB) string {
	t.Helper()
	u := reachable(t, "NATS", NATSEnv, DefaultNATS)
	anchor.once.Do(func() { anchor.err = ensureAnchor(u) })
	if anchor.err != nil {
		t.Fatalf("NATS at %s: anchor stream %s: %v", u, AnchorStream, anchor.err)
	}
	return u
}

// AnchorStream is a file-backed stream the tests leave on the shared NATS
// server for good. nats-server 2.9 removes an account's store directory
// when its last stream is deleted, and a stream created at that moment
// fails with "error creating store for stream: mkdir …/$G/streams: no such
// file or directory"; test packages run in parallel and each deletes the
// streams it made, so without a stream that outlives them all that race
// failed a test now and then. With the anchor in place the directory is
// never empty. It captures a subject nothing publishes to and keeps at most
// one message.
const AnchorStream = "FAIRRELAY_TEST_ANCHOR"

var anchor struct {
	once sync.Once
	err  error
}

func ensureAnchor(u string) error {
	nc, err := nats.Connect(u, nats.Name("fairrelay-test-anchor"), nats.Timeout(5*time.Second))
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer nc.Close()
	j, err := js.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = j.CreateOrUpdateStream(ctx, js.StreamConfig{Name: AnchorStream,
		Subjects: []string{"fairrelay-test-anchor.>"}, Storage: js.FileStorage, MaxMsgs: 1})
	return err
}

// AMQP returns the shared RabbitMQ server's URL (no credentials in it) as
// NATS does.
func AMQP(t testing.TB) string { return reachable(t, "RabbitMQ", AMQPEnv, DefaultAMQP) }

func reachable(t testing.TB, name, env, def string) string {
	t.Helper()
	raw := os.Getenv(env)
	if raw == "" {
		raw = def
	}
	u, err := url.Parse(raw)
	if err == nil {
		var c net.Conn
		if c, err = net.DialTimeout("tcp", u.Host, 3*time.Second); err == nil {
			c.Close()
			return raw
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s at %s is unreachable under CI=true: %v", name, raw, err)
	}
	t.Skipf("%s at %s is unreachable (set %s to point at one): %v", name, raw, env, err)
	return ""
}

// Name returns prefix followed by 12 random hex digits: a stream, exchange
// or queue name no other test on the shared broker uses.
func Name(prefix string) string {
	var b [6]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
