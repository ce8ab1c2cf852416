package console_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/console"
	"github.com/fairrelay/fairrelay/internal/pgtest"
)

// A browser that leaves while its page or action waits for the store (a
// lock held by a migration, a VACUUM FULL) ends the request's reads with
// its context's error: that is no failure of the store, and the console
// logs it at info level, not as "console: request failed" at error level
// with "the store failed" (an audit of the console's error paths: every
// page an operator navigated away from during a slow read left an error
// line, which an alert on the console's errors counted). Each path of
// failErr is tried: a page and an action.
func TestConsoleDoesNotLogAClientThatLeftAsAStoreFailure(t *testing.T) {
	t.Parallel()
	dsn := pgtest.Schema(t, "frconleft")
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("schema")
	q, err := fairrelay.Open(bg, dsn, fairrelay.Config{Policy: fairrelay.DaemonPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	if _, err := q.Enqueue(bg, fairrelay.EnqueueParams{ID: "A1", Flow: "A", Body: []byte(`{"delta":1}`), At: fairrelay.AtStored}); err != nil {
		t.Fatal(err)
	}
	var logs records
	s, err := console.New(console.Config{Queue: q, Logger: slog.New(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s) // loopback
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL)
	csrf := c.csrf("/flows")
	probe := pgtest.Connect(t, dsn)
	defer probe.Close(bg)
	for _, r := range []struct {
		name, method, path string
		form               url.Values
	}{
		{"page", "GET", "/flows", nil},
		{"action", "POST", "/action/pause", url.Values{"csrf": {csrf}, "flow": {"A"}, "reason": {"hold"}}},
	} {
		logs.reset()
		release := pgtest.LockTable(t, dsn, "clock") // every read and write of the store waits
		ctx, hangUp := context.WithCancel(bg)
		var body *strings.Reader
		if r.form != nil {
			body = strings.NewReader(r.form.Encode())
		}
		var req *http.Request
		if body != nil {
			req, _ = http.NewRequestWithContext(ctx, r.method, srv.URL+r.path, body)
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		} else {
			req, _ = http.NewRequestWithContext(ctx, r.method, srv.URL+r.path, nil)
		}
		done := make(chan error, 1)
		go func() {
			resp, err := c.hc.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			done <- err
		}()
		// Hang up once the request's statement waits for the lock.
		deadline := time.Now().Add(15 * time.Second)
		for waiting := 0; waiting == 0; {
			if err := probe.QueryRow(bg, `SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
				JOIN pg_namespace n ON n.oid = c.relnamespace WHERE NOT l.granted AND c.relname = 'clock' AND n.nspname = $1`, schema).Scan(&waiting); err != nil {
				t.Fatal(err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no statement waited for the lock within 15s", r.name)
			}
			time.Sleep(5 * time.Millisecond) // polling the server's state
		}
		hangUp()
		if err := <-done; err == nil {
			t.Fatalf("%s: answered although its client hung up", r.name)
		}
		// The handler ends once its statement is cancelled: the line it
		// logs says so.
		line := logs.wait(t, "console: ")
		release()
		if line.Level >= slog.LevelError || !strings.Contains(line.Message, "went away") {
			t.Errorf("%s whose client hung up logged %s %q %s; want an info line that the client went away", r.name, line.Level, line.Message, line.attrs)
		}
	}
	if fi, err := q.Flow(bg, "A"); err != nil || fi.Paused {
		t.Errorf("flow A after a pause whose client left while it waited: %+v %v, want not paused", fi, err)
	}
}

// records is a slog.Handler that keeps the records and lets a test wait
// for one.
type records struct {
	mu   sync.Mutex
	recs []record
	more chan struct{}
}

type record struct {
	Level   slog.Level
	Message string
	attrs   string
}

func (l *records) Enabled(context.Context, slog.Level) bool { return true }
func (l *records) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, record{r.Level, r.Message, b.String()})
	if l.more != nil {
		close(l.more)
		l.more = nil
	}
	return nil
}
func (l *records) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *records) WithGroup(string) slog.Handler      { return l }

func (l *records) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = nil
}

// wait returns the first record whose message starts with prefix, waiting
// up to 30 s for it.
func (l *records) wait(t *testing.T, prefix string) record {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		l.mu.Lock()
		for _, r := range l.recs {
			if strings.HasPrefix(r.Message, prefix) {
				l.mu.Unlock()
				return r
			}
		}
		if l.more == nil {
			l.more = make(chan struct{})
		}
		more := l.more
		l.mu.Unlock()
		select {
		case <-more:
		case <-timeout:
			t.Fatalf("no log line %q within 30s", prefix)
		}
	}
}
