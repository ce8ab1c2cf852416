package logcap_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay/internal/logcap"
)

// codeOf is the test's error code: the text before the first colon.
func codeOf(err error) string {
	code, _, _ := strings.Cut(err.Error(), ":")
	return code
}

// Each kind of line has its allowance: Burst at once, then Rate a second;
// a line over it is not allowed and counted, and the next allowed line of
// the kind gets the count. Another kind's first line is allowed however
// many of the first came before it.
func TestAllowCapsEachKind(t *testing.T) {
	t.Parallel()
	c := logcap.New()
	t0 := time.Unix(1000, 0).UTC()
	allowed := 0
	for range logcap.Burst + 10 {
		if ok, quiet := c.Allow("a", t0); ok {
			allowed++
			if quiet != 0 {
				t.Fatalf("an allowed line within the burst counted %d", quiet)
			}
		}
	}
	if allowed != logcap.Burst {
		t.Fatalf("%d lines at once: %d allowed, want %d", logcap.Burst+10, allowed, logcap.Burst)
	}
	if ok, quiet := c.Allow("b", t0); !ok || quiet != 0 {
		t.Errorf("the first line of another kind: allowed %t, quiet %d; want allowed, 0", ok, quiet)
	}
	if ok, quiet := c.Allow("a", t0.Add(time.Second)); !ok || quiet != 10 {
		t.Errorf("a second later: allowed %t, quiet %d; want allowed, counting the 10 not allowed", ok, quiet)
	}
	if ok, _ := c.Allow("a", t0.Add(time.Second)); ok {
		t.Error("a second line in that second was allowed")
	}
}

// The handler caps WARN and ERROR lines by their message and the code of
// their error: over the allowance they go out at DEBUG (or not at all
// when the handler underneath leaves DEBUG out), and the next one kept
// says how many did; the first line of a new error code, and every line
// below WARN, go out as they are.
func TestHandlerCapsRepeatedLines(t *testing.T) {
	t.Parallel()
	busy := errors.New("busy: locked")
	gone := errors.New("not_a_database: no such table: receipt")
	t0 := time.Unix(1000, 0).UTC()
	record := func(at time.Time, level slog.Level, msg string, err error) slog.Record {
		r := slog.NewRecord(at, level, msg, 0)
		r.AddAttrs(slog.String("id", "E1"), slog.Any("err", err))
		return r
	}
	for _, lv := range []slog.Level{slog.LevelDebug, slog.LevelInfo} {
		var out bytes.Buffer
		h := logcap.NewHandler(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: lv}), nil, "repeats", codeOf)
		handle := func(r slog.Record) {
			if err := h.Handle(context.Background(), r); err != nil {
				t.Fatal(err)
			}
		}
		for range 25 {
			handle(record(t0, slog.LevelError, "inbox: receive failed", busy))
			handle(record(t0, slog.LevelInfo, "inbox: the client went away", busy))
		}
		handle(record(t0, slog.LevelError, "inbox: receive failed", gone))
		handle(record(t0.Add(time.Second), slog.LevelError, "inbox: receive failed", busy))
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		count := func(prefix, code string) (n int) {
			for _, l := range lines {
				if strings.HasPrefix(l, prefix) && strings.Contains(l, code) {
					n++
				}
			}
			return n
		}
		errLine := "time=1970-01-01T00:16:40.000Z level=ERROR msg=\"inbox: receive failed\""
		if n := count(errLine, `err="busy: locked"`); n != logcap.Burst {
			t.Errorf("log level %s: %d busy failures at ERROR at once, want %d:\n%s", lv, n, logcap.Burst, out.String())
		}
		wantDebug := 0
		if lv == slog.LevelDebug {
			wantDebug = 25 - logcap.Burst
		}
		if n := count("time=1970-01-01T00:16:40.000Z level=DEBUG msg=\"inbox: receive failed\"", `err="busy: locked"`); n != wantDebug {
			t.Errorf("log level %s: %d busy failures at DEBUG, want %d:\n%s", lv, n, wantDebug, out.String())
		}
		if n := count(errLine, "not_a_database: no such table"); n != 1 {
			t.Errorf("log level %s: the first not_a_database failure is not at ERROR:\n%s", lv, out.String())
		}
		if n := count("time=1970-01-01T00:16:40.000Z level=INFO", "went away"); n != 25 {
			t.Errorf("log level %s: %d INFO lines, want all 25", lv, n)
		}
		if last := lines[len(lines)-1]; !strings.Contains(last, "level=ERROR") || !strings.HasSuffix(last, "repeats=5") {
			t.Errorf("log level %s: a second later %q; want at ERROR, counting the 5 at DEBUG", lv, last)
		}
	}
}
