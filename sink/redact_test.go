package sink_test

import (
	"strings"
	"testing"

	"github.com/fairrelay/fairrelay/sink"
	"github.com/fairrelay/fairrelay/sink/amqp"
	"github.com/fairrelay/fairrelay/sink/jetstream"
	"github.com/fairrelay/fairrelay/sink/webhook"
)

func TestRedactURL(t *testing.T) {
	for _, c := range []struct{ raw, want string }{
		{"https://alice:s3cr3t@127.0.0.1:0/hook", "https://alice:xxxxx@127.0.0.1:0/hook"},
		{"http://alice:s3cr3t@/hook", "http://alice:xxxxx@/hook"},
		{"http://alice:p@ss@host/x", "http://alice:xxxxx@host/x"}, // an @ not encoded: the last one ends it
		{"amqp://u:pw@", "amqp://u:xxxxx@"},
		{"http://alice@host/x", "http://alice@host/x"}, // no password
		{"http://host/a:b@c", "http://host/a:b@c"},     // not user information: the path's
		{"http://host:8080/", "http://host:8080/"},
		{"not a url", "not a url"},
		{"http://u:pw@host /x", "http://u:xxxxx@host /x"}, // one that does not parse
		// A password holding '/', '?' or '#' not encoded: it ends what
		// url.Parse takes for the authority, and was shown whole.
		{"http://u:hunter#2@127.0.0.1:9/", "http://u:xxxxx@127.0.0.1:9/"},
		{"http://u:a/b@host/x", "http://u:xxxxx@host/x"},
		{"amqp://u:a?b@host", "amqp://u:xxxxx@host"},
		{"http://u:123#x@host/", "http://u:xxxxx@host/"},
		{"http://host:80/a@b", "http://host:xxxxx@b"}, // a path's '@' after a port: too much hidden, nothing shown
	} {
		if got := sink.RedactURL(c.raw); got != c.want {
			t.Errorf("RedactURL(%q) = %q, want %q", c.raw, got, c.want)
		}
	}
}

// No sink's refusal of its URL shows a password given in it: every
// parser, every way the URL can be wrong (a breaker: the webhook's port
// and host errors quoted the URL whole, with the password the CLI had
// joined to it from $FAIRRELAY_SINK_PASSWORD).
func TestURLErrorsHideThePassword(t *testing.T) {
	const secret = "s3cr3t-pw"
	parsers := map[string]func(string) error{
		"webhook.New":        func(raw string) error { _, err := webhook.New(webhook.Options{URL: raw, Unsigned: true}); return err },
		"webhook.CheckURL":   webhook.CheckURL,
		"amqp.ParseEndpoint": func(raw string) error { _, err := amqp.ParseEndpoint("sink", raw); return err },
		"jetstream.ParseEndpoint": func(raw string) error {
			_, err := jetstream.ParseEndpoint("sink", raw)
			return err
		},
	}
	for name, parse := range parsers {
		scheme := map[string]string{"amqp.ParseEndpoint": "amqp", "jetstream.ParseEndpoint": "nats"}[name]
		if scheme == "" {
			scheme = "https"
		}
		for _, raw := range []string{
			scheme + "://alice:" + secret + "@127.0.0.1:0/hook",     // port 0
			scheme + "://alice:" + secret + "@127.0.0.1:99999/hook", // port out of range
			scheme + "://alice:" + secret + "@/hook",                // no host
			scheme + "://alice:" + secret + "@host/ x",              // a space
			scheme + "://alice:" + secret + "#1@host/",              // a '#' in the password
			scheme + "://alice:" + secret + "/1@host/",              // a '/' in the password
			"ftp://alice:" + secret + "@host/",                      // another scheme
		} {
			err := parse(raw)
			if err == nil {
				t.Errorf("%s(%q): no error", name, raw)
				continue
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%s(%q): %v: shows the password", name, raw, err)
			}
		}
	}
}
