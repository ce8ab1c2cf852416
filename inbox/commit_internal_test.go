package inbox

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/sink/webhook"
)

// commitBackends opens a fresh inbox on each backend: a SQLite file and a
// PostgreSQL schema.
func commitBackends(t *testing.T, run func(t *testing.T, in *Inbox, dsn string)) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			dsn := filepath.Join(t.TempDir(), "inbox.db")
			if backend == "postgres" {
				dsn = pgtest.Schema(t, "frincommit")
			}
			in, err := Open(t.Context(), dsn, Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { in.Close() })
			run(t, in, dsn)
		})
	}
}

var commitDelivery = Delivery{EventID: "A1", Flow: "A", Seq: 1, Body: []byte(`{"delta":3}`)}

// wantApplied checks that exactly commitDelivery's receipt and effect are
// in the inbox (applied) or that nothing is.
func wantApplied(t *testing.T, in *Inbox, applied bool) {
	t.Helper()
	s, err := in.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := len(s.Receipts) == 1 && s.Receipts[0] == (Receipt{ID: "A1", Flow: "A", Seq: 1}) &&
		len(s.Projection) == 1 && s.Projection[0] == (Projection{Flow: "A", Seq: 1, Total: 3})
	if got != applied || (!applied && (len(s.Receipts) != 0 || len(s.Projection) != 0)) {
		t.Fatalf("inbox %+v, want applied=%v", s, applied)
	}
}

// Once the effect's transaction is committing, the caller's context no
// longer matters: a request cancelled right then still commits, and Receive
// answers accepted for the receipt it wrote (issue 15: PostgreSQL answered
// 500 with "commit: context canceled" for committed receipts).
func TestReceiveCommitsWhenTheCallerLeavesAtTheCommit(t *testing.T) {
	t.Parallel()
	commitBackends(t, func(t *testing.T, in *Inbox, _ string) {
		ctx, cancel := context.WithCancel(t.Context())
		in.commitHook = func(_ context.Context, tx *sql.Tx) error {
			cancel() // the client hangs up as the commit starts
			return tx.Commit()
		}
		out, err := in.Receive(ctx, commitDelivery)
		if err != nil || out != fairrelay.OutcomeAccepted {
			t.Fatalf("Receive: %v, %v; want accepted", out, err)
		}
		wantApplied(t, in, true)
	})
}

// A commit that reports an error after the server applied it (a connection
// lost on the way back) is not a failure: the receipt is there, and Receive
// says accepted. A commit that really failed is still an error, with
// nothing written.
func TestReceiveNeverReportsFailureForAnAppliedEffect(t *testing.T) {
	t.Parallel()
	commitBackends(t, func(t *testing.T, in *Inbox, _ string) {
		in.commitHook = func(_ context.Context, tx *sql.Tx) error {
			if err := tx.Commit(); err != nil {
				return err
			}
			return errors.New("read tcp: connection reset by peer")
		}
		out, err := in.Receive(t.Context(), commitDelivery)
		if err != nil || out != fairrelay.OutcomeAccepted {
			t.Fatalf("a commit that applied but reported an error: %v, %v; want accepted", out, err)
		}
		wantApplied(t, in, true)

		in.commitHook = func(_ context.Context, tx *sql.Tx) error {
			tx.Rollback()
			return errors.New("read tcp: connection reset by peer")
		}
		d := Delivery{EventID: "B1", Flow: "B", Seq: 1, Body: []byte(`{"delta":1}`)}
		out, err = in.Receive(t.Context(), d)
		if err == nil {
			t.Fatalf("a commit that failed: %v, nil; want the error", out)
		}
		// On PostgreSQL a commit whose connection was lost may still be
		// running on the server: a receipt not there yet proves nothing,
		// so the outcome is unknown (a breaker's report: "nothing was
		// written", and the commit completed three seconds later). A SQLite
		// commit's error is final.
		if pg := in.path == ""; errors.Is(err, fairrelay.ErrCommitUnknown) != pg {
			t.Errorf("a commit whose connection was lost (postgres %v): %v; want ErrCommitUnknown only on PostgreSQL", pg, err)
		}
		if applied, err := in.applied(t.Context(), d); err != nil || applied {
			t.Fatalf("B1 after a failed commit: applied=%v %v", applied, err)
		}
		// The server's own answer to COMMIT is final on either backend.
		in.commitHook = func(_ context.Context, tx *sql.Tx) error {
			tx.Rollback()
			return &pgconn.PgError{Code: "40001", Message: "could not serialize access"}
		}
		c := Delivery{EventID: "C1", Flow: "C", Seq: 1, Body: []byte(`{"delta":1}`)}
		if _, err := in.Receive(t.Context(), c); err == nil || errors.Is(err, fairrelay.ErrCommitUnknown) {
			t.Errorf("a commit the server refused: %v; want its error, not ErrCommitUnknown", err)
		}
	})
}

