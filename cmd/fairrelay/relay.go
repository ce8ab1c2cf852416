package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/loopback"
	"github.com/fairrelay/fairrelay/relay"
	"github.com/fairrelay/fairrelay/sink"
	"github.com/fairrelay/fairrelay/sink/webhook"
)

func init() { rootCmd.AddCommand(newRelayCmd()) }

func newRelayCmd() *cobra.Command {
	var (
		queue, sinkURL, secret, metricsAddr, permanent, name string
		unsignedOK                                           bool
		logs                                                 logFlags
		consoleAddr                                          string
		cf                                                   consoleFlags
		workers, maxGroupSlots                               int
		timeout, margin, shutdown, retainAcked, retainIDs    time.Duration
		quantum                                              time.Duration
		pf                                                   policyFlags
		mustExist                                            bool
	)
	cmd := &cobra.Command{
		Use:   "relay --queue Q --sink URL [--secret S] [--workers N] [--policy fair]",
		Short: "Run the relay daemon: claim, deliver (webhook, NATS JetStream, RabbitMQ), settle",
		Long: `Runs until SIGINT or SIGTERM. Claims heads, delivers them to --sink,
--workers at once, and settles the answers, many to a transaction. The sink
is chosen by the URL's scheme:

  http://, https://  POST, signed with --secret (Standard Webhooks)
  nats://HOST[:PORT][?subject=fairrelay.{flow}][&stream=NAME]
                     publish to NATS JetStream (ack: accepted, duplicate ack:
                     duplicate; no stream, a message over the limits, a refused
                     publish: rejected, quarantined)
  amqp://HOST[:PORT][/VHOST][?exchange=amq.topic][&routing_key=fairrelay.{flow}]
                     publish to RabbitMQ with confirms and mandatory (ack:
                     accepted; unroutable, missing exchange: rejected; nack,
                     lost connection: retried)

{flow} is the flow's token: the flow id, with every byte but A-Z a-z 0-9 - _
written %XX. Broker ` + brokerEnvHelp + `. A broker
that is down, when the relay starts or later, is an outage: deliveries are
retried with backoff and the sink connects once the broker is back. At start
the relay asks the broker for the exchange or the stream of the subject: a
missing one refuses the start (invalid_input naming sink), and warns instead
when the template names {flow} (it asks for a sample flow's).

Time is the daemon clock of SPEC §7: 1 tick = 1 ms; --lease and the backoff
flags are durations (30s, 5m), whole milliseconds.
On a signal (SIGINT or SIGTERM) the relay stops claiming, lets in-flight
deliveries finish (up to --shutdown-timeout), never settles after a lease ran
out, and exits 0; a second signal stops it at once, with exit code 130 after
SIGINT, 143 after SIGTERM (128 + the signal's number), leaving the deliveries
in flight to their leases.

Store errors (a full disk, a PostgreSQL restart, dropped connections) do not
stop it: it retries with backoff, logs once when they start and once when they
end, and resumes by itself. It exits 2 only on what waiting cannot cure: a bad
configuration, a store it cannot open at start, a stored tick beyond the range
of ticks. With --metrics-addr, /healthz answers
200 while the process runs, and /readyz 200 while the relay dispatches with
its store answering, 503 (saying why) otherwise.

Webhook receiver contract: a JSON answer {"status": "<outcome>"} is that outcome when
the HTTP status agrees (an ack needs a 2xx, a permanent outcome a 4xx other
than 408/425/429, retry and gap go with any status); otherwise 2xx is accepted, 408/425/429/5xx, timeouts and connection errors are
retried (Retry-After sets a floor), any other status is retried unless listed
in --permanent-status.

Slots are shared by time, not by claims (SPEC §11): each group (a flow
without one is its own) is charged the time its deliveries hold a slot,
divided by its weight, and while slots are scarce they go to the groups
charged least; --max-group-slots caps any group's slots (configure
--max-slots sets one group's cap). See docs/relay.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			// A server of its own (metrics and probes, the console) that
			// stops on an error stops the relay, which exits with it.
			ctx, fail := serving(cmd.Context())
			defer func() { err = stoppedBeforeStart(cmd, serverFailed(ctx, err)) }()
			secret, err := secretFlag(cmd, secret)
			if err != nil {
				return err
			}
			log, err := logs.logger()
			if err != nil {
				return err
			}
			pol, err := pf.policy()
			if err != nil {
				return err
			}
			if workers < 1 || workers > relay.MaxWorkers {
				// Checked here: the library reads 0 as "the default".
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "workers", Message: fmt.Sprintf("must be 1 to %d, got %d", relay.MaxWorkers, workers)}
			}
			if maxGroupSlots < 0 || maxGroupSlots > workers {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "max-group-slots", Message: fmt.Sprintf("must be 0 (no cap) to --workers (%d), got %d", workers, maxGroupSlots)}
			}
			if quantum <= 0 {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "quantum", Message: fmt.Sprintf("must be positive, got %s", quantum)}
			}
			// 0 is not "no timeout": the library would take its 10s default.
			if timeout <= 0 {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "timeout", Message: fmt.Sprintf("must be a positive duration such as 10s, got %s", timeout)}
			}
			// Nor is a margin of 0 "none": the library would take its 1s
			// default, and the lease check below, given 0, said "plus the
			// margin 0s" (a breaker's report).
			if margin <= 0 {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "lease-margin", Message: fmt.Sprintf("must be a positive duration such as 1s (the time kept between a delivery's timeout and its lease's end), got %s", margin)}
			}
			// Given, 0 would be the default (--timeout), not "none".
			if cmd.Flags().Changed("shutdown-timeout") && shutdown <= 0 {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "shutdown-timeout", Message: fmt.Sprintf("must be a positive duration such as 10s (leave it out for --timeout's), got %s", shutdown)}
			}
			if sinkURL == "" {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "sink", Message: "missing: give --sink URL"}
			}
			// Before the store is opened: a refused run creates nothing.
			if err := relay.CheckLease(pol.Lease, timeout, margin); err != nil {
				return err
			}
			if consoleAddr != "" {
				if _, err := cf.config("console-addr", consoleAddr, nil, nil, log); err != nil {
					return err
				}
			} else {
				// A console flag without the console would be ignored: a
				// relay an operator believes to serve HTTPS or to require
				// sign-in would serve nothing.
				for _, name := range consoleFlagNames {
					if cmd.Flags().Changed(name) {
						return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: name, Message: "is for the relay's console: give --console-addr too"}
					}
				}
			}
			var s sink.Sink
			shown := redactDSN(sinkURL)
			unsigned := false // said once the run is past its checks (a fresh user's report: it came before a refusal)
			if bad := sink.BadSpace(sinkURL); bad != "" {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "sink", Message: bad}
			}
			if isBroker(sinkURL) {
				for _, name := range []string{"secret", "unsigned", "permanent-status"} {
					if cmd.Flags().Changed(name) {
						return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: name, Message: "is for the webhook sink (http:// or https://), not a broker"}
					}
				}
				bs, u, closeSink, err := brokerSink(sinkURL, workers, timeout, log)
				if err != nil {
					return err
				}
				defer closeSink()
				s, shown = bs, u
			} else {
				if !strings.HasPrefix(sinkURL, "http://") && !strings.HasPrefix(sinkURL, "https://") {
					return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "sink",
						Message: fmt.Sprintf("must be an http(s):// receiver, a nats:// JetStream server or an amqp(s):// RabbitMQ, got %q", sink.RedactURL(sinkURL))}
				}
				codes, err := parseStatuses(permanent)
				if err != nil {
					return err
				}
				// The URL as given, before webhookURL joins the
				// environment's credentials to it: no message about it
				// may show them.
				if err := webhook.CheckURL(sinkURL); err != nil {
					return err
				}
				target, inURL, err := webhookURL(sinkURL, os.Getenv)
				if err != nil {
					return err
				}
				if secret != "" && unsignedOK {
					return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "unsigned", Message: "given with --secret (or $" + secretEnv + "): leave it out to sign with the secret"}
				}
				if secret == "" && !unsignedOK {
					// Unsigned deliveries leave this machine only when asked
					// for, as receive accepts unsigned requests only on a
					// loopback address: a forgotten $FAIRRELAY_SECRET turned
					// signing off with one WARN line (a fresh user's report).
					if u, err := url.Parse(sinkURL); err == nil && !loopback.Host(u.Hostname()) {
						return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "secret",
							Message: fmt.Sprintf("required for a receiver not on this machine (%s): without it deliveries are unsigned, and a receiver cannot tell them from forged ones (give --secret or $%s; --unsigned sends them unsigned)", u.Hostname(), secretEnv)}
					}
				}
				if inURL {
					log.Warn("relay: the sink's URL carries credentials, which show in ps: give them in $" + sinkUserEnv + " and $" + sinkPasswordEnv + " instead")
				}
				opts := webhook.Options{URL: target, Timeout: timeout, Permanent: codes, MaxConnsPerHost: workers, Unsigned: secret == ""}
				if secret != "" {
					if opts.Key, err = webhookKey(log, "relay", secret); err != nil {
						return err
					}
				}
				ws, err := webhook.New(opts)
				if err != nil {
					return err
				}
				defer ws.Close()
				s = ws
				unsigned = secret == ""
			}
			// Every setting and address checked before the store is opened
			// (or created): a refused run leaves nothing behind.
			settings := relay.Config{Name: name, Workers: workers, DeliveryTimeout: timeout, LeaseMargin: margin,
				ShutdownTimeout: shutdown, RetainAcked: retainAcked, RetainIDs: retainIDs, MaxGroupSlots: maxGroupSlots, Quantum: quantum}
			if err := settings.ValidateSettings(); err != nil {
				var fe *fairrelay.Error
				if errors.As(err, &fe) && fe.Field == "delivery_timeout" {
					c := *fe
					c.Field = "timeout" // the flag that sets it
					return &c
				}
				return err
			}
			// The probes answer from here on (/readyz: starting), so that a
			// liveness probe does not kill a relay that waits for its store.
			reg, ready, err := serveProbesEarly(metricsAddr, log, fail)
			if err != nil {
				return err
			}
			defer ready.stop()
			// The console's address too (its flags were checked above),
			// before the store is opened (or created, or migrated).
			var consoleLn net.Listener
			if consoleAddr != "" {
				if consoleLn, err = listenConsole("console-addr", consoleAddr, cf.certFile != ""); err != nil {
					return err
				}
				defer consoleLn.Close() // for a return before it serves
			}
			var (
				q       *fairrelay.Queue
				created string
			)
			err = untilStoreAnswers(ctx, log, "relay", func() (err error) {
				q, created, err = openQueueCreating(ctx, namedFor(queue, "relay"), pol, &pf, nil, mustExist)
				return err
			})
			if err != nil {
				return err // a signal during the start: stoppedBeforeStart
			}
			defer q.Close()
			// Name what it works on, so a typo shows at once.
			log.Info("relay: starting", "queue", redactDSN(queue), "sink", shown, "workers", workers, "policy", pol.Entry)
			if created != "" {
				log.Warn("relay: the queue store "+logCreated(created)+"; if --queue is misspelt, stop and fix it", "queue", redactDSN(queue))
			} else if m := q.Migrated(); len(m) > 0 {
				// An upgrade's migration, said as migrate says it.
				log.Info("relay: migrated the queue store", "queue", redactDSN(queue), "applied", versionList(m))
			}
			cfg := settings
			cfg.Queue, cfg.Sink, cfg.Logger = q, s, log
			if reg != nil {
				if cfg.Metrics, err = relay.NewMetrics(reg); err != nil {
					return err
				}
				if err := relay.RegisterQueueGauges(reg, q, relay.QueueGaugesOptions{Logger: log}); err != nil {
					return err
				}
			}
			var r *relay.Relay
			err = untilStoreAnswers(ctx, log, "relay", func() (err error) {
				r, err = relay.New(ctx, cfg)
				return err
			})
			if err != nil {
				return err // a signal: stoppedBeforeStart
			}
			ready.set(r.Ready)
			leasedAtExit.Store(&leasedReport{leased: r.Leased, leaseMS: q.Policy().Lease})
			defer leasedAtExit.Store(nil)
			if consoleAddr != "" {
				// The console's failed requests are capped as receive's
				// (capRepeats); the relay's own lines have their caps.
				ccfg, err := cf.config("console-addr", consoleAddr, q, nil, capRepeats(log))
				if err != nil {
					return err
				}
				cctx, stop := context.WithCancel(ctx)
				url, wait, err := cf.start(cctx, consoleLn, ccfg, fail)
				if err != nil {
					stop()
					return err
				}
				defer wait()
				defer stop()
				log.Info("console: serving", "url", url)
			}
			if unsigned {
				log.Warn("relay: no --secret: deliveries are unsigned")
			}
			if retainAcked == 0 && retainIDs > 0 && cmd.Flags().Changed("retain-ids") {
				// The relay prunes nothing while acked events are kept: a
				// tombstone is made only by a prune (a breaker's report: the
				// start line said retain_ids=1h, and none was ever deleted).
				log.Warn("relay: --retain-ids has no effect with --retain-acked 0: the relay prunes nothing; tombstones from a manual prune stay until fairrelay prune --ids-before deletes them")
			}
			// A second signal stops the process at once (main); a server
			// that stopped on an error stops it as a first one does.
			err = r.Run(ctx)
			if errors.Is(err, fairrelay.ErrNotDatabase) {
				// The store went under it (a schema dropped): say what to
				// do, as the start-up refusal does (a fresh user's report).
				log.Error("relay: the queue store is gone (its schema or tables dropped?); stopping: restore it from a backup, then restart (a store made again empty starts every flow at seq 1, which the receivers' inboxes refuse as sequence_conflict; docs/operations.md#backups)", "queue", redactDSN(queue))
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&queue, "queue", "", "queue store: a SQLite file path or a postgres:// URL")
	f.StringVar(&sinkURL, "sink", "", "where deliveries go: an http(s):// receiver, a nats:// JetStream server or an amqp:// RabbitMQ (see above)")
	f.BoolVar(&unsignedOK, "unsigned", false, "send webhook deliveries unsigned to a receiver not on this machine (without --secret, a loopback receiver gets them unsigned with a warning, any other is refused)")
	f.StringVar(&secret, "secret", "", "shared secret for Standard Webhooks signatures: whsec_<base64> or any string (default: $"+secretEnv+", which keeps it out of ps; set but empty, it is refused)")
	f.IntVar(&workers, "workers", 4, "concurrent deliveries")
	f.DurationVar(&timeout, "timeout", 10*time.Second, "per-delivery timeout")
	f.IntVar(&maxGroupSlots, "max-group-slots", 0, "the most delivery slots one group's deliveries hold at once, for every group without its own cap (configure --max-slots); 0: no cap; at most --workers")
	f.DurationVar(&quantum, "quantum", 100*time.Millisecond, "how far a group's charge of slot time may run ahead of V (the fair-share floor) and still be claimed while slots are scarce (SPEC §11; docs/relay.md)")
	f.DurationVar(&margin, "lease-margin", time.Second, "time kept between a delivery's timeout and its lease's end; --lease must exceed --timeout plus this")
	f.DurationVar(&shutdown, "shutdown-timeout", 0, "how long in-flight deliveries may run after a signal (default: --timeout)")
	f.DurationVar(&retainAcked, "retain-acked", 7*24*time.Hour, "prune acked events (and their bodies) acked longer ago than this, every minute in short batches (SPEC §8); 0 keeps them forever")
	f.DurationVar(&retainIDs, "retain-ids", 30*24*time.Hour, "keep a pruned event's id idempotent (its tombstone) this long after its ack; 0 keeps tombstones forever; at least --retain-acked, and used only with it (with --retain-acked 0 the relay prunes nothing)")
	f.StringVar(&permanent, "permanent-status", "", "webhook sink: comma-separated HTTP statuses (3xx/4xx) that mean a permanent rejection, e.g. 400,404,410")
	f.StringVar(&metricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics, and /healthz and /readyz (e.g. 127.0.0.1:9090)")
	f.BoolVar(&mustExist, "must-exist", false, "refuse to start when --queue holds no queue store, instead of creating one (a SQLite file; a PostgreSQL store always must exist): for a service whose store 'fairrelay migrate' makes, so a misspelt path fails at start")
	f.StringVar(&name, "name", "", "this relay's name in the attempt history of what it delivers (default HOST:PID)")
	logs.register(f)
	f.StringVar(&consoleAddr, "console-addr", "", "serve the operator console on this address, sharing the relay's queue (docs/console.md)")
	cf.register(cmd)
	pf.register(cmd, fairrelay.DaemonPolicy(), false)
	return cmd
}

func parseStatuses(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		n, err := strconv.Atoi(part)
		if err != nil {
			return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "permanent-status", Message: fmt.Sprintf("%q is not an HTTP status", part)}
		}
		out = append(out, n)
	}
	return out, nil
}

// checkListenAddr refuses an address that is not HOST:PORT with a numeric
// port (ErrInvalidInput naming field), before anything is opened.
func checkListenAddr(field, addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		_, err = strconv.ParseUint(port, 10, 16)
	}
	if err != nil {
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: field, Message: fmt.Sprintf("want HOST:PORT, got %q", addr)}
	}
	return nil
}

// listenOn listens on addr, the value of the flag field: ErrInvalidInput
// naming field when addr is not HOST:PORT or cannot be listened on (a
// port taken). The daemons bind every address before they open a store
// and before they say they listen, so that a taken port refuses the whole
// run.
func listenOn(field, addr string) (net.Listener, error) {
	if err := checkListenAddr(field, addr); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: field, Message: err.Error()}
	}
	return ln, nil
}

// newMetricsRegistry is the registry a daemon's --metrics-addr serves:
// besides the daemon's own metrics, the process's (process_*: start time,
// CPU, memory, open files), the Go runtime's (go_*: goroutines, heap, GC)
// and go_build_info, as every Prometheus exporter has them — restarts,
// crash loops and leaks show there (an operator's report: they were
// missing).
func newMetricsRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector(), collectors.NewBuildInfoCollector())
	return reg
}

// readyWithin bounds /readyz's own read of the store: a probe answers
// within Kubernetes' default probe timeout (1 s). With 5 s, a relay whose
// store was locked answered after 5 s, a probe failure of its own kind
// rather than the 503 that says why (an SRE's drill).
const readyWithin = 900 * time.Millisecond

// metricsHandler serves reg (promhttp, a failed collection left out) and
// logs its errors at warn level through log, each scrape's own: every
// gathering error, but of the errors sending the page only the first and
// then one line counting the rest. A scraper that gave up (curl -m 2, a
// Prometheus scrape timeout, while the process was stopped or slow) made
// every later family fail with the same broken pipe: 46 lines a scrape (a
// fresh user's report, 414 lines after a 20 s SIGSTOP).
func metricsHandler(reg *prometheus.Registry, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sl := &scrapeLog{log: log}
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, ErrorHandling: promhttp.ContinueOnError, ErrorLog: sl}).ServeHTTP(w, r)
		if sl.sending > 1 {
			log.Warn("metrics: the rest of the page could not be sent either (the scraper is gone?)", "families", sl.sending-1)
		}
	})
}

// scrapeLog is promhttp's ErrorLog for one scrape (metricsHandler).
type scrapeLog struct {
	log     *slog.Logger
	sending int // errors sending a family
}

// sendError is how promhttp begins the error of a family it could not
// encode or write.
const sendError = "error encoding and sending metric family"

func (s *scrapeLog) Println(v ...any) {
	msg := strings.TrimSuffix(fmt.Sprintln(v...), "\n")
	if strings.HasPrefix(msg, sendError) {
		if s.sending++; s.sending > 1 {
			return
		}
	}
	s.log.Warn(msg)
}

// serveMetrics serves, on ln (listenOn's) until stop is called, reg at
// /metrics (a metric whose collection fails is left out and logged at warn
// level, the rest served) and two probes: /healthz answers 200 while the process serves
// HTTP at all, /readyz 200 when ready returns nil, else 503 with its error
// (within readyWithin). stop closes ln. A server that stops on an error
// logs it and calls fail ("the metrics server", and the error), so that
// the daemon stops with it (serving): without its probes it looked
// healthy to nothing, and a daemon without a liveness probe ran on
// unwatched.
func serveMetrics(ln net.Listener, reg *prometheus.Registry, ready func(context.Context) error, log *slog.Logger, fail func(what string, err error)) (stop func()) {
	mux := http.NewServeMux()
	// A metric that cannot be read now (the inbox's held count while its
	// database is slow or gone) is left out and logged: the page keeps the
	// counters that say what happened meanwhile (a 500 for the whole page
	// hid them; a fresh user's report).
	mux.Handle("/metrics", metricsHandler(reg, log))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, req *http.Request) {
		ctx, cancel := context.WithTimeout(req.Context(), readyWithin)
		defer cancel()
		if err := ready(ctx); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics: the server stopped on an error; stopping", "err", err)
			fail("the metrics server", err)
		}
	}()
	log.Info("metrics: serving", "url", "http://"+ln.Addr().String()+"/metrics")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}
}
