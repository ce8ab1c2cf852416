package inbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/pgtest"
	"github.com/fairrelay/fairrelay/sink/webhook"
)

// errLostCommit is what a commit whose answer the connection lost reports.
var errLostCommit = errors.New("read tcp 127.0.0.1:5432: connection reset by peer")

// A commit that reports an error is read back (the receipt may be there: a
// connection lost after the server committed). When that read fails too,
// nobody knows whether the delivery was applied, and it may have been: the
// handler answered "nothing was written", which the relay records in the
// attempt history, and Receive returned the commit's error alone (an audit
// of the paths that turn a database error into a claim it cannot make).
// Now the error has fairrelay.ErrCommitUnknown in its chain and the answer
// says the delivery may have been applied. PostgreSQL: the commit applies,
// then reports a lost connection, and the receipt's table is locked past
// the inbox's lock timeout, so that the read back fails.
func TestHandlerDoesNotSayNothingWasWrittenWhenTheCommitIsUnknown(t *testing.T) {
	t.Parallel()
	dsn := pgtest.Schema(t, "frinunknown")
	in, err := openMigrated(t, dsn, Options{BusyTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	committed, locked := make(chan struct{}), make(chan struct{})
	in.commitHook = func(_ context.Context, tx *sql.Tx) error {
		err := tx.Commit()
		close(committed)
		<-locked
		if err != nil {
			return err
		}
		return errLostCommit
	}
	srv := httptest.NewServer(in.Handler(HandlerOptions{}))
	t.Cleanup(srv.Close)
	type answer struct {
		status int
		body   map[string]string
		err    error
	}
	res := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(string(commitDelivery.Body)))
		req.Header.Set(webhook.HeaderID, webhook.MessageID(commitDelivery.EventID, commitDelivery.Flow, commitDelivery.Seq))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			res <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		var body map[string]string
		err = json.NewDecoder(resp.Body).Decode(&body)
		res <- answer{resp.StatusCode, body, err}
	}()
	<-committed
	release := pgtest.LockTable(t, dsn, "receipt")
	close(locked)
	a := <-res
	release()
	if a.err != nil {
		t.Fatal(a.err)
	}
	if a.status != http.StatusInternalServerError || strings.Contains(a.body["message"], "nothing was written") || !strings.Contains(a.body["message"], "may have been applied") {
		t.Errorf("a commit that applied, then reported a lost connection, and could not be read back: %d %q; want 500 saying the delivery may have been applied", a.status, a.body)
	}
	wantApplied(t, in, true)
}

// The same for ReceiveHeld, whose held copies commit alike: its error has
// fairrelay.ErrCommitUnknown in its chain when the read back of a failed
// commit failed too.
func TestReceiveHeldSaysWhenItsCommitIsUnknown(t *testing.T) {
	t.Parallel()
	dsn := pgtest.Schema(t, "frinheldunknown")
	in, err := openMigrated(t, dsn, Options{BusyTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	ctx := t.Context()
	second := Delivery{EventID: "A2", Flow: "A", Seq: 2, Body: []byte(`{"delta":1}`)}
	if held, err := in.Hold(ctx, second, fairrelay.OutcomeGap); err != nil || !held {
		t.Fatalf("hold A2: %v %v", held, err)
	}
	if out, err := in.Receive(ctx, commitDelivery); err != nil || out != fairrelay.OutcomeAccepted {
		t.Fatalf("receive A1: %v %v", out, err)
	}
	var release func()
	in.commitHook = func(_ context.Context, tx *sql.Tx) error {
		if err := tx.Commit(); err != nil {
			return err
		}
		release = pgtest.LockTable(t, dsn, "receipt")
		return errLostCommit
	}
	r, err := in.ReceiveHeld(ctx, "A", 10)
	if release != nil {
		release()
	}
	if !errors.Is(err, fairrelay.ErrCommitUnknown) || !errors.Is(err, errLostCommit) {
		t.Fatalf("ReceiveHeld whose commit applied, reported a lost connection and could not be read back: %+v %v; want the commit's error with ErrCommitUnknown", r, err)
	}
	in.commitHook = nil
	if applied, err := in.applied(ctx, second); err != nil || !applied {
		t.Fatalf("A2 after its commit: applied=%v %v", applied, err)
	}
}

// openMigrated opens the inbox at dsn with opts after a first Open with
// the default options has migrated it: a short BusyTimeout, which is the
// migrations' lock timeout too, failed them under CI's parallel tests
// (migration 004 waited on a lock past 100 ms).
func openMigrated(t *testing.T, dsn string, opts Options) (*Inbox, error) {
	t.Helper()
	in, err := Open(t.Context(), dsn, Options{})
	if err != nil {
		return nil, err
	}
	in.Close()
	return Open(t.Context(), dsn, opts)
}
