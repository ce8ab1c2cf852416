package jetstream_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/fairrelay/fairrelay/consume"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/harness/brokertest"
	"github.com/fairrelay/fairrelay/internal/syncbuf"
	"github.com/fairrelay/fairrelay/sink/jetstream"
)

// DropsUnread names the limits under which JetStream deletes a message
// whether a consumer acked it or not, and nothing else.
func TestDropsUnread(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  js.StreamConfig
		want string
	}{
		{js.StreamConfig{}, ""},
		{js.StreamConfig{Retention: js.WorkQueuePolicy}, ""},
		{js.StreamConfig{MaxAge: 7 * 24 * time.Hour}, "max_age 168h0m0s"},
		{js.StreamConfig{MaxMsgs: 2}, "max_msgs 2 with discard old"},
		{js.StreamConfig{MaxMsgs: 2, Discard: js.DiscardNew}, ""}, // refuses new ones: the relay retries
		{js.StreamConfig{MaxMsgsPerSubject: 2, Discard: js.DiscardNew}, "max_msgs_per_subject 2 without discard_new_per_subject"},
		{js.StreamConfig{MaxMsgsPerSubject: 2, Discard: js.DiscardNew, DiscardNewPerSubject: true}, ""},
		{js.StreamConfig{MaxBytes: 1 << 20, MaxMsgsPerSubject: 5, MaxAge: time.Hour}, "max_age 1h0m0s, max_bytes 1048576, max_msgs_per_subject 5 with discard old"},
	} {
		if got := jetstream.DropsUnread(tc.cfg); got != tc.want {
			t.Errorf("DropsUnread(%+v) = %q, want %q", tc.cfg, got, tc.want)
		}
	}
}

// A consumer of a stream that can drop a message before it is acked says
// so at its start: the docs recommended --max-age 7d, and a message that
// ages out unread is an event the relay settled and nobody applied (a
// breaker's run: max_age 2s, the consumer started 3 s later, 0 of 3
// applied). A stream without such limits says nothing.
func TestConsumeWarnsOfAStreamThatDropsUnreadMessages(t *testing.T) {
	t.Parallel()
	nc := connect(t, brokertest.NATS(t), jetstream.Credentials{})
	for _, tc := range []struct {
		cfg  js.StreamConfig
		warn bool
	}{
		{js.StreamConfig{Retention: js.WorkQueuePolicy, MaxAge: time.Hour}, true},
		{js.StreamConfig{Retention: js.WorkQueuePolicy}, false},
	} {
		name, prefix := brokertest.Name("FR_"), brokertest.Name("fr")
		stream(t, nc, name, prefix, tc.cfg)
		in, err := inbox.Open(t.Context(), filepath.Join(t.TempDir(), "inbox.db"), inbox.Options{})
		if err != nil {
			t.Fatal(err)
		}
		var logs syncbuf.Buffer
		ctx, cancel := context.WithCancel(t.Context())
		err = jetstream.Consume(ctx, jetstream.ConsumerOptions{Conn: nc, Stream: name, Durable: "ledger", Ready: cancel},
			consume.Options{Inbox: in, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		in.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(logs.String(), "the stream can drop a message before this consumer acks it"); got != tc.warn {
			t.Errorf("stream %+v: warned %v, want %v:\n%s", tc.cfg, got, tc.warn, logs.String())
		}
		if tc.warn && !strings.Contains(logs.String(), "limits=\"max_age 1h0m0s\"") {
			t.Errorf("the warning does not name the limit:\n%s", logs.String())
		}
	}
}
