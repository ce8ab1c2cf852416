package inbox_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

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
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	req.Header.Set(webhook.HeaderID, id)
	req.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(webhook.HeaderFlow, flow)
	req.Header.Set(webhook.HeaderSeq, strconv.Itoa(seq))
	switch sign {
	case "good":
		req.Header.Set(webhook.HeaderSignature, webhook.Sign(testKey, id, now, []byte(body)))
	case "bad":
		req.Header.Set(webhook.HeaderSignature, webhook.Sign([]byte("not the key"), id, now, []byte(body)))
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
	in, srv := newServer(t, inbox.HandlerOptions{MaxBodyBytes: 64})
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
		{"not POST", "PUT", "D1", "D", 1, `{"delta":1}`, 405, "", "method"},
		{"no flow", "POST", "D1", "", 1, `{"delta":1}`, 400, "", "invalid_input"},
		{"bad seq", "POST", "D1", "D", 0, `{"delta":1}`, 400, "", "invalid_input"},
		{"too large", "POST", "D1", "D", 1, `{"delta":1,"pad":"` + strings.Repeat("x", 100) + `"}`, 413, "", "body"},
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
	if n := receipts(t, in); n != 1 {
		t.Fatalf("%d receipts, want only A1's", n)
	}
}
