package fairrelay_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/disktest"
)

// Opening a queue store or an inbox whose disk is full is a database error
// that says the disk may be full, not invalid input: the caller's path and
// settings are right, and freeing space cures it (an SRE's drill: relay,
// enqueue and inspect exited "invalid_input: queue: cannot open: read
// schema: disk I/O error", and a daemon gave up at start instead of
// waiting). Nothing of either is lost: both open again once space is
// freed.
func TestOpeningOnAFullDiskIsADatabaseError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	disk := disktest.SmallDisk(t, 4<<20)
	queue, inboxPath := filepath.Join(disk, "q.db"), filepath.Join(disk, "in.db")
	q, err := fairrelay.Open(ctx, queue, fairrelay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: "A1", Flow: "A", Body: []byte(`{"delta":1}`)}); err != nil {
		t.Fatal(err)
	}
	q.Close()
	in, err := inbox.Open(ctx, inboxPath, inbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	in.Close()

	free := disktest.FillDisk(t, disk, queue)
	full := func(what string, err error) {
		t.Helper()
		if fairrelay.CodeOf(err) != fairrelay.CodeDatabase || !errors.Is(err, fairrelay.ErrDatabase) || !strings.Contains(err.Error(), "is it full?") {
			t.Errorf("%s on a full disk: %v (code %q), want a database error that asks whether the disk is full", what, err, fairrelay.CodeOf(err))
		}
	}
	if q, err := fairrelay.Open(ctx, queue, fairrelay.Config{}); err == nil {
		q.Close()
		t.Skip("the store opened on a full disk: nothing to check here")
	} else {
		full("fairrelay.Open", err)
	}
	if q, err := fairrelay.Open(ctx, queue, fairrelay.Config{ReadOnly: true}); err == nil {
		q.Close()
	} else {
		full("fairrelay.Open read-only", err)
	}
	if in, err := inbox.Open(ctx, inboxPath, inbox.Options{}); err == nil {
		in.Close()
	} else {
		full("inbox.Open", err)
	}

	free()
	q, err = fairrelay.Open(ctx, queue, fairrelay.Config{})
	if err != nil {
		t.Fatalf("open after the disk was freed: %v", err)
	}
	defer q.Close()
	if es, err := q.Events(ctx, "", 0, 10); err != nil || len(es) != 1 || es[0].ID != "A1" {
		t.Errorf("events after the disk was freed: %+v %v, want A1", es, err)
	}
}
