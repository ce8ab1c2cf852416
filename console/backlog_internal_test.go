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
	"github.com/fairrelay/fairrelay/inbox"
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

// A count that does not end within the page's wait (on PostgreSQL the count
// reads every flow) goes on in the background: the overview shows the last
// count, with its age once it is a second old; a count older than its
// refresh interval starts a new one; a failed count is shown by its code,
// the store's text going to the log only.
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
	gate := make(chan struct{}) // one send lets one count go on
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
		now: wall.Now, timeout: time.Minute, wait: 10 * time.Millisecond, done: func() { ended <- struct{}{} },
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
	gate <- struct{}{}
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
	noCount(t, s.backlog, ended, "within the refresh interval")

	// Past it (100 times the 50 ms the count took): the last count with
	// its age, and a new count, then its answer.
	wall.Add(5 * time.Second)
	page = overviewOf(t, s)
	if got := backlogOf(t, page); got != "3" || !strings.Contains(page, "counted 6s ago") {
		t.Errorf("5.55 s later: backlog %q, want 3 counted 6s ago:\n%s", got, page)
	}
	gate <- struct{}{}
	<-ended
	if got := backlogOf(t, overviewOf(t, s)); got != "5" {
		t.Errorf("after the new count: backlog %q, want 5", got)
	}

	// A failed count: the last good count stays, the code is shown, the
	// store's text is only logged.
	fail = fmt.Errorf("%w: disk I/O error (secret path /x/y)", fairrelay.ErrDatabase)
	wall.Add(6 * time.Second)
	overviewOf(t, s)
	gate <- struct{}{}
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

// A page waits (up to pageWait) for the count it starts, so a small
// store's overview is never stale — also after a count that once took
// long (the first, or one on a loaded machine): the console's fresh-user
// trial saw "backlog 2 … counted 9s ago" on a PostgreSQL store of two
// flows whose backlog was 1.
func TestOverviewWaitsForACheapCount(t *testing.T) {
	ctx := context.Background()
	q, s, wall := wallServer(t)
	ended := make(chan struct{}, 8)
	slow := true
	s.backlog = &backlogCount{count: func(ctx context.Context) (int64, error) {
		if slow {
			wall.Add(50 * time.Millisecond) // the first count took long
			slow = false
		}
		return q.Backlog(ctx)
	}, now: wall.Now, timeout: time.Minute, wait: time.Minute, log: s.log, done: func() { ended <- struct{}{} }}
	if got := backlogOf(t, overviewOf(t, s)); got != "0" {
		t.Errorf("first overview: backlog %q, want 0, counted by then", got)
	}
	<-ended
	for i, id := range []string{"A1", "A2"} {
		if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: id, Flow: "A", Body: []byte(`{"delta":1}`), At: fairrelay.AtStored}); err != nil {
			t.Fatal(err)
		}
		wall.Add(9 * time.Second)
		page := overviewOf(t, s)
		if got, want := backlogOf(t, page), fmt.Sprint(i+1); got != want || strings.Contains(page, `id="backlog-age"`) {
			t.Errorf("9 s after the last count: backlog %q, want %s, counted now:\n%s", got, want, page)
		}
		select {
		case <-ended:
		default:
			t.Error("the page showed the count before it ended")
		}
	}
}

// noCount fails the test if a count of b ran or runs: one that ended
// (ended) or one started and not ended yet (running).
func noCount(t *testing.T, b *backlogCount, ended chan struct{}, when string) {
	t.Helper()
	b.mu.Lock()
	running := b.running
	b.mu.Unlock()
	select {
	case <-ended:
		running = true
	default:
	}
	if running {
		t.Fatalf("a count ran %s", when)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// A count that waited long (PostgreSQL waits for a lock up to its lock
// timeout) is refreshed after a minute at most, not after 100 times its
// time: the number is never minutes stale.
func TestBacklogRefreshIsCappedAtAMinute(t *testing.T) {
	_, s, wall := wallServer(t)
	ended := make(chan struct{}, 8)
	counts := 0
	s.backlog = &backlogCount{count: func(context.Context) (int64, error) {
		counts++
		wall.Add(5 * time.Second) // a count that waited 5 s for a lock
		return int64(counts), nil
	}, now: wall.Now, timeout: time.Minute, log: s.log, done: func() { ended <- struct{}{} }}
	overviewOf(t, s)
	<-ended
	wall.Add(50 * time.Second) // 55 s after the count began
	if got := backlogOf(t, overviewOf(t, s)); got != "1" {
		t.Fatalf("55 s after the count: backlog %q, want the first count", got)
	}
	noCount(t, s.backlog, ended, "within a minute of the last")
	wall.Add(6 * time.Second)
	overviewOf(t, s) // 61 s: a new count, not 500 s later
	<-ended
	if got := backlogOf(t, overviewOf(t, s)); got != "2" {
		t.Errorf("after the refresh: backlog %q, want the second count", got)
	}
}

// A busy store answers 503 without the store's text (a lock timeout's
// message names tables and statements): that goes to the log.
func TestBusyPagesDoNotShowTheStoreText(t *testing.T) {
	_, s, _ := wallServer(t)
	w := httptest.NewRecorder()
	s.failErr(w, httptest.NewRequest("GET", "http://127.0.0.1/flows", nil),
		fmt.Errorf("clock: %w: ClockGet: ERROR: canceling statement due to lock timeout (SQLSTATE 55P03)", fairrelay.ErrBusy))
	if w.Code != 503 || strings.Contains(w.Body.String(), "ClockGet") || strings.Contains(w.Body.String(), "SQLSTATE") {
		t.Errorf("busy: %d %q, want 503 without the store's text", w.Code, w.Body.String())
	}
}

// The inbox page's after is a flow id: one that is not (invalid UTF-8, a
// control character) answers 400 naming it, as on the other pages.
func TestInboxAfterMustBeAFlowID(t *testing.T) {
	q, err := fairrelay.Open(context.Background(), filepath.Join(t.TempDir(), "q.db"), fairrelay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	in, err := inbox.Open(context.Background(), filepath.Join(t.TempDir(), "i.db"), inbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	s, err := New(Config{Queue: q, Inbox: in, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for _, after := range []string{"%ff", "%00"} {
		w := httptest.NewRecorder()
		s.ServeHTTP(w, httptest.NewRequest("GET", "http://127.0.0.1/inbox?after="+after, nil))
		if w.Code != 400 || !strings.Contains(w.Body.String(), "after") {
			t.Errorf("/inbox?after=%s: %d %q, want 400 naming after", after, w.Code, w.Body.String())
		}
	}
}

// The rate chart's bars say "1 delivery", not "1 deliveries" (a fresh
// user's report), and "N deliveries" otherwise.
func TestRateChartBarTitles(t *testing.T) {
	var bs [minutes]bucket
	bs[0].n, bs[1].n = 1, 3
	got := string(rateChart(bs))
	for _, want := range []string{"<title>1 delivery</title>", "<title>3 deliveries</title>"} {
		if !strings.Contains(got, want) {
			t.Errorf("rate chart lacks %q", want)
		}
	}
	if strings.Contains(got, "1 deliveries") {
		t.Error(`rate chart says "1 deliveries"`)
	}
}
