package webhook_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/sink"
	"github.com/fairrelay/fairrelay/sink/sinktest"
	"github.com/fairrelay/fairrelay/sink/webhook"
)

const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func key(t *testing.T) []byte {
	t.Helper()
	k, err := webhook.ParseSecret(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newSink(t *testing.T, opts webhook.Options) *webhook.Sink {
	t.Helper()
	s, err := webhook.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// The conformance suite over real HTTP on loopback: the inbox's handler with
// signature checks behind an httptest server.
func TestConformance(t *testing.T) {
	sinktest.Run(t, func(t *testing.T, in *inbox.Inbox) sink.Sink {
		k := key(t)
		srv := httptest.NewServer(in.Handler(inbox.HandlerOptions{Verify: webhook.NewVerifier(k).Verify}))
		t.Cleanup(srv.Close)
		return newSink(t, webhook.Options{URL: srv.URL, Key: k})
	})
}

// The published Standard Webhooks test vector.
func TestSignVector(t *testing.T) {
	got := webhook.Sign(key(t), "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("signature %s, want %s", got, want)
	}
}

// A request our sink sends verifies with the Standard Webhooks reference
// library for Go, which no one here wrote, for a whsec_ secret and a raw one.
func TestStandardLibraryVerifies(t *testing.T) {
	t.Parallel()
	for _, secret := range []string{testSecret, "a plain shared secret"} {
		k, err := webhook.ParseSecret(secret)
		if err != nil {
			t.Fatal(err)
		}
		var wh *standardwebhooks.Webhook
		if strings.HasPrefix(secret, "whsec_") {
			wh, err = standardwebhooks.NewWebhook(secret)
		} else {
			wh, err = standardwebhooks.NewWebhookRaw([]byte(secret))
		}
		if err != nil {
			t.Fatal(err)
		}
		verified := make(chan error, 1)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			verified <- wh.Verify(body, r.Header)
		}))
		s := newSink(t, webhook.Options{URL: srv.URL, Key: k})
		res, err := s.Deliver(t.Context(), sink.Delivery{EventID: "evt-1", Flow: "A", Seq: 1, Generation: 1, Attempt: 1, Body: []byte(`{"delta":1}`)})
		srv.Close()
		if err != nil || res.Outcome != fairrelay.OutcomeAccepted {
			t.Fatalf("deliver: %v %v", res, err)
		}
		if err := <-verified; err != nil {
			t.Fatalf("secret %q: the standard library rejects our signature: %v", secret, err)
		}
	}
}

