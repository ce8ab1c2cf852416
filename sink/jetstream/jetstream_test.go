package jetstream_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/consume"
	"github.com/fairrelay/fairrelay/internal/harness/brokertest"
	"github.com/fairrelay/fairrelay/sink"
	"github.com/fairrelay/fairrelay/sink/jetstream"
)

func connect(t testing.TB, server string, c jetstream.Credentials) *nats.Conn {
	t.Helper()
	nc, err := jetstream.Connect(jetstream.Endpoint{Server: server}, jetstream.ConnectOptions{Name: "fairrelay-test", Credentials: c})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// stream creates a stream capturing prefix.> and deletes it when the test
// ends.
func stream(t testing.TB, nc *nats.Conn, name, prefix string, cfg js.StreamConfig) {
	t.Helper()
	j, err := js.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Name, cfg.Subjects = name, []string{prefix + ".>"}
	if _, err := j.CreateStream(t.Context(), cfg); err != nil {
		t.Fatalf("create stream %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := j.DeleteStream(ctx, name); err != nil && !errors.Is(err, js.ErrStreamNotFound) {
			t.Errorf("delete stream %s: %v", name, err)
		}
	})
}

func newSink(t testing.TB, opts jetstream.Options) *jetstream.Sink {
	t.Helper()
	s, err := jetstream.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// rigOn makes fresh rigs on the server at url: a stream of their own
// (duplicate window 100 ms, the server's least, so the conformance suite's
// second copies reach the inbox soon), the sink publishing to it, and a
// durable consumer of it.
func rigOn(url func(t testing.TB) string) brokertest.NewRig {
	return func(t *testing.T) brokertest.Rig {
		nc := connect(t, url(t), jetstream.Credentials{})
		name, prefix := brokertest.Name("FR_"), brokertest.Name("fr")
		stream(t, nc, name, prefix, js.StreamConfig{Duplicates: 100 * time.Millisecond})
		s := newSink(t, jetstream.Options{Conn: nc, Subject: prefix + ".{flow}", Stream: name, Timeout: 5 * time.Second})
		return brokertest.Rig{Sink: s, DedupByID: true, Consume: func(ctx context.Context, opts consume.Options) error {
			return jetstream.Consume(ctx, jetstream.ConsumerOptions{Conn: nc, Stream: name, Durable: "ledger", AckWait: 5 * time.Second}, opts)
		}}
	}
}

func TestConformance(t *testing.T) {
	brokertest.RunConformance(t, rigOn(brokertest.NATS))
}

func TestSlowFlowsDoNotHoldUpAnOrderedFlow(t *testing.T) {
	t.Parallel()
	brokertest.SlowFlows(t, rigOn(brokertest.NATS))
}

// The server the relay, the sink and the consumer talk to is stopped
// mid-run, deliveries fail meanwhile, and it is started again on the same
// port and store: the clients reconnect, and every event ends applied once.
func TestServerRestartedMidRun(t *testing.T) {
	t.Parallel()
	srv := brokertest.StartNATS(t, "")
	brokertest.Outage(t, rigOn(func(testing.TB) string { return srv.URL() }),
		func(t *testing.T) { srv.Stop(t) }, func(t *testing.T) { srv.Start(t) })
}

// No stream captures the subject: the head is quarantined after one
// delivery, not retried for ever.
func TestNoStreamQuarantines(t *testing.T) {
	t.Parallel()
	nc := connect(t, brokertest.NATS(t), jetstream.Credentials{})
	s := newSink(t, jetstream.Options{Conn: nc, Subject: brokertest.Name("nostream") + ".{flow}"})
	brokertest.Quarantines(t, s, "no stream for subject")
}

func delivery(id, flow string, body []byte) sink.Delivery {
	return sink.Delivery{EventID: id, Flow: flow, Seq: 1, Generation: 3, Attempt: 2, Body: body}
}

func deliver(t *testing.T, s *jetstream.Sink, d sink.Delivery, want fairrelay.Outcome, detail string) {
	t.Helper()
	res, err := s.Deliver(t.Context(), d)
	if err != nil {
		t.Fatalf("deliver %s: %v", d.EventID, err)
	}
	if res.Outcome != want || !strings.Contains(res.Detail, detail) {
		t.Fatalf("deliver %s: %q (%s), want %q with %q", d.EventID, res.Outcome, res.Detail, want, detail)
	}
}

// What arrives: the subject with the flow's token, the body byte for byte,
// the event id as Nats-Msg-Id and the Fairrelay-* headers; a second copy
// within the window is acked as a duplicate and not stored.
func TestMessageAndDuplicateAck(t *testing.T) {
	t.Parallel()
	nc := connect(t, brokertest.NATS(t), jetstream.Credentials{})
	name, prefix := brokertest.Name("FR_"), brokertest.Name("fr")
	stream(t, nc, name, prefix, js.StreamConfig{})
	s := newSink(t, jetstream.Options{Conn: nc, Subject: prefix + ".{flow}.v1"})
	body := []byte("{ \"delta\": 1, \"x\": \"\u00e9\" }")
	d := delivery("evt-1", "orders/eu.7", body)
	deliver(t, s, d, fairrelay.OutcomeAccepted, "seq 1")
	d.Generation, d.Attempt = 4, 1
	deliver(t, s, d, fairrelay.OutcomeDuplicate, "duplicate")

	j, _ := js.New(nc)
	st, err := j.Stream(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("the stream holds %d messages, want 1", info.State.Msgs)
	}
	m, err := st.GetMsg(t.Context(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := prefix + ".orders%2Feu%2E7.v1"; m.Subject != want {
		t.Errorf("subject %q, want %q", m.Subject, want)
	}
	if !bytes.Equal(m.Data, body) {
		t.Errorf("body %q, want %q", m.Data, body)
	}
	for k, v := range map[string]string{"Nats-Msg-Id": "evt-1", "Fairrelay-Flow": "orders/eu.7", "Fairrelay-Seq": "1",
		"Fairrelay-Generation": "3", "Fairrelay-Attempt": "2"} {
		if got := m.Header.Get(k); got != v {
			t.Errorf("header %s: %q, want %q", k, got, v)
		}
	}
}

// Bodies over the stream's max_msg_size or the server's max_payload, and a
// subject captured by another stream than Options.Stream, are rejected with
// the broker's words.
func TestPermanentRefusals(t *testing.T) {
	t.Parallel()
	nc := connect(t, brokertest.NATS(t), jetstream.Credentials{})
	name, prefix := brokertest.Name("FR_"), brokertest.Name("fr")
	// The stream's limit counts the headers too (about 150 bytes here).
	stream(t, nc, name, prefix, js.StreamConfig{MaxMsgSize: 512})
	s := newSink(t, jetstream.Options{Conn: nc, Subject: prefix + ".{flow}"})
	deliver(t, s, delivery("small", "A", []byte(`{"delta":1}`)), fairrelay.OutcomeAccepted, "")
	deliver(t, s, delivery("big", "A", bytes.Repeat([]byte("x"), 1000)), fairrelay.OutcomeRejected, "message size exceeds maximum")
	huge := bytes.Repeat([]byte("x"), int(nc.MaxPayload())+1)
	deliver(t, s, delivery("huge", "A", huge), fairrelay.OutcomeRejected, "max_payload")
	other := newSink(t, jetstream.Options{Conn: nc, Subject: prefix + ".{flow}", Stream: "SOME_OTHER_STREAM"})
	deliver(t, other, delivery("elsewhere", "A", []byte(`{"delta":1}`)), fairrelay.OutcomeRejected, "expected stream does not match")
}

// A publish the server's permissions refuse is rejected with the server's
// words as soon as its -ERR arrives, not after the publish timeout.
func TestPermissionRefused(t *testing.T) {
	t.Parallel()
	srv := brokertest.StartNATS(t, `
authorization {
  users = [
    {user: relay, password: relay-pw, permissions: {
      publish: {allow: ["allowed.>", "$JS.API.>"]},
      subscribe: {allow: ["_INBOX.>"]}
    }}
  ]
}
`)
	nc := connect(t, srv.URL(), jetstream.Credentials{User: "relay", Password: "relay-pw"})
	j, _ := js.New(nc)
	if _, err := j.CreateStream(t.Context(), js.StreamConfig{Name: "S", Subjects: []string{"allowed.>", "denied.>"}}); err != nil {
		t.Fatal(err)
	}
	ok := newSink(t, jetstream.Options{Conn: nc, Subject: "allowed.{flow}"})
	deliver(t, ok, delivery("e1", "A", []byte(`{"delta":1}`)), fairrelay.OutcomeAccepted, "")
	denied := newSink(t, jetstream.Options{Conn: nc, Subject: "denied.{flow}", Timeout: 20 * time.Second})
	start := time.Now()
	deliver(t, denied, delivery("e2", "A", []byte(`{"delta":1}`)), fairrelay.OutcomeRejected, `Permissions Violation for Publish to "denied.A"`)
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the refusal took %s: it waited for the timeout", d)
	}
}

// Without a server the publish fails with an error (transient), within the
// sink's timeout. The client keeps it in its reconnect buffer and sends it
// once the server is back, so the next copy may be acked as a duplicate.
func TestServerDownIsTransient(t *testing.T) {
	t.Parallel()
	srv := brokertest.StartNATS(t, "")
	nc := connect(t, srv.URL(), jetstream.Credentials{})
	stream(t, nc, "S", "fr", js.StreamConfig{})
	s := newSink(t, jetstream.Options{Conn: nc, Subject: "fr.{flow}", Timeout: time.Second})
	deliver(t, s, delivery("e1", "A", []byte(`{"delta":1}`)), fairrelay.OutcomeAccepted, "")
	srv.Stop(t)
	res, err := s.Deliver(t.Context(), delivery("e2", "A", []byte(`{"delta":1}`)))
	if err == nil && res.Outcome.Class() != fairrelay.ClassTransient {
		t.Fatalf("server down: %q (%s) with no error, want a transient answer", res.Outcome, res.Detail)
	}
	srv.Start(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := s.Deliver(t.Context(), delivery("e2", "A", []byte(`{"delta":1}`)))
		if err == nil && res.Outcome.Class() == fairrelay.ClassAck {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the restart: %q %v", res.Outcome, err)
		}
	}
}

// A server that is not up when the connection is made (Retry) is a passing
// condition, as a server that went away is: Connect returns, the deliveries
// fail at once with an error (transient), and once the server is up the
// connection is made and a delivery is acked.
func TestServerNotUpAtStartIsTransient(t *testing.T) {
	t.Parallel()
	srv := brokertest.StartNATS(t, "")
	// The stream is kept in the server's store: it is there again when the
	// server starts, before it accepts the sink's connection.
	nc0 := connect(t, srv.URL(), jetstream.Credentials{})
	j, _ := js.New(nc0)
	if _, err := j.CreateStream(t.Context(), js.StreamConfig{Name: "S", Subjects: []string{"fr.>"}}); err != nil {
		t.Fatal(err)
	}
	nc0.Close()
	srv.Stop(t)

	nc, err := jetstream.Connect(jetstream.Endpoint{Server: srv.URL()}, jetstream.ConnectOptions{Name: "fairrelay-test", Retry: true})
	if err != nil {
		t.Fatalf("connect with Retry to a server that is not up: %v", err)
	}
	t.Cleanup(nc.Close)
	connected := nc.StatusChanged(nats.CONNECTED)
	s := newSink(t, jetstream.Options{Conn: nc, Subject: "fr.{flow}", Stream: "S", Timeout: 5 * time.Second})
	start := time.Now()
	res, err := s.Deliver(t.Context(), delivery("e1", "A", []byte(`{"delta":1}`)))
	if err == nil || !strings.Contains(err.Error(), "no connection to the server yet") {
		t.Fatalf("no server yet: %q (%s), %v; want an error saying there is no connection yet", res.Outcome, res.Detail, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the delivery took %s to fail: it waited instead of answering at once", d)
	}

	srv.Start(t)
	select {
	case <-connected:
	case <-time.After(30 * time.Second):
		t.Fatalf("the connection was not made within 30s of the server's start (status %s)", nc.Status())
	}
	deliver(t, s, delivery("e1", "A", []byte(`{"delta":1}`)), fairrelay.OutcomeAccepted, "stream S seq 1")
}

// A credentials file that cannot be read fails Connect at once, Retry or
// not: the client reads it only while connecting, so it would be retried
// for ever.
func TestUnreadableCredsFileFailsConnect(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "relay.creds")
	for _, retry := range []bool{false, true} {
		nc, err := jetstream.Connect(jetstream.Endpoint{Server: "nats://127.0.0.1:1"},
			jetstream.ConnectOptions{Credentials: jetstream.Credentials{CredsFile: missing}, Retry: retry})
		if err == nil {
			nc.Close()
			t.Errorf("retry %v: connected with a credentials file that does not exist", retry)
		} else if !strings.Contains(err.Error(), "credentials file") || !strings.Contains(err.Error(), missing) {
			t.Errorf("retry %v: %v; want an error naming the credentials file", retry, err)
		}
	}
}

func TestBadOptions(t *testing.T) {
	t.Parallel()
	nc := &nats.Conn{}
	for _, tc := range []struct {
		opts  jetstream.Options
		field string
	}{
		{jetstream.Options{}, "conn"},
		{jetstream.Options{Conn: nc, Subject: "a.*.{flow}"}, "subject"},
		{jetstream.Options{Conn: nc, Subject: "a..{flow}"}, "subject"},
		{jetstream.Options{Conn: nc, Subject: "a.{flow}."}, "subject"},
		{jetstream.Options{Conn: nc, Subject: "a b.{flow}"}, "subject"},
		{jetstream.Options{Conn: nc, Subject: "a.{id}"}, "subject"},
		{jetstream.Options{Conn: nc, Stream: "a.b"}, "stream"},
		{jetstream.Options{Conn: nc, Timeout: -time.Second}, "timeout"},
	} {
		_, err := jetstream.New(tc.opts)
		var fe *fairrelay.Error
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%+v: %v, want an error naming %s", tc.opts, err, tc.field)
		}
	}
	// The consumer's: a negative value was taken as the default in
	// silence (a library user's report, of the webhook sink's).
	for _, tc := range []struct {
		opts  jetstream.ConsumerOptions
		field string
	}{
		{jetstream.ConsumerOptions{Conn: nc, Stream: "S", Durable: "D", AckWait: -time.Second}, "ack_wait"},
		{jetstream.ConsumerOptions{Conn: nc, Stream: "S", Durable: "D", MaxAckPending: -1}, "max_ack_pending"},
	} {
		err := jetstream.Consume(t.Context(), tc.opts, consume.Options{})
		var fe *fairrelay.Error
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%+v: %v, want an error naming %s", tc.opts, err, tc.field)
		}
	}
}

