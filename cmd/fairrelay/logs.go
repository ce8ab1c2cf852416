package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/pflag"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/logcap"
)

// logFlags are the daemons' logging flags (relay, receive, console):
// --log-level and --log-format.
type logFlags struct{ level, format string }

func (l *logFlags) register(f *pflag.FlagSet) {
	f.StringVar(&l.level, "log-level", "info", "debug, info, warn or error (logs go to stderr)")
	f.StringVar(&l.format, "log-format", "text", "text (key=value lines) or json (one JSON object per line, for a log collector)")
}

// logger builds the daemon's logger on stderr, or an invalid_input error
// naming the flag whose value is not one of its choices. The logger also
// carries the process's own lines from then on (daemonLog).
func (l *logFlags) logger() (*slog.Logger, error) {
	log, err := newLogger(os.Stderr, l.level, l.format)
	if err == nil {
		daemonLog.Store(&daemonLogger{log: log, json: l.format == "json"})
	}
	return log, err
}

// jsonValue writes a duration as the text logs do ("10s", not its
// nanoseconds) and a value with a String method but no JSON form of its own
// as that string, not as an empty object.
func jsonValue(_ []string, a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindDuration:
		a.Value = slog.StringValue(a.Value.Duration().String())
	case slog.KindAny:
		v := a.Value.Any()
		if _, ok := v.(json.Marshaler); ok {
			break
		}
		if _, ok := v.(error); ok {
			break
		}
		if st, ok := v.(fmt.Stringer); ok {
			a.Value = slog.StringValue(st.String())
		}
	}
	return a
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "log-level", Message: fmt.Sprintf("must be debug, info, warn or error, got %q", level)}
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		opts.ReplaceAttr = jsonValue
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "log-format", Message: fmt.Sprintf("must be text or json, got %q", format)}
}

// repeatsKey is the attribute of a capped line that counts the lines of
// its kind logged at DEBUG since the last one at its level (capRepeats).
const repeatsKey = "repeats_at_debug_only"

// capRepeats is log with its WARN and ERROR lines capped per kind, as the
// relay caps its failed deliveries (package logcap): receive and the
// console wrote one line per request or message while their store failed
// under load. Of each kind (the message, and the error's code) the first
// 20 lines and then one a second keep their level; the others go out at
// DEBUG, and the next line kept counts them (repeats_at_debug_only).
func capRepeats(log *slog.Logger) *slog.Logger {
	return slog.New(logcap.NewHandler(log.Handler(), nil, repeatsKey, func(err error) string { return string(fairrelay.CodeOf(err)) }))
}
