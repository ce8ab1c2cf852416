package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/console"
)

// serverMustNotFail is a serving fail for a server that must not stop on
// an error in the test: a call fails the test.
func serverMustNotFail(t *testing.T) func(what string, err error) {
	return func(what string, err error) { t.Errorf("%s stopped serving: %v", what, err) }
}

// brokenListener is a listener whose Accept fails for good, as a
// server's does when its socket goes (not a temporary error, which the
// server waits out).
type brokenListener struct{ net.Listener }

var errSocketGone = errors.New("accept: the socket is gone")

func (brokenListener) Accept() (net.Conn, error) { return nil, errSocketGone }

func newBrokenListener(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return brokenListener{ln}
}

// A daemon's server that stops on an error while the daemon runs — its
// metrics and probes (relay, receive), its console (console, relay
// --console-addr, demo --console) — ends the daemon's context (serving)
// with that error, which the daemon then exits with (serverFailed) in
// place of a stop's nil or context.Canceled: the server's error was
// logged, and the daemon ran on without it or exited 0.
func TestAServerThatStopsOnAnErrorStopsTheDaemon(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	t.Run("metrics", func(t *testing.T) {
		t.Parallel()
		ctx, fail := serving(t.Context())
		stop := serveMetrics(newBrokenListener(t), prometheus.NewRegistry(), func(context.Context) error { return nil }, log, fail)
		defer stop()
		<-ctx.Done()
		err := serverFailed(ctx, nil)
		if !errors.Is(err, errSocketGone) || err.Error() != "the metrics server stopped serving: "+errSocketGone.Error() {
			t.Errorf("a daemon whose metrics server stopped exits with %v; want that server's error", err)
		}
	})
	t.Run("console", func(t *testing.T) {
		t.Parallel()
		q, err := fairrelay.Open(t.Context(), filepath.Join(t.TempDir(), "q.db"), fairrelay.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		ctx, fail := serving(t.Context())
		var cf consoleFlags
		_, wait, err := cf.start(ctx, newBrokenListener(t), console.Config{Queue: q, LocalOperator: "test", Logger: log}, fail)
		if err != nil {
			t.Fatal(err)
		}
		<-ctx.Done()
		wait()
		for _, stopped := range []error{nil, context.Canceled} {
			if err := serverFailed(ctx, stopped); !errors.Is(err, errSocketGone) || !strings.HasPrefix(err.Error(), "the console stopped serving: ") {
				t.Errorf("a daemon whose console stopped, ending with %v, exits with %v; want the console's error", stopped, err)
			}
		}
		// An error of the daemon's own is kept beside it.
		own := errors.New("the store went")
		if err := serverFailed(ctx, own); !errors.Is(err, own) || !errors.Is(err, errSocketGone) {
			t.Errorf("serverFailed with the daemon's own error: %v; want both", err)
		}
	})
	t.Run("signal", func(t *testing.T) {
		t.Parallel()
		parent, stop := context.WithCancel(t.Context())
		ctx, _ := serving(parent)
		stop() // a stop signal: no server failed
		<-ctx.Done()
		if err := serverFailed(ctx, nil); err != nil {
			t.Errorf("a daemon stopped by a signal exits with %v; want nil", err)
		}
		if err := serverFailed(ctx, context.Canceled); !errors.Is(err, context.Canceled) {
			t.Errorf("a start stopped by a signal: %v; want context.Canceled kept (stoppedBeforeStart)", err)
		}
	})
}
