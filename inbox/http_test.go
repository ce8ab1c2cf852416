package inbox_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"

	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/sink/webhook"
)

var testKey = []byte("inbox test secret")

func newServer(t *testing.T, opts inbox.HandlerOptions) (*inbox.Inbox, *httptest.Server) {
	t.Helper()
	in, err := inbox.Open(t.Context(), filepath.Join(t.TempDir(), "inbox.db"), inbox.Options{MaxDelta: 5})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	srv := httptest.NewServer(in.Handler(opts))
	t.Cleanup(srv.Close)
	return in, srv
}

// post sends one delivery; sign says how: "good", "bad" (another key) or
// "" (unsigned).
func post(t *testing.T, url, method, id, flow string, seq int, body, sign string) (int, map[string]string) {
	t.Helper()
	return send(t, url, method, header(id, flow, seq, body, sign, time.Now()), body)
}

// header builds the headers the webhook sink sends for one delivery, signed
// as post's sign says.
func header(id, flow string, seq int, body, sign string, now time.Time) http.Header {
	h := http.Header{}
	msgID := webhook.MessageID(id, flow, int64(seq))
	h.Set(webhook.HeaderID, msgID)
	h.Set(webhook.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	h.Set(webhook.HeaderEventID, id)
	h.Set(webhook.HeaderFlow, flow)
	h.Set(webhook.HeaderSeq, strconv.Itoa(seq))
	switch sign {
	case "good":
		h.Set(webhook.HeaderSignature, webhook.Sign(testKey, msgID, now, []byte(body)))
	case "bad":
		h.Set(webhook.HeaderSignature, webhook.Sign([]byte("not the key"), msgID, now, []byte(body)))
	}
	return h
}

// send posts body with exactly the headers h and returns the status and the
// JSON answer.
func send(t *testing.T, url, method string, h http.Header, body string) (int, map[string]string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]string
	json.Unmarshal(b, &m)
	return resp.StatusCode, m
}

func receipts(t *testing.T, in *inbox.Inbox) int {
	t.Helper()
	s, err := in.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return len(s.Receipts)
}

// With a verifier, an unsigned or badly signed delivery gets 401 and
// nothing is written; a good one goes through.
func TestHandlerRejectsBadSignatures(t *testing.T) {
	t.Parallel()
	in, srv := newServer(t, inbox.HandlerOptions{Verify: webhook.NewVerifier(testKey).Verify})
	for _, sign := range []string{"", "bad"} {
		code, m := post(t, srv.URL, http.MethodPost, "A1", "A", 1, `{"delta":1}`, sign)
		if code != http.StatusUnauthorized || m["error"] != "unauthorized" || m["status"] != "" {
			t.Errorf("signature %q: %d %v, want 401", sign, code, m)
		}
	}
	if n := receipts(t, in); n != 0 {
		t.Fatalf("%d receipts written by rejected requests", n)
	}
	if code, m := post(t, srv.URL, http.MethodPost, "A1", "A", 1, `{"delta":1}`, "good"); code != 200 || m["status"] != "accepted" {
		t.Fatalf("good signature: %d %v", code, m)
	}
	if n := receipts(t, in); n != 1 {
		t.Fatalf("%d receipts, want 1", n)
	}
}

