package inbox_test

import (
	"errors"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
)

// A PostgreSQL URL or schema name that does not parse is the caller's
// input, invalid_input naming inbox, as a queue store answers for its own
// (a breaker: ?schema=a-b was a database error for the inbox), and nothing
// is contacted.
func TestOpenRefusesABadPostgresURLAsInput(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{
		"postgres://postgres@127.0.0.1:5432/test?schema=brk1-dash",
		"postgres://postgres@127.0.0.1:5432/test?schema=1abc",
		"postgres://postgres@127.0.0.1:5432/test?connect_timeout=soon",
	} {
		in, err := inbox.Open(t.Context(), dsn, inbox.Options{})
		if in != nil {
			in.Close()
		}
		var fe *fairrelay.Error
		if !errors.As(err, &fe) || fe.Code != fairrelay.CodeInvalidInput || fe.Field != "inbox" {
			t.Errorf("%s: %v, want invalid_input naming inbox", dsn, err)
		}
	}
}
