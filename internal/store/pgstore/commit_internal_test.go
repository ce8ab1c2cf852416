package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fairrelay/fairrelay/internal/store"
)

type connState bool

func (c connState) IsClosed() bool { return bool(c) }

// A commit whose connection closed before its answer is marked
// store.ErrCommitUnknown, its words kept; one the server answered (the
// connection still open) is not.
func TestMayHaveCommittedMarksTheUnknownCommit(t *testing.T) {
	t.Parallel()
	cause := errors.New("unexpected EOF")
	err := mayHaveCommitted(connState(true), cause)
	if !errors.Is(err, store.ErrCommitUnknown) || !errors.Is(err, cause) || !strings.Contains(err.Error(), "so it may have committed: unexpected EOF") {
		t.Errorf("closed connection: %v, want ErrCommitUnknown with the cause and its words", err)
	}
	if err := mayHaveCommitted(connState(false), cause); errors.Is(err, store.ErrCommitUnknown) || err != cause {
		t.Errorf("open connection: %v, want the error as it is", err)
	}
}

// CommitOn sends stmts and COMMIT on conn in one round trip, as the store's
// own transactions commit (pgxConn.commit), for the tests of package
// pgstore_test, which may reach PostgreSQL (pgtest imports this package).
func CommitOn(ctx context.Context, conn *pgx.Conn, stmts ...string) error {
	pc := &pgxConn{tx: conn}
	for i, st := range stmts {
		pc.queue(fmt.Sprintf("statement %d", i+1), st)
	}
	return pc.commit(ctx)
}
