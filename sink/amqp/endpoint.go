package amqp

import (
	"net/url"
	"strings"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/fairrelay/fairrelay/sink/topic"

	"github.com/fairrelay/fairrelay/sink"
)

// Endpoint is a parsed amqp:// (or amqps://) URL of the command line:
//
//	amqp://HOST[:PORT][/VHOST][?exchange=TEMPLATE][&routing_key=TEMPLATE][&queue=NAME]
//
// exchange and routing_key are the sink's Options (the relay's --sink);
// queue is the queue a consumer reads (receive's --from), bound to the
// exchange with the routing key's template where the flow's token becomes
// '*' (one topic word). The vhost is the URL's path ("/" when absent;
// "%2F" is "/"). Credentials never travel in the URL (it shows in ps): see
// Credentials.
type Endpoint struct {
	// Server is the broker's URL without query, user or password.
	Server string
	// Exchange and RoutingKey are the templates; the defaults when the URL
	// has none.
	Exchange, RoutingKey string
	// Queue is the value of the queue parameter, "" when absent.
	Queue string
}

// ParseEndpoint parses raw. Errors: fairrelay.ErrInvalidInput naming field
// (the flag the URL came from) for a URL that is not amqp://HOST…, user
// information in it, or an unknown or repeated parameter; naming "exchange",
// "routing_key" or "queue" for a bad value.
func ParseEndpoint(field, raw string) (Endpoint, error) {
	if bad := sink.BadSpace(raw); bad != "" {
		return Endpoint{}, invalid(field, "%s", bad)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") || u.Hostname() == "" || u.Fragment != "" {
		return Endpoint{}, invalid(field, "must be amqp://HOST[:PORT][/VHOST][?exchange=…&routing_key=…], got %q", sink.RedactURL(raw))
	}
	if u.User != nil {
		return Endpoint{}, invalid(field, "credentials may not be in the URL (it shows in ps): set them in the environment")
	}
	if bad := sink.BadPort(u); bad != "" {
		return Endpoint{}, invalid(field, "%s", bad)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return Endpoint{}, invalid(field, "query: %v", err)
	}
	e := Endpoint{Exchange: DefaultExchange, RoutingKey: DefaultRoutingKey}
	for k, v := range q {
		if len(v) != 1 {
			return Endpoint{}, invalid(field, "parameter %q given %d times", k, len(v))
		}
		switch k {
		case "exchange":
			e.Exchange = v[0]
		case "routing_key":
			e.RoutingKey = v[0]
		case "queue":
			e.Queue = v[0]
		default:
			return Endpoint{}, invalid(field, "unknown parameter %q (amqp:// takes exchange, routing_key and queue)", k)
		}
	}
	if _, err := ParseExchange(e.Exchange); err != nil {
		return Endpoint{}, err
	}
	if _, err := topic.Parse("routing_key", e.RoutingKey); err != nil {
		return Endpoint{}, err
	}
	if len(e.Queue) > MaxNameBytes {
		return Endpoint{}, invalid("queue", "%d bytes: AMQP allows %d", len(e.Queue), MaxNameBytes)
	}
	u.RawQuery = ""
	e.Server = u.String()
	if _, err := amqp091.ParseURI(e.Server); err != nil {
		return Endpoint{}, invalid(field, "%v", err)
	}
	return e, nil
}

// String returns the endpoint as a URL with its parameters, for logs (it
// never holds credentials).
func (e Endpoint) String() string {
	q := url.Values{"exchange": {e.Exchange}, "routing_key": {e.RoutingKey}}
	if e.Queue != "" {
		q.Set("queue", e.Queue)
	}
	// The placeholder stays readable: braces are fine in a log line.
	return e.Server + "?" + strings.ReplaceAll(q.Encode(), "%7Bflow%7D", topic.Placeholder)
}

// BindingKey is the routing key template with the flow's token as '*': the
// key that binds a queue of a topic exchange to every flow's messages.
func (e Endpoint) BindingKey() string {
	tpl, _ := topic.Parse("routing_key", e.RoutingKey)
	return tpl.Literal("*")
}

// Credentials authenticate a connection (SASL PLAIN). Empty, RabbitMQ's
// default account guest/guest is used, which RabbitMQ accepts from loopback
// only. The command line reads them from the environment.
type Credentials struct {
	User, Password string
}

// Dialer returns a Dialer for e: each call opens a connection named name
// (RabbitMQ's connection_name, shown by rabbitmqctl list_connections and the
// management UI), with a 5s limit on connecting and a 10s heartbeat.
func (e Endpoint) Dialer(name string, c Credentials) Dialer {
	return func() (*amqp091.Connection, error) {
		props := amqp091.NewConnectionProperties()
		props.SetClientConnectionName(name)
		cfg := amqp091.Config{Properties: props, Heartbeat: 10 * time.Second, Locale: "en_US",
			Dial: amqp091.DefaultDial(5 * time.Second)}
		if c.User != "" || c.Password != "" {
			cfg.SASL = []amqp091.Authentication{&amqp091.PlainAuth{Username: c.User, Password: c.Password}}
		}
		return amqp091.DialConfig(e.Server, cfg)
	}
}