func TestVerifier(t *testing.T) {
	t.Parallel()
	k := key(t)
	now := time.Unix(1_700_000_000, 0)
	v := webhook.NewVerifier(k)
	v.Now = func() time.Time { return now }
	body := []byte(`{"delta":1}`)
	header := func(id string, ts time.Time, sig string) http.Header {
		h := http.Header{}
		h.Set(webhook.HeaderID, id)
		h.Set(webhook.HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
		h.Set(webhook.HeaderSignature, sig)
		return h
	}
	good := webhook.Sign(k, "e1", now, body)
	other := webhook.Sign([]byte("another key"), "e1", now, body)
	for _, tc := range []struct {
		name string
		h    http.Header
		body []byte
		want error
	}{
		{"good", header("e1", now, good), body, nil},
		{"one of several", header("e1", now, "v2,xyz "+other+" "+good), body, nil},
		{"wrong key", header("e1", now, other), body, webhook.ErrSignature},
		{"body changed", header("e1", now, good), []byte(`{"delta":2}`), webhook.ErrSignature},
		{"id changed", header("e2", now, good), body, webhook.ErrSignature},
		{"unsigned", http.Header{}, body, webhook.ErrUnsigned},
		{"too old", header("e1", now.Add(-6*time.Minute), webhook.Sign(k, "e1", now.Add(-6*time.Minute), body)), body, webhook.ErrTimestamp},
		{"too new", header("e1", now.Add(6*time.Minute), webhook.Sign(k, "e1", now.Add(6*time.Minute), body)), body, webhook.ErrTimestamp},
	} {
		if err := v.Verify(tc.h, tc.body); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// The timestamp is signed as sent: only its canonical spelling verifies
	// ("+…" and "0…" parsed to the signed second; a breaker's report), and a
	// refusal quotes a clip of it, not a megabyte.
	for _, ts := range []string{"+" + strconv.FormatInt(now.Unix(), 10), "0" + strconv.FormatInt(now.Unix(), 10), strings.Repeat("A", 100000)} {
		h := header("e1", now, good)
		h.Set(webhook.HeaderTimestamp, ts)
		err := v.Verify(h, body)
		if !errors.Is(err, webhook.ErrTimestamp) || len(err.Error()) > 200 {
			t.Errorf("timestamp %.20q…: %.300v, want ErrTimestamp in a short message", ts, err)
		}
	}
}

// A refused timestamp says how far it is, in seconds, and which way, with
// a hint for a sender's milliseconds: a time.Duration saturates at about
// 292 years, and milliseconds (about 55 000 years ahead) read as
// "-2562047h47m16s away from now"; a malformed one says so, not "outside
// the tolerance" (an SRE's report).
func TestVerifierSaysHowFarTheTimestampIs(t *testing.T) {
	t.Parallel()
	k := key(t)
	now := time.Unix(1_700_000_000, 0)
	v := webhook.NewVerifier(k)
	v.Now = func() time.Time { return now }
	body := []byte(`{"delta":1}`)
	for _, tc := range []struct {
		ts        string
		want, not string
	}{
		{"1700000000000", "1700000000000 is 1698300000000 s ahead of this machine's clock, past the tolerance of 5m0s (milliseconds? it wants Unix seconds)", "2562047h"},
		{"1699999400", "1699999400 is 600 s behind this machine's clock, past the tolerance of 5m0s", "milliseconds"},
		{"1700000600", "1700000600 is 600 s ahead of this machine's clock, past the tolerance of 5m0s", "milliseconds"},
		{"9223372036854775807", "9223372036854775807 is 9223372035154775807 s ahead", "-"},
		{"-5", "-5 is before 1970", "tolerance"},
		{"+1700000000", "is not Unix seconds in canonical decimal", "tolerance"},
	} {
		h := http.Header{}
		h.Set(webhook.HeaderID, "e1")
		h.Set(webhook.HeaderTimestamp, tc.ts)
		h.Set(webhook.HeaderSignature, webhook.Sign(k, "e1", now, body))
		err := v.Verify(h, body)
		if !errors.Is(err, webhook.ErrTimestamp) || !strings.Contains(err.Error(), tc.want) || strings.Contains(strings.TrimPrefix(err.Error(), "webhook: webhook-timestamp refused: "+tc.ts), tc.not) {
			t.Errorf("timestamp %s: %v; want ErrTimestamp saying %q, not %q", tc.ts, err, tc.want, tc.not)
		}
	}
}

// Rotating a secret: a verifier given the new key and the old one as
// previous accepts requests signed with either (relays not yet switched,
// and switched ones), and still refuses a third key; without the old one
// the old signatures are refused.
func TestVerifierWithAPreviousKey(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	body := []byte(`{"delta":1}`)
	oldKey, newKey, third := []byte("old key"), []byte("new key"), []byte("third key")
	signed := func(k []byte) http.Header {
		h := http.Header{}
		h.Set(webhook.HeaderID, "e1")
		h.Set(webhook.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
		h.Set(webhook.HeaderSignature, webhook.Sign(k, "e1", now, body))
		return h
	}
	both := webhook.NewVerifier(newKey, oldKey)
	only := webhook.NewVerifier(newKey)
	for _, v := range []*webhook.Verifier{both, only} {
		v.Now = func() time.Time { return now }
	}
	for _, tc := range []struct {
		name string
		v    *webhook.Verifier
		key  []byte
		want error
	}{
		{"new key, rotating", both, newKey, nil},
		{"old key, rotating", both, oldKey, nil},
		{"third key, rotating", both, third, webhook.ErrSignature},
		{"old key, rotated", only, oldKey, webhook.ErrSignature},
	} {
		if err := tc.v.Verify(signed(tc.key), body); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// answer is one canned HTTP answer.
type answer struct {
	status     int
	body       string
	retryAfter string
}

func TestClassify(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		name      string
		a         answer
		permanent []int
		want      fairrelay.Outcome
		after     time.Duration
	}{
		{"2xx plain", answer{status: 204}, nil, fairrelay.OutcomeAccepted, 0},
		{"2xx foreign JSON status", answer{status: 200, body: `{"status":"ok"}`}, nil, fairrelay.OutcomeAccepted, 0},
		{"fairrelay duplicate", answer{status: 200, body: `{"status":"duplicate"}`}, nil, fairrelay.OutcomeDuplicate, 0},
		{"JSON ack with a 5xx is judged by the status", answer{status: 503, body: `{"status":"accepted"}`}, nil, fairrelay.OutcomeRetry, 0},
		{"JSON permanent with a 429 is judged by the status", answer{status: 429, body: `{"status":"rejected"}`}, nil, fairrelay.OutcomeRetry, 0},
		// A refusal in the body and an ack in the status: never acked (the
		// event would be gone with no effect; a breaker's receiver), never
		// quarantined on a 2xx — retried.
		{"JSON permanent with a 2xx is retried", answer{status: 200, body: `{"status":"id_conflict"}`}, nil, fairrelay.OutcomeRetry, 0},
		{"JSON rejected with a 201 is retried", answer{status: 201, body: `{"status":"rejected"}`}, nil, fairrelay.OutcomeRetry, 0},
		{"JSON outcome in another case with a 2xx is no answer", answer{status: 200, body: `{"status":"Accepted"}`}, nil, fairrelay.OutcomeAccepted, 0},
		{"JSON transient with a 2xx is taken", answer{status: 200, body: `{"status":"gap"}`}, nil, fairrelay.OutcomeGap, 0},
		{"fairrelay permanent", answer{status: 422, body: `{"status":"unsupported_delta"}`}, nil, fairrelay.OutcomeUnsupportedDelta, 0},
		{"fairrelay gap", answer{status: 409, body: `{"status":"gap"}`}, nil, fairrelay.OutcomeGap, 0},
		{"503 with Retry-After seconds", answer{status: 503, retryAfter: "7"}, nil, fairrelay.OutcomeRetry, 7 * time.Second},
		{"429 with Retry-After date", answer{status: 429, retryAfter: now.Add(90 * time.Second).UTC().Format(http.TimeFormat)}, nil, fairrelay.OutcomeRetry, 90 * time.Second},
		{"Retry-After capped", answer{status: 503, retryAfter: "999999999"}, nil, fairrelay.OutcomeRetry, time.Hour},
		{"an answer that repeats status is retried", answer{status: 200, body: `{"status":"retry","status":"accepted"}`}, nil, fairrelay.OutcomeRetry, 0},
		{"an answer that repeats status, the other way", answer{status: 200, body: `{"status":"accepted","status":"retry"}`}, nil, fairrelay.OutcomeRetry, 0},
		// Keys match exactly: encoding/json's struct matching ignores case
		// (and folds ſ), which read these as id_conflict, past the
		// repeated-key rule (a breaker's report).
		{"a key in another case is not status", answer{status: 422, body: `{"status":"retry","Status":"id_conflict"}`}, nil, fairrelay.OutcomeRetry, 0},
		{"a key with a long s is not status", answer{status: 422, body: `{"status":"retry","ſtatus":"id_conflict"}`}, nil, fairrelay.OutcomeRetry, 0},
		{"STATUS alone is no answer", answer{status: 422, body: `{"STATUS":"id_conflict"}`}, nil, fairrelay.OutcomeRetry, 0},
		{"a 2xx answer: status decides, not Status", answer{status: 200, body: `{"status":"retry","Status":"accepted"}`}, nil, fairrelay.OutcomeRetry, 0},
		{"a status that is not a string is no answer", answer{status: 422, body: `{"status":["id_conflict"]}`}, nil, fairrelay.OutcomeRetry, 0},
		{"Retry-After past int64 capped", answer{status: 503, retryAfter: "99999999999999999999"}, nil, fairrelay.OutcomeRetry, time.Hour},
		{"Retry-After negative past int64", answer{status: 503, retryAfter: "-99999999999999999999"}, nil, fairrelay.OutcomeRetry, 0},
		{"Retry-After garbage", answer{status: 503, retryAfter: "soon"}, nil, fairrelay.OutcomeRetry, 0},
		{"408", answer{status: 408}, []int{404}, fairrelay.OutcomeRetry, 0},
		{"425", answer{status: 425}, nil, fairrelay.OutcomeRetry, 0},
		{"unknown 4xx is not permanent", answer{status: 404}, nil, fairrelay.OutcomeRetry, 0},
		{"401 is not permanent", answer{status: 401}, nil, fairrelay.OutcomeRetry, 0},
		{"configured permanent", answer{status: 404}, []int{404, 410}, fairrelay.OutcomeRejected, 0},
		{"redirect is not followed", answer{status: 302}, nil, fairrelay.OutcomeRetry, 0},
		{"unknown fairrelay-style status is retry", answer{status: 500, body: `{"status":"weird"}`}, nil, fairrelay.OutcomeRetry, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.a.retryAfter != "" {
					w.Header().Set("Retry-After", tc.a.retryAfter)
				}
				if tc.a.status == 302 {
					w.Header().Set("Location", "/elsewhere")
				}
				w.WriteHeader(tc.a.status)
				io.WriteString(w, tc.a.body)
			}))
			t.Cleanup(srv.Close)
			s := newSink(t, webhook.Options{URL: srv.URL, Unsigned: true, Permanent: tc.permanent, Now: func() time.Time { return now }})
			res, err := s.Deliver(t.Context(), sink.Delivery{EventID: "e", Flow: "A", Seq: 1, Body: []byte("x")})
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcome != tc.want || res.RetryAfter != tc.after {
				t.Fatalf("got %q after %s (%s), want %q after %s", res.Outcome, res.RetryAfter, res.Detail, tc.want, tc.after)
			}
		})
	}
}

