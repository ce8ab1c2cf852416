// Package brokertest gives the broker sinks' tests real brokers: the shared
// NATS JetStream and RabbitMQ servers of the machine, NATS servers of the
// test's own, fresh names for streams, exchanges and queues, and the
// scenarios every broker sink must pass (a relay over the broker into an
// inbox). When a shared broker is unreachable, tests fail under CI=true and
// skip, saying why, otherwise — as internal/pgtest does for PostgreSQL.
package brokertest

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/url"
	"os"
	"testing"
	"time"
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
// skips it elsewhere.
func NATS(t testing.TB) string { return reachable(t, "NATS", NATSEnv, DefaultNATS) }

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
