// Command fairrelay is the CLI and daemon of fairrelay: scenario scripts,
// one-shot queue operations, inspection, migrations and the demo. Each
// subcommand lives in its own file and registers itself with the root
// command; the logic lives in the library packages.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/fairrelay/fairrelay"
)

var rootCmd = &cobra.Command{
	Use:           "fairrelay",
	Short:         "A durable, fair, per-flow-ordered event relay",
	SilenceUsage:  true,
	SilenceErrors: true,
}

// The exit codes, one meaning each across every command (docs/cli.md "Exit
// codes"), so a script can tell "applied" from "answered, but nothing
// applied" from "failed".
const (
	// exitApplied: the command did what it was asked, or found it already
	// done (enqueue answering existing).
	exitApplied = 0
	// exitNotApplied: the command answered on stdout, and nothing was
	// applied: enqueue conflict, a bulk line that failed or was refused,
	// claim idle, settle stale or expired, redrive rejected or nothing to
	// redrive, an experiment that differs.
	exitNotApplied = 1
	// exitFailed: an error (one line on stderr naming the code and the
	// field): bad input, a store that cannot be used, a database error.
	// Nothing changed.
	exitFailed = 2
)

// exitError carries an exit code chosen by a subcommand.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

// notApplied is the error of a command that printed its answer and applied
// nothing: exit code exitNotApplied, with msg on stderr.
func notApplied(format string, args ...any) error {
	return &exitError{code: exitNotApplied, err: fmt.Errorf(format, args...)}
}

func main() {
	// The first SIGINT or SIGTERM cancels ctx: daemons stop claiming and let
	// in-flight work finish (up to their shutdown timeouts). A second one
	// stops the process at once.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go exitOnSecondSignal(sigs, stop)
	// cobra adds its completion command at execution; add it now so that
	// argsAsInput covers it too (completion bogus: an unknown command).
	rootCmd.InitDefaultCompletionCmd()
	argsAsInput(rootCmd)
	strictFlags(rootCmd)
	cmd, err := rootCmd.ExecuteContextC(ctx)
	if err == nil {
		return
	}
	err = clockBeforeFields(context.WithoutCancel(ctx), cmd, err)
	say("fairrelay: "+errorLine(flagNames(cmd, err)), slog.LevelError, "stopped with an error", "error", errorLine(flagNames(cmd, err)))
	var ee *exitError
	if errors.As(err, &ee) {
		os.Exit(ee.code)
	}
	os.Exit(exitFailed)
}

// clockedCommands are the commands that write the queue store at --at.
var clockedCommands = map[string]bool{"enqueue": true, "claim": true, "settle": true, "redrive": true,
	"expedite": true, "pause": true, "resume": true, "configure": true, "prune": true}

// clockBeforeFields returns, for a command of clockedCommands given --at
// whose input the command refused (invalid_input naming a flag other than
// --queue and --at: a missing or empty flag, refused before the store was
// opened), the clock's answer instead when it has one: clock_regressed,
// or invalid_input naming at for a tick more than --max-tick-jump ahead
// of the stored one or beyond the largest tick. SPEC §2 puts the clock
// before the fields of a write, and the library and the script answer so.
// The store is opened only when it exists (nothing is created); any other
// error, or a store that cannot be opened, leaves err as it is.
func clockBeforeFields(ctx context.Context, cmd *cobra.Command, err error) error {
	var fe *fairrelay.Error
	if cmd == nil || !clockedCommands[cmd.Name()] || !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput ||
		fe.Field == "queue" || fe.Field == "at" {
		return err
	}
	atFlag, queueFlag := cmd.Flags().Lookup("at"), cmd.Flags().Lookup("queue")
	if atFlag == nil || !atFlag.Changed || queueFlag == nil || queueFlag.Value.String() == "" {
		return err
	}
	at, perr := strconv.ParseInt(atFlag.Value.String(), 10, 64)
	if perr != nil {
		return err
	}
	pol := fairrelay.DaemonPolicy()
	pol.MaxTickJump = maxTickJumpFlag(cmd)
	q, oerr := fairrelay.Open(ctx, queueFlag.Value.String(), fairrelay.Config{Policy: pol, MustExist: true, AdoptStoredEntry: true, ReadOnly: true})
	if oerr != nil {
		return err
	}
	defer q.Close()
	terr := q.CheckTick(ctx, cmd.Name(), at, false)
	var te *fairrelay.Error
	if errors.As(terr, &te) && (te.Code == fairrelay.CodeClockRegressed || (te.Code == fairrelay.CodeInvalidInput && te.Field == "at")) {
		return terr
	}
	return err
}

