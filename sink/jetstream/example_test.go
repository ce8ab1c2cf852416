package jetstream_test

import (
	"context"
	"log"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/consume"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/relay"
	"github.com/fairrelay/fairrelay/sink/jetstream"
)

// A relay publishing to JetStream (subjects fairrelay.<flow>, which the
// stream ORDERS captures), and the consumer applying them to an inbox.
func Example() {
	ctx := context.Background()
	e, err := jetstream.ParseEndpoint("sink", "nats://127.0.0.1:4222?stream=ORDERS")
	if err != nil {
		log.Fatal(err)
	}
	nc, err := jetstream.Connect(e, jetstream.ConnectOptions{Name: "orders relay"})
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	s, err := jetstream.New(jetstream.Options{Conn: nc, Subject: e.Subject, Stream: e.Stream})
	if err != nil {
		log.Fatal(err)
	}
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

	// The receiving service: the durable consumer "ledger" of ORDERS,
	// each message applied once through the inbox, acked after it.
	in, err := inbox.Open(ctx, "inbox.db", inbox.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer in.Close()
	err = jetstream.Consume(ctx, jetstream.ConsumerOptions{Conn: nc, Stream: "ORDERS", Subjects: []string{"fairrelay.*"}, Durable: "ledger"},
		consume.Options{Inbox: in})
	if err != nil {
		log.Fatal(err)
	}
}
