package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/harness/brokertest"
)

// relay --sink and receive --from, as processes, over each broker: the
// relay delivers a bulk-enqueued file, the consumer is stopped and started
// again half-way, and every event ends applied once, in order.
func TestRelayAndReceiveOverBrokers(t *testing.T) {
	// RabbitMQ's guest; the shared NATS server has no authentication and
	// ignores them.
	t.Setenv(brokerUserEnv, brokertest.AMQPUser)
	t.Setenv(brokerPasswordEnv, brokertest.AMQPPassword)
	prefix := brokertest.Name("frcli")
	t.Run("nats", func(t *testing.T) {
		server := brokertest.NATS(t)
		stream := brokertest.Name("FRCLI_")
		t.Cleanup(func() { deleteStream(t, server, stream) })
		base := server + "?subject=" + prefix + ".nats.{flow}&stream=" + stream
		overBroker(t, base, base+"&durable=ledger")
	})
	t.Run("amqp", func(t *testing.T) {
		server := brokertest.AMQP(t)
		queue := brokertest.Name("frcli-")
		t.Cleanup(func() { deleteQueue(t, server, queue) })
		base := server + "?routing_key=" + prefix + ".amqp.{flow}"
		overBroker(t, base, base+"&queue="+queue)
	})
}

func overBroker(t *testing.T, sinkURL, fromURL string) {
	dir := t.TempDir()
	queue, inboxPath := filepath.Join(dir, "queue.db"), filepath.Join(dir, "inbox.db")
	out, errOut, code := cli(t, eventsFile(10, 20), "enqueue", "--queue", queue)
	if code != 0 {
		t.Fatalf("bulk enqueue: exit %d\n%s%s", code, out, errOut)
	}
	recv := startConsumerCLI(t, inboxPath, fromURL)
	rel := startCLI(t, "relay", "--queue", queue, "--sink", sinkURL, "--workers", "8", "--backoff-base", "50ms", "--backoff-cap", "200ms")
	waitReceipts(t, inboxPath, 100)
	if code := recv.signal(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("receive exited %d on SIGTERM: %s", code, recv.stderr())
	}
	// As over HTTP: a new inbox is created, with a warning (a misspelt
	// --inbox would otherwise go unnoticed), and only the first time.
	if !strings.Contains(recv.stderr(), "the inbox did not exist and was created empty") {
		t.Errorf("receive --from created the inbox without a warning:\n%s", recv.stderr())
	}
	_, before := inboxLedger(t, inboxPath)
	metrics := freeAddr(t)
	recv = startConsumerCLI(t, inboxPath, fromURL, "--metrics-addr", metrics)
	waitReceipts(t, inboxPath, 200)
	wantLedger(t, inboxPath, 10, 20)
	// The second consumer's metrics: every receipt it added counted once
	// as accepted (acked, or applied from the held table), nothing held.
	// A message is counted after its commit and ack: poll until the
	// count reaches the receipts (another process's), or 10 s pass.
	var got map[string]float64
	var accepted float64
	for deadline := time.Now().Add(10 * time.Second); ; {
		got = scrapeConsumer(t, metrics)
		accepted = got[`fairrelay_consume_messages_total{action="ack",outcome="accepted"}`] +
			got[`fairrelay_consume_messages_total{action="applied",outcome="accepted"}`]
		if accepted >= float64(200-before) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling another process's counts, not synchronising
	}
	if accepted != float64(200-before) {
		t.Errorf("the second consumer counted %v accepted messages, want %d (200 receipts, %d before it started):\n%v", accepted, 200-before, before, got)
	}
	for _, state := range []string{"waiting", "superseded"} {
		if held, ok := got[`fairrelay_inbox_held{state="`+state+`"}`]; !ok || held != 0 {
			t.Errorf("fairrelay_inbox_held{state=%q} = %v (shown: %v), want 0", state, held, ok)
		}
	}
	if code := rel.signal(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("relay exited %d on SIGTERM: %s", code, rel.stderr())
	}
	if code := recv.signal(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("receive exited %d on SIGTERM: %s", code, recv.stderr())
	}
	if strings.Contains(recv.stderr(), "created empty") {
		t.Errorf("receive --from warned of a new inbox on its second start:\n%s", recv.stderr())
	}
	if logs := rel.stderr(); !strings.Contains(logs, "relay: starting") || strings.Contains(logs, brokertest.AMQPPassword+"@") {
		t.Errorf("the relay's log does not show the sink URL without its password:\n%s", logs)
	}
}

