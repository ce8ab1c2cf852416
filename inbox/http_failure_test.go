package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fairrelay/fairrelay/internal/syncbuf"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/sink/webhook"
)

// A 500 (or a busy 503) answers with the failure's code and where to look,
// not the error's text, which names the store's statements, tables and
// files (a receiver's internals: a fresh user saw "ReceiptGet: …" in an
// answer); the handler's log has the text. Both ways to a 500: the inbox's
// own store failing (its receipts dropped: not_a_database) and an error of
// Apply carrying the application's own details.
func TestFailureAnswersKeepTheErrorInTheLog(t *testing.T) {
	t.Parallel()
	const secret = "stock table row 4711 of warehouse-db.internal"
	for _, c := range []struct {
		name, code, want string
		apply            func(ctx context.Context, tx *sql.Tx, d inbox.Delivery) (fairrelay.Outcome, error)
		breakStore       bool
	}{
		{name: "store", code: string(fairrelay.CodeNotDatabase), want: "receipt", breakStore: true},
		{name: "apply", code: "apply", want: secret,
			apply: func(ctx context.Context, tx *sql.Tx, d inbox.Delivery) (fairrelay.Outcome, error) {
				return "", errors.New(secret)
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			in, err := inbox.Open(t.Context(), filepath.Join(t.TempDir(), "inbox.db"), inbox.Options{Apply: c.apply})
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			if c.breakStore {
				if _, err := in.DB().ExecContext(t.Context(), "DROP TABLE receipt"); err != nil {
					t.Fatal(err)
				}
			}
			var logs syncbuf.Buffer
			srv := httptest.NewServer(in.Handler(inbox.HandlerOptions{
				Verify: webhook.NewVerifier(testKey).Verify,
				Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			}))
			defer srv.Close()
			code, m := post(t, srv.URL+"/", http.MethodPost, "A1", "A", 1, `{"x":1}`, "good")
			if code != http.StatusInternalServerError || m["error"] != c.code {
				t.Fatalf("answer %d %v, want 500 with error %q", code, m, c.code)
			}
			if !strings.Contains(m["message"], "the receiver's log has the error") {
				t.Errorf("message %q: want it to say where the error is", m["message"])
			}
			for _, internal := range []string{c.want, "Receipt", "no such table", "inbox.db"} {
				if strings.Contains(m["message"], internal) {
					t.Errorf("message %q carries %q, the receiver's internals", m["message"], internal)
				}
			}
			if !strings.Contains(logs.String(), c.want) {
				t.Errorf("the log %q: want the error's text (%q)", logs.String(), c.want)
			}
		})
	}
}

// Without HandlerOptions.Logger the error goes to slog.Default(): a 500
// says "the receiver's log has the error", and with a handler that
// discarded by default a receiver built from receiver.md's example had no
// such log (a fresh user's report: the Apply's database error was lost).
// Not parallel: it replaces the process's default logger.
func TestFailureWithoutALoggerGoesToTheDefaultLogger(t *testing.T) {
	const secret = "effects table missing in warehouse-db.internal"
	logs := syncbuf.DefaultLog(t)
	in, err := inbox.Open(t.Context(), filepath.Join(t.TempDir(), "inbox.db"), inbox.Options{
		Apply: func(ctx context.Context, tx *sql.Tx, d inbox.Delivery) (fairrelay.Outcome, error) {
			return "", errors.New(secret)
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	srv := httptest.NewServer(in.Handler(inbox.HandlerOptions{Verify: webhook.NewVerifier(testKey).Verify}))
	defer srv.Close()
	if code, m := post(t, srv.URL+"/", http.MethodPost, "A1", "A", 1, `{"x":1}`, "good"); code != http.StatusInternalServerError {
		t.Fatalf("answer %d %v, want 500", code, m)
	}
	if !strings.Contains(logs.String(), secret) || !strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("the default logger got %q: want the error at error level", logs.String())
	}
}
