package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/console"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/relay"
	"github.com/fairrelay/fairrelay/sink"
	"github.com/fairrelay/fairrelay/sink/webhook"
)

func init() { rootCmd.AddCommand(newDemoCmd()) }

// demoOptions size the demo's workload.
type demoOptions struct {
	dir       string
	temporary bool // dir is a temporary folder, removed when the demo ends
	flows     int  // flows beyond the article's A, B, C
	events    int  // events over those flows
	workers   int
	flakyPer  int // the receiver answers 503 to the first attempt of every flakyPer-th event (0: never)
	timeout   time.Duration
	sink      string // webhook, or a broker: nats[://HOST:PORT] or amqp[://HOST:PORT]
	console   string // serve the operator console there and keep running until a signal ("" : no console)
}

func newDemoCmd() *cobra.Command {
	o := demoOptions{}
	cmd := &cobra.Command{
		Use:   "demo [--dir DIR] [--flows N] [--events N] [--workers N]",
		Short: "Run the whole system on loopback: a receiver, a relay over HTTP, the article's poison head and a redrive",
		Long: `Starts a receiver (the inbox over HTTP, signed webhooks) and a relay on
127.0.0.1, enqueues the article's sample — A1 with delta 10 against a receiver
that supports 5, A2, B1-B3, C1-C3 — plus --events events over --flows flows,
shows live progress (on a terminal), then the table: A1 quarantined without holding back any
other flow. It then raises the receiver's limit, redrives A1 with a reason,
and ends with every event acked once (A: seq 2, total 11).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.flows < 1 || o.flows > 1000 {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "flows", Message: "must be 1 to 1000"}
			}
			if o.events < 0 || o.events > 100000 {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "events", Message: "must be 0 to 100000"}
			}
			// Checked before anything runs: a demo with no time at all ran
			// and then failed "did not finish in time" (a breaker's sweep).
			if o.timeout <= 0 {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "timeout", Message: fmt.Sprintf("must be positive, got %s", o.timeout)}
			}
			if o.flakyPer < 0 {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "flaky-every", Message: fmt.Sprintf("must be 0 (never) or more, got %d", o.flakyPer)}
			}
			if o.dir == "" {
				// The temporary folder goes when the demo ends, also when
				// its reader went away (demo | head): with SIGPIPE ignored,
				// a write to the closed pipe fails instead of killing the
				// process before the cleanup.
				signal.Ignore(syscall.SIGPIPE)
				d, err := os.MkdirTemp("", "fairrelay-demo-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(d)
				o.dir, o.temporary = d, true
			} else {
				if err := os.MkdirAll(o.dir, 0o755); err != nil {
					return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "dir", Message: err.Error()}
				}
				// The demo's events have fixed ids: a second run on the same
				// files would only answer existing and wait for nothing.
				for _, name := range []string{"queue.db", "inbox.db"} {
					if _, err := os.Stat(filepath.Join(o.dir, name)); err == nil {
						return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "dir", Message: fmt.Sprintf("%s already holds a demo run (%s); give an empty or new folder", o.dir, name)}
					}
				}
			}
			if o.workers < 1 || o.workers > relay.MaxWorkers {
				return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "workers", Message: fmt.Sprintf("must be 1 to %d, got %d", relay.MaxWorkers, o.workers)}
			}
			if o.console != "" {
				if o.sink != "webhook" {
					return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "console", Message: "runs with the webhook demo only"}
				}
				if err := console.CheckAddr(o.console, console.Config{}); err != nil {
					return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "console", Message: err.Error()}
				}
			}
			if o.sink != "webhook" {
				return runBrokerDemo(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), o)
			}
			return runDemo(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dir, "dir", "", "folder for queue.db and inbox.db (default: a temporary folder, removed afterwards)")
	f.IntVar(&o.flows, "flows", 20, "flows beside the article's A, B and C")
	f.IntVar(&o.events, "events", 300, "events spread over those flows")
	f.IntVar(&o.workers, "workers", 8, "relay workers")
	f.IntVar(&o.flakyPer, "flaky-every", 10, "the receiver answers 503 to the first attempt of every event whose seq in its flow is a multiple of N (0: never)")
	f.DurationVar(&o.timeout, "timeout", 2*time.Minute, "give up when the demo has not finished by then")
	f.StringVar(&o.console, "console", "", "serve the operator console on this loopback address (e.g. 127.0.0.1:8081) and keep running until Ctrl-C")
	f.StringVar(&o.sink, "sink", "webhook", "webhook (a receiver over HTTP), or a broker: nats (JetStream at 127.0.0.1:4222, or nats://HOST:PORT) or amqp (RabbitMQ at 127.0.0.1:5672, or amqp://HOST:PORT)")
	return cmd
}

// demoEvent is one event of the demo's workload.
type demoEvent struct {
	id, flow string
	delta    int
}

// demoWorkload is the article's sample, then events round-robin over flows
// F01…, deltas 1 to 5.
// demoSpread says how demoWorkload spreads events over flows: over
// min(flows, events) of them, the only ones it makes ("5 events over 10
// flows" made 5; a fresh user's report).
func demoSpread(events, flows int) string {
	used := min(flows, events)
	if used == 0 {
		return "no events beside them"
	}
	if used == 1 {
		return fmt.Sprintf("%d event%s over 1 flow", events, map[bool]string{true: "s"}[events != 1])
	}
	return fmt.Sprintf("%d events over %d flows", events, used)
}

func demoWorkload(flows, events int) []demoEvent {
	ws := []demoEvent{{"A1", "A", 10}, {"A2", "A", 1}, {"B1", "B", 1}, {"B2", "B", 2}, {"B3", "B", 3},
		{"C1", "C", 1}, {"C2", "C", 2}, {"C3", "C", 3}}
	for i := range events {
		f := fmt.Sprintf("F%02d", i%flows+1)
		ws = append(ws, demoEvent{id: fmt.Sprintf("%s-%d", f, i/flows+1), flow: f, delta: 1 + i%5})
	}
	return ws
}

func runDemo(parent context.Context, out, errOut io.Writer, o demoOptions) (err error) {
	// A server of the demo's (its console, its receiver) that stops on an
	// error ends the demo with that error: the console was the only thing
	// left running after the story, and the demo waited on without it.
	parent, fail := serving(parent)
	defer func() { err = serverFailed(parent, err) }()
	ctx, cancel := context.WithTimeout(parent, o.timeout)
	defer cancel()
	defer func() {
		// Whatever step --timeout ended (opening the stores, the relay,
		// the wait for settles) says so, not its own context error (a
		// fresh user's report: "open stopped: read schema: context
		// deadline exceeded").
		if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) && parent.Err() == nil {
			err = fmt.Errorf("demo: did not finish in time (--timeout %s)", o.timeout)
		}
	}()
	q, in, err := openDemoStores(ctx, o)
	if err != nil {
		return err
	}
	defer q.Close()
	defer in.Close()
	consoleURL := ""
	if o.console != "" {
		// The console outlives the demo's timeout: it stops on a signal.
		cctx, stop := context.WithCancel(parent)
		defer stop()
		var cf consoleFlags
		ln, err := listenConsole("console", o.console, false)
		if err != nil {
			return err
		}
		url, wait, err := cf.start(cctx, ln, console.Config{Queue: q, Inbox: in, LocalOperator: "demo-operator",
			Logger: slog.New(slog.NewTextHandler(errOut, &slog.HandlerOptions{Level: slog.LevelWarn}))}, fail)
		if err != nil {
			return err
		}
		defer wait()
		consoleURL = url
		fmt.Fprintf(out, "Operator console: %s\n", url)
	}

	// The receiver: the inbox over HTTP on loopback, checking signatures.
	raw := make([]byte, 24)
	rand.Read(raw)
	key, err := webhook.ParseSecret("whsec_" + base64.StdEncoding.EncodeToString(raw))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	quiet := slog.New(slog.DiscardHandler)
	handler := flaky(in.Handler(inbox.HandlerOptions{Verify: webhook.NewVerifier(key).Verify, Logger: quiet}), o.flakyPer)
	srvCtx, stopSrv := context.WithCancel(context.WithoutCancel(ctx))
	srvDone := make(chan error, 1)
	go func() {
		err := serveUntilDone(srvCtx, ln, handler, defaultLimits, quiet)
		if err != nil {
			fail("the demo's receiver", err)
		}
		srvDone <- err
	}()
	defer func() { stopSrv(); <-srvDone }()

	// The relay: a webhook sink to that receiver.
	s, err := webhook.New(webhook.Options{URL: "http://" + ln.Addr().String() + "/", Key: key, Timeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer s.Close()
	d, err := startDemoRelay(ctx, q, s, o.workers)
	if err != nil {
		return err
	}
	defer d.stop()
	r, settled, relayDone, stopRelay := d.r, d.settled, d.done, d.cancel

	work := demoWorkload(o.flows, o.events)
	fmt.Fprintf(out, "fairrelay demo: a receiver on http://%s (signed webhooks) and a relay with %d workers; %s\n\n",
		ln.Addr(), o.workers, demoWhere(o))
	fmt.Fprintf(out, "Enqueueing the article's sample (A1 delta 10 against a receiver that supports 5, A2, B1-B3, C1-C3)\n")
	fmt.Fprintf(out, "and %s, while the relay runs.", demoSpread(o.events, o.flows))
	if o.flakyPer > 0 {
		fmt.Fprintf(out, " The receiver answers 503 to the first attempt of every event whose seq in its flow is a multiple of %d.", o.flakyPer)
	}
	fmt.Fprint(out, "\n\n")

	// The bar, and the line breaks that end it, only on a terminal: in a
	// file or a pipe they would be blank lines.
	tty := isTerminal(errOut)
	endBar := func() {
		if tty {
			fmt.Fprintln(errOut)
		}
	}
	bar := progressbar.NewOptions(len(work), progressbar.OptionSetWriter(errOut), progressbar.OptionSetWidth(30),
		progressbar.OptionSetVisibility(tty),
		progressbar.OptionShowCount(), progressbar.OptionSetDescription("acked"),
		progressbar.OptionOnCompletion(endBar))
	st := &demoStats{bar: bar}
	if err := enqueueDemo(ctx, r, q, work, func() { st.drain(settled) }); err != nil {
		return err
	}
	// First pass: everything but A is acked, A1 is quarantined.
	if err := st.until(ctx, settled, relayDone, func() bool { return st.acked == len(work)-2 && st.quarantined == 1 }); err != nil {
		return err
	}
	bar.Describe("acked (A1 quarantined, A2 waits behind it)")
	endBar()
	a1, err := q.Event(ctx, "A1")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "A1 was quarantined (%s) after %d attempt(s); A2 waits behind it; every other flow completed:\n\n",
		deref(a1.Reason), a1.LifetimeAttempts)
	if err := demoFlowTable(ctx, out, q, in, false); err != nil {
		return err
	}

	reason := "receiver upgraded to accept large deltas"
	in.SetMaxDelta(1000)
	var rd fairrelay.RedriveResult
	if err := r.Do(ctx, func(at int64) (err error) {
		rd, err = q.Redrive(ctx, fairrelay.RedriveParams{EventID: "A1", ExpectedGeneration: a1.Generation, Reason: reason, Operator: "demo", At: at})
		return err
	}); err != nil {
		return err
	}
	if rd.Status != fairrelay.RedriveReady {
		return fmt.Errorf("demo: redrive A1 answered %s", rd.Status)
	}
	fmt.Fprintf(out, "\nThe receiver now supports deltas up to 1000. Redrive A1 (%q): ready, generation %d.\n", reason, rd.Generation)
	bar.Describe("acked")
	if err := st.until(ctx, settled, relayDone, func() bool { return st.acked == len(work) }); err != nil {
		return err
	}
	bar.Finish()
	stopRelay()
	if err := <-relayDone; err != nil {
		return err
	}
	relayDone <- nil // for the deferred stop

	fmt.Fprintf(out, "\nFinal state (%d deliveries: %d acked, %d retried, %d quarantined):\n\n", st.delivered, st.acked, st.retried, st.quarantined)
	if err := demoFlowTable(ctx, out, q, in, true); err != nil {
		return err
	}
	if err := demoCheck(ctx, out, q, in, len(work)); err != nil {
		return err
	}
	if consoleURL != "" {
		return demoKeepRunning(parent, out, q, s, o.workers, consoleURL)
	}
	return nil
}

// demoKeepRunning runs a relay again beside the receiver and the console
// until a signal, so that what an operator does in the console takes
// effect (a pause, a resume, a redrive).
func demoKeepRunning(ctx context.Context, out io.Writer, q *fairrelay.Queue, s sink.Sink, workers int, url string) error {
	// Something for the operator to do: a flow whose events wait, paused,
	// until it is resumed in the console.
	for i := 1; i <= 3; i++ {
		if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: fmt.Sprintf("P%d", i), Flow: "P", Body: []byte(`{"delta":1}`), At: fairrelay.AtStored}); err != nil {
			return err
		}
	}
	if _, err := q.Pause(ctx, fairrelay.FlowActionParams{Flow: "P", Reason: "held for you: resume it in the console", Operator: "demo", At: fairrelay.AtStored}); err != nil {
		return err
	}
	d, err := startDemoRelay(ctx, q, s, workers)
	if err != nil {
		return err
	}
	stopDrain := make(chan struct{})
	go func() {
		for {
			select {
			case <-d.settled:
			case <-stopDrain:
				return
			}
		}
	}()
	fmt.Fprintf(out, "\nFlow P holds 3 events and is paused: resume it in the console (%sflows?paused=1) and watch them delivered.\n", url)
	fmt.Fprintf(out, "The operator console stays up at %s, with the receiver and a relay: press Ctrl-C to end the demo.\n", url)
	<-ctx.Done()
	d.stop()
	close(stopDrain)
	return nil
}

// demoRelay is the demo's relay, running.
type demoRelay struct {
	r       *relay.Relay
	settled chan relay.Settled // every settle, reported by the relay
	done    chan error         // Run's result
	cancel  context.CancelFunc // stops Run
}

// startDemoRelay runs a relay over s with a 5 s delivery timeout.
func startDemoRelay(ctx context.Context, q *fairrelay.Queue, s sink.Sink, workers int) (*demoRelay, error) {
	d := &demoRelay{settled: make(chan relay.Settled, 1024), done: make(chan error, 1)}
	var err error
	d.r, err = relay.New(ctx, relay.Config{Queue: q, Sink: s, Workers: workers, DeliveryTimeout: 5 * time.Second,
		Logger: slog.New(slog.DiscardHandler), OnSettle: func(s relay.Settled) { d.settled <- s }})
	if err != nil {
		return nil, err
	}
	var runCtx context.Context
	runCtx, d.cancel = context.WithCancel(ctx)
	go func() { d.done <- d.r.Run(runCtx) }()
	return d, nil
}

// stop stops the relay and waits for it.
func (d *demoRelay) stop() { d.cancel(); <-d.done }

// demoWhere says where the demo's files are.
func demoWhere(o demoOptions) string {
	where := "files in " + o.dir
	if o.temporary {
		where += " (removed at the end; --dir DIR keeps them)"
	}
	return where
}

// openDemoStores opens the demo's queue store and its inbox (max delta 5).
func openDemoStores(ctx context.Context, o demoOptions) (*fairrelay.Queue, *inbox.Inbox, error) {
	// The daemon policy, with short delays so the demo's retries show: 1
	// tick = 1 ms, lease 10 s, backoff 200 ms doubling to 2 s, jitter 0.2.
	pol := fairrelay.Policy{Entry: fairrelay.EntryFair, Lease: 10_000, Budget: 5, BackoffBase: 200, BackoffCap: 2000, Jitter: 0.2}
	q, err := fairrelay.Open(ctx, filepath.Join(o.dir, "queue.db"), fairrelay.Config{Policy: pol})
	if err != nil {
		return nil, nil, err
	}
	in, err := inbox.Open(ctx, filepath.Join(o.dir, "inbox.db"), inbox.Options{MaxDelta: 5})
	if err != nil {
		q.Close()
		return nil, nil, err
	}
	return q, in, nil
}

// enqueueDemo enqueues the workload in waves of 100, through the relay so
// the ticks stay in order and idle workers wake at once.
func enqueueDemo(ctx context.Context, r *relay.Relay, q *fairrelay.Queue, work []demoEvent, between func()) error {
	for start := 0; start < len(work); start += 100 {
		batch := make([]fairrelay.NewEvent, 0, 100)
		for _, e := range work[start:min(start+100, len(work))] {
			batch = append(batch, fairrelay.NewEvent{ID: e.id, Flow: e.flow, Body: fmt.Appendf(nil, `{"delta":%d}`, e.delta)})
		}
		if err := r.Do(ctx, func(at int64) error {
			_, err := q.EnqueueMany(ctx, fairrelay.EnqueueManyParams{At: at, Events: batch})
			return err
		}); err != nil {
			return err
		}
		between()
	}
	return nil
}

// flaky answers 503 to the first attempt of every nth event (by seq), the
// rest goes to h: a receiver with a bad network, to show the backoff.
func flaky(h http.Handler, n int) http.Handler {
	if n <= 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seq, _ := strconv.Atoi(r.Header.Get(webhook.HeaderSeq))
		if r.Header.Get(webhook.HeaderAttempt) == "1" && seq%n == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// demoStats counts the settles the relay reports.
type demoStats struct {
	bar                                    *progressbar.ProgressBar
	delivered, acked, retried, quarantined int
}

func (s *demoStats) add(x relay.Settled) {
	s.delivered++
	switch x.Result.Status {
	case fairrelay.SettleAcked:
		s.acked++
		s.bar.Add(1)
	case fairrelay.SettleReady:
		s.retried++
	case fairrelay.SettleQuarantined:
		s.quarantined++
	}
}

// drain takes the settles reported so far without waiting.
func (s *demoStats) drain(ch <-chan relay.Settled) {
	for {
		select {
		case x := <-ch:
			s.add(x)
		default:
			return
		}
	}
}

// until takes settles until done, the relay stops, or ctx ends.
func (s *demoStats) until(ctx context.Context, ch <-chan relay.Settled, relayDone <-chan error, done func() bool) error {
	for !done() {
		select {
		case x := <-ch:
			s.add(x)
		case err := <-relayDone:
			return fmt.Errorf("demo: the relay stopped: %v", err)
		case <-ctx.Done():
			return errors.New("demo: did not finish in time")
		}
	}
	return nil
}

// demoFlowTable prints one row per flow: the queue's view and the
// receiver's projection.
func demoFlowTable(ctx context.Context, out io.Writer, q *fairrelay.Queue, in *inbox.Inbox, final bool) error {
	snap, err := q.Snapshot(ctx)
	if err != nil {
		return err
	}
	is, err := in.Snapshot(ctx)
	if err != nil {
		return err
	}
	proj := map[string]inbox.Projection{}
	for _, p := range is.Projection {
		proj[p.Flow] = p
	}
	type row struct {
		events, acked int
		head          *fairrelay.EventState
	}
	rows := map[string]*row{}
	for _, f := range snap.Flows {
		rows[f.Flow] = &row{}
	}
	for _, e := range snap.Events {
		rw := rows[e.Flow]
		rw.events++
		if e.State == fairrelay.StateAcked {
			rw.acked++
		} else if rw.head == nil {
			rw.head = &e
		}
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FLOW\tEVENTS\tACKED\tHEAD\tSTATE\tREASON\tSEQ\tTOTAL")
	for _, f := range snap.Flows {
		rw := rows[f.Flow]
		head, state, reason := "-", "done", "-"
		if rw.head != nil {
			head, state, reason = rw.head.ID, string(rw.head.State), deref(rw.head.Reason)
			if reason == "" {
				reason = "-"
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%d\t%d\n", f.Flow, rw.events, rw.acked, head, state, reason, proj[f.Flow].Seq, proj[f.Flow].Total)
	}
	return tw.Flush()
}

// demoCheck verifies the end state: every event acked, one receipt per
// event, A1 with two lifetime attempts and one audit row.
func demoCheck(ctx context.Context, out io.Writer, q *fairrelay.Queue, in *inbox.Inbox, events int) error {
	is, err := in.Snapshot(ctx)
	if err != nil {
		return err
	}
	a1, err := q.Event(ctx, "A1")
	if err != nil {
		return err
	}
	audit, err := q.Audit(ctx, 0, 10)
	if err != nil {
		return err
	}
	if len(is.Receipts) != events || a1.State != fairrelay.StateAcked || len(audit) != 1 {
		return fmt.Errorf("demo: end state is wrong: %d receipts for %d events, A1 %s, %d audit rows", len(is.Receipts), events, a1.State, len(audit))
	}
	a := audit[0]
	fmt.Fprintf(out, "\n%d receipts for %d events: each applied once. A1: acked, lifetime_attempts %d.\n", len(is.Receipts), events, a1.LifetimeAttempts)
	fmt.Fprintf(out, "Audit: %s of %s by %s at tick %d, cleared %q: %q.\n", a.Action, deref(a.ID), deref(a.Operator), a.At, deref(a.PreviousReason), a.Reason)
	return nil
}
