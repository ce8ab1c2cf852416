package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/console"
	"github.com/fairrelay/fairrelay/inbox"
)

func init() { rootCmd.AddCommand(newConsoleCmd()) }

// consoleFlags are the console's flags, shared by `console` and `relay
// --console-addr`.
type consoleFlags struct {
	tokens, authHeader, readOnly, certFile, keyFile string
}

// consoleFlagNames are the flags register adds.
var consoleFlagNames = []string{"tokens", "auth-header", "readonly-users", "tls-cert", "tls-key"}

func (c *consoleFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&c.tokens, "tokens", "", "console: require signing in with a token of this `FILE` (made by fairrelay console token add)")
	f.StringVar(&c.authHeader, "auth-header", "", "console: trust this header, set by an authenticating proxy, to name the user (e.g. X-Forwarded-User); only behind that proxy")
	f.StringVar(&c.readOnly, "readonly-users", "", "console, with --auth-header: comma-separated users who may only read")
	f.StringVar(&c.certFile, "tls-cert", "", "console: serve HTTPS with this certificate (and --tls-key)")
	f.StringVar(&c.keyFile, "tls-key", "", "console: the TLS key")
}

// config checks the flags for a console on addr (the flag field).
func (c *consoleFlags) config(field, addr string, q *fairrelay.Queue, in *inbox.Inbox, log *slog.Logger) (console.Config, error) {
	cfg := console.Config{Queue: q, Inbox: in, AuthHeader: c.authHeader, LocalOperator: osUser(), Logger: log}
	if c.authHeader != "" {
		if err := console.CheckAuthHeader(c.authHeader); err != nil {
			return cfg, err
		}
	}
	if c.tokens != "" {
		t, err := console.LoadTokens(c.tokens)
		if err != nil {
			// The field names the flag; the library's own "tokens: " prefix
			// would say it twice.
			return cfg, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "tokens", Err: trimmedError{err, "tokens: "}}
		}
		cfg.Tokens = t
	}
	if c.readOnly != "" {
		if c.authHeader == "" {
			return cfg, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "readonly-users", Message: "is for --auth-header users (a token file marks its read-only users itself)"}
		}
		cfg.ReadOnlyUsers = strings.Split(c.readOnly, ",")
	}
	if (c.certFile == "") != (c.keyFile == "") {
		return cfg, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "tls-key", Message: "give both --tls-cert and --tls-key"}
	}
	if c.certFile != "" {
		// Loaded here, before anything starts: the server loads them only
		// once it serves, so a missing or mismatched file stopped the
		// console while the relay beside it ran on (a breaker's report).
		if _, err := tls.LoadX509KeyPair(c.certFile, c.keyFile); err != nil {
			return cfg, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "tls-cert", Message: fmt.Sprintf("cannot load the certificate and key: %v", err)}
		}
	}
	if fairrelay.CheckID("operator", cfg.LocalOperator) != nil {
		cfg.LocalOperator = "console"
	}
	if err := console.CheckAddr(addr, cfg); err != nil {
		var fe *fairrelay.Error
		if errors.As(err, &fe) {
			fe.Field = field
		}
		return cfg, err
	}
	return cfg, nil
}

// listenConsole listens on addr for a console: before any store is opened, so
// that an address in use, or no address at all, is refused with nothing
// created or migrated (a breaker's report: relay --console-addr
// 127.0.0.1:99999 created the queue store first). Errors: ErrInvalidInput
// naming field.
//
// Until start serves on it, the listener answers every connection itself
// (startingListener): a console waiting for its store (a PostgreSQL server
// down at start) took connections into the listener's backlog and never
// answered them, so a probe hung (an SRE's drill: two curls, ten minutes).
func listenConsole(field, addr string, tlsConsole bool) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: field, Message: err.Error()}
	}
	return newStartingListener(ln.(*net.TCPListener), tlsConsole), nil
}

