package relay_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/relay"
	"github.com/fairrelay/fairrelay/sink/webhook"
)

// A receiver (the inbox over signed webhooks) and a relay delivering to it:
// the article's poison head is quarantined, the other flow is served.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "relay-example-")
	defer os.RemoveAll(dir)

	// The receiver's side.
	key, _ := webhook.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	in, _ := inbox.Open(ctx, filepath.Join(dir, "inbox.db"), inbox.Options{MaxDelta: 5})
	defer in.Close()
	srv := httptest.NewServer(in.Handler(inbox.HandlerOptions{Verify: webhook.NewVerifier(key).Verify}))
	defer srv.Close()

	// The sender's side, with the daemon's policy (ticks are ms: a lease of
	// 30 s, a failing head retried for about an hour). A Policy's zero
	// fields are the reference policy's, made for scripts (SPEC §5).
	q, _ := fairrelay.Open(ctx, filepath.Join(dir, "queue.db"), fairrelay.Config{Policy: fairrelay.DaemonPolicy()})
	defer q.Close()
	for _, e := range []struct{ id, flow, body string }{
		{"A1", "A", `{"delta":10}`}, {"A2", "A", `{"delta":1}`}, {"B1", "B", `{"delta":1}`}, {"B2", "B", `{"delta":2}`},
	} {
		// At the store's tick: At's zero value is tick 0, which a store
		// whose relay has run is past (clock_regressed).
		q.Enqueue(ctx, fairrelay.EnqueueParams{ID: e.id, Flow: e.flow, Body: []byte(e.body), At: fairrelay.AtStored})
	}
	s, _ := webhook.New(webhook.Options{URL: srv.URL, Key: key})
	defer s.Close()

	settled := make(chan relay.Settled, 16)
	r, err := relay.New(ctx, relay.Config{Queue: q, Sink: s, Workers: 1, OnSettle: func(x relay.Settled) { settled <- x }})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	for range 3 { // A1, B1, B2; A2 waits behind the quarantined A1
		x := <-settled
		fmt.Println(x.Claim.Token.EventID, x.Outcome, x.Result.Status)
	}
	stop()
	fmt.Println("Run:", <-done)
	// Output:
	// A1 unsupported_delta quarantined
	// B1 accepted acked
	// B2 accepted acked
	// Run: <nil>
}