// relay --sink nats:// with no server listening yet starts and retries, as
// with RabbitMQ: a broker that is not up is an outage, not a usage error.
// Once a server starts on that port the relay connects and the event is
// delivered.
func TestRelayWaitsForANATSServerNotUpYet(t *testing.T) {
	t.Parallel()
	srv := brokertest.StartNATS(t, "")
	// The stream is kept in the server's store: it is there again when the
	// server starts, before the relay's connection is accepted (a delivery
	// that finds no stream would be quarantined).
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	j, _ := js.New(nc)
	if _, err := j.CreateStream(t.Context(), js.StreamConfig{Name: "S", Subjects: []string{"fr.*"}}); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	srv.Stop(t)

	queue := filepath.Join(t.TempDir(), "queue.db")
	rel := startCLI(t, "relay", "--queue", queue, "--sink", srv.URL()+"?subject=fr.{flow}&stream=S",
		"--backoff-base", "50ms", "--backoff-cap", "500ms", "--budget", "1000")
	rel.waitLine(t, "nats: cannot connect")
	if _, errOut, code := cli(t, "", "enqueue", "--queue", queue, "--id", "A1", "--flow", "A", "--delta", "1"); code != 0 {
		t.Fatalf("enqueue: exit %d: %s", code, errOut)
	}
	if l := rel.waitLine(t, "relay: delivery failed; will retry"); !strings.Contains(l, "no connection to the server yet") {
		t.Errorf("the failed delivery does not say why: %s", l)
	}

	srv.Start(t)
	rel.waitLine(t, "nats: connected")
	waitFor(t, queue, "A1 acked", func(s *fairrelay.Snapshot) bool { return countState(s, fairrelay.StateAcked) == 1 })
	nc, err = nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	j, _ = js.New(nc)
	st, err := j.Stream(t.Context(), "S")
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(t.Context(), "fr.A")
	if err != nil {
		t.Fatalf("the stream has no message of flow A: %v", err)
	}
	if id := m.Header.Get("Nats-Msg-Id"); id != "A1" || string(m.Data) != `{"delta":1}` {
		t.Errorf("the stream holds %s %q, want A1 {\"delta\":1}", id, m.Data)
	}
	if code := rel.signal(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("relay exited %d on SIGTERM: %s", code, rel.stderr())
	}
}

// startConsumerCLI runs receive --from and waits for its first line.
func startConsumerCLI(t *testing.T, inboxPath, from string, args ...string) *daemon {
	t.Helper()
	d := startCLI(t, append([]string{"receive", "--inbox", inboxPath, "--from", from}, args...)...)
	line := <-d.firstLine
	var l struct{ Status, From string }
	if err := json.Unmarshal(line, &l); err != nil || l.Status != "consuming" {
		t.Fatalf("receive --from printed %q; stderr: %s", line, d.stderr())
	}
	// The consumer checks no signature: it says so at every start.
	d.waitLine(t, "broker messages are not signed")
	// The URL as a user reads it: & is not written \u0026.
	if !strings.Contains(l.From, "&") || strings.Contains(string(line), `\u0026`) {
		t.Errorf("receive --from printed %s; want the URL's & as it is", line)
	}
	return d
}

// scrapeConsumer reads receive --from's /metrics at addr: each sample's
// line (name{labels}) → value.
func scrapeConsumer(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s, %v\n%s", resp.Status, err, body)
	}
	got := map[string]float64{}
	for line := range strings.Lines(string(body)) {
		name, value, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			got[name] = v
		}
	}
	return got
}

// waitReceipts polls the inbox, which the receive process writes, until
// it holds n receipts or 60s pass.
func waitReceipts(t *testing.T, inboxPath string, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, got := inboxLedger(t, inboxPath); got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d receipts", n)
		}
		time.Sleep(50 * time.Millisecond) // polling another process's writes, not synchronising
	}
}

func deleteStream(t *testing.T, server, name string) {
	nc, err := nats.Connect(server)
	if err != nil {
		t.Errorf("delete stream %s: %v", name, err)
		return
	}
	defer nc.Close()
	j, _ := js.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := j.DeleteStream(ctx, name); err != nil {
		t.Errorf("delete stream %s: %v", name, err)
	}
}

