package console

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
)

// fakeWall is a wall clock a test moves.
type fakeWall struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeWall) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeWall) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }
func (c *fakeWall) String() string      { return c.Now().String() }

// wallServer is a console without sign-in on a fresh SQLite queue,
// closed when the test ends, whose wall clock the test moves.
func wallServer(t *testing.T) (*fairrelay.Queue, *Server, *fakeWall) {
	t.Helper()
	q, err := fairrelay.Open(context.Background(), filepath.Join(t.TempDir(), "q.db"), fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	wall := &fakeWall{t: time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)}
	s, err := New(Config{Queue: q, Now: wall.Now, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return q, s, wall
}

func overviewOf(t *testing.T, s *Server) string {
	t.Helper()
	w := httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest("GET", "http://127.0.0.1/", nil))
	if w.Code != 200 {
		t.Fatalf("overview: %d %s", w.Code, w.Body)
	}
	return w.Body.String()
}

var backlogCard = regexp.MustCompile(`id="backlog">([^<]*)<`)

func backlogOf(t *testing.T, page string) string {
	t.Helper()
	m := backlogCard.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no backlog card in the overview:\n%s", page)
	}
	return m[1]
}

// The overview never counts the backlog itself (on PostgreSQL the count
// reads every flow): it shows the last count, started in the background,
// with its age once it is a second old; a count older than its refresh
// interval starts a new one; a failed count is shown by its code, the
// store's text going to the log only.
func TestOverviewShowsTheBacklogCountedInTheBackground(t *testing.T) {
	ctx := context.Background()
	q, s, wall := wallServer(t)
	enqueue := func(ids ...string) {
		for _, id := range ids {
			if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: id, Flow: id[:1], Body: []byte(`{"delta":1}`), At: fairrelay.AtStored}); err != nil {
				t.Fatal(err)
			}
		}
	}
	enqueue("A1", "A2", "B1")
	var logged strings.Builder
	var logMu sync.Mutex
	gate := make(chan struct{})
	ended := make(chan struct{}, 8)
	var fail error
	s.backlog = &backlogCount{
		count: func(ctx context.Context) (int64, error) {
			<-gate
			wall.Add(50 * time.Millisecond) // a slow count: in the background
			if fail != nil {
				return 0, fail
			}
			return q.Backlog(ctx)
		},
		now: wall.Now, timeout: time.Minute, done: func() { ended <- struct{}{} },
		log: slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
			logMu.Lock()
			defer logMu.Unlock()
			return logged.Write(p)
		}), nil)),
	}

	// The first view answers while the count waits.
	if got := backlogOf(t, overviewOf(t, s)); got != "counting…" {
		t.Fatalf("first overview while the count runs: backlog %q, want counting…", got)
	}
	close(gate)
	<-ended
	page := overviewOf(t, s)
	if got := backlogOf(t, page); got != "3" {
		t.Fatalf("after the count: backlog %q, want 3", got)
	}
	if strings.Contains(page, `id="backlog-age"`) {
		t.Errorf("a fresh count shows an age:\n%s", page)
	}

	// Within the refresh interval: the same count, and none started.
	enqueue("C1", "C2")
	wall.Add(500 * time.Millisecond)
	if got := backlogOf(t, overviewOf(t, s)); got != "3" {
		t.Errorf("half a second later: backlog %q, want the last count, 3", got)
	}
	select {
	case <-ended:
		t.Fatal("a count ran within the refresh interval")
	default:
	}

	// Past it (100 times the 50 ms the count took): the last count with
	// its age, and a new count, then its answer.
	wall.Add(5 * time.Second)
	page = overviewOf(t, s)
	if got := backlogOf(t, page); got != "3" || !strings.Contains(page, "counted 6s ago") {
		t.Errorf("5.55 s later: backlog %q, want 3 counted 6s ago:\n%s", got, page)
	}
	<-ended
	if got := backlogOf(t, overviewOf(t, s)); got != "5" {
		t.Errorf("after the new count: backlog %q, want 5", got)
	}

	// A failed count: the last good count stays, the code is shown, the
	// store's text is only logged.
	fail = fmt.Errorf("%w: disk I/O error (secret path /x/y)", fairrelay.ErrDatabase)
	wall.Add(6 * time.Second)
	overviewOf(t, s)
	<-ended
	page = overviewOf(t, s)
	if got := backlogOf(t, page); got != "5" || !strings.Contains(page, `id="backlog-failed"`) || !strings.Contains(page, "(database)") {
		t.Errorf("after a failed count: backlog %q, want 5 and the failure's code:\n%s", got, page)
	}
	if strings.Contains(page, "secret path") {
		t.Errorf("the page shows the store's error text:\n%s", page)
	}
	logMu.Lock()
	if !strings.Contains(logged.String(), "secret path") {
		t.Errorf("the failed count is not logged: %q", logged.String())
	}
	logMu.Unlock()
}

// A count that takes less than inlineCount (SQLite's counter) is run by
// the page itself once the last one is a second old: a small store's
// overview is never stale.
func TestOverviewCountsACheapBacklogItself(t *testing.T) {
	ctx := context.Background()
	q, s, wall := wallServer(t)
	ended := make(chan struct{}, 8)
	s.backlog = &backlogCount{count: q.Backlog, now: wall.Now, timeout: time.Minute, log: s.log, done: func() { ended <- struct{}{} }}
	overviewOf(t, s) // the first count, in the background
	<-ended
	if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "A1", Flow: "A", Body: []byte(`{"delta":1}`), At: fairrelay.AtStored}); err != nil {
		t.Fatal(err)
	}
	wall.Add(time.Second)
	page := overviewOf(t, s)
	if got := backlogOf(t, page); got != "1" || strings.Contains(page, `id="backlog-age"`) {
		t.Errorf("a second later: backlog %q, want 1, counted now:\n%s", got, page)
	}
	select {
	case <-ended:
	default:
		t.Error("the page showed the count before it ended")
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
