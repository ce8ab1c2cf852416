package jetstream

import (
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fairrelay/fairrelay/sink/topic"

	"github.com/fairrelay/fairrelay/sink"
)

// Endpoint is a parsed nats:// URL of the command line:
//
//	nats://HOST[:PORT][?subject=TEMPLATE][&stream=NAME][&durable=NAME]
//
// subject and stream are the sink's Options (the relay's --sink); stream and
// durable name the stream and the durable consumer to read (receive's
// --from). Credentials never travel in the URL (it shows in ps): see
// Credentials.
type Endpoint struct {
	// Server is the server's URL without query: nats://HOST:PORT (4222 when
	// the URL gives no port).
	Server string
	// Subject is the subject template; DefaultSubject when the URL has none.
	Subject string
	// Stream and Durable are the values of those parameters, "" when absent.
	Stream, Durable string
}

// ParseEndpoint parses raw. Errors: fairrelay.ErrInvalidInput naming field
// (the flag the URL came from) for a URL that is not nats://HOST[:PORT], user
// information in it, or an unknown or repeated parameter; naming "subject"
// or "stream" for a bad value.
func ParseEndpoint(field, raw string) (Endpoint, error) {
	if bad := sink.BadSpace(raw); bad != "" {
		return Endpoint{}, invalid(field, "%s", bad)
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "nats" || u.Hostname() == "" || (u.Path != "" && u.Path != "/") || u.Fragment != "" {
		return Endpoint{}, invalid(field, "must be nats://HOST[:PORT][?subject=…&stream=…], got %q", sink.RedactURL(raw))
	}
	if u.User != nil {
		return Endpoint{}, invalid(field, "credentials may not be in the URL (it shows in ps): set them in the environment")
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return Endpoint{}, invalid(field, "query: %v", err)
	}
	e := Endpoint{Subject: DefaultSubject}
	for k, v := range q {
		if len(v) != 1 {
			return Endpoint{}, invalid(field, "parameter %q given %d times", k, len(v))
		}
		switch k {
		case "subject":
			e.Subject = v[0]
		case "stream":
			e.Stream = v[0]
		case "durable":
			e.Durable = v[0]
		default:
			return Endpoint{}, invalid(field, "unknown parameter %q (nats:// takes subject, stream and durable)", k)
		}
	}
	if _, err := ParseSubject(e.Subject); err != nil {
		return Endpoint{}, err
	}
	if e.Stream != "" && !validStreamName(e.Stream) {
		return Endpoint{}, invalid("stream", "%q is not a stream name (no spaces, '.', '*', '>', '/' or '\\')", e.Stream)
	}
	if e.Durable != "" && !validStreamName(e.Durable) {
		return Endpoint{}, invalid("durable", "%q is not a consumer name (no spaces, '.', '*', '>', '/' or '\\')", e.Durable)
	}
	host := u.Host
	if bad := sink.BadPort(u); bad != "" {
		return Endpoint{}, invalid(field, "%s", bad)
	}
	if u.Port() == "" {
		host += ":4222"
	}
	e.Server = (&url.URL{Scheme: "nats", Host: host}).String()
	return e, nil
}

// String returns the endpoint as a URL with its parameters, for logs (it
// never holds credentials).
func (e Endpoint) String() string {
	q := url.Values{"subject": {e.Subject}}
	if e.Stream != "" {
		q.Set("stream", e.Stream)
	}
	if e.Durable != "" {
		q.Set("durable", e.Durable)
	}
	// The placeholder stays readable: braces are fine in a log line.
	return e.Server + "?" + strings.ReplaceAll(q.Encode(), "%7Bflow%7D", topic.Placeholder)
}

// Credentials authenticate a connection; the zero value connects without.
// The command line reads them from the environment.
type Credentials struct {
	// User and Password: user/password authentication.
	User, Password string
	// Token: token authentication.
	Token string
	// CredsFile: the path of a .creds file (a JWT and an NKey seed).
	CredsFile string
}

// ConnectOptions configure Connect.
type ConnectOptions struct {
	// Name is the connection's name in the server's monitoring.
	Name string
	// Credentials authenticate the connection.
	Credentials Credentials
	// Logger receives a line when the connection drops (warn; not when its
	// owner closes it, which is logged at debug), comes back (info) or the
	// server reports an asynchronous error (warn); with
	// Retry, also when the first connection fails (warn, once) and when it
	// is made at last (info). Defaults to slog.Default(); give
	// slog.New(slog.DiscardHandler) to drop them.
	Logger *slog.Logger
	// Retry makes a server that cannot be reached at first (or refuses the
	// login) a passing condition, as a connection lost later is: Connect
	// returns the connection at once, still connecting, and it keeps
	// trying every 250 ms for ever. A Sink on it answers every delivery
	// with an error (transient) until the first connection is made. For a
	// publisher such as the relay, which must outlive a broker that starts
	// after it; a consumer is better off failing loudly at start (a typo
	// is not an outage).
	Retry bool
}

// Connect connects to e.Server, reconnecting every 250 ms for ever when the
// connection drops (publishes made meanwhile wait in the client's buffer,
// up to their timeout); a connection that stops answering without closing
// is taken for dropped after 3 pings 10 s apart go unanswered. Without opts.Retry it fails when the first
// connection cannot be made within 5s; with it, only when
// opts.Credentials.CredsFile cannot be read.
func Connect(e Endpoint, opts ConnectOptions) (*nats.Conn, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	c := opts.Credentials
	if c.CredsFile != "" {
		// The client reads it only while connecting: with Retry, a missing
		// file would be retried for ever.
		if _, err := os.ReadFile(c.CredsFile); err != nil {
			return nil, fmt.Errorf("jetstream: credentials file: %w", err)
		}
	}
	nopts := []nats.Option{nats.Name(opts.Name), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond),
		nats.Timeout(5 * time.Second),
		// A connection that went dead without a FIN or a reset (a
		// partition, a frozen server) is found by pings: nats.go's
		// default, one every 2 minutes and 2 unanswered, left a consumer
		// and a relay on it for 6 minutes (a breaker's report; the AMQP
		// side's heartbeat finds it in about 30 s). Here within about 30 s.
		nats.PingInterval(10 * time.Second), nats.MaxPingsOutstanding(3),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if nc.IsClosed() {
				return // closed by its owner: not an outage
			}
			log.Warn("nats: disconnected; reconnecting", "server", e.Server, "err", err)
		}),
		nats.ClosedHandler(func(*nats.Conn) { log.Debug("nats: closed", "server", e.Server) }),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("nats: reconnected", "server", nc.ConnectedUrlRedacted()) }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { log.Warn("nats: server error", "err", err) }),
	}
	if opts.Retry {
		// The client reports every failed attempt, 4 a second: only the
		// first before the first connection is logged (later outages
		// have the disconnect line above).
		var connected, warned atomic.Bool
		nopts = append(nopts, nats.RetryOnFailedConnect(true), nats.IgnoreAuthErrorAbort(),
			nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
				if !connected.Load() && warned.CompareAndSwap(false, true) {
					log.Warn("nats: cannot connect; trying again every 250ms (deliveries are retried meanwhile)", "server", e.Server, "err", err)
				}
			}),
			nats.ConnectHandler(func(nc *nats.Conn) {
				connected.Store(true)
				log.Info("nats: connected", "server", nc.ConnectedUrlRedacted())
			}))
	}
	if c.User != "" || c.Password != "" {
		nopts = append(nopts, nats.UserInfo(c.User, c.Password))
	}
	if c.Token != "" {
		nopts = append(nopts, nats.Token(c.Token))
	}
	if c.CredsFile != "" {
		nopts = append(nopts, nats.UserCredentials(c.CredsFile))
	}
	nc, err := nats.Connect(e.Server, nopts...)
	if err != nil {
		return nil, fmt.Errorf("jetstream: connect to %s: %w", e.Server, err)
	}
	return nc, nil
}