// Every outcome answers {"status": outcome} with its HTTP status; malformed
// requests answer an error and write nothing.
func TestHandlerAnswers(t *testing.T) {
	t.Parallel()
	in, srv := newServer(t, inbox.HandlerOptions{MaxBodyBytes: 20100})
	for _, tc := range []struct {
		name, method, id, flow string
		seq                    int
		body                   string
		code                   int
		status, err            string
	}{
		{"gap", "POST", "A2", "A", 2, `{"delta":1}`, 409, "gap", ""},
		{"accepted", "POST", "A1", "A", 1, `{"delta":1}`, 200, "accepted", ""},
		{"duplicate", "POST", "A1", "A", 1, `{"delta":1}`, 200, "duplicate", ""},
		{"id conflict", "POST", "A1", "A", 1, `{"delta":2}`, 422, "id_conflict", ""},
		{"unsupported delta", "POST", "B1", "B", 1, `{"delta":9}`, 422, "unsupported_delta", ""},
		{"invalid body", "POST", "C1", "C", 1, `[1]`, 422, "invalid_body", ""},
		// SPEC §3: other keys are ignored, however deep their values nest
		// (past encoding/json's 10 000 levels, which an enqueue takes).
		{"deep ignored key", "POST", "F1", "F", 1, `{"delta":1,"x":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`, 200, "accepted", ""},
		{"not POST", "PUT", "D1", "D", 1, `{"delta":1}`, 405, "", "method"},
		{"no flow", "POST", "D1", "", 1, `{"delta":1}`, 400, "", "invalid_input"},
		{"bad seq", "POST", "D1", "D", 0, `{"delta":1}`, 400, "", "invalid_input"},
		{"too large", "POST", "D1", "D", 1, `{"delta":1,"pad":"` + strings.Repeat("x", 20100) + `"}`, 413, "", "body"},
	} {
		code, m := post(t, srv.URL, tc.method, tc.id, tc.flow, tc.seq, tc.body, "")
		if code != tc.code || m["status"] != tc.status || m["error"] != tc.err {
			t.Errorf("%s: %d %v, want %d status %q error %q", tc.name, code, m, tc.code, tc.status, tc.err)
		}
	}
	in.SetUnavailable(true)
	if code, m := post(t, srv.URL, "POST", "E1", "E", 1, `{"delta":1}`, ""); code != 503 || m["status"] != "retry" {
		t.Errorf("unavailable: %d %v", code, m)
	}
	if n := receipts(t, in); n != 2 {
		t.Fatalf("%d receipts, want only A1's and F1's", n)
	}
}

// A captured signed request resent within the replay window with another
// Fairrelay-Flow, Fairrelay-Seq or Fairrelay-Event-Id gets 401 and writes
// nothing: the signed webhook-id binds the id, the flow and the seq, and
// the receiver acts on those alone. The genuine request still applies to
// its own flow afterwards (issue 15).
func TestHandlerRefusesReplayWithChangedMetadata(t *testing.T) {
	t.Parallel()
	in, srv := newServer(t, inbox.HandlerOptions{Verify: webhook.NewVerifier(testKey).Verify})
	body := `{"delta":1}`
	genuine := header("E1", "A", 1, body, "good", time.Now())
	for _, tc := range []struct{ header, value string }{
		{webhook.HeaderFlow, "VICTIM"},
		{webhook.HeaderSeq, "2"},
		{webhook.HeaderEventID, "E2"},
	} {
		h := genuine.Clone()
		h.Set(tc.header, tc.value)
		code, m := send(t, srv.URL, http.MethodPost, h, body)
		if code != http.StatusUnauthorized || m["cause"] != webhook.CauseMetadata || !strings.Contains(m["message"], tc.header) {
			t.Errorf("replay with %s: %s: %d %v, want 401 naming the header", tc.header, tc.value, code, m)
		}
	}
	// Nor does a webhook-id rewritten for the victim pass: it is signed.
	h := genuine.Clone()
	h.Set(webhook.HeaderID, webhook.MessageID("E1", "VICTIM", 1))
	h.Set(webhook.HeaderFlow, "VICTIM")
	if code, m := send(t, srv.URL, http.MethodPost, h, body); code != http.StatusUnauthorized || m["cause"] != webhook.CauseSignature {
		t.Errorf("replay with a rewritten webhook-id: %d %v, want 401", code, m)
	}
	if n := receipts(t, in); n != 0 {
		t.Fatalf("%d receipts written by replays", n)
	}
	// The headers are optional; the signed webhook-id is enough.
	h = genuine.Clone()
	h.Del(webhook.HeaderFlow)
	h.Del(webhook.HeaderSeq)
	h.Del(webhook.HeaderEventID)
	if code, m := send(t, srv.URL, http.MethodPost, h, body); code != http.StatusOK || m["status"] != "accepted" {
		t.Fatalf("the genuine request: %d %v", code, m)
	}
	s, err := in.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Receipts) != 1 || s.Receipts[0] != (inbox.Receipt{ID: "E1", Flow: "A", Seq: 1}) || len(s.Projection) != 1 || s.Projection[0].Flow != "A" {
		t.Fatalf("inbox after the genuine request: %+v", s)
	}
}

