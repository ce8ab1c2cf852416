package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/consume"
	"github.com/fairrelay/fairrelay/sink"
	"github.com/fairrelay/fairrelay/sink/amqp"
	"github.com/fairrelay/fairrelay/sink/jetstream"
	"github.com/fairrelay/fairrelay/sink/topic"
)

// The environment variables relay and receive read a broker's credentials
// from: a command line is visible to every user of the machine (ps), the
// environment is not, so a URL with credentials in it is refused.
const (
	brokerUserEnv     = "FAIRRELAY_BROKER_USER"
	brokerPasswordEnv = "FAIRRELAY_BROKER_PASSWORD"
	brokerTokenEnv    = "FAIRRELAY_BROKER_TOKEN" // NATS token authentication
	brokerCredsEnv    = "FAIRRELAY_BROKER_CREDS" // NATS: the path of a .creds file
)

// brokerEnvHelp is the flags' note on credentials.
const brokerEnvHelp = "credentials from $" + brokerUserEnv + " and $" + brokerPasswordEnv + " (NATS also $" + brokerTokenEnv + " or $" + brokerCredsEnv + "), never in the URL"

// noCredentials refuses a broker URL that carries credentials, naming the
// variables they go in instead (the sink packages refuse it too, but know
// nothing of the CLI's environment).
func noCredentials(field, raw string) error {
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: field, Message: "credentials may not be in the URL (it shows in ps): set $" + brokerUserEnv + " and $" + brokerPasswordEnv + " (NATS also $" + brokerTokenEnv + " or $" + brokerCredsEnv + ") instead"}
	}
	return nil
}

// The webhook sink's HTTP basic auth, for a receiver behind a proxy that
// asks for it (deliveries are signed either way: --secret).
const (
	sinkUserEnv     = "FAIRRELAY_SINK_USER"
	sinkPasswordEnv = "FAIRRELAY_SINK_PASSWORD"
)

// webhookURL returns the URL the webhook sink posts to: raw, with
// $FAIRRELAY_SINK_USER and $FAIRRELAY_SINK_PASSWORD (read through getenv)
// as its basic auth when the user is set. Credentials in raw itself still
// work, as they always did, but show in ps (the relay logs raw redacted):
// inURL says so, for the caller to warn. Both at once are refused
// (invalid_input naming sink), as is a password without a user.
func webhookURL(raw string, getenv func(string) string) (target string, inURL bool, err error) {
	u, perr := url.Parse(raw)
	if perr != nil {
		return raw, false, nil // webhook.New says what is wrong with it
	}
	user, pass := getenv(sinkUserEnv), getenv(sinkPasswordEnv)
	switch {
	case user == "" && pass != "":
		return "", false, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "sink", Message: "$" + sinkPasswordEnv + " is set without $" + sinkUserEnv}
	case user != "" && u.User != nil:
		return "", false, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "sink", Message: "credentials both in the URL and in $" + sinkUserEnv + ": give them once, in the environment (the URL shows in ps)"}
	case user != "":
		u.User = url.UserPassword(user, pass)
		return u.String(), false, nil
	}
	return raw, u.User != nil, nil
}

// underFlag puts an invalid_input error about one of a broker URL's
// parameters (subject, stream, durable, exchange, routing_key, queue)
// under the flag the URL came in, so that the line names both: `sink:
// subject: …`, as checkDestination names them. Other errors pass as they
// are.
func underFlag(flag string, err error) error {
	var fe *fairrelay.Error
	if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field == flag || fe.Field == "" {
		return err
	}
	return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: flag, Message: fe.Field + ": " + fe.Message, Err: fe.Err}
}

// schemeOf returns raw's URL scheme, "" when it has none.
func schemeOf(raw string) string {
	// The text before "://", not url.Parse's answer: a URL that does not
	// parse (nats://host:4222 with a space after it) is still meant for
	// its scheme's parser, whose error says what is wrong (a fresh user
	// got the generic "must be an http(s):// receiver…").
	scheme, _, ok := strings.Cut(raw, "://")
	if !ok {
		return ""
	}
	return strings.ToLower(scheme)
}