func deleteQueue(t *testing.T, server, name string) {
	conn, err := amqp091.DialConfig(server, amqp091.Config{SASL: []amqp091.Authentication{
		&amqp091.PlainAuth{Username: brokertest.AMQPUser, Password: brokertest.AMQPPassword}}})
	if err != nil {
		t.Errorf("delete queue %s: %v", name, err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err == nil {
		_, err = ch.QueueDelete(name, false, false, false)
	}
	if err != nil {
		t.Errorf("delete queue %s: %v", name, err)
	}
}

// demo --sink nats and --sink amqp run the article's sample over the
// broker: A1 held by the consumer until the limit is raised, every event
// applied once in the end.
func TestDemoOverBrokers(t *testing.T) {
	t.Setenv(brokerUserEnv, brokertest.AMQPUser)
	t.Setenv(brokerPasswordEnv, brokertest.AMQPPassword)
	for _, b := range []struct{ name, reach string }{{"nats", brokertest.NATS(t)}, {"amqp", brokertest.AMQP(t)}} {
		t.Run(b.name, func(t *testing.T) {
			out, errOut, code := cli(t, "", "demo", "--sink", b.reach, "--flows", "5", "--events", "50")
			if code != 0 {
				t.Fatalf("demo --sink %s: exit %d\n%s%s", b.reach, code, out, errOut)
			}
			for _, want := range []string{"answered unsupported_delta to A1", "58 receipts for 58 events", "A: seq 2, total 11"} {
				if !strings.Contains(out, want) {
					t.Errorf("the demo's output lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

// Bad broker URLs and webhook-only flags are input errors naming the field,
// and nothing is created.
func TestBrokerFlagErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	queue, inboxPath := filepath.Join(dir, "queue.db"), filepath.Join(dir, "inbox.db")
	for _, tc := range []struct {
		args  []string
		field string
	}{
		{[]string{"relay", "--queue", queue, "--sink", "nats://user:pw@127.0.0.1:4222"}, "sink:"},
		{[]string{"relay", "--queue", queue, "--sink", "nats://127.0.0.1:4222?subject=a.>"}, "sink: subject:"},
		// Each parameter of a URL under its flag (a fresh user's report:
		// `invalid_input: subject: …` did not say which URL).
		{[]string{"relay", "--queue", queue, "--sink", "nats://127.0.0.1:4222?subject="}, "sink: subject:"},
		{[]string{"relay", "--queue", queue, "--sink", "nats://127.0.0.1:4222?stream=a.b"}, "sink: stream:"},
		{[]string{"relay", "--queue", queue, "--sink", "amqp://127.0.0.1:5672/?routing_key={id}"}, "sink: routing_key:"},
		{[]string{"receive", "--inbox", inboxPath, "--from", "nats://127.0.0.1:4222?stream=S&durable=a%20b"}, "from: durable:"},
		{[]string{"relay", "--queue", queue, "--sink", "amqp://127.0.0.1:5672/?exchange=a%20b"}, "sink: exchange:"},
		{[]string{"relay", "--queue", queue, "--sink", "amqp://127.0.0.1:5672/", "--permanent-status", "404"}, "permanent-status:"},
		{[]string{"relay", "--queue", queue, "--sink", "nats://127.0.0.1:4222", "--secret", "s"}, "secret:"},
		{[]string{"receive", "--inbox", inboxPath, "--from", "nats://127.0.0.1:4222?stream=S"}, "from:"},
		{[]string{"receive", "--inbox", inboxPath, "--from", "amqp://127.0.0.1:5672/"}, "from:"},
		{[]string{"receive", "--inbox", inboxPath, "--from", "http://127.0.0.1:1/"}, "from:"},
		{[]string{"receive", "--inbox", inboxPath, "--from", "amqp://127.0.0.1:5672/?queue=q&exchange=x.{flow}"}, "from: exchange:"},
		// A placeholder inside a token: the consumer's wildcard would be
		// literal text, catching none of the relay's messages.
		{[]string{"receive", "--inbox", inboxPath, "--from", "nats://127.0.0.1:4222?stream=S&durable=D&subject=hbx.p{flow}"}, "from: subject:"},
		{[]string{"receive", "--inbox", inboxPath, "--from", "amqp://127.0.0.1:5672/?queue=q&routing_key=hb.p{flow}"}, "from: routing_key:"},
		{[]string{"receive", "--inbox", inboxPath, "--from", "nats://127.0.0.1:4222?stream=S&durable=D", "--addr", "127.0.0.1:0"}, "from:"},
		{[]string{"receive", "--inbox", inboxPath, "--addr", "nope"}, "addr:"},
		// Not a port: refused, not retried for ever as an outage.
		{[]string{"relay", "--queue", queue, "--sink", "nats://127.0.0.1:99999"}, "sink:"},
		{[]string{"relay", "--queue", queue, "--sink", "amqp://127.0.0.1:99999/"}, "sink:"},
		// A raw space is refused, not sent as %20 (a fresh user's report).
		{[]string{"relay", "--queue", queue, "--sink", "amqp://127.0.0.1:5672/ "}, "sink:"},
		{[]string{"relay", "--queue", queue, "--sink", "nats://127.0.0.1:4222 "}, "sink: \"nats://127.0.0.1:4222 \" holds a space"},
		{[]string{"relay", "--queue", queue, "--sink", " http://127.0.0.1:8080/"}, "sink: \" http://127.0.0.1:8080/\" holds a space"},
		{[]string{"relay", "--queue", queue, "--sink", "nats://127.0.0.1:4222?subject=a\u00a0b"}, "sink:"},
		{[]string{"receive", "--inbox", inboxPath, "--from", "nats://127.0.0.1:4222?stream=S&durable=D "}, "from:"},
		{[]string{"receive", "--inbox", inboxPath, "--from", "nats://127.0.0.1:0?stream=S&durable=D"}, "from:"},
	} {
		_, errOut, code := cli(t, "", tc.args...)
		if code == 0 || !strings.Contains(errOut, "invalid_input: "+tc.field) {
			t.Errorf("%v: exit %d, %s; want invalid_input naming %s", tc.args, code, errOut, tc.field)
		}
	}
	// A broker that cannot be reached at start: refused with the field
	// named, as for NATS, and no inbox is created (RabbitMQ's consumer
	// created the inbox and printed an error without a code; a fresh
	// user's report).
	for _, from := range []string{"amqp://127.0.0.1:1/?queue=q", "nats://127.0.0.1:1?stream=S&durable=D"} {
		fresh := filepath.Join(dir, "unreached.db")
		_, errOut, code := cli(t, "", "receive", "--inbox", fresh, "--from", from)
		if code != 2 || !strings.Contains(errOut, "invalid_input: from:") {
			t.Errorf("receive --from %s (nothing listening): exit %d, %s; want exit 2, invalid_input naming from", from, code, errOut)
		}
		if _, err := os.Stat(fresh); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("receive --from %s (nothing listening) created the inbox: %v", from, err)
		}
	}
	// Credentials in the URL: the error names the variables they go in.
	for _, args := range [][]string{
		{"relay", "--queue", queue, "--sink", "amqp://guest:guest@127.0.0.1:5672/"},
		{"relay", "--queue", queue, "--sink", "nats://user:pw@127.0.0.1:4222"},
		{"receive", "--inbox", inboxPath, "--from", "amqp://guest:guest@127.0.0.1:5672/?queue=q"},
		{"receive", "--inbox", inboxPath, "--from", "nats://tok@127.0.0.1:4222?stream=S&durable=D"},
	} {
		_, errOut, code := cli(t, "", args...)
		if code != 2 || !strings.Contains(errOut, "credentials may not be in the URL") || !strings.Contains(errOut, "$FAIRRELAY_BROKER_USER and $FAIRRELAY_BROKER_PASSWORD") {
			t.Errorf("%v: exit %d, %s; want invalid_input naming the credentials' variables", args, code, errOut)
		}
	}
	for _, p := range []string{queue, inboxPath} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s was created by a refused command", p)
		}
	}
}

// A relay started before its consumer: with no queue bound for the routing
// key each head is rejected and quarantined, nothing is lost, and once the
// consumer is up the redrive docs/relay.md gives puts every flow back; each
// event then applies once, in order.
func TestRelayBeforeItsConsumerRedrives(t *testing.T) {
	t.Setenv(brokerUserEnv, brokertest.AMQPUser)
	t.Setenv(brokerPasswordEnv, brokertest.AMQPPassword)
	server := brokertest.AMQP(t)
	queueName := brokertest.Name("frfirst-")
	t.Cleanup(func() { deleteQueue(t, server, queueName) })
	sinkURL := server + "?routing_key=" + brokertest.Name("frfirst") + ".{flow}"
	dir := t.TempDir()
	queue, inboxPath := filepath.Join(dir, "queue.db"), filepath.Join(dir, "inbox.db")
	if out, errOut, code := cli(t, eventsFile(3, 4), "enqueue", "--queue", queue); code != 0 {
		t.Fatalf("bulk enqueue: exit %d\n%s%s", code, out, errOut)
	}
	rel := startCLI(t, "relay", "--queue", queue, "--sink", sinkURL, "--workers", "4")
	var heads []struct{ ID, Reason string }
	for deadline := time.Now().Add(30 * time.Second); len(heads) < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("the 3 heads were not quarantined within 30 s: %v\n%s", heads, rel.stderr())
		}
		time.Sleep(50 * time.Millisecond) // polling another process's writes, not synchronising
		out, errOut, code := cli(t, "", "inspect", "--queue", queue, "quarantined", "--json")
		if code != 0 {
			t.Fatalf("inspect quarantined: exit %d: %s", code, errOut)
		}
		heads = heads[:0]
		for line := range strings.Lines(out) {
			var h struct{ ID, Reason string }
			if err := json.Unmarshal([]byte(line), &h); err != nil {
				t.Fatalf("inspect quarantined printed %q: %v", line, err)
			}
			heads = append(heads, h)
		}
	}
	for _, h := range heads {
		if h.Reason != "rejected" {
			t.Errorf("head %s quarantined for %q, want rejected (no queue bound)", h.ID, h.Reason)
		}
	}
	recv := startConsumerCLI(t, inboxPath, sinkURL+"&queue="+queueName)
	out, errOut, code := cli(t, "", "redrive", "--queue", queue, "--all", "--reason-is", "rejected", "--reason", "consumer was not up")
	if code != 0 || strings.Count(out, `"status":"ready"`) != 3 {
		t.Fatalf("redrive --all: exit %d, want 3 ready heads\n%s%s", code, out, errOut)
	}
	waitReceipts(t, inboxPath, 12)
	wantLedger(t, inboxPath, 3, 4)
	for _, d := range []*daemon{rel, recv} {
		if code := d.signal(t, syscall.SIGTERM); code != 0 {
			t.Fatalf("exit %d on SIGTERM: %s", code, d.stderr())
		}
	}
}

// receive --from nats:// reads only its subject template's subjects: on a
// stream that also captures another setup's (or an application's)
// subjects it applies its own relay's events alone (it took every subject
// of the stream, a fresh user's report), and on a stream that captures
// none of them it does not start.
func TestConsumerReadsOnlyItsSubjects(t *testing.T) {
	server := brokertest.NATS(t)
	nc, err := nats.Connect(server)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	j, err := js.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, prefix := brokertest.Name("FRCLISUB_"), brokertest.Name("frsub")
	if _, err := j.CreateStream(t.Context(), js.StreamConfig{Name: stream, Subjects: []string{prefix + ".>"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteStream(t, server, stream) })
	publish := func(subject, id, flow string) {
		m := nats.NewMsg(subject)
		m.Header.Set("Nats-Msg-Id", id)
		m.Header.Set("Fairrelay-Flow", flow)
		m.Header.Set("Fairrelay-Seq", "1")
		m.Data = []byte(`{"delta":1}`)
		if _, err := j.PublishMsg(t.Context(), m); err != nil {
			t.Fatal(err)
		}
	}
	publish(prefix+".other.B", "B1", "B") // another setup's, first in the stream
	publish(prefix+".mine.A", "A1", "A")
	inboxPath := filepath.Join(t.TempDir(), "inbox.db")
	recv := startConsumerCLI(t, inboxPath, server+"?stream="+stream+"&durable=mine&subject="+prefix+".mine.{flow}")
	waitReceipts(t, inboxPath, 1)
	if code := recv.signal(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("receive exited %d on SIGTERM: %s", code, recv.stderr())
	}
	if got, n := inboxLedger(t, inboxPath); n != 1 || got["A"].Total != 1 {
		t.Errorf("the inbox applied %d events (%v), want A1 alone", n, got)
	}
	// A template the stream does not capture: refused when the consumer
	// is made, before it says it consumes.
	out, errOut, code := cli(t, "", "receive", "--inbox", inboxPath, "--from", server+"?stream="+stream+"&durable=elsewhere&subject=frelsewhere.{flow}")
	if code == 0 || strings.Contains(out, "consuming") || !strings.Contains(errOut, "elsewhere") {
		t.Errorf("receive --from on a stream that captures none of its subjects: exit %d, stdout %q, stderr %q; want a refusal naming the consumer", code, out, errOut)
	}
}

// A relay whose broker has no destination for its sink — an exchange or a
// subject that does not name the flow, missing — refuses to start, naming
// the sink and what is missing: started, it rejected every delivery and
// quarantined each head (a fresh user's typo of an exchange did).
func TestRelayRefusesABrokerDestinationThatDoesNotExist(t *testing.T) {
	t.Parallel()
	amqpURL, natsURL := brokertest.AMQP(t), brokertest.NATS(t)
	queue := filepath.Join(t.TempDir(), "queue.db")
	exch, subj := brokertest.Name("frmissing-"), brokertest.Name("frmissing")+".orders"
	for _, tc := range []struct{ sink, want string }{
		{strings.TrimSuffix(amqpURL, "/") + "/?exchange=" + exch, "invalid_input: sink: exchange: the broker has no exchange \"" + exch + "\""},
		{natsURL + "?subject=" + subj, "invalid_input: sink: subject: no JetStream stream captures subject \"" + subj + "\""},
		// A misspelt stream= fails every flow, whatever the subject: refused
		// with a template naming the flow too (a fresh user's report: a
		// warning, then every head quarantined).
		{natsURL + "?stream=FR_NO_SUCH_STREAM&subject=" + strings.TrimSuffix(subj, ".orders") + ".{flow}", "invalid_input: sink: stream: the server has no stream \"FR_NO_SUCH_STREAM\""},
	} {
		_, errOut, code := cli(t, "", "relay", "--queue", queue, "--sink", tc.sink)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("relay --sink %s: exit %d, %s; want exit 2 and %q", tc.sink, code, errOut, tc.want)
		}
	}
}

// checkFunc is a sink's Check as a function.
type checkFunc func(context.Context) error

func (f checkFunc) Check(ctx context.Context) error { return f(ctx) }

// checkDestination's three answers: a missing destination that does not
// name the flow refuses the start, naming sink and the sink's field; one
// that names it (a sample flow was asked for) and a broker that did not
// answer start the relay with a warning that says which.
func TestCheckDestinationRefusesOrWarns(t *testing.T) {
	t.Parallel()
	missing := checkFunc(func(context.Context) error {
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "exchange", Message: "the broker has no exchange \"x\""}
	})
	down := checkFunc(func(context.Context) error { return errors.New("amqp: connect: connection refused") })
	for _, tc := range []struct {
		name    string
		check   checkFunc
		byFlow  bool
		refused string // the error's text, "" for a start
		warned  string // in the log, "" for none
	}{
		{"missing", missing, false, "sink: exchange: the broker has no exchange \"x\"", ""},
		{"missing for a sample flow", missing, true, "", "no destination for a sample flow"},
		{"no such stream, for a sample flow", checkFunc(func(context.Context) error {
			return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "stream", Message: "the server has no stream \"S\""}
		}), true, "sink: stream: the server has no stream \"S\"", ""},
		{"broker down", down, false, "", "could not ask the broker"},
		{"there", checkFunc(func(context.Context) error { return nil }), false, "", ""},
	} {
		var logged bytes.Buffer
		err := checkDestination(tc.check, tc.byFlow, "amqp://127.0.0.1:5672/", slog.New(slog.NewTextHandler(&logged, nil)))
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%s: %v, want a start", tc.name, err)
		case tc.refused != "" && (fairrelay.CodeOf(err) != fairrelay.CodeInvalidInput || err.Error() != tc.refused):
			t.Errorf("%s: %v, want invalid_input %q", tc.name, err, tc.refused)
		}
		if tc.warned == "" && logged.Len() > 0 || tc.warned != "" && !strings.Contains(logged.String(), "level=WARN") || !strings.Contains(logged.String(), tc.warned) {
			t.Errorf("%s: logged %q, want a warning with %q (none when empty)", tc.name, logged.String(), tc.warned)
		}
	}
}
