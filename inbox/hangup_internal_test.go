package inbox

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/internal/sqlitetest"
	"github.com/fairrelay/fairrelay/sink/webhook"
)

// A commit the database refuses is the receiver's failure, logged at ERROR,
// also when the client hung up while it ran: the handler took every error
// that came with the request's context done for the client's leaving, and
// logged a failed commit at INFO as "the client went away" (an audit of the
// handler's error paths: a commit that stalls past the relay's timeout and
// then fails — a full disk, a deferred constraint — showed in no error
// line, every retry alike). The commit fails for real here: a deferred
// constraint that the receipt's insert breaks, checked at COMMIT.
func TestHandlerLogsAFailedCommitAsAnErrorWhenTheClientLeft(t *testing.T) {
	t.Parallel()
	commitBackends(t, func(t *testing.T, in *Inbox, dsn string) {
		if strings.HasPrefix(dsn, "postgres") {
			pgtest.Exec(t, dsn, `CREATE FUNCTION refuse_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'deferred check failed at commit'; END $$;
CREATE CONSTRAINT TRIGGER refuse_at_commit AFTER INSERT ON receipt DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW EXECUTE FUNCTION refuse_at_commit()`)
		} else {
			// A deferred foreign key (the inbox's connections enforce
			// them) to a parent that never exists: COMMIT fails.
			sqlitetest.Exec(t, dsn, `CREATE TABLE parent (id INTEGER PRIMARY KEY);
CREATE TABLE guard (p INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED);
CREATE TRIGGER refuse_at_commit AFTER INSERT ON receipt BEGIN INSERT INTO guard VALUES (1); END`)
		}
		var logs recordLog
		srv := httptest.NewServer(in.Handler(HandlerOptions{Logger: slog.New(&logs)}))
		t.Cleanup(srv.Close)
		ctx, hangUp := context.WithCancel(t.Context())
		done := make(chan error, 1)
		in.commitHook = func(reqCtx context.Context, tx *sql.Tx) error {
			hangUp()
			select { // the server notices the closed connection
			case <-reqCtx.Done():
			case <-time.After(10 * time.Second):
				t.Error("the request's context was not cancelled 10s after the client hung up")
			}
			err := tx.Commit()
			done <- err
			return err
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(string(commitDelivery.Body)))
		req.Header.Set(webhook.HeaderID, webhook.MessageID(commitDelivery.EventID, commitDelivery.Flow, commitDelivery.Seq))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			t.Fatal("the request was answered although its client hung up")
		}
		if err := <-done; err == nil {
			t.Fatal("the commit succeeded: the deferred check did not refuse it")
		}
		srv.Close() // waits for the handler to return
		wantApplied(t, in, false)
		if e := logs.errors(); !strings.Contains(e, "inbox: receive failed") {
			t.Fatalf("a commit the database refused, its client gone, logged at ERROR: %q; want \"inbox: receive failed\"", e)
		}
	})
}

// The other side of it: a client that goes away while its receive waits
// (for another writer's lock) ends the receive with its context's error,
// which is no failure of the receiver: logged at INFO, nothing at ERROR,
// nothing written.
func TestHandlerLogsAClientThatLeftWhileItsReceiveWaitedAtInfo(t *testing.T) {
	t.Parallel()
	commitBackends(t, func(t *testing.T, in *Inbox, dsn string) {
		if strings.HasPrefix(dsn, "postgres") {
			pgtest.LockTable(t, dsn, "receipt") // the receive's read of the receipt waits
		} else {
			t.Cleanup(sqlitetest.HoldWriter(t, dsn)) // the receive's BEGIN IMMEDIATE waits
		}
		var logs recordLog
		arrived := make(chan struct{})
		h := in.Handler(HandlerOptions{Logger: slog.New(&logs)})
		var status atomic.Int64 // what the handler wrote, as metrics around it see it
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(arrived)
			rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
			h.ServeHTTP(rec, r)
			status.Store(int64(rec.status))
		}))
		t.Cleanup(srv.Close)
		ctx, hangUp := context.WithCancel(t.Context())
		go func() {
			<-arrived
			hangUp()
		}()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(string(commitDelivery.Body)))
		req.Header.Set(webhook.HeaderID, webhook.MessageID(commitDelivery.EventID, commitDelivery.Flow, commitDelivery.Seq))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			t.Fatal("the request was answered although its client hung up")
		}
		srv.Close() // waits for the handler to return
		if e := logs.errors(); e != "" {
			t.Fatalf("logged at ERROR for a client that went away: %s", e)
		}
		if !logs.has("inbox: the client went away before the delivery was applied") {
			t.Fatal("no line said the client went away")
		}
		// Not 200, which a handler that writes nothing is counted as (an
		// SRE's drill: the receiver's metrics said 200 for requests
		// nobody answered).
		if got := status.Load(); got != StatusClientClosedRequest {
			t.Errorf("status written for a client that went away: %d, want %d", got, StatusClientClosedRequest)
		}
	})
}

// statusRecorder records the status a handler writes (200 when it writes
// none, as promhttp's counters take it).
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// has reports whether a record with message msg was logged.
func (l *recordLog) has(msg string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.recs {
		if r.Message == msg {
			return true
		}
	}
	return false
}

// A receive whose caller leaves while it waits for one of the inbox's
// connections (all in use: a slow Apply beside others) answers one line:
// it answered "begin transaction: context canceled\ncontext canceled"
// (errors.Join of the caller's error and BEGIN's own, the cancel of its
// context; a library user's report), a line break in a log line.
func TestAReceiveWhoseCallerLeftWhileItWaitedForAConnectionSaysSoOnOneLine(t *testing.T) {
	t.Parallel()
	in, err := Open(t.Context(), pgtest.Schema(t, "frinwait"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	in.db.SetMaxOpenConns(1)
	held, err := in.db.Conn(t.Context()) // the one connection, in use
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond) // the caller gives up
	defer cancel()
	_, err = in.Receive(ctx, commitDelivery)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Receive whose caller left while it waited for a connection: %v, want context.DeadlineExceeded in its chain", err)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("Receive's error %q holds a line break", err)
	}
}