// startingListener is a console's listener before the console serves on it:
// a goroutine answers each connection — a plain console's with 503
// {"status":"starting",…} and Retry-After: 1, a TLS console's by closing it
// (its certificate is loaded when it begins to serve) — until ready (or
// Close) stops it.
type startingListener struct {
	*net.TCPListener
	once sync.Once
	stop func()
	done chan struct{}
}

// startingAnswer is what a console that waits for its store answers.
const startingAnswer = `{"status":"starting","error":"the console is waiting for its store; try again"}`

func newStartingListener(ln *net.TCPListener, tlsConsole bool) *startingListener {
	l := &startingListener{TCPListener: ln, done: make(chan struct{})}
	stopping := make(chan struct{})
	go func() {
		defer close(l.done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				select {
				case <-stopping:
					return
				default:
				}
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					continue
				}
				return // closed
			}
			go answerStarting(conn, tlsConsole)
		}
	}()
	l.stop = func() {
		close(stopping)
		ln.SetDeadline(time.Now()) // ends the Accept under way
		<-l.done
		ln.SetDeadline(time.Time{})
	}
	return l
}

// answerStarting answers one connection of a console that is not serving
// yet, and closes it.
func answerStarting(conn net.Conn, tlsConsole bool) {
	defer conn.Close()
	if tlsConsole {
		return
	}
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	req, err := http.ReadRequest(bufio.NewReader(conn))
	if err != nil {
		return
	}
	req.Body.Close()
	fmt.Fprintf(conn, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(startingAnswer), startingAnswer)
}

// ready stops answering: the console serves on the listener from now on.
func (l *startingListener) ready() { l.once.Do(l.stop) }

// Close stops answering and closes the listener.
func (l *startingListener) Close() error {
	l.ready()
	return l.TCPListener.Close()
}

// start serves the console on ln until ctx is done (closing ln on an
// error); it returns the console's URL, and wait, which waits for the
// server to stop. A server that stops on an error calls fail ("the
// console", and the error: invalid_input naming tls-cert for a
// certificate and key it could not load when it began to serve, changed
// since config checked them), so that the daemon stops with it (serving).
func (c *consoleFlags) start(ctx context.Context, ln net.Listener, cfg console.Config, fail func(what string, err error)) (url string, wait func(), err error) {
	if sl, ok := ln.(*startingListener); ok {
		sl.ready()
	}
	srv, err := console.New(cfg)
	if err != nil {
		ln.Close()
		return "", nil, err
	}
	scheme := "http"
	if c.certFile != "" {
		scheme = "https"
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := console.Serve(ctx, ln, srv, c.certFile, c.keyFile, cfg.Logger)
		if errors.Is(err, console.ErrCertificate) {
			err = &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "tls-cert", Message: "the console could not serve", Err: err}
		}
		if err != nil {
			fail("the console", err)
		}
	}()
	return scheme + "://" + ln.Addr().String() + "/", func() { <-done }, nil
}