func TestBadOptions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		opts  webhook.Options
		field string
	}{
		{webhook.Options{URL: "ftp://127.0.0.1/", Unsigned: true}, "sink"},
		{webhook.Options{URL: "", Unsigned: true}, "sink"},
		// A port no connection reaches: every delivery would be retried
		// until its budget ran out (a fresh user's typo).
		{webhook.Options{URL: "http://127.0.0.1:80800/", Unsigned: true}, "sink"},
		{webhook.Options{URL: "https://127.0.0.1:0/", Unsigned: true}, "sink"},
		// A raw space (a shell quoting slip) was sent as %20: another path.
		{webhook.Options{URL: "http://127.0.0.1:8080/hook ", Unsigned: true}, "sink"},
		{webhook.Options{URL: "http://127.0.0.1:8080/a b", Unsigned: true}, "sink"},
		{webhook.Options{URL: "http://127.0.0.1:8080/hook\u00a0", Unsigned: true}, "sink"},
		{webhook.Options{URL: "http://127.0.0.1:8080/hook\u3000", Unsigned: true}, "sink"},
		{webhook.Options{URL: "http://127.0.0.1/", Unsigned: true, Permanent: []int{503}}, "permanent_status"},
		{webhook.Options{URL: "http://127.0.0.1/", Unsigned: true, Permanent: []int{429}}, "permanent_status"},
		{webhook.Options{URL: "http://127.0.0.1/", Unsigned: true, Permanent: []int{200}}, "permanent_status"},
		{webhook.Options{URL: "http://127.0.0.1/", Unsigned: true, Timeout: -time.Second}, "timeout"},
		// Negative was taken as the default in silence (a library user's
		// report).
		{webhook.Options{URL: "http://127.0.0.1/", Unsigned: true, MaxResponseBytes: -1}, "max_response_bytes"},
		{webhook.Options{URL: "http://127.0.0.1/", Unsigned: true, MaxRetryAfter: -time.Second}, "max_retry_after"},
		{webhook.Options{URL: "http://127.0.0.1/", Unsigned: true, MaxConnsPerHost: -5}, "max_conns_per_host"},
		// No key and no Unsigned: a forgotten Key sent every delivery
		// unsigned, in silence (a library user's report).
		{webhook.Options{URL: "http://127.0.0.1/"}, "key"},
		{webhook.Options{URL: "http://127.0.0.1/", Key: []byte("k"), Unsigned: true}, "key"},
	} {
		_, err := webhook.New(tc.opts)
		var fe *fairrelay.Error
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%+v: error %v, want field %s", tc.opts, err, tc.field)
		}
	}
	if _, err := webhook.ParseSecret("whsec_***"); err == nil {
		t.Error("bad base64 secret accepted")
	}
}