// The inbox stores no id or flow the queue would refuse (fairrelay.CheckID):
// a signed request naming one gets 400 naming the field, and writes nothing;
// Receive called directly refuses them too (issue 15).
func TestInboxRefusesNamesTheQueueRefuses(t *testing.T) {
	t.Parallel()
	in, srv := newServer(t, inbox.HandlerOptions{Verify: webhook.NewVerifier(testKey).Verify})
	for _, tc := range []struct{ id, flow, field string }{
		{"S1\t", "S", "id"},
		{"S\xff", "S", "id"},
		{strings.Repeat("i", 300), "S", "id"},
		{"S1 ", "S", "id"},
		{"S1", " R", "flow"},
		{"S1", "R\u0085", "flow"},
	} {
		code, m := send(t, srv.URL, http.MethodPost, header(tc.id, tc.flow, 1, `{"delta":1}`, "good", time.Now()), `{"delta":1}`)
		if code != http.StatusBadRequest || m["error"] != "invalid_input" || !strings.HasPrefix(m["message"], tc.field+": ") {
			t.Errorf("id %q flow %q: %d %v, want 400 naming %s", tc.id, tc.flow, code, m, tc.field)
		}
		_, err := in.Receive(t.Context(), inbox.Delivery{EventID: tc.id, Flow: tc.flow, Seq: 1, Body: []byte(`{"delta":1}`)})
		var fe *fairrelay.Error
		if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != tc.field {
			t.Errorf("Receive id %q flow %q: %v, want invalid_input naming %s", tc.id, tc.flow, err, tc.field)
		}
	}
	if n := receipts(t, in); n != 0 {
		t.Fatalf("%d receipts written for names the queue refuses", n)
	}
}

// Receipts pages by (flow, seq): a seq without its flow, or a negative one,
// is refused naming after_seq, as Queue.Events does, not ignored.
func TestReceiptsPagingArgumentsAreChecked(t *testing.T) {
	in, err := inbox.Open(t.Context(), filepath.Join(t.TempDir(), "inbox.db"), inbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	for _, tc := range []struct {
		flow string
		seq  int64
	}{{"", 3}, {"A", -1}} {
		_, err := in.Receipts(t.Context(), tc.flow, tc.seq, 10)
		var fe *fairrelay.Error
		if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != "after_seq" {
			t.Errorf("Receipts(%q, %d): %v, want invalid_input naming after_seq", tc.flow, tc.seq, err)
		}
	}
	if rs, err := in.Receipts(t.Context(), "", 0, 10); err != nil || len(rs) != 0 {
		t.Errorf("Receipts from the first of an empty inbox: %v, %v", rs, err)
	}
}

// The receiver's JSON answers are read by people: <, > and & stay as they
// are, not \u003c… (a fresh user's trial saw "fr1:\u003cid\u003e").
func TestAnswersDoNotEscapeHTML(t *testing.T) {
	_, srv := newServer(t, inbox.HandlerOptions{})
	h := header("A1", "A", 1, `{"delta":1}`, "", time.Now())
	h.Set(webhook.HeaderID, "not-a-message-id")
	req, err := http.NewRequestWithContext(t.Context(), "POST", srv.URL, strings.NewReader(`{"delta":1}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "fr1:<id>:<flow>:<seq>") {
		t.Errorf("a bad webhook-id: %d %s, want 400 naming fr1:<id>:<flow>:<seq> as written", resp.StatusCode, b)
	}
}