// maxTickJumpFlag is cmd's --max-tick-jump in ticks (a duration of the
// daemon's milliseconds, or ticks under the script's policy flags); 0
// (no limit) when the command has none or it does not parse (then the
// command refused it, and that error stands).
func maxTickJumpFlag(cmd *cobra.Command) int64 {
	f := cmd.Flags().Lookup("max-tick-jump")
	if f == nil {
		return 0
	}
	if f.Value.Type() == "duration" {
		d, err := time.ParseDuration(f.Value.String())
		if err != nil || d < 0 {
			return 0
		}
		return d.Milliseconds()
	}
	n, err := strconv.ParseInt(f.Value.String(), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// flagNames returns err with the library's field names that are flags of
// cmd written as the flags are (ids_before → ids-before), in the field and
// in the message, so that a CLI user reads the names they typed; the
// library, the script format and JSON keep the underscores (SPEC §6). Any
// other error is returned as it is.
func flagNames(cmd *cobra.Command, err error) error {
	var fe *fairrelay.Error
	if cmd == nil || !errors.As(err, &fe) {
		return err
	}
	out := *fe
	// A field of a nested value (policy.jitter: fairrelay.Policy's) is
	// named by its last part when a flag sets it (--jitter).
	leaf := out.Field[strings.LastIndex(out.Field, ".")+1:]
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		under := strings.ReplaceAll(f.Name, "-", "_")
		if out.Field == under || leaf == under {
			out.Field = f.Name
		}
		if strings.Contains(f.Name, "-") {
			out.Message = fieldWord(under).ReplaceAllString(out.Message, "${1}"+f.Name)
		}
	})
	if out == *fe {
		return err
	}
	return &out
}

// fieldWord matches name as a whole word (not inside a longer name).
func fieldWord(name string) *regexp.Regexp {
	return regexp.MustCompile(`(^|[^A-Za-z0-9_])` + regexp.QuoteMeta(name) + `\b`)
}

// errorLine renders an error as one line that names the code and field,
// without the library's Hint (it names Go, not flags); line breaks inside
// driver messages are folded so the line stays one, a line repeated in
// them is kept once (pgx lists each attempt of a connection: with and
// without TLS, the same refused dial twice), and any other character a
// terminal would act on is escaped (\u001b): an error may quote what a
// user or a store gave.
func errorLine(err error) string {
	msg := err.Error()
	var fe *fairrelay.Error
	if errors.As(err, &fe) {
		plain := *fe
		plain.Hint = ""
		msg = fmt.Sprintf("%s: %s", plain.Code, plain.Error())
	}
	var words []string
	seen := map[string]bool{}
	for line := range strings.Lines(msg) {
		key := strings.Join(strings.Fields(line), " ")
		if seen[key] {
			continue
		}
		seen[key] = true
		words = append(words, strings.Fields(line)...)
	}
	return string(escapeUnsafe([]byte(strings.Join(words, " "))))
}

// leasedReport is what a relay leaves leased if the process ends now:
// Relay.Leased, and the lease in milliseconds.
type leasedReport struct {
	leased  func() int
	leaseMS int64
}

// leasedAtExit is the running relay's leasedReport, which a second signal
// reports before the process exits; nil when no relay runs.
var leasedAtExit atomic.Pointer[leasedReport]