// isBroker reports whether a --sink or --from URL names a broker.
func isBroker(raw string) bool {
	switch schemeOf(raw) {
	case "nats", "amqp", "amqps":
		return true
	}
	return false
}

// brokerSink opens the sink of a nats:// or amqp(s):// --sink URL. shown is
// the URL to log (it holds no credentials); closeSink releases the
// connection.
func brokerSink(raw string, workers int, timeout time.Duration, log *slog.Logger) (s sink.Sink, shown string, closeSink func(), err error) {
	if err := noCredentials("sink", raw); err != nil {
		return nil, "", nil, err
	}
	if schemeOf(raw) == "nats" {
		e, err := jetstream.ParseEndpoint("sink", raw)
		if err != nil {
			return nil, "", nil, underFlag("sink", err)
		}
		// A server that is not up yet is an outage, not a usage error: the
		// relay starts, its deliveries are retried, and it connects when it
		// can, as the RabbitMQ sink does.
		nc, err := jetstream.Connect(e, jetstream.ConnectOptions{Name: "fairrelay relay", Credentials: natsCredentials(), Logger: log, Retry: true})
		if err != nil {
			return nil, "", nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "sink", Message: err.Error()}
		}
		js, err := jetstream.New(jetstream.Options{Conn: nc, Subject: e.Subject, Stream: e.Stream, Timeout: timeout})
		if err != nil {
			nc.Close()
			return nil, "", nil, err
		}
		if err := checkDestination(js, e.Subject == "" || strings.Contains(e.Subject, topic.Placeholder), e.String(), log); err != nil {
			nc.Close()
			return nil, "", nil, err
		}
		return js, e.String(), nc.Close, nil
	}
	e, err := amqp.ParseEndpoint("sink", raw)
	if err != nil {
		return nil, "", nil, underFlag("sink", err)
	}
	as, err := amqp.New(amqp.Options{Dial: e.Dialer("fairrelay relay", amqpCredentials()), Exchange: e.Exchange,
		RoutingKey: e.RoutingKey, Timeout: timeout, Channels: workers, Logger: log})
	if err != nil {
		return nil, "", nil, err
	}
	if err := checkDestination(as, strings.Contains(e.Exchange, topic.Placeholder), e.String(), log); err != nil {
		as.Close()
		return nil, "", nil, err
	}
	return as, e.String(), func() { as.Close() }, nil
}

// checkTimeout bounds the broker's answer to a sink's Check at start.
const checkTimeout = 5 * time.Second

// checkDestination asks the broker for the sink's destination before the
// relay starts (amqp.Sink.Check, jetstream.Sink.Check): a missing one
// would reject every delivery and quarantine each head (a fresh user's
// typo of an exchange did). One that does not name the flow refuses the
// start, invalid_input naming sink; one that does was asked for by a
// sample flow, so the relay starts and warns, unless the answer is about
// the NATS stream= itself, which holds for every flow (refused). A broker that does not
// answer is an outage: the relay starts, warns, and retries deliveries.
func checkDestination(c interface{ Check(context.Context) error }, byFlow bool, shown string, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	err := c.Check(ctx)
	var fe *fairrelay.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &fe) && fe.Code == fairrelay.CodeInvalidInput && (!byFlow || fe.Field == "stream"):
		// A stream that does not exist, or that cannot capture the
		// sample's subject, fails every flow's delivery: JetStream's
		// streams never share a subject, so no other flow's subject of the
		// template lands in it either.
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "sink", Message: fmt.Sprintf("%s: %s", fe.Field, fe.Message)}
	case fe != nil && fe.Code == fairrelay.CodeInvalidInput:
		log.Warn("relay: the broker has no destination for a sample flow; deliveries of flows without one will be rejected and their heads quarantined",
			"sink", shown, "check", fmt.Sprintf("%s: %s", fe.Field, fe.Message))
	default:
		log.Warn("relay: could not ask the broker for the sink's destination; starting, and retrying deliveries until it answers", "sink", shown, "error", err)
	}
	return nil
}