// The headers carry the event's place; the body arrives byte for byte.
func TestHeaders(t *testing.T) {
	t.Parallel()
	got := make(chan *http.Request, 1)
	bodies := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- r
		bodies <- string(b)
	}))
	t.Cleanup(srv.Close)
	s := newSink(t, webhook.Options{URL: srv.URL, Unsigned: true})
	if _, err := s.Deliver(t.Context(), sink.Delivery{EventID: "e-9", Flow: "flow/é", Seq: 12, Generation: 3, Attempt: 2, Body: []byte("{ \"delta\" : 1 }")}); err != nil {
		t.Fatal(err)
	}
	r := <-got
	for h, want := range map[string]string{
		webhook.HeaderID: "fr1:e-9:flow%2F%C3%A9:12", webhook.HeaderEventID: "e-9", webhook.HeaderFlow: "flow/é", webhook.HeaderSeq: "12",
		webhook.HeaderGeneration: "3", webhook.HeaderAttempt: "2", "Content-Type": "application/json", webhook.HeaderSignature: "",
	} {
		if v := r.Header.Get(h); v != want {
			t.Errorf("header %s = %q, want %q", h, v, want)
		}
	}
	if r.Method != http.MethodPost {
		t.Errorf("method %s", r.Method)
	}
	if b := <-bodies; b != "{ \"delta\" : 1 }" {
		t.Errorf("body %q", b)
	}
}

