package main

import (
	"encoding/base64"
	"errors"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/harness/brokertest"
	"github.com/fairrelay/fairrelay/internal/pgtest"
)

// relay and receive name the store and the sink they work on when they
// start, without passwords, and say when they have just created the store:
// `relay --queue queeu.db` no longer idles in silence on an empty store
// (issue 15). The relay's start line also gives the retry policy and the
// retention it runs with.
func TestDaemonsNameTheirStoresAndSayWhenCreated(t *testing.T) {
	t.Parallel()
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(sink.Close)
	dir := t.TempDir()
	queue := filepath.Join(dir, "queeu.db")
	sinkURL := strings.Replace(sink.URL, "http://", "http://relay:hunter2@", 1) + "/?token=s3cret"
	run := func(args ...string) string { return startedLogs(t, args...) }
	for _, first := range []bool{true, false} {
		logs := run("relay", "--queue", queue, "--sink", sinkURL, "--budget", "7", "--backoff-base", "2s", "--retain-acked", "48h")
		for _, want := range []string{"budget=7", "backoff_base_ms=2000", "backoff_cap_ms=300000", "retain_acked=48h0m0s", "retain_ids=720h0m0s"} {
			if !strings.Contains(logs, want) {
				t.Errorf("relay's start line does not say %s (the retry settings and retention it runs with):\n%s", want, logs)
			}
		}
		if !strings.Contains(logs, "queue="+queue) || !strings.Contains(logs, "sink=") || !strings.Contains(logs, "relay:xxxxx@") ||
			strings.Contains(logs, "hunter2") || strings.Contains(logs, "s3cret") {
			t.Errorf("relay's start logs do not name the queue and the redacted sink:\n%s", logs)
		}
		if created := strings.Contains(logs, "did not exist and was created empty"); created != first {
			t.Errorf("run %d: said created=%v:\n%s", map[bool]int{true: 1, false: 2}[first], created, logs)
		}
		if !strings.Contains(logs, "the sink's URL carries credentials, which show in ps") {
			t.Errorf("relay's start logs do not warn of the credentials in the sink's URL:\n%s", logs)
		}
		inboxPath := filepath.Join(dir, "inbx.db")
		logs = run("receive", "--inbox", inboxPath, "--addr", "127.0.0.1:0")
		if !strings.Contains(logs, "inbox="+inboxPath) {
			t.Errorf("receive's start logs do not name the inbox:\n%s", logs)
		}
		if created := strings.Contains(logs, "did not exist and was created empty"); created != first {
			t.Errorf("receive run: said created=%v:\n%s", created, logs)
		}
	}
}

// With --must-exist, relay and receive refuse a path that holds no store,
// naming the flag's field and the command that makes one, and create
// nothing: a service's misspelt --queue or --inbox fails at start instead
// of idling on a new empty store with one WARN line (a fresh user's
// report). Without it, they create the store (above).
func TestDaemonsWithMustExistRefuseAMissingStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	refused := func(t *testing.T, path, want string, args ...string) {
		args = append(args, path, "--must-exist")
		_, stderr, code := cli(t, "", args...)
		if code != 2 || !strings.Contains(stderr, want) || !strings.Contains(stderr, "migrate") {
			t.Errorf("%v: exit %d, want 2 and %q naming migrate: %s", args, code, want, stderr)
		}
		if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%v: the store's path exists afterwards (%v): a refused start created it", args, err)
		}
	}
	t.Run("relay", func(t *testing.T) {
		refused(t, filepath.Join(dir, "queeu.db"), "invalid_input: queue: no queue store there", "relay", "--sink", "http://127.0.0.1:1/", "--queue")
	})
	t.Run("receive", func(t *testing.T) {
		refused(t, filepath.Join(dir, "inbx.db"), "invalid_input: inbox: ", "receive", "--addr", "127.0.0.1:0", "--inbox")
	})
	t.Run("receive --from", func(t *testing.T) {
		// The inbox is opened before the stream is looked up: no stream
		// of this name is needed.
		from := brokertest.NATS(t) + "?stream=" + brokertest.Name("FRMUSTEXIST_") + "&durable=ledger"
		refused(t, filepath.Join(dir, "inbx2.db"), "invalid_input: inbox: ", "receive", "--from", from, "--inbox")
	})
}

