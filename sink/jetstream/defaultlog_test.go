package jetstream_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay/internal/harness/brokertest"
	"github.com/fairrelay/fairrelay/internal/syncbuf"
	"github.com/fairrelay/fairrelay/sink/jetstream"
)

// Without ConnectOptions.Logger the connection logs to slog.Default():
// before, its lines (a lost connection, a server's error) were discarded
// by default (the closing notes' "loggers that discard by default"). Not
// parallel: it replaces the process's default logger.
func TestConnectLogsToTheDefaultLoggerWithoutALogger(t *testing.T) {
	var mu sync.Mutex
	var logged bytes.Buffer
	connected := make(chan struct{})
	syncbuf.DefaultLogger(t, slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		if strings.Contains(string(p), "nats: connected") && !strings.Contains(logged.String(), "nats: connected") {
			close(connected)
		}
		return logged.Write(p)
	}), nil))
	nc, err := jetstream.Connect(jetstream.Endpoint{Server: brokertest.NATS(t)}, jetstream.ConnectOptions{Name: "fairrelay-test", Retry: true})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	select {
	case <-connected:
	case <-time.After(20 * time.Second): // a bound on a failure, not synchronisation
		t.Error(`the default logger got no "nats: connected" line in 20 s`)
	}
}