// No answer is an error (the relay settles retry): a receiver slower than
// the timeout, and a closed port.
func TestNoAnswer(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	s := newSink(t, webhook.Options{URL: srv.URL, Unsigned: true, Timeout: 50 * time.Millisecond})
	if _, err := s.Deliver(t.Context(), sink.Delivery{EventID: "e", Flow: "A", Seq: 1, Body: []byte("x")}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("slow receiver: %v, want a deadline error", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s = newSink(t, webhook.Options{URL: "http://" + addr + "/", Unsigned: true})
	if _, err := s.Deliver(t.Context(), sink.Delivery{EventID: "e", Flow: "A", Seq: 1, Body: []byte("x")}); err == nil {
		t.Error("closed port: no error")
	}
}

// Connections are reused across deliveries, also after a large answer,
// of which only MaxResponseBytes are read.
func TestConnectionReuseAndBoundedRead(t *testing.T) {
	t.Parallel()
	var conns atomic.Int64
	huge := `{"status":"duplicate","pad":"` + strings.Repeat("x", 1<<20) + `"}`
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(webhook.HeaderSeq) == "1" {
			io.WriteString(w, huge)
			return
		}
		io.WriteString(w, `{"status":"duplicate"}`)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	s := newSink(t, webhook.Options{URL: srv.URL, Unsigned: true, MaxResponseBytes: 64})
	// The huge answer is cut at 64 bytes: a JSON object whose status
	// cannot be read, so retried (not the 200's accepted).
	res, err := s.Deliver(t.Context(), sink.Delivery{EventID: "e", Flow: "A", Seq: 1, Body: []byte("x")})
	if err != nil || res.Outcome != fairrelay.OutcomeRetry || !strings.Contains(res.Detail, "cut off after 64 bytes") {
		t.Fatalf("huge answer: %v %v", res, err)
	}
	for range 5 {
		res, err := s.Deliver(t.Context(), sink.Delivery{EventID: "e", Flow: "A", Seq: 2, Body: []byte("x")})
		if err != nil || res.Outcome != fairrelay.OutcomeDuplicate {
			t.Fatalf("small answer: %v %v", res, err)
		}
	}
	if n := conns.Load(); n > 2 {
		t.Errorf("%d connections for 6 sequential deliveries, want reuse", n)
	}
}

// MessageID writes what its doc says, and ParseMessageID reads exactly that
// back and nothing else.
func TestMessageID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		id, flow string
		seq      int64
		want     string
	}{
		{"A1", "A", 1, "fr1:A1:A:1"},
		{"order.7", "shop/é", 12, "fr1:order%2E7:shop%2F%C3%A9:12"},
		{"a:b", "50%", 9223372036854775807, "fr1:a%3Ab:50%25:9223372036854775807"},
	} {
		got := webhook.MessageID(tc.id, tc.flow, tc.seq)
		if got != tc.want {
			t.Errorf("MessageID(%q, %q, %d) = %q, want %q", tc.id, tc.flow, tc.seq, got, tc.want)
		}
		id, flow, seq, err := webhook.ParseMessageID(got)
		if err != nil || id != tc.id || flow != tc.flow || seq != tc.seq {
			t.Errorf("ParseMessageID(%q) = %q %q %d %v", got, id, flow, seq, err)
		}
	}
	for _, bad := range []string{
		"A1", "fr1:A1:A", "fr1:A1:A:1:2", "fr1::A:1", "fr1:A1::1", "fr1:A1:A:0", "fr1:A1:A:01", "fr1:A1:A:+1",
		"fr1:A1:A:-1", "fr1:A%2e1:A:1", "fr1:A%41:A:1", "fr1:A.1:A:1", "fr1:A%4:A:1", "fr1:A 1:A:1", "fr2:A1:A:1",
	} {
		if _, _, _, err := webhook.ParseMessageID(bad); !errors.Is(err, webhook.ErrMessageID) {
			t.Errorf("ParseMessageID(%q): %v, want ErrMessageID", bad, err)
		}
	}
}

