package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/console"
	"github.com/fairrelay/fairrelay/consume"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/errs"
	"github.com/fairrelay/fairrelay/sink"
	"github.com/fairrelay/fairrelay/sink/webhook"
)

func init() { rootCmd.AddCommand(newReceiveCmd()) }

func newReceiveCmd() *cobra.Command {
	var (
		inboxDSN, addr, from, secret, metricsAddr string
		logs                                      logFlags
		previous                                  []string
		maxDelta, maxBody                         int64
		tolerance                                 time.Duration
		limits                                    serverLimits
		mustExist                                 bool
		retain                                    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "receive --inbox I (--addr HOST:PORT [--secret S] | --from URL) [--max-delta N]",
		Short: "Run the inbox (SPEC §3) as an HTTP receiver, or as a consumer of a broker",
		Long: `Takes deliveries as POST / and answers {"status": "<outcome>"}: accepted,
duplicate, id_conflict, sequence_conflict, gap, unsupported_delta, invalid_body
or retry. With --secret, a request without a valid Standard Webhooks signature,
or whose Fairrelay-* headers differ from its signed webhook-id (which binds the
event id, flow and seq), gets 401 and nothing is written. Prints {"status":"listening","addr":...} on
stdout once it listens (--addr 127.0.0.1:0 picks a free port); stops on
SIGINT or SIGTERM.

With --from, it consumes from a broker instead of listening, applies each
message through the inbox and acks it only after the inbox committed
(accepted, duplicate); retry and errors are redelivered later. A message that
cannot apply yet (gap) or that the inbox refuses for good is held in the
inbox and acked, so that it holds up only its own flow: the flow's held
messages apply in order once their predecessor is, and a refused one is
retried (logged) until the cause is fixed ('inspect --inbox I held' lists
them). Prints {"status":"consuming","from":...} once the stream or queue
exists.

  nats://HOST[:PORT]?stream=NAME&durable=NAME[&subject=fairrelay.{flow}]
      the durable consumer NAME of the JetStream stream (created, with the
      subject's wildcard, when missing)
  amqp://HOST[:PORT][/VHOST]?queue=NAME[&exchange=amq.topic][&routing_key=fairrelay.{flow}]
      the queue NAME (declared durable when missing), bound to the exchange
      with the routing key's wildcard

With --metrics-addr it serves /metrics (requests by HTTP status and their
durations; with --from, messages by action and outcome, errors, and the
deliveries held in the inbox), /healthz and /readyz (a read of the inbox
answers: its database is reachable and still holds it).

Broker ` + brokerEnvHelp + `.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			// Its metrics server stopping on an error stops it too, and
			// it exits with that error.
			sctx, fail := serving(cmd.Context())
			defer func() { err = stoppedBeforeStart(cmd, serverFailed(sctx, err)) }()
			ctx := sctx
			secret, err := secretFlag(cmd, secret)
			if err != nil {
				return err
			}
			log, err := logs.logger()
			if err != nil {
				return err
			}
			// A failing inbox under load fails every request (or
			// message) alike: its lines are capped.
			log = capRepeats(log)
			if maxDelta < 0 {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "max-delta", Message: "must not be negative (0: no limit)"}
			}
			if retain < 0 {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "retain-receipts", Message: fmt.Sprintf("must not be negative (0: keep receipts for good), got %s", retain)}
			}
			if metricsAddr != "" {
				if err := checkListenAddr("metrics-addr", metricsAddr); err != nil {
					return err
				}
			}
			if maxBody < 1 {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "max-body-bytes", Message: fmt.Sprintf("must be a positive number of bytes, got %d", maxBody)}
			}
			if from != "" {
				if cmd.Flags().Changed("addr") || cmd.Flags().Changed("secret") || cmd.Flags().Changed("previous-secret") || cmd.Flags().Changed("max-body-bytes") {
					return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "from", Message: "consumes from a broker: --addr, --secret, --previous-secret and --max-body-bytes are for HTTP"}
				}
				if bad := sink.BadSpace(from); bad != "" {
					return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "from", Message: bad}
				}
				if !isBroker(from) {
					return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "from", Message: fmt.Sprintf("must be a nats:// or amqp:// URL, got %q", redactDSN(from))}
				}
				return receiveFromBroker(ctx, fail, cmd, inboxDSN, from, metricsAddr, maxDelta, mustExist, retain, log)
			}
			if err := limits.check(); err != nil {
				return err
			}
			// 0 is not "exact": the verifier would take its 5 min default.
			if tolerance <= 0 {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "tolerance", Message: fmt.Sprintf("must be a positive duration such as 5m, got %s", tolerance)}
			}
			opts := inbox.HandlerOptions{Logger: log, MaxConcurrent: limits.maxRequests, MaxBodyBytes: maxBody}
			if len(previous) > 0 && secret == "" {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "previous-secret", Message: "needs --secret (the new secret): it is what a rotation keeps accepting beside it"}
			}
			if secret != "" {
				key, err := webhookKey(log, "receive", secret)
				if err != nil {
					return err
				}
				var old [][]byte
				for _, p := range previous {
					if err := checkSecretList(log, "previous-secret", p); err != nil {
						return err
					}
					k, err := webhook.ParseSecret(p)
					if err != nil {
						var fe *fairrelay.Error
						if errors.As(err, &fe) {
							named := *fe
							named.Field = "previous-secret"
							return &named
						}
						return err
					}
					old = append(old, k)
				}
				v := webhook.NewVerifier(key, old...)
				v.Tolerance = tolerance
				opts.Verify = v.Verify
			} else {
				// Unsigned requests write to the inbox: only from this
				// machine, as the console without sign-in.
				host, _, err := net.SplitHostPort(addr)
				if err != nil {
					return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "addr", Message: fmt.Sprintf("want HOST:PORT, got %q", addr)}
				}
				if !console.LoopbackHost(host) {
					if host == "" {
						host = "every interface"
					}
					return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "secret", Message: fmt.Sprintf("required on %s, which is not a loopback address: without it anyone who can reach the port writes to the inbox (give --secret or $%s, the relay's)", host, secretEnv)}
				}
				log.Warn("receive: no --secret: unsigned requests are accepted (loopback only)")
			}
			// Every address first: a refused run creates no inbox, and
			// "listening" is said only once both listen.
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "addr", Message: err.Error()}
			}
			defer ln.Close() // for a return before it serves
			reg, ready, err := serveProbesEarly(metricsAddr, log, fail)
			if err != nil {
				return err
			}
			defer ready.stop()
			in, err := openInboxWaiting(ctx, inboxDSN, inbox.Options{MaxDelta: maxDelta}, mustExist, log)
			if err != nil {
				return err
			}
			defer in.Close()
			h := in.Handler(opts)
			if opts.Verify == nil {
				h = inbox.LoopbackOnly(h)
			}
			if reg != nil {
				if h, err = inbox.Instrument(reg, h); err != nil {
					return err
				}
				ready.set(inboxReady(in))
			}
			if err := printJSON(cmd.OutOrStdout(), map[string]string{"status": "listening", "addr": ln.Addr().String()}); err != nil {
				return err
			}
			log.Info("receive: listening", "addr", ln.Addr().String(), "inbox", redactDSN(inboxDSN), "max_delta", deltaLimit(maxDelta), "retain_receipts", retainShown(retain))
			ctx, stopWatch := watchInboxFile(ctx, in, isPostgresURL(inboxDSN), log)
			defer stopWatch()
			stopRetain, err := retainReceipts(ctx, in, retain, reg, log)
			if err != nil {
				return err
			}
			defer stopRetain()
			if err := serveUntilDone(ctx, ln, h, limits, log); err != nil {
				return err
			}
			return inboxReplaced(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&inboxDSN, "inbox", "", "inbox store: a SQLite file path or a postgres:// URL")
	f.StringVar(&addr, "addr", "127.0.0.1:8080", "HOST:PORT to listen on")
	f.StringVar(&from, "from", "", "consume from a broker instead: a nats:// or amqp:// URL (see above)")
	f.StringVar(&secret, "secret", "", "shared secret the relay signs with: whsec_<base64> or any string (default: $"+secretEnv+", which keeps it out of ps; set but empty, it is refused)")
	f.StringArrayVar(&previous, "previous-secret", nil, "a secret also accepted while relays switch to --secret (repeatable): rotate by adding the new one as --secret and the old one here, switch the relays, then drop this")
	f.BoolVar(&mustExist, "must-exist", false, "refuse to start when --inbox holds no inbox, instead of creating one (a SQLite file; a PostgreSQL inbox always must exist): for a service whose inbox 'fairrelay migrate --inbox' makes, so a misspelt path fails at start")
	f.Int64Var(&maxDelta, "max-delta", 0, "largest ledger delta supported; larger ones answer unsupported_delta (0: no limit)")
	f.Int64Var(&maxBody, "max-body-bytes", 1<<20, "HTTP: the largest request body read, in bytes; a larger one answers 413 (the queue's default limit on a body, Policy.MaxBodyBytes, is the same 1 MiB: raise both together)")
	f.DurationVar(&retain, "retain-receipts", 0, "delete receipts written longer ago than this, every minute in short batches (e.g. 2160h for 90 days; longer than the relay's --retain-ids): a late copy of a pruned event then answers sequence_conflict, never applies twice; 0 keeps them for good")
	f.DurationVar(&tolerance, "tolerance", webhook.DefaultTolerance, "largest accepted distance between webhook-timestamp and this machine's clock")
	logs.register(f)
	f.StringVar(&metricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics (requests by HTTP status, their durations; with --from, messages by action and outcome, and the deliveries held), and /healthz and /readyz (the inbox answers) (e.g. 127.0.0.1:9091)")
	f.DurationVar(&limits.read, "read-timeout", defaultLimits.read, "longest time to read one request, headers and body: a client sending slower is cut off (408)")
	f.DurationVar(&limits.write, "write-timeout", defaultLimits.write, "longest time from a request's headers to the end of its answer, the inbox transaction included")
	f.DurationVar(&limits.idle, "idle-timeout", defaultLimits.idle, "how long a kept-alive connection may wait for its next request (longer than the relay's 90 s, so the relay closes first)")
	f.DurationVar(&limits.grace, "shutdown-timeout", defaultLimits.grace, "how long requests in flight may finish after a signal; those still open then are cut off (their senders send them again), and receive exits 0")
	f.IntVar(&limits.maxRequests, "max-requests", defaultLimits.maxRequests, "requests handled at once; one more is answered 503 with Retry-After: 1 (the relay retries it)")
	return cmd
}

// serverLimits are receive's defences against slow and numerous clients,
// and how long its requests may run once it is stopped (grace).
type serverLimits struct {
	read, write, idle, grace time.Duration
	maxRequests              int
}

// defaultLimits are receive's defaults: a relay sends a body at once and
// gives up on an answer after its --timeout (10s), so a request that takes
// longer to arrive is not a relay's.
var defaultLimits = serverLimits{read: 10 * time.Second, write: 30 * time.Second, idle: 2 * time.Minute, grace: 10 * time.Second, maxRequests: inbox.DefaultMaxConcurrent}

func (l serverLimits) check() error {
	for name, d := range map[string]time.Duration{"read-timeout": l.read, "write-timeout": l.write, "idle-timeout": l.idle, "shutdown-timeout": l.grace} {
		if d <= 0 {
			return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: name, Message: fmt.Sprintf("must be a positive duration such as 10s, got %s", d)}
		}
	}
	if l.maxRequests < 1 {
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "max-requests", Message: fmt.Sprintf("must be at least 1, got %d", l.maxRequests)}
	}
	return nil
}

// receiveFromBroker runs receive --from: the inbox as a broker consumer,
// until ctx ends (serving's: fail stops it).
func receiveFromBroker(ctx context.Context, fail func(what string, err error), cmd *cobra.Command, inboxDSN, from, metricsAddr string, maxDelta int64, mustExist bool, retain time.Duration, log *slog.Logger) error {
	// Before the inbox is opened: a refused URL or a taken port creates
	// nothing.
	shown, run, release, err := brokerConsumer(from, log)
	if err != nil {
		return err
	}
	defer release()
	// Every start, since nothing else tells the operator (a breaker forged
	// a message with plain NATS and its effect was applied).
	log.Warn("receive: broker messages are not signed: whoever may publish to the stream's subjects or the exchange's routing keys writes to the inbox; give that right to the relay's credentials alone (docs/receiver.md)", "from", shown)
	reg, ready, err := serveProbesEarly(metricsAddr, log, fail)
	if err != nil {
		return err
	}
	defer ready.stop()
	in, err := openInboxWaiting(ctx, inboxDSN, inbox.Options{MaxDelta: maxDelta}, mustExist, log)
	if err != nil {
		return err
	}
	defer in.Close()
	opts := consume.Options{Inbox: in, Logger: log}
	if reg != nil {
		if opts.Metrics, err = consume.NewMetrics(reg, in); err != nil {
			return err
		}
		ready.set(inboxReady(in))
	}
	ctx, stopWatch := watchInboxFile(ctx, in, isPostgresURL(inboxDSN), log)
	defer stopWatch()
	stopRetain, err := retainReceipts(ctx, in, retain, reg, log)
	if err != nil {
		return err
	}
	defer stopRetain()
	var printErr error
	err = run(ctx, opts, func() {
		// Once the stream or queue exists: a relay started after this line
		// finds it.
		printErr = printJSON(cmd.OutOrStdout(), map[string]string{"status": "consuming", "from": shown})
		log.Info("receive: consuming", "from", shown, "inbox", redactDSN(inboxDSN), "max_delta", deltaLimit(maxDelta), "retain_receipts", retainShown(retain))
	})
	if err = errs.Join(err, printErr); err != nil {
		return err
	}
	if err := inboxReplaced(ctx); err != nil {
		return err
	}
	log.Info("receive: stopped")
	return nil
}

// inboxFileWatch is how often receive checks that its SQLite inbox's file
// is the one it opened: one stat(2) each time.
const inboxFileWatch = time.Second

// watchInboxFile returns ctx, cancelled with the error as its cause once
// in's SQLite file is found removed or replaced (inbox.Inbox.CheckFile;
// within inboxFileWatch, idle or not), or, for a PostgreSQL inbox (pg),
// once a ping answers not_a_database (its schema or tables dropped), and a
// func that stops the watch. Every write of such an inbox fails and no
// wait cures it: a receiver that went on answered 500 (or nacked every
// message) for ever, ready to no probe and exited by no supervisor (an
// SRE's drill; on PostgreSQL a fresh user's dropped schema, each delivery
// then spending an attempt of the relay's budget). receive stops instead,
// as the relay does, and exits 2 (inboxReplaced); restarted, it opens the
// new file, or refuses the schema until fairrelay migrate --inbox makes it.
// A ping that fails otherwise (the server unreachable) is an outage: the
// watch goes on.
func watchInboxFile(ctx context.Context, in *inbox.Inbox, pg bool, log *slog.Logger) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(inboxFileWatch)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			// Another stat error (a directory made unreadable) is not
			// this: the inbox's own writes report it.
			if err := in.CheckFile(); errors.Is(err, fairrelay.ErrFileReplaced) {
				log.Error("receive: the inbox's file was removed or replaced; stopping (restart to open the new file)", "err", err)
				cancel(err)
				return
			}
			if pg {
				pctx, pcancel := context.WithTimeout(ctx, inboxFileWatch)
				err := in.Ping(pctx)
				pcancel()
				if errors.Is(err, fairrelay.ErrNotDatabase) {
					log.Error("receive: the inbox's schema holds no inbox any more (dropped?); stopping: restore it from a backup (an inbox made again empty has no flow's applied seq: every flow with history answers gap for good; docs/operations.md#backups)", "err", err)
					cancel(err)
					return
				}
			}
		}
	}()
	return ctx, func() {
		cancel(nil)
		<-done
	}
}

// inboxReplaced is the error that stopped ctx of watchInboxFile (or
// consume.Run's own, wrapped the same), or nil when it was a signal.
func inboxReplaced(ctx context.Context) error {
	if err := context.Cause(ctx); errors.Is(err, fairrelay.ErrFileReplaced) || errors.Is(err, fairrelay.ErrNotDatabase) {
		return err
	}
	return nil
}

// serveUntilDone serves h on ln until ctx is done, then lets in-flight
// requests finish (up to l.grace, then cuts them off) and returns nil. The limits bound how long a
// client may take to send a request (headers within the read timeout too),
// how long an answer may take, and how long an idle connection is kept.
func serveUntilDone(ctx context.Context, ln net.Listener, h http.Handler, l serverLimits, log *slog.Logger) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: min(l.read, 10*time.Second), ReadTimeout: l.read, WriteTimeout: l.write, IdleTimeout: l.idle,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), l.grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		// A client still sending (or reading) after the grace: a stop by
		// signal all the same, exit 0 (docs/cli.md). It exited 2 with a
		// bare "context deadline exceeded", a failed stop to a supervisor
		// for whatever any client that reaches the port does (an SRE's
		// report). A request cut off here wrote nothing that was not
		// committed; its sender (a relay) sends it again.
		log.Warn("receive: requests still open after the grace were cut off; their senders send them again", "shutdown_timeout", l.grace, "err", err)
		srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	log.Info("receive: stopped")
	return nil
}

// inboxReady is /readyz of receive: a read of the inbox's receipts answers
// within the probe's time (the database reachable and still holding the
// inbox), and a SQLite inbox's file is the one receive opened
// (inbox.Inbox.Ping).
func inboxReady(in *inbox.Inbox) func(context.Context) error {
	return in.Ping
}

// deltaLimit is --max-delta as the logs show it: 0 is no limit, which a
// bare 0 in a log line reads as the opposite of.
func deltaLimit(n int64) any {
	if n == 0 {
		return "none"
	}
	return n
}

// retainShown is --retain-receipts as the start line gives it.
func retainShown(d time.Duration) string {
	if d <= 0 {
		return "forever"
	}
	return d.String()
}
