package inbox

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/internal/sqlitetest"
)

// A SQLite inbox shares its file with the application, whose writes hold
// the writer now and then. A receive that cannot take it within the
// inbox's busy timeout answers busy (not success, not a refusal) and
// changes nothing; the inbox's connection keeps its busy timeout and goes
// back to the pool (it has one), so the receive after the other writer
// let go applies.
func TestReceiveBesideAnotherWriter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "inbox.db")
	in, err := Open(context.Background(), path, Options{BusyTimeout: 30 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	release := sqlitetest.HoldWriter(t, path) // the application holds the writer
	_, err = in.Receive(context.Background(), commitDelivery)
	var fe *fairrelay.Error
	if !errors.As(err, &fe) || fe.Code != fairrelay.CodeBusy {
		t.Fatalf("receive while another connection held the writer: %v, want a busy error", err)
	}
	if ms := sqlitetest.BusyTimeout(t, in.db); ms != 30 {
		t.Errorf("inbox connection's busy timeout after the busy receive %d ms, want 30", ms)
	}
	release()
	wantApplied(t, in, false)
	out, err := in.Receive(context.Background(), commitDelivery)
	if err != nil || out != fairrelay.OutcomeAccepted {
		t.Fatalf("receive after the other writer let go: %v, %v; want accepted", out, err)
	}
	wantApplied(t, in, true)
	if ms := sqlitetest.BusyTimeout(t, in.db); ms != 30 {
		t.Errorf("inbox connection's busy timeout after the receive %d ms, want 30", ms)
	}
}