// exitOnSecondSignal waits for a first signal, says that a second one
// stops at once, then cancels the command's context (stop), so that the
// notice comes before the daemon's own stopping lines (it came after
// "relay: stopped" at times: an operator's report), and exits with 128 +
// the signal's number when a second comes: an operator who pressed Ctrl-C twice means
// now, not after the in-flight deliveries or requests (a lease that was not
// settled runs out and its head is delivered again; SQLite and PostgreSQL
// keep every committed write).
func exitOnSecondSignal(sigs <-chan os.Signal, stop context.CancelFunc) {
	first := <-sigs
	// The notice first, so that it comes before the daemon's stopping
	// lines; but a stderr that blocks (a stalled pipe) must not hold the
	// stop back: after a second the context is cancelled anyway.
	said := make(chan struct{})
	go func() {
		defer close(said)
		sayEvent(fmt.Sprintf("fairrelay: %s: stopping gracefully; send it again to stop at once", first),
			slog.LevelWarn, "stopping gracefully; send it again to stop at once", "signal", first.String())
	}()
	select {
	case <-said:
	case <-time.After(time.Second):
	}
	stop()
	second := <-sigs
	sayEvent(fmt.Sprintf("fairrelay: %s again: stopping at once", second), slog.LevelWarn, "stopping at once", "signal", second.String())
	if rep := leasedAtExit.Load(); rep != nil {
		// What the stop leaves behind (an operator's report: a forced stop
		// said nothing of the heads it left leased, whose flows then
		// waited a lease with no word of why).
		if n := rep.leased(); n > 0 {
			what := fmt.Sprintf("%d heads this relay claimed are", n)
			if n == 1 {
				what = "1 head this relay claimed is"
			}
			sayEvent(fmt.Sprintf("fairrelay: %s left leased: each is delivered again once its lease runs out (up to %s)", what, time.Duration(rep.leaseMS)*time.Millisecond),
				slog.LevelWarn, "heads left leased: each is delivered again once its lease runs out", "leased", n, "lease_ms", rep.leaseMS)
		}
	}
	code := exitFailed
	if n, ok := second.(syscall.Signal); ok {
		code = 128 + int(n)
	}
	os.Exit(code)
}

// stoppedBeforeStart is a daemon's (relay, receive, console) answer to
// err: a stop signal that arrived while the daemon was still starting
// (opening its store, waiting on a busy database) ends the start with
// context.Canceled, and that is a stop asked for, not a failure: it says
// so on stderr and returns nil (exit 0), as a stop after the start does.
// Any other error is returned as it is.
func stoppedBeforeStart(cmd *cobra.Command, err error) error {
	if err == nil || cmd.Context().Err() == nil || !errors.Is(err, context.Canceled) {
		return err
	}
	sayEvent(fmt.Sprintf("fairrelay: %s: stopped before it started (%s)", cmd.Name(), errorLine(err)),
		slog.LevelWarn, "stopped before it started", "command", cmd.Name(), "error", errorLine(err))
	return nil
}

// daemonLogger is the daemon's logger and whether it logs JSON
// (--log-format json).
type daemonLogger struct {
	log  *slog.Logger
	json bool
}

// daemonLog is the daemon's logger once it has one (nil for the commands
// that are not daemons). The stop signals' notices, events in the middle
// of its log, go through it whatever its format (sayEvent), so that they
// have its format (a plain line among the key=value lines broke logfmt
// parsers: an operator's report); when it logs JSON, the process's other
// lines on stderr — the error it exits with — go through it too (say), so
// that every line a log collector reads is one JSON object.
var daemonLog atomic.Pointer[daemonLogger]

// sayEvent is say for an event in a daemon's life: once the daemon has a
// logger, a record of msg and args at level, in its format.
// A text logger whose level leaves level out (--log-level error) gets
// the plain line instead, so that a stop signal's notice is not hidden; a
// JSON one keeps every line JSON, and its level decides.
func sayEvent(line string, level slog.Level, msg string, args ...any) {
	if d := daemonLog.Load(); d != nil && (d.json || d.log.Enabled(context.Background(), level)) {
		d.log.Log(context.Background(), level, msg, args...)
		return
	}
	fmt.Fprintln(os.Stderr, line)
}

// say writes line on stderr, or, when the daemon logs JSON, a record of
// msg and args at level instead. The error a command exits with stays a
// "fairrelay: code: field: …" line in text mode, as every command's.
func say(line string, level slog.Level, msg string, args ...any) {
	if d := daemonLog.Load(); d != nil && d.json {
		d.log.Log(context.Background(), level, msg, args...)
		return
	}
	fmt.Fprintln(os.Stderr, line)
}