func TestParseEndpoint(t *testing.T) {
	t.Parallel()
	e, err := jetstream.ParseEndpoint("sink", "nats://127.0.0.1?subject=orders.{flow}&stream=ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	if e.Server != "nats://127.0.0.1:4222" || e.Subject != "orders.{flow}" || e.Stream != "ORDERS" {
		t.Errorf("parsed %+v", e)
	}
	if e, _ := jetstream.ParseEndpoint("sink", "nats://h:1"); e.Subject != jetstream.DefaultSubject {
		t.Errorf("default subject %q", e.Subject)
	}
	for raw, field := range map[string]string{
		"http://h:1":                   "sink",
		"nats://":                      "sink",
		"nats://u:secret@h:1":          "sink",
		"nats://token@h:1":             "sink",
		"nats://h:1?subjet=x":          "sink",
		"nats://h:1?stream=a&stream=b": "sink",
		"nats://h:1/path":              "sink",
		"nats://h:1?subject=a.>":       "subject",
		"nats://h:1?stream=a.b":        "stream",
		"nats://h:1?durable=a%20b":     "durable",
	} {
		_, err := jetstream.ParseEndpoint("sink", raw)
		var fe *fairrelay.Error
		if !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("%s: %v, want an error naming %s", raw, err, field)
		}
	}
}