// Secrets stay out of logs and output: a URL's password and its secret
// query parameters are redacted; a path is shown as it is.
func TestRedactDSN(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"queue.db": "queue.db",
		"postgres://app:pw@db:5432/shop?sslmode=require&schema=relay": "postgres://app:xxxxx@db:5432/shop?sslmode=require&schema=relay", // the query as written
		"postgres://app@db/shop?password=pw&schema=relay":             "postgres://app@db/shop?password=xxxxx&schema=relay",
		"https://hooks.example/in?token=abc&x=1":                      "https://hooks.example/in?token=xxxxx&x=1",
		"http://127.0.0.1:8080/":                                      "http://127.0.0.1:8080/",
		// A password holding '#' or '/' not encoded parses as a port and a
		// fragment or a path, which u.Redacted showed.
		"postgres://app:123#pw@db/shop": "postgres://app:xxxxx@db/shop",
		"postgres://app:12/pw@db/shop":  "postgres://app:xxxxx@db/shop",
		// A pair url.Query drops (a ';', a bad escape) is redacted as written.
		"postgres://db/shop?password=S3CR;x&schema=relay": "postgres://db/shop?password=xxxxx&schema=relay",
		"postgres://db/shop?password=S3CR%zz":             "postgres://db/shop?password=xxxxx",
		"postgres://db/shop?sslpassword=ab#cd":            "postgres://db/shop?sslpassword=xxxxx#xxxxx",
	} {
		if got := redactDSN(in); got != want {
			t.Errorf("redactDSN(%q) = %q, want %q", in, got, want)
		}
	}
}

// inspect --inbox shows an inbox's receipts, projection and held deliveries, a page at a
// time, on SQLite and PostgreSQL, and refuses a store that does not exist
// without creating it (issue 15: the only way to read an inbox was script,
// which creates missing files).
func TestInspectInbox(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			dsn, missing := filepath.Join(dir, "inbox.db"), filepath.Join(dir, "inbx.db")
			if backend == "postgres" {
				dsn, missing = pgtest.Schema(t, "frinspect"), pgtest.Schema(t, "frinspectmissing")
			}
			in, err := inbox.Open(t.Context(), dsn, inbox.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range []inbox.Delivery{{EventID: "A1", Flow: "A", Seq: 1}, {EventID: "A2", Flow: "A", Seq: 2}, {EventID: "B1", Flow: "B", Seq: 1}} {
				d.Body = []byte(`{"delta":2}`)
				if _, err := in.Receive(t.Context(), d); err != nil {
					t.Fatal(err)
				}
			}
			// B3 waits for B2: held, as a broker consumer keeps it.
			if held, err := in.Hold(t.Context(), inbox.Delivery{EventID: "B3", Flow: "B", Seq: 3, Body: []byte(`{"delta":2}`)}, fairrelay.OutcomeGap); err != nil || !held {
				t.Fatalf("hold: %v %v", held, err)
			}
			in.Close()

			out, errOut, code := cli(t, "", "inspect", "--inbox", dsn, "--json")
			if code != 0 || out != `{"id":"A1","flow":"A","seq":1}`+"\n"+`{"id":"A2","flow":"A","seq":2}`+"\n"+`{"id":"B1","flow":"B","seq":1}`+"\n" {
				t.Fatalf("receipts: exit %d, %q %q", code, out, errOut)
			}
			out, _, _ = cli(t, "", "inspect", "--inbox", dsn, "projection")
			if !strings.Contains(out, "FLOW  SEQ  TOTAL") || !strings.Contains(out, "A     2    4") || !strings.Contains(out, "B     1    2") {
				t.Fatalf("projection table:\n%s", out)
			}
			// Paging: a full page says how to ask for the next.
			out, errOut, _ = cli(t, "", "inspect", "--inbox", dsn, "--limit", "2", "--json")
			if strings.Count(out, "\n") != 2 || !strings.Contains(errOut, "--after A --after-seq 2") {
				t.Fatalf("first page: %q, stderr %q", out, errOut)
			}
			out, _, _ = cli(t, "", "inspect", "--inbox", dsn, "--limit", "2", "--json", "--after", "A", "--after-seq", "2")
			if out != `{"id":"B1","flow":"B","seq":1}`+"\n" {
				t.Fatalf("second page: %q", out)
			}
			out, _, _ = cli(t, "", "inspect", "--inbox", dsn, "held", "--json")
			if out != `{"id":"B3","flow":"B","seq":3,"reason":"gap","state":"waiting"}`+"\n" {
				t.Fatalf("held: %q", out)
			}
			out, _, _ = cli(t, "", "inspect", "--inbox", dsn, "projection", "--json", "--after", "A")
			if out != `{"flow":"B","seq":1,"total":2}`+"\n" {
				t.Fatalf("projection after A: %q", out)
			}
			// A missing inbox is refused and not created.
			out, errOut, code = cli(t, "", "inspect", "--inbox", missing)
			if code != exitFailed || out != "" || !strings.Contains(errOut, "invalid_input: inbox: ") {
				t.Fatalf("missing inbox: exit %d, %q %q", code, out, errOut)
			}
			if backend == "sqlite" {
				if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("inspect created the missing inbox: %v", err)
				}
			} else if _, errOut, code := cli(t, "", "inspect", "--inbox", missing); code != exitFailed || !strings.Contains(errOut, "holds no inbox") {
				t.Fatalf("missing inbox, asked twice: it was created by the first: exit %d %s", code, errOut)
			}
			for _, args := range [][]string{
				{"inspect", "--inbox", dsn, "heads"},
				{"inspect", "--inbox", dsn, "--queue", filepath.Join(dir, "q.db")},
				{"inspect", "--inbox", dsn, "projection", "--after-seq", "1"},
			} {
				if _, errOut, code := cli(t, "", args...); code != exitFailed || !strings.Contains(errOut, "invalid_input") {
					t.Errorf("%v: exit %d %s", args, code, errOut)
				}
			}
		})
	}
}

