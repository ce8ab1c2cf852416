package amqp_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/consume"
	"github.com/fairrelay/fairrelay/internal/harness/brokertest"
	"github.com/fairrelay/fairrelay/sink"
	"github.com/fairrelay/fairrelay/sink/amqp"
)

var guest = amqp.Credentials{User: brokertest.AMQPUser, Password: brokertest.AMQPPassword}

// dialer returns a Dialer to the shared RabbitMQ whose connections are all
// named name.
func dialer(t testing.TB, name string) amqp.Dialer {
	t.Helper()
	return amqp.Endpoint{Server: brokertest.AMQP(t)}.Dialer(name, guest)
}

// admin opens a channel for the test's own declarations.
func admin(t testing.TB) *amqp091.Channel {
	t.Helper()
	conn, err := dialer(t, "fairrelay-test-admin")()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// exchange declares a durable topic exchange and deletes it when the test
// ends.
func exchange(t testing.TB, name string) {
	t.Helper()
	ch := admin(t)
	if err := ch.ExchangeDeclare(name, "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := admin(t).ExchangeDelete(name, false, false); err != nil {
			t.Errorf("delete exchange %s: %v", name, err)
		}
	})
}

// deleteQueueAtEnd deletes the queue when the test ends (registered before
// the consumer starts, so it runs after the consumer stopped).
func deleteQueueAtEnd(t testing.TB, name string) {
	t.Cleanup(func() {
		if _, err := admin(t).QueueDelete(name, false, false, false); err != nil {
			t.Errorf("delete queue %s: %v", name, err)
		}
	})
}

