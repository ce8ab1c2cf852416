package amqp_test

import (
	"context"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/fairrelay/fairrelay/consume"
	"github.com/fairrelay/fairrelay/internal/harness/brokertest"
	"github.com/fairrelay/fairrelay/sink/amqp"
)

// A queue the operator made first, with arguments (a dead-letter exchange
// for the messages the consumer rejects, a quorum queue, a length limit),
// is consumed as it is: Consume declared it again without them, and
// RabbitMQ refused that declaration (PRECONDITION_FAILED, inequivalent
// arg; a breaker's report).
func TestConsumeTakesAnExistingQueueAsItIs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args amqp091.Table
	}{
		{"dead-letter", amqp091.Table{"x-dead-letter-exchange": "amq.fanout"}},
		{"quorum", amqp091.Table{"x-queue-type": "quorum"}},
		{"max-length", amqp091.Table{"x-max-length": int32(100000), "x-overflow": "reject-publish"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			queue := brokertest.Name("existing-q-")
			if _, err := admin(t).QueueDeclare(queue, true, false, false, false, tc.args); err != nil {
				t.Fatal(err)
			}
			deleteQueueAtEnd(t, queue)
			in := brokertest.OpenInbox(t)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			ready := false
			err := amqp.Consume(ctx, amqp.ConsumerOptions{Dial: dialer(t, "existing-queue"), Queue: queue, Exchange: "amq.topic", BindingKey: "existing.*",
				Ready: func() { ready = true; cancel() }}, consume.Options{Inbox: in})
			if !ready || err != nil {
				t.Errorf("queue %s made first with %v: Consume: %v (ready %v)", queue, tc.args, err, ready)
			}
		})
	}
}

// What Consume must not take as it is: an existing exchange of another
// kind than ExchangeKind (a queue bound with "kind.*" to a direct exchange
// catches none of the relay's "kind.<flow>" messages), and an existing
// queue that is not durable or is auto-delete (the messages the relay saw
// confirmed into it are lost when the broker restarts, or when the
// consumer leaves). The passive declarations of the
// change that took existing queues as they are took both (a reviewer's
// report).
func TestConsumeRefusesAnExchangeOfAnotherKindAndATransientQueue(t *testing.T) {
	t.Parallel()
	exch := brokertest.Name("kind-direct-x-")
	if err := admin(t).ExchangeDeclare(exch, "direct", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin(t).ExchangeDelete(exch, false, false) })
	transient := brokertest.Name("transient-q-")
	if _, err := admin(t).QueueDeclare(transient, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	deleteQueueAtEnd(t, transient)
	autoDelete := brokertest.Name("autodelete-q-")
	if _, err := admin(t).QueueDeclare(autoDelete, true, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	deleteQueueAtEnd(t, autoDelete)
	for _, c := range []struct {
		name string
		opts amqp.ConsumerOptions
		want string
	}{
		{"an exchange of another kind", amqp.ConsumerOptions{Queue: brokertest.Name("kind-q-"), Exchange: exch, ExchangeKind: "topic", BindingKey: "kind.*"}, "inequivalent arg 'type'"},
		{"a queue that is not durable", amqp.ConsumerOptions{Queue: transient, Exchange: "amq.topic", BindingKey: "transient.*"}, "is not durable"},
		{"a queue that is auto-delete", amqp.ConsumerOptions{Queue: autoDelete, Exchange: "amq.topic", BindingKey: "autodelete.*"}, "is auto-delete"},
	} {
		deleteQueueAtEnd(t, c.opts.Queue)
		in := brokertest.OpenInbox(t)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		ready := false
		c.opts.Dial, c.opts.Ready = dialer(t, "refused"), func() { ready = true; cancel() }
		err := amqp.Consume(ctx, c.opts, consume.Options{Inbox: in})
		cancel()
		if ready || err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Consume %v (ready %v); want it refused, saying %q", c.name, err, ready, c.want)
		}
	}
}
