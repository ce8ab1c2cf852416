package main

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay/inbox"
)

// agedInbox makes a SQLite inbox at path with receipts A1, A2 (flow A) and
// B1, and dates every receipt but A2 two days back.
func agedInbox(t *testing.T, path string) {
	t.Helper()
	in, err := inbox.Open(t.Context(), path, inbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	for _, d := range []inbox.Delivery{
		{EventID: "A1", Flow: "A", Seq: 1, Body: []byte(`{"delta":1}`)},
		{EventID: "A2", Flow: "A", Seq: 2, Body: []byte(`{"delta":1}`)},
		{EventID: "B1", Flow: "B", Seq: 1, Body: []byte(`{"delta":1}`)},
	} {
		if _, err := in.Receive(t.Context(), d); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := in.DB().ExecContext(t.Context(), `UPDATE receipt SET received_ms = $1 WHERE event_id <> 'A2'`,
		time.Now().Add(-48*time.Hour).UnixMilli()); err != nil {
		t.Fatal(err)
	}
}

// receiptIDs lists the inbox's receipts as inspect prints them.
func receiptIDs(t *testing.T, path string) string {
	t.Helper()
	out, errOut, code := cli(t, "", "inspect", "--inbox", path, "receipts", "--json")
	if code != 0 {
		t.Fatalf("inspect receipts: exit %d: %s", code, errOut)
	}
	var ids []string
	for _, id := range []string{"A1", "A2", "B1"} {
		if strings.Contains(out, `"`+id+`"`) {
			ids = append(ids, id)
		}
	}
	return strings.Join(ids, " ")
}

// prune --inbox I --receipts-older-than D deletes the receipts written
// longer ago than D and prints how many, keeps the rest (and the
// projection: a late copy answers sequence_conflict), and refuses a
// duration that is not positive, deleting nothing.
func TestPruneInboxReceiptsOlderThan(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "inbox.db")
	agedInbox(t, path)
	for _, bad := range []string{"0s", "-1h"} {
		_, errOut, code := cli(t, "", "prune", "--inbox", path, "--receipts-older-than", bad)
		if code != 2 || !strings.Contains(errOut, "invalid_input: receipts-older-than: must be a positive duration") {
			t.Errorf("--receipts-older-than %s: exit %d, %q", bad, code, errOut)
		}
	}
	if _, errOut, code := cli(t, "", "prune", "--receipts-older-than", "1h"); code != 2 || !strings.Contains(errOut, "invalid_input: inbox: required with --receipts-older-than") {
		t.Errorf("without --inbox: exit %d, %q", code, errOut)
	}
	if got := receiptIDs(t, path); got != "A1 A2 B1" {
		t.Fatalf("receipts after refused prunes: %s", got)
	}
	out, errOut, code := cli(t, "", "prune", "--inbox", path, "--receipts-older-than", "24h")
	if code != 0 || strings.TrimSpace(out) != `{"receipts":2,"status":"pruned"}` {
		t.Fatalf("prune --receipts-older-than 24h: exit %d, %q, %s", code, out, errOut)
	}
	if got := receiptIDs(t, path); got != "A2" {
		t.Fatalf("receipts after the prune: %q, want A2", got)
	}
	in, err := inbox.Open(t.Context(), path, inbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if out, err := in.Receive(t.Context(), inbox.Delivery{EventID: "A1", Flow: "A", Seq: 1, Body: []byte(`{"delta":1}`)}); err != nil || out != "sequence_conflict" {
		t.Fatalf("a late copy of a pruned receipt: %q %v, want sequence_conflict", out, err)
	}
}

// receive --retain-receipts D prunes the receipts older than D as it
// starts (and every minute), logging what it deleted; a negative duration
// is refused before the inbox is opened.
func TestReceiveRetainsReceipts(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "inbox.db")
	agedInbox(t, path)
	if _, errOut, code := cli(t, "", "receive", "--inbox", path, "--addr", "127.0.0.1:0", "--retain-receipts", "-1h"); code != 2 || !strings.Contains(errOut, "invalid_input: retain-receipts: must not be negative") {
		t.Errorf("--retain-receipts -1h: exit %d, %q", code, errOut)
	}
	d, _ := startReceiver(t, path, "--retain-receipts", "24h")
	line := d.waitLine(t, "inbox: pruned receipts")
	if !strings.Contains(line, "receipts=2") {
		t.Errorf("prune line %q: want receipts=2", line)
	}
	if !strings.Contains(d.line("receive: listening"), "retain_receipts=24h0m0s") {
		t.Errorf("start line %q: want retain_receipts=24h0m0s", d.line("receive: listening"))
	}
	if code := d.signal(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("receive exited %d: %s", code, d.stderr())
	}
	if got := receiptIDs(t, path); got != "A2" {
		t.Fatalf("receipts after receive's retention: %q, want A2", got)
	}
}
