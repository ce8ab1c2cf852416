package pgstore_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fairrelay/fairrelay/internal/store"
	"github.com/fairrelay/fairrelay/internal/store/pgstore"
)

// The server's lock timeout and deadlock answers are busy, and say what
// happened and what the caller does next (a fresh user's report: only the
// server's own words reached the CLI).
func TestTranslateBusySaysWhatToDo(t *testing.T) {
	for code, want := range map[string]string{
		"55P03": "another transaction held a row this call needs",
		"40P01": "try again (in a transaction of your own, roll it back and run it again)",
	} {
		err := pgstore.Translate(fmt.Errorf("enqueue_many: %w", &pgconn.PgError{Code: code, Message: "server words"}))
		if !errors.Is(err, store.ErrBusy) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "server words") {
			t.Errorf("%s: %v, want busy saying %q and keeping the server's words", code, err, want)
		}
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != code {
			t.Errorf("%s: the server's error is not in the chain: %v", code, err)
		}
	}
}
