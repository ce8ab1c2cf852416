package amqp_test

import (
	"context"
	"log"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/consume"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/relay"
	"github.com/fairrelay/fairrelay/sink/amqp"
)

// A relay publishing to RabbitMQ (amq.topic, routing keys
// fairrelay.<flow>), and the consumer of the queue "ledger" bound to them,
// applying each message once through an inbox.
func Example() {
	ctx := context.Background()
	e, err := amqp.ParseEndpoint("sink", "amqp://127.0.0.1:5672/?queue=ledger")
	if err != nil {
		log.Fatal(err)
	}
	dial := e.Dialer("orders relay", amqp.Credentials{User: "guest", Password: "guest"})
	s, err := amqp.New(amqp.Options{Dial: dial, Exchange: e.Exchange, RoutingKey: e.RoutingKey, Channels: 16})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	q, err := fairrelay.Open(ctx, "queue.db", fairrelay.Config{Policy: fairrelay.DaemonPolicy()})
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	r, err := relay.New(ctx, relay.Config{Queue: q, Sink: s, Workers: 16})
	if err != nil {
		log.Fatal(err)
	}
	go r.Run(ctx)

	in, err := inbox.Open(ctx, "inbox.db", inbox.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer in.Close()
	err = amqp.Consume(ctx, amqp.ConsumerOptions{Dial: dial, Queue: e.Queue, Exchange: e.Exchange, BindingKey: e.BindingKey()},
		consume.Options{Inbox: in})
	if err != nil {
		log.Fatal(err)
	}
}