// A refused delivery says what to fix: a clock skew is reported as skew —
// named by the receiver's cause, or seen in a plain receiver's Date header —
// and only a signature failure blames the secret (issue 15).
func TestRefusalNamesTheCause(t *testing.T) {
	t.Parallel()
	k := key(t)
	in, err := inbox.Open(t.Context(), t.TempDir()+"/inbox.db", inbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	skewed := webhook.NewVerifier(k)
	skewed.Now = func() time.Time { return time.Now().Add(10 * time.Minute) }
	plain := func(date time.Time) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Date", date.UTC().Format(http.TimeFormat))
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
		})
	}
	for _, tc := range []struct {
		name      string
		h         http.Handler
		key       []byte
		want, not string
	}{
		{"fairrelay receiver, skewed clock", in.Handler(inbox.HandlerOptions{Verify: skewed.Verify}), k, "clock skew", "--secret"},
		{"fairrelay receiver, another secret", in.Handler(inbox.HandlerOptions{Verify: webhook.NewVerifier(k).Verify}), []byte("another"), "--secret", "clock"},
		{"plain receiver 10 minutes ahead", plain(time.Now().Add(10 * time.Minute)), k, "ahead of the relay's", "--secret"},
		{"plain receiver 10 minutes behind", plain(time.Now().Add(-10 * time.Minute)), k, "behind the relay's", "--secret"},
		{"plain receiver on time", plain(time.Now()), k, "--secret", "clock skew"},
		// A relay without a key was told to check that its key matches.
		{"unsigned relay, fairrelay receiver", in.Handler(inbox.HandlerOptions{Verify: webhook.NewVerifier(k).Verify}), nil, "sends unsigned requests", "matches the receiver's"},
		{"unsigned relay, plain receiver", plain(time.Now()), nil, "sends unsigned requests", "matches the receiver's"},
	} {
		srv := httptest.NewServer(tc.h)
		s := newSink(t, webhook.Options{URL: srv.URL, Key: tc.key, Unsigned: tc.key == nil})
		res, err := s.Deliver(t.Context(), sink.Delivery{EventID: "E1", Flow: "A", Seq: 1, Generation: 1, Attempt: 1, Body: []byte(`{"delta":1}`)})
		srv.Close()
		if err != nil || res.Outcome != fairrelay.OutcomeRetry {
			t.Fatalf("%s: %v %v", tc.name, res, err)
		}
		if !strings.Contains(res.Detail, tc.want) || strings.Contains(res.Detail, tc.not) {
			t.Errorf("%s: %q, want it to say %q and not %q", tc.name, res.Detail, tc.want, tc.not)
		}
	}
}

