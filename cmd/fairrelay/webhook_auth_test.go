package main

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/sink"
	"github.com/fairrelay/fairrelay/sink/webhook"
)

// $FAIRRELAY_SINK_USER and $FAIRRELAY_SINK_PASSWORD give the webhook sink
// its basic auth, which a receiver on loopback sees on the delivery;
// credentials in the URL still work but are flagged (they show in ps, as a
// broker URL's would, which is refused); both at once, or a password
// without a user, are invalid_input naming sink.
func TestWebhookCredentialsComeFromTheEnvironment(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	var fe *fairrelay.Error
	if got, inURL, err := webhookURL("http://u:p@127.0.0.1:8080/", env(nil)); err != nil || !inURL || got != "http://u:p@127.0.0.1:8080/" {
		t.Errorf("credentials in the URL: %q %v %v, want the URL as given, flagged", got, inURL, err)
	}
	if _, _, err := webhookURL("http://u:p@127.0.0.1:8080/", env(map[string]string{sinkUserEnv: "v"})); !errors.As(err, &fe) || fe.Field != "sink" || fe.Code != fairrelay.CodeInvalidInput {
		t.Errorf("credentials in the URL and the environment: %v, want invalid_input naming sink", err)
	}
	if _, _, err := webhookURL("http://127.0.0.1:8080/", env(map[string]string{sinkPasswordEnv: "p"})); !errors.As(err, &fe) || fe.Field != "sink" {
		t.Errorf("a password without a user: %v, want invalid_input naming sink", err)
	}
	if got, inURL, err := webhookURL("http://127.0.0.1:8080/", env(nil)); err != nil || inURL || got != "http://127.0.0.1:8080/" {
		t.Errorf("no credentials: %q %v %v, want the URL as given", got, inURL, err)
	}

	seen := make(chan [2]string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, _ := r.BasicAuth()
		seen <- [2]string{u, p}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	target, _, err := webhookURL(srv.URL+"/", env(map[string]string{sinkUserEnv: "relay", sinkPasswordEnv: "s3cret"}))
	if err != nil {
		t.Fatal(err)
	}
	s, err := webhook.New(webhook.Options{URL: target, Unsigned: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Deliver(t.Context(), sink.Delivery{EventID: "A1", Flow: "A", Seq: 1, Body: []byte(`{"delta":1}`)}); err != nil {
		t.Fatal(err)
	}
	if got := <-seen; got != [2]string{"relay", "s3cret"} {
		t.Errorf("basic auth at the receiver %q, want relay / s3cret", got)
	}
}

// A --sink the relay refuses never shows the password of
// $FAIRRELAY_SINK_PASSWORD (the URL is checked before the environment's
// credentials are joined to it) nor one written in the URL; the refusal
// still names sink, and no store is created.
func TestRelayRefusalsHideTheSinkPassword(t *testing.T) {
	const secret = "s3cr3t-pw"
	dir := t.TempDir()
	q := filepath.Join(dir, "q.db")
	env := []string{sinkUserEnv + "=alice", sinkPasswordEnv + "=" + secret}
	for _, c := range []struct {
		env  []string
		sink string
	}{
		{env, "https://127.0.0.1:0/hook"},
		{env, "https://127.0.0.1:99999/hook"},
		{env, "http:///hook"},
		{nil, "https://alice:" + secret + "@127.0.0.1:0/hook"},
		{nil, "ftp://alice:" + secret + "@127.0.0.1/hook"},
		{nil, "https://alice:" + secret + "@127.0.0.1/ hook"},
	} {
		_, stderr, code := cliEnv(t, c.env, "", "relay", "--queue", q, "--sink", c.sink)
		if code == 0 || !strings.Contains(stderr, "invalid_input: sink") {
			t.Errorf("--sink %q: exit %d, %q; want invalid_input naming sink", c.sink, code, stderr)
		}
		if strings.Contains(stderr, secret) {
			t.Errorf("--sink %q: the refusal shows the password: %s", c.sink, stderr)
		}
	}
	if _, err := os.Stat(q); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused relay left %s (%v)", q, err)
	}
}