func newConsoleCmd() *cobra.Command {
	var queue, inboxDSN, addr string
	var logs logFlags
	var cf consoleFlags
	cmd := &cobra.Command{
		Use:   "console --queue Q [--inbox I] [--addr 127.0.0.1:8081] [--tokens FILE | --auth-header H]",
		Short: "Serve the operator console: overview, flows, events, quarantine, audit; redrive, expedite, pause, resume",
		Long: `Serves the operator console over HTTP until SIGINT or SIGTERM (see
docs/console.md). It prints {"status":"listening","url":…} once it listens.

Without --tokens or --auth-header there is no sign-in: it then serves only a
loopback address, and every action is audited under the OS account running
it. --tokens FILE requires a token of the file (its lines: "NAME SHA256-HEX"
for an operator, "NAME SHA256-HEX readonly" for a read-only user; add one
with 'fairrelay console token add NAME --tokens FILE'). --auth-header H trusts
the header H, set by an authenticating proxy, to name the user.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			ctx, fail := serving(cmd.Context())
			defer func() { err = stoppedBeforeStart(cmd, serverFailed(ctx, err)) }()
			log, err := logs.logger()
			if err != nil {
				return err
			}
			log = capRepeats(log) // a failing store fails every request alike
			// Checked, and listening, before any store is opened.
			if _, err := cf.config("addr", addr, nil, nil, log); err != nil {
				return err
			}
			ln, err := listenConsole("addr", addr, cf.certFile != "")
			if err != nil {
				return err
			}
			defer ln.Close() // for a return before it serves
			// A store that does not answer yet is waited for, as relay and
			// receive wait for theirs.
			var q *fairrelay.Queue
			if err := untilStoreAnswers(ctx, log, "console", func() (err error) {
				q, err = openExistingQueue(ctx, namedFor(queue, "console"), fairrelay.DaemonPolicy(), nil)
				return err
			}); err != nil {
				return err // a signal: stoppedBeforeStart
			}
			defer q.Close()
			var in *inbox.Inbox
			if inboxDSN != "" {
				// The console only reads the inbox: opened read-only, a
				// newer console does not migrate it under older receivers.
				if err := untilStoreAnswers(ctx, log, "console", func() (err error) {
					in, err = openInbox(ctx, namedFor(inboxDSN, "console"), inbox.Options{ReadOnly: true})
					return err
				}); err != nil {
					return err // a signal: stoppedBeforeStart
				}
				defer in.Close()
			}
			cfg, err := cf.config("addr", addr, q, in, log)
			if err != nil {
				return err
			}
			url, wait, err := cf.start(ctx, ln, cfg, fail)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "{\"status\":\"listening\",\"url\":%q}\n", url)
			wait()
			// As relay and receive end: a stopped console said nothing
			// after "stopping gracefully" (a fresh user's report).
			log.Info("console: stopped")
			return nil // or the server's error: serverFailed
		},
	}
	f := cmd.Flags()
	f.StringVar(&queue, "queue", "", "queue store: a SQLite file path or a postgres:// URL")
	f.StringVar(&inboxDSN, "inbox", "", "inbox store, to show the receiver's projection (optional)")
	f.StringVar(&addr, "addr", "127.0.0.1:8081", "where to listen")
	logs.register(f)
	cf.register(cmd)
	cmd.AddCommand(newConsoleTokenCmd())
	return cmd
}

func newConsoleTokenCmd() *cobra.Command {
	tok := &cobra.Command{Use: "token", Short: "Manage the console's token file"}
	var tokens string
	var readOnly bool
	add := &cobra.Command{
		Use:   "add NAME --tokens FILE [--readonly]",
		Short: "Add a user to a token file and print their new token, once",
		Long: `Appends "NAME SHA256-HEX" (with --readonly, "NAME SHA256-HEX readonly") to
FILE, created with mode 0600 when missing, and prints the new random token
once: only its hash is stored, so it cannot be shown again. NAME is the
audit operator of the user's actions.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if tokens == "" {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "tokens", Message: "missing: give --tokens FILE"}
			}
			t, err := console.AddToken(tokens, args[0], readOnly)
			var fe *fairrelay.Error
			if err != nil && !errors.As(err, &fe) {
				// The file's own problems (a directory, a malformed line),
				// named as the flag, as console --tokens names them.
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "tokens", Err: trimmedError{err, "tokens: "}}
			}
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), t)
			return nil
		},
	}
	add.Flags().StringVar(&tokens, "tokens", "", "the token file")
	add.Flags().BoolVar(&readOnly, "readonly", false, "a read-only user: may read every page, act on nothing")
	tok.AddCommand(add)
	return tok
}

// trimmedError is err with prefix left out of its message (a field the
// error that wraps it names already), still err for errors.Is and
// errors.As.
type trimmedError struct {
	err    error
	prefix string
}

func (e trimmedError) Error() string { return strings.TrimPrefix(e.err.Error(), e.prefix) }
func (e trimmedError) Unwrap() error { return e.err }