// A 2xx whose answer starts as a JSON object that cannot be read — cut off
// at MaxResponseBytes, or by a connection closed mid-answer, or two values
// — names a status nobody knows, and is retried: taken as the 2xx alone,
// {"status":"retry", …} cut off at 64 KiB acked an event its receiver had
// not applied (a breaker's report). A byte order mark before an answer is
// not part of it. A 2xx whose body is not meant as JSON stays accepted.
func TestAnAnswerThatCannotBeReadIsRetried(t *testing.T) {
	t.Parallel()
	pad := strings.Repeat("x", 70<<10)
	for _, tc := range []struct {
		name   string
		status int
		body   string
		close  bool // the body ends with the connection, cut short
		want   fairrelay.Outcome
	}{
		{"retry, cut off", 200, `{"status":"retry","pad":"` + pad + `"}`, false, fairrelay.OutcomeRetry},
		{"gap, cut off", 200, `{"status":"gap","pad":"` + pad + `"}`, false, fairrelay.OutcomeRetry},
		{"id_conflict, cut off", 200, `{"status":"id_conflict","pad":"` + pad + `"}`, false, fairrelay.OutcomeRetry},
		{"status after the cut", 200, `{"pad":"` + pad + `","status":"retry"}`, false, fairrelay.OutcomeRetry},
		{"cut by the connection", 200, `{"status":"ret`, true, fairrelay.OutcomeRetry},
		{"two values", 200, "{\"status\":\"retry\"}\n{}", false, fairrelay.OutcomeRetry},
		{"byte order mark", 200, "\ufeff{\"status\":\"retry\"}", false, fairrelay.OutcomeRetry},
		{"byte order mark, accepted", 200, "\ufeff{\"status\":\"accepted\"}", false, fairrelay.OutcomeAccepted},
		{"plain text", 200, "OK", false, fairrelay.OutcomeAccepted},
		{"empty", 204, "", false, fairrelay.OutcomeAccepted},
		{"a long text, cut off", 200, pad, false, fairrelay.OutcomeAccepted},
		{"white space, cut off, then an answer", 200, strings.Repeat(" ", 70<<10) + `{"status":"retry"}`, false, fairrelay.OutcomeRetry},
		{"white space alone", 200, "  \n", false, fairrelay.OutcomeAccepted},
		{"a JSON array", 200, `[1,2]`, false, fairrelay.OutcomeAccepted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.close {
					// Neither a length nor chunks: the body ends where the
					// connection does, which a client reads as the whole answer.
					conn, buf, err := w.(http.Hijacker).Hijack()
					if err != nil {
						t.Error(err)
						return
					}
					fmt.Fprintf(buf, "HTTP/1.1 %d %s\r\nConnection: close\r\n\r\n%s", tc.status, http.StatusText(tc.status), tc.body)
					buf.Flush()
					conn.Close()
					return
				}
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			}))
			t.Cleanup(srv.Close)
			s := newSink(t, webhook.Options{URL: srv.URL, Unsigned: true})
			res, err := s.Deliver(t.Context(), sink.Delivery{EventID: "e", Flow: "A", Seq: 1, Body: []byte(`{"delta":1}`)})
			if err != nil || res.Outcome != tc.want {
				t.Errorf("%d %.40q: %+v %v, want %s", tc.status, tc.body, res, err, tc.want)
			}
		})
	}
}