// brokerConsumer parses a nats:// or amqp(s):// --from URL and, for NATS,
// connects. run then applies the messages through opts.Inbox until ctx is
// done, calling ready once the stream or queue and the consumer exist;
// shown is the URL to log; release closes the connection.
func brokerConsumer(raw string, log *slog.Logger) (shown string, run func(ctx context.Context, opts consume.Options, ready func()) error, release func(), err error) {
	if err := noCredentials("from", raw); err != nil {
		return "", nil, nil, err
	}
	if schemeOf(raw) == "nats" {
		e, err := jetstream.ParseEndpoint("from", raw)
		if err != nil {
			return "", nil, nil, underFlag("from", err)
		}
		if e.Stream == "" || e.Durable == "" {
			return "", nil, nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "from", Message: "a nats:// URL to consume from names stream=NAME and durable=NAME"}
		}
		subj, err := jetstream.ParseSubject(e.Subject)
		if err == nil {
			err = subj.CheckWildcard("subject")
		}
		if err != nil {
			return "", nil, nil, underFlag("from", err)
		}
		nc, err := jetstream.Connect(e, jetstream.ConnectOptions{Name: "fairrelay receive", Credentials: natsCredentials(), Logger: log})
		if err != nil {
			return "", nil, nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "from", Message: err.Error()}
		}
		// The consumer reads the subjects of its own template only: a
		// stream that captures more (another setup's prefix, an
		// application's own subjects) would otherwise hand it events that
		// are not its relay's. A stream that captures none of them is
		// refused by the server when the consumer is made.
		wildcard := subj.Literal("*")
		return e.String(), func(ctx context.Context, opts consume.Options, ready func()) error {
			return jetstream.Consume(ctx, jetstream.ConsumerOptions{Conn: nc, Stream: e.Stream, Durable: e.Durable,
				Subjects: []string{wildcard}, FilterSubject: wildcard, Ready: ready}, opts)
		}, nc.Close, nil
	}
	e, err := amqp.ParseEndpoint("from", raw)
	if err != nil {
		return "", nil, nil, underFlag("from", err)
	}
	if e.Queue == "" {
		return "", nil, nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "from", Message: "an amqp:// URL to consume from names queue=NAME"}
	}
	if key, err := topic.Parse("routing_key", e.RoutingKey); err != nil {
		return "", nil, nil, underFlag("from", err)
	} else if err := key.CheckWildcard("routing_key"); err != nil {
		return "", nil, nil, underFlag("from", err)
	}
	if strings.Contains(e.Exchange, topic.Placeholder) {
		return "", nil, nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "from",
			Message: "exchange: a consumer binds its queue to one exchange: " + topic.Placeholder + " in the exchange is for the relay's sink"}
	}
	// Connect before the inbox is opened, as for NATS: a broker that
	// cannot be reached (a wrong port, refused credentials) is refused
	// with the field named and creates no inbox. Consume's first dial
	// takes this connection; its reconnections dial anew.
	dial := e.Dialer("fairrelay receive", amqpCredentials())
	first, err := dial()
	if err != nil {
		return "", nil, nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "from", Message: "amqp: connect: " + err.Error()}
	}
	var mu sync.Mutex
	take := func() *amqp091.Connection {
		mu.Lock()
		defer mu.Unlock()
		c := first
		first = nil
		return c
	}
	return e.String(), func(ctx context.Context, opts consume.Options, ready func()) error {
			return amqp.Consume(ctx, amqp.ConsumerOptions{Dial: func() (*amqp091.Connection, error) {
				if c := take(); c != nil {
					return c, nil
				}
				return dial()
			}, Queue: e.Queue, Exchange: e.Exchange, BindingKey: e.BindingKey(), Logger: log, Ready: ready}, opts)
		}, func() {
			if c := take(); c != nil { // never used: the inbox did not open
				c.Close()
			}
		}, nil
}

func natsCredentials() jetstream.Credentials {
	return jetstream.Credentials{User: os.Getenv(brokerUserEnv), Password: os.Getenv(brokerPasswordEnv),
		Token: os.Getenv(brokerTokenEnv), CredsFile: os.Getenv(brokerCredsEnv)}
}

func amqpCredentials() amqp.Credentials {
	return amqp.Credentials{User: os.Getenv(brokerUserEnv), Password: os.Getenv(brokerPasswordEnv)}
}