// A stream full under DiscardNew refuses the publish with an API error the
// sink does not know as permanent: retry (the consumers may drain it).
func TestFullStreamIsTransient(t *testing.T) {
	t.Parallel()
	nc := connect(t, brokertest.NATS(t), jetstream.Credentials{})
	name, prefix := brokertest.Name("FR_"), brokertest.Name("fr")
	stream(t, nc, name, prefix, js.StreamConfig{MaxMsgs: 1, Discard: js.DiscardNew})
	s := newSink(t, jetstream.Options{Conn: nc, Subject: prefix + ".{flow}"})
	deliver(t, s, delivery("e1", "A", []byte(`{"delta":1}`)), fairrelay.OutcomeAccepted, "")
	deliver(t, s, delivery("e2", "A", []byte(`{"delta":1}`)), fairrelay.OutcomeRetry, "maximum messages exceeded")
}

// Closing a connection is not an outage: no "disconnected" warning, only
// a debug line that it closed (the relay logged a warning with err=<nil>
// at every clean stop).
func TestCloseIsNotLoggedAsAnOutage(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var logged strings.Builder
	closed := make(chan struct{})
	h := slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		if strings.Contains(string(p), "nats: closed") {
			close(closed)
		}
		return logged.Write(p)
	}), &slog.HandlerOptions{Level: slog.LevelDebug})
	nc, err := jetstream.Connect(jetstream.Endpoint{Server: brokertest.NATS(t)}, jetstream.ConnectOptions{Logger: slog.New(h)})
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	<-closed // the client's callbacks run in order: a disconnect line would be before it
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(logged.String(), "disconnected") {
		t.Errorf("a clean close logged an outage:\n%s", logged.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// Check asks which stream captures the subject before any delivery: none
// (a fresh user's missing stream, which would reject every delivery and
// quarantine each head) is invalid input naming the subject; another
// stream than Options.Stream names the stream; the stream that captures it
// passes, for a template by its sample flow's subject.
func TestCheckAsksWhichStreamCapturesTheSubject(t *testing.T) {
	t.Parallel()
	nc := connect(t, brokertest.NATS(t), jetstream.Credentials{})
	name, prefix := brokertest.Name("FR_"), brokertest.Name("fr")
	check := func(opts jetstream.Options) error {
		opts.Conn, opts.Timeout = nc, 5*time.Second
		return newSink(t, opts).Check(t.Context())
	}
	missing := brokertest.Name("frnone") + ".{flow}"
	if err := check(jetstream.Options{Subject: missing}); !errors.Is(err, fairrelay.ErrInvalidInput) || !strings.Contains(err.Error(), "subject") || !strings.Contains(err.Error(), jetstream.CheckFlow) {
		t.Errorf("no stream captures %s: %v, want invalid input naming subject and the sample flow", missing, err)
	}
	// The hint gives the subjects a stream must capture: every flow's.
	if err := check(jetstream.Options{Subject: missing}); err == nil || !strings.Contains(err.Error(), strings.TrimSuffix(missing, "{flow}")+"*") {
		t.Errorf("no stream captures %s: %v, want the subjects to capture (%s*)", missing, err, strings.TrimSuffix(missing, "{flow}"))
	}
	stream(t, nc, name, prefix, js.StreamConfig{})
	if err := check(jetstream.Options{Subject: prefix + ".{flow}"}); err != nil {
		t.Errorf("a stream captures the template's sample subject: %v", err)
	}
	if err := check(jetstream.Options{Subject: prefix + ".orders", Stream: name}); err != nil {
		t.Errorf("the named stream captures the subject: %v", err)
	}
	other := name + "_OTHER"
	if err := check(jetstream.Options{Subject: prefix + ".orders", Stream: other}); !errors.Is(err, fairrelay.ErrInvalidInput) || !strings.Contains(err.Error(), "has no stream") || !strings.Contains(err.Error(), other) {
		t.Errorf("stream= names no stream: %v, want invalid input saying the server has no stream %s", err, other)
	}
	stream(t, nc, other, brokertest.Name("fro"), js.StreamConfig{})
	if err := check(jetstream.Options{Subject: prefix + ".orders", Stream: other}); !errors.Is(err, fairrelay.ErrInvalidInput) || !strings.Contains(err.Error(), "stream") || !strings.Contains(err.Error(), name) {
		t.Errorf("another stream captures the subject: %v, want invalid input naming stream and %s", err, name)
	}
}

// NATS counts a message's headers into the server's max_payload: a body
// under it by less than the headers the sink adds (about 150-600 bytes)
// was refused with the client's bare "maximum payload exceeded" (a
// breaker's report). The sink refuses it itself, saying the body's and the
// headers' sizes and the largest body that fits; that body is delivered,
// and one byte more is what the client refuses too.
func TestMaxPayloadCountsTheHeaders(t *testing.T) {
	t.Parallel()
	nc := connect(t, brokertest.NATS(t), jetstream.Credentials{})
	name, prefix := brokertest.Name("FR_"), brokertest.Name("fr")
	stream(t, nc, name, prefix, js.StreamConfig{})
	s := newSink(t, jetstream.Options{Conn: nc, Subject: prefix + ".{flow}", Stream: name})
	max := int(nc.MaxPayload())
	res, err := s.Deliver(t.Context(), delivery("near", "A", bytes.Repeat([]byte("x"), max-10)))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`the body has \d+ bytes and its headers \d+, more than the server's max_payload of \d+ \(NATS counts headers; raise max_payload or keep bodies under (\d+) bytes\)`).FindStringSubmatch(res.Detail)
	if res.Outcome != fairrelay.OutcomeRejected || m == nil {
		t.Fatalf("a body %d bytes under max_payload: %q (%s), want rejected naming its headers", 10, res.Outcome, res.Detail)
	}
	fits, _ := strconv.Atoi(m[1])
	deliver(t, s, delivery("near", "A", bytes.Repeat([]byte("x"), fits)), fairrelay.OutcomeAccepted, "")
	deliver(t, s, delivery("near", "A", bytes.Repeat([]byte("x"), fits+1)), fairrelay.OutcomeRejected, "keep bodies under")
	// One byte more is over for the client too: the sink's count is exact.
	j, err := js.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(prefix + ".A")
	msg.Data = bytes.Repeat([]byte("x"), fits+1)
	msg.Header.Set(consume.HeaderFlow, "A")
	msg.Header.Set(consume.HeaderSeq, "1")
	msg.Header.Set(consume.HeaderGeneration, "3")
	msg.Header.Set(consume.HeaderAttempt, "2")
	if _, err := j.PublishMsg(t.Context(), msg, js.WithMsgID("near"), js.WithExpectStream(name)); !errors.Is(err, nats.ErrMaxPayload) {
		t.Fatalf("the client's publish of %d bytes with the same headers: %v, want ErrMaxPayload", fits+1, err)
	}
}
