package amqp_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/fairrelay/fairrelay/consume"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/harness/brokertest"
	"github.com/fairrelay/fairrelay/internal/syncbuf"
	"github.com/fairrelay/fairrelay/sink"
	"github.com/fairrelay/fairrelay/sink/amqp"
)

// onLine is a slog handler that closes seen at the first record whose
// message starts with prefix.
type onLine struct {
	prefix string
	seen   chan struct{}
	once   sync.Once
}

func (h *onLine) Enabled(context.Context, slog.Level) bool { return true }
func (h *onLine) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, h.prefix) {
		h.once.Do(func() { close(h.seen) })
	}
	return nil
}
func (h *onLine) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *onLine) WithGroup(string) slog.Handler      { return h }

// useDefaultLogger makes a handler waiting for prefix the process's default
// logger for the test, and returns the channel it closes. Tests that call
// it are not parallel: the default logger is the process's.
func useDefaultLogger(t *testing.T, prefix string) <-chan struct{} {
	h := &onLine{prefix: prefix, seen: make(chan struct{})}
	syncbuf.DefaultLogger(t, h)
	return h.seen
}

// Without Options.Logger the sink logs to slog.Default(): before, it
// discarded its lines by default (the closing notes' "loggers that discard
// by default"), so a relay built without one never said that its broker
// connection was lost.
func TestSinkLogsToTheDefaultLoggerWithoutALogger(t *testing.T) {
	seen := useDefaultLogger(t, "amqp: connected")
	exch := brokertest.Name("fr-x-")
	exchange(t, exch)
	s := newSink(t, amqp.Options{Dial: dialer(t, brokertest.Name("fairrelay-test-")), Exchange: exch, RoutingKey: "fr.{flow}"})
	if _, err := s.Deliver(t.Context(), sink.Delivery{EventID: "A1", Flow: "A", Seq: 1, Body: []byte(`{"delta":1}`)}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-seen:
	default:
		t.Fatal(`the default logger got no "amqp: connected" line from a delivery's connection`)
	}
}

// Without ConsumerOptions.Logger the consumer logs a lost connection to
// slog.Default(); before, the line was discarded by default.
func TestConsumerLogsToTheDefaultLoggerWithoutALogger(t *testing.T) {
	seen := useDefaultLogger(t, "amqp: consumer lost its connection")
	queue := brokertest.Name("fr-q-")
	deleteQueueAtEnd(t, queue)
	in, err := inbox.Open(t.Context(), filepath.Join(t.TempDir(), "inbox.db"), inbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	dial := dialer(t, brokertest.Name("fairrelay-test-"))
	first := make(chan *amqp091.Connection, 1)
	ready := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- amqp.Consume(ctx, amqp.ConsumerOptions{Queue: queue,
			Dial: func() (*amqp091.Connection, error) {
				conn, err := dial()
				if err == nil {
					select {
					case first <- conn:
					default:
					}
				}
				return conn, err
			},
			Ready: func() { ready <- struct{}{} }}, consume.Options{Inbox: in})
	}()
	<-ready
	if err := (<-first).Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-seen:
	case <-time.After(20 * time.Second): // a bound on a failure, not synchronisation
		t.Error(`the default logger got no "amqp: consumer lost its connection" line in 20 s`)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