func newSink(t testing.TB, opts amqp.Options) *amqp.Sink {
	t.Helper()
	s, err := amqp.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// rig makes fresh rigs on the shared RabbitMQ: an exchange and a queue of
// their own, the sink publishing to the exchange, a consumer of the queue.
// Every connection of a rig is named after it (rigName), for
// rabbitmqctl close_connection.
func rig(t *testing.T) brokertest.Rig {
	exch, queue, name := brokertest.Name("fr-x-"), brokertest.Name("fr-q-"), brokertest.Name("fairrelay-test-")
	exchange(t, exch)
	// Bound before the first publish, which would be unroutable otherwise;
	// the consumer declares the same again.
	ch := admin(t)
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	deleteQueueAtEnd(t, queue)
	if err := ch.QueueBind(queue, "fr.*", exch, false, nil); err != nil {
		t.Fatal(err)
	}
	rigNames.Store(t.Name(), name)
	s := newSink(t, amqp.Options{Dial: dialer(t, name+"/relay"), Exchange: exch, RoutingKey: "fr.{flow}", Timeout: 5 * time.Second, Channels: 16})
	return brokertest.Rig{Sink: s, Consume: func(ctx context.Context, opts consume.Options) error {
		return amqp.Consume(ctx, amqp.ConsumerOptions{Dial: dialer(t, name+"/consumer"), Queue: queue, Exchange: exch, BindingKey: "fr.*"}, opts)
	}}
}

// rigNames maps a test to its rig's connection name; the conformance
// suite's subtests make their rigs in parallel.
var rigNames sync.Map // test name → string

func TestConformance(t *testing.T) {
	brokertest.RunConformance(t, rig)
}

func TestSlowFlowsDoNotHoldUpAnOrderedFlow(t *testing.T) {
	t.Parallel()
	brokertest.SlowFlows(t, rig)
}

// The server closes the relay's and the consumer's connections mid-run
// (rabbitmqctl close_connection): both open new ones, and every event ends
// applied once.
func TestConnectionsClosedByServer(t *testing.T) {
	var name string
	var closed []string
	brokertest.Outage(t, func(t *testing.T) brokertest.Rig {
		r := rig(t)
		v, _ := rigNames.Load(t.Name())
		name = v.(string)
		return r
	}, func(t *testing.T) {
		closed = connections(t, name)
		if len(closed) != 2 {
			t.Fatalf("found %d connections named %s*, want the sink's and the consumer's", len(closed), name)
		}
		for _, pid := range closed {
			out, err := exec.Command("rabbitmqctl", "close_connection", pid, "fairrelay test: closed mid-run").CombinedOutput()
			if err != nil {
				t.Fatalf("rabbitmqctl close_connection %s: %v\n%s", pid, err, out)
			}
		}
	}, nil)
	// The relay delivered the second half, and the consumer applied it, on
	// connections of their own making.
	fresh := connections(t, name)
	if len(fresh) != 2 || slices.ContainsFunc(fresh, func(p string) bool { return slices.Contains(closed, p) }) {
		t.Fatalf("the connections named %s* are %v, after %v were closed: want two new ones", name, fresh, closed)
	}
}

// connections lists the pids of the open connections whose name starts
// with name, from
// rabbitmqctl's tab-separated listing (pid, then the client properties).
func connections(t *testing.T, name string) []string {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", "list_connections", "pid", "client_properties", "-q").Output()
	if err != nil {
		if os.Getenv("CI") != "true" {
			t.Skipf("rabbitmqctl list_connections: %v", err)
		}
		t.Fatalf("rabbitmqctl list_connections: %v", err)
	}
	var pids []string
	for _, line := range strings.Split(string(out), "\n") {
		pid, props, ok := strings.Cut(line, "\t")
		if ok && strings.Contains(props, `"`+name) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// An exchange that does not exist: the head is quarantined after one
// delivery, with the broker's words.
func TestMissingExchangeQuarantines(t *testing.T) {
	t.Parallel()
	s := newSink(t, amqp.Options{Dial: dialer(t, "fairrelay-test"), Exchange: brokertest.Name("fr-missing-")})
	brokertest.Quarantines(t, s, "NOT_FOUND - no exchange")
}

// An exchange with no queue bound for the key: mandatory makes the broker
// return the message, and the head is quarantined.
func TestUnroutableQuarantines(t *testing.T) {
	t.Parallel()
	exch := brokertest.Name("fr-x-")
	exchange(t, exch)
	s := newSink(t, amqp.Options{Dial: dialer(t, "fairrelay-test"), Exchange: exch})
	brokertest.Quarantines(t, s, "NO_ROUTE")
}

// What arrives: the routing key with the flow's token, the body byte for
// byte, message_id and the Fairrelay-* headers, persistent.
func TestMessage(t *testing.T) {
	t.Parallel()
	exch, queue := brokertest.Name("fr-x-"), brokertest.Name("fr-q-")
	exchange(t, exch)
	ch := admin(t)
	if _, err := ch.QueueDeclare(queue, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	deleteQueueAtEnd(t, queue)
	if err := ch.QueueBind(queue, "fr.#", exch, false, nil); err != nil {
		t.Fatal(err)
	}
	s := newSink(t, amqp.Options{Dial: dialer(t, "fairrelay-test"), Exchange: exch, RoutingKey: "fr.{flow}.v1"})
	body := []byte("{ \"delta\": 1, \"x\": \"\u00e9\" }")
	res, err := s.Deliver(t.Context(), sink.Delivery{EventID: "evt-1", Flow: "orders/eu.7", Seq: 4, Generation: 3, Attempt: 2, Body: body})
	if err != nil || res.Outcome != fairrelay.OutcomeAccepted {
		t.Fatalf("deliver: %q (%s) %v", res.Outcome, res.Detail, err)
	}
	m, ok, err := ch.Get(queue, true)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if m.RoutingKey != "fr.orders%2Feu%2E7.v1" || m.MessageId != "evt-1" || m.DeliveryMode != amqp091.Persistent || m.ContentType != "application/json" {
		t.Errorf("routing key %q, message id %q, delivery mode %d, content type %q", m.RoutingKey, m.MessageId, m.DeliveryMode, m.ContentType)
	}
	if !bytes.Equal(m.Body, body) {
		t.Errorf("body %q, want %q", m.Body, body)
	}
	for k, v := range map[string]string{"Fairrelay-Flow": "orders/eu.7", "Fairrelay-Seq": "4", "Fairrelay-Generation": "3", "Fairrelay-Attempt": "2"} {
		if got := m.Headers[k]; got != v {
			t.Errorf("header %s: %v, want %q", k, got, v)
		}
	}
}

// A broker that cannot be reached is an error (transient), not an outcome.
func TestUnreachableIsTransient(t *testing.T) {
	t.Parallel()
	e, err := amqp.ParseEndpoint("sink", "amqp://127.0.0.1:1/")
	if err != nil {
		t.Fatal(err)
	}
	s := newSink(t, amqp.Options{Dial: e.Dialer("fairrelay-test", guest), Timeout: 2 * time.Second})
	res, err := s.Deliver(t.Context(), sink.Delivery{EventID: "e", Flow: "A", Seq: 1, Body: []byte("x")})
	if err == nil {
		t.Fatalf("no error but %q (%s)", res.Outcome, res.Detail)
	}
}

func TestBadOptions(t *testing.T) {
	t.Parallel()
	dial := amqp.Dialer(func() (*amqp091.Connection, error) { return nil, errors.New("unused") })
	for _, tc := range []struct {
		opts  amqp.Options
		field string
	}{
		{amqp.Options{}, "dial"},
		{amqp.Options{Dial: dial, Exchange: "ex change"}, "exchange"},
		{amqp.Options{Dial: dial, Exchange: "ex.{id}"}, "exchange"},
		{amqp.Options{Dial: dial, RoutingKey: "k.{flow"}, "routing_key"},
		{amqp.Options{Dial: dial, RoutingKey: strings.Repeat("k", 256)}, "routing_key"},
		{amqp.Options{Dial: dial, Timeout: -time.Second}, "timeout"},
		{amqp.Options{Dial: dial, Channels: -1}, "channels"},
	} {
		_, err := amqp.New(tc.opts)
		var fe *fairrelay.Error
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%+v: %v, want an error naming %s", tc.opts, err, tc.field)
		}
	}
	// The consumer's prefetch: negative was taken as the default in
	// silence (a library user's report, of the webhook sink's).
	err := amqp.Consume(t.Context(), amqp.ConsumerOptions{Dial: dial, Queue: "q", Prefetch: -1}, consume.Options{})
	var fe *fairrelay.Error
	if !errors.As(err, &fe) || fe.Field != "prefetch" {
		t.Errorf("Prefetch -1: %v, want an error naming prefetch", err)
	}
	// AMQP carries it in 16 bits: 65 536 went out as 0, no limit at all.
	err = amqp.Consume(t.Context(), amqp.ConsumerOptions{Dial: dial, Queue: "q", Prefetch: amqp.MaxPrefetch + 1}, consume.Options{})
	if !errors.As(err, &fe) || fe.Field != "prefetch" {
		t.Errorf("Prefetch %d: %v, want an error naming prefetch", amqp.MaxPrefetch+1, err)
	}
}

func TestParseEndpoint(t *testing.T) {
	t.Parallel()
	e, err := amqp.ParseEndpoint("sink", "amqp://127.0.0.1:5672/prod?exchange=orders&routing_key=o.{flow}&queue=ledger")
	if err != nil {
		t.Fatal(err)
	}
	if e.Server != "amqp://127.0.0.1:5672/prod" || e.Exchange != "orders" || e.RoutingKey != "o.{flow}" || e.Queue != "ledger" || e.BindingKey() != "o.*" {
		t.Errorf("parsed %+v, binding key %q", e, e.BindingKey())
	}
	if e, _ := amqp.ParseEndpoint("sink", "amqp://h"); e.Exchange != amqp.DefaultExchange || e.RoutingKey != amqp.DefaultRoutingKey {
		t.Errorf("defaults %+v", e)
	}
	for raw, field := range map[string]string{
		"http://h":                                   "sink",
		"amqp://":                                    "sink",
		"amqp://guest:guest@h":                       "sink",
		"amqp://h?exchang=x":                         "sink",
		"amqp://h?queue=a&queue=b":                   "sink",
		"amqp://h?exchange=a%20b":                    "exchange",
		"amqp://h?routing_key={id}":                  "routing_key",
		"amqp://h?queue=" + strings.Repeat("q", 256): "queue",
	} {
		_, err := amqp.ParseEndpoint("sink", raw)
		var fe *fairrelay.Error
		if !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("%s: %v, want an error naming %s", raw, err, field)
		}
	}
}

// A nack (here: a queue full with overflow reject-publish) is transient:
// retry, the channel kept.
func TestNackIsTransient(t *testing.T) {
	t.Parallel()
	exch, queue := brokertest.Name("fr-x-"), brokertest.Name("fr-q-")
	exchange(t, exch)
	ch := admin(t)
	if _, err := ch.QueueDeclare(queue, false, false, false, false, amqp091.Table{"x-max-length": int32(0), "x-overflow": "reject-publish"}); err != nil {
		t.Fatal(err)
	}
	deleteQueueAtEnd(t, queue)
	if err := ch.QueueBind(queue, "fr.#", exch, false, nil); err != nil {
		t.Fatal(err)
	}
	s := newSink(t, amqp.Options{Dial: dialer(t, "fairrelay-test"), Exchange: exch, RoutingKey: "fr.{flow}"})
	for range 2 {
		res, err := s.Deliver(t.Context(), sink.Delivery{EventID: "e", Flow: "A", Seq: 1, Body: []byte("x")})
		if err != nil || res.Outcome != fairrelay.OutcomeRetry || !strings.Contains(res.Detail, "nack") {
			t.Fatalf("full queue: %q (%s) %v, want retry after a nack", res.Outcome, res.Detail, err)
		}
	}
}

// A user without write access to the exchange: the broker closes the
// channel with 403, and the head is rejected with the broker's words.
func TestAccessRefusedIsPermanent(t *testing.T) {
	t.Parallel()
	user := brokertest.Name("fr-user-")
	rabbitmqctl(t, "add_user", user, "pw")
	t.Cleanup(func() { rabbitmqctl(t, "delete_user", user) })
	rabbitmqctl(t, "set_permissions", "-p", "/", user, ".*", "^$", ".*") // configure and read, no write
	e, err := amqp.ParseEndpoint("sink", brokertest.AMQP(t))
	if err != nil {
		t.Fatal(err)
	}
	s := newSink(t, amqp.Options{Dial: e.Dialer("fairrelay-test", amqp.Credentials{User: user, Password: "pw"})})
	res, err := s.Deliver(t.Context(), sink.Delivery{EventID: "e", Flow: "A", Seq: 1, Body: []byte("x")})
	if err != nil || res.Outcome != fairrelay.OutcomeRejected || !strings.Contains(res.Detail, "ACCESS_REFUSED") {
		t.Fatalf("no write access: %q (%s) %v, want rejected with ACCESS_REFUSED", res.Outcome, res.Detail, err)
	}
}

func rabbitmqctl(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("rabbitmqctl", args...).CombinedOutput(); err != nil {
		if os.Getenv("CI") != "true" {
			t.Skipf("rabbitmqctl %v: %v\n%s", args, err, out)
		}
		t.Fatalf("rabbitmqctl %v: %v\n%s", args, err, out)
	}
}
