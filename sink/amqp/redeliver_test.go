package amqp_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/consume"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/harness/brokertest"
	"github.com/fairrelay/fairrelay/sink"
	"github.com/fairrelay/fairrelay/sink/amqp"
)

// A message the inbox did not take yet (retry) is delivered again by the
// consumer itself, not nacked back to the queue: each nack is a delivery
// more for the broker, and a quorum queue with a delivery limit (RabbitMQ
// 4 gives every quorum queue 20) drops the message past it, though the
// relay settled it long ago (a breaker's run: an inbox busy for a minute
// lost both events of the queue). Here the limit is 1 and the inbox answers
// retry four times: the event is applied once, on the fifth try, from the
// message's first delivery.
func TestRetriesSpendNoDeliveryOfTheQueue(t *testing.T) {
	t.Parallel()
	exch, queue := brokertest.Name("fr-x-"), brokertest.Name("fr-qq-")
	exchange(t, exch)
	ch := admin(t)
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp091.Table{"x-queue-type": "quorum", "x-delivery-limit": int32(1)}); err != nil {
		t.Fatal(err)
	}
	deleteQueueAtEnd(t, queue)
	if err := ch.QueueBind(queue, "fr.*", exch, false, nil); err != nil {
		t.Fatal(err)
	}
	var tries atomic.Int32
	in, err := inbox.Open(t.Context(), filepath.Join(t.TempDir(), "inbox.db"), inbox.Options{
		Apply: func(ctx context.Context, tx *sql.Tx, d inbox.Delivery) (fairrelay.Outcome, error) {
			if tries.Add(1) <= 4 {
				return fairrelay.OutcomeRetry, nil
			}
			return fairrelay.OutcomeAccepted, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	s := newSink(t, amqp.Options{Dial: dialer(t, "redeliver/relay"), Exchange: exch, RoutingKey: "fr.{flow}", Timeout: 5 * time.Second})
	if res, err := s.Deliver(t.Context(), sink.Delivery{EventID: "A1", Flow: "A", Seq: 1, Generation: 1, Attempt: 1, Body: []byte(`{"delta":1}`)}); err != nil || res.Outcome != fairrelay.OutcomeAccepted {
		t.Fatalf("publish: %+v %v", res, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	applied := make(chan consume.Applied, 16)
	done := make(chan error, 1)
	go func() {
		done <- amqp.Consume(ctx, amqp.ConsumerOptions{Dial: dialer(t, "redeliver/consumer"), Queue: queue, Exchange: exch, BindingKey: "fr.*"},
			consume.Options{Inbox: in, RedeliverBase: 10 * time.Millisecond, RedeliverCap: 20 * time.Millisecond,
				OnApplied: func(a consume.Applied) { applied <- a }})
	}()
	for {
		select {
		case a := <-applied:
			if a.Outcome != fairrelay.OutcomeAccepted {
				continue
			}
			if a.Err != nil || tries.Load() != 5 {
				t.Errorf("accepted after %d tries (%v), want on the fifth", tries.Load(), a.Err)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			return
		case <-ctx.Done():
			t.Fatalf("A1 not applied within 20 s after %d tries: the queue dropped it at its delivery limit", tries.Load())
		}
	}
}