// A short webhook secret is taken (both ends must change together) but
// warned of at start, by relay and receive alike; a whsec_ key of 32
// random bytes is not (a fresh user's report: "short" signed deliveries
// without a word, while a malformed whsec_ value was refused).
func TestDaemonsWarnOfAShortSecret(t *testing.T) {
	t.Parallel()
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(sink.Close)
	dir := t.TempDir()
	run := func(args ...string) string { return startedLogs(t, args...) }
	const warning = "the webhook secret is short"
	long := "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	for _, c := range []struct {
		secret string
		warn   bool
	}{{"short", true}, {"whsec_" + base64.StdEncoding.EncodeToString([]byte("fifteen bytes..")), true}, {"sixteen bytes...", false}, {long, false}} {
		relayLogs := run("relay", "--queue", filepath.Join(dir, "q.db"), "--sink", sink.URL, "--secret", c.secret)
		receiveLogs := run("receive", "--inbox", filepath.Join(dir, "in.db"), "--addr", "127.0.0.1:0", "--secret", c.secret)
		for name, logs := range map[string]string{"relay": relayLogs, "receive": receiveLogs} {
			if got := strings.Contains(logs, warning); got != c.warn {
				t.Errorf("%s --secret %q: warned of a short secret: %v, want %v:\n%s", name, c.secret, got, c.warn, logs)
			}
		}
	}
}

// startedLogs runs relay or receive (args) until it has started, stops it
// with SIGTERM, and returns its stderr; an exit other than 0 fails t.
func startedLogs(t *testing.T, args ...string) string {
	t.Helper()
	cmd, stderr, exited := startDaemon(t, args...)
	waitStderr(t, stderr, map[bool]string{true: "relay: started", false: "receive: listening"}[args[0] == "relay"])
	cmd.Process.Signal(syscall.SIGTERM)
	if code := <-exited; code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, stderr.String())
	}
	return stderr.String()
}

// receive --max-body-bytes bounds the request body it reads (413 past
// it); it was fixed at 1 MiB, while a library or SQL producer may raise
// the queue's limit (a breaker's report).
func TestReceiveMaxBodyBytes(t *testing.T) {
	t.Parallel()
	d, addr := startReceiver(t, filepath.Join(t.TempDir(), "in.db"), "--max-body-bytes", "100")
	defer d.signal(t, syscall.SIGTERM)
	for size, want413 := range map[int]bool{90: false, 150: true} {
		resp, err := http.Post("http://"+addr+"/", "application/json", strings.NewReader(`{"delta":1,"pad":"`+strings.Repeat("x", size-20)+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.StatusCode == http.StatusRequestEntityTooLarge; got != want413 {
			t.Errorf("a body of about %d bytes under --max-body-bytes 100: status %d", size, resp.StatusCode)
		}
	}
}
