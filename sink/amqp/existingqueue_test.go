package amqp_test

import (
	"context"
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