// A client that goes away while its delivery commits is not an error of the
// receiver: the handler logs nothing at ERROR, and the delivery is applied.
func TestHandlerDoesNotLogAClientThatLeftAsAnError(t *testing.T) {
	t.Parallel()
	commitBackends(t, func(t *testing.T, in *Inbox, _ string) {
		var logs recordLog
		srv := httptest.NewServer(in.Handler(HandlerOptions{Logger: slog.New(&logs)}))
		t.Cleanup(srv.Close)
		ctx, hangUp := context.WithCancel(t.Context())
		done := make(chan struct{})
		in.commitHook = func(reqCtx context.Context, tx *sql.Tx) error {
			defer close(done)
			hangUp()
			select { // the server notices the closed connection
			case <-reqCtx.Done():
			case <-time.After(10 * time.Second):
				t.Error("the request's context was not cancelled 10s after the client hung up")
			}
			return tx.Commit()
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(string(commitDelivery.Body)))
		req.Header.Set(webhook.HeaderID, webhook.MessageID(commitDelivery.EventID, commitDelivery.Flow, commitDelivery.Seq))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			t.Fatal("the request was answered although its client hung up")
		}
		<-done
		srv.Close() // waits for the handler to return
		wantApplied(t, in, true)
		if e := logs.errors(); e != "" {
			t.Fatalf("logged at ERROR for a client that went away: %s", e)
		}
	})
}

// The real thing on PostgreSQL: the client hangs up while the server is in
// the middle of COMMIT (a deferred trigger makes COMMIT take half a second;
// the test waits until the server shows the COMMIT running). Before, pgx
// cancelled the COMMIT on the request's context: the receipt was lost, or
// committed and reported failed. Now the COMMIT finishes and Receive
// answers accepted.
func TestPostgresReceiveSurvivesAClientLeavingMidCommit(t *testing.T) {
	t.Parallel()
	app := "frinmid" + strconv.FormatInt(time.Now().UnixNano(), 36)
	dsn := pgtest.Schema(t, "frinmid") + "&application_name=" + app
	in, err := Open(t.Context(), dsn, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	pgtest.Exec(t, dsn, `CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_sleep(0.5); RETURN NULL; END $$;
CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON receipt DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW EXECUTE FUNCTION slow_commit()`)
	ctx, hangUp := context.WithCancel(t.Context())
	type result struct {
		out fairrelay.Outcome
		err error
	}
	res := make(chan result, 1)
	go func() {
		out, err := in.Receive(ctx, commitDelivery)
		res <- result{out, err}
	}()
	// Wait until the inbox's backend (its application_name) sleeps inside
	// COMMIT.
	probe := pgtest.Connect(t, dsn)
	defer probe.Close(context.Background())
	deadline := time.Now().Add(15 * time.Second)
	for {
		var n int
		err := probe.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND wait_event = 'PgSleep' AND lower(query) LIKE 'commit%'`, app).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		select {
		case r := <-res:
			t.Fatalf("Receive returned %v, %v before its COMMIT was seen", r.out, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no COMMIT seen sleeping in its deferred trigger within 15s")
		}
		time.Sleep(5 * time.Millisecond) // polling the server's state
	}
	hangUp()
	r := <-res
	if r.err != nil || r.out != fairrelay.OutcomeAccepted {
		t.Fatalf("Receive with the client gone mid-commit: %v, %v; want accepted", r.out, r.err)
	}
	wantApplied(t, in, true)
}

// recordLog is a slog.Handler that keeps the records, for asserting what a
// handler logged.
type recordLog struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *recordLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *recordLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r.Clone())
	return nil
}
func (l *recordLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *recordLog) WithGroup(string) slog.Handler      { return l }

// errors returns the ERROR records, one per line, "" when there are none.
func (l *recordLog) errors() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b bytes.Buffer
	for _, r := range l.recs {
		if r.Level >= slog.LevelError {
			b.WriteString(r.Message)
			r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
			b.WriteByte('\n')
		}
	}
	return b.String()
}
