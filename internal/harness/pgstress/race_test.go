package pgstress

import (
	"bufio"
	"context"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/fairrelay/fairrelay"
)

// TestEightProcessClaimRace is SPEC §5 item 7 on PostgreSQL: A, B, C with two
// events each; eight OS processes open the store, wait at a common starting
// line (their stdin) and claim once at tick 0. Exactly A1, B1, C1 are
// claimed, five processes get idle, none errors.
func TestEightProcessClaimRace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _, qdsn, idsn := fresh(t, "frr")
	for _, f := range []string{"A", "B", "C"} {
		for _, id := range []string{f + "1", f + "2"} {
			if _, err := q.Enqueue(ctx, fairrelay.EnqueueParams{ID: id, Flow: f, Body: []byte(`{"delta":1}`)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	type racer struct {
		stdin  io.WriteCloser
		stdout *bufio.Reader
		wait   func() error
	}
	var racers []racer
	for range 8 {
		cmd := child(t, "race", queueEnv+"="+qdsn, inboxEnv+"="+idsn)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r := racer{stdin: stdin, stdout: bufio.NewReader(stdout), wait: cmd.Wait}
		t.Cleanup(func() { stdin.Close(); cmd.Wait() })
		if line, err := r.stdout.ReadString('\n'); err != nil || line != "ready\n" {
			t.Fatalf("racer did not get ready: %q %v %s", line, err, stderr.String())
		}
		racers = append(racers, r)
	}
	// Every process has its connections open: release them together.
	for _, r := range racers {
		if _, err := io.WriteString(r.stdin, "go\n"); err != nil {
			t.Fatal(err)
		}
	}
	var claimed []string
	idle := 0
	for i, r := range racers {
		line, err := r.stdout.ReadString('\n')
		if err != nil {
			t.Fatalf("racer %d: %v", i, err)
		}
		switch line = strings.TrimSpace(line); {
		case line == "idle":
			idle++
		case strings.HasPrefix(line, "error:"):
			t.Errorf("racer %d: %s", i, line)
		default:
			claimed = append(claimed, line)
		}
	}
	slices.Sort(claimed)
	if !slices.Equal(claimed, []string{"A1", "B1", "C1"}) || idle != 5 {
		t.Fatalf("claimed %v and %d idle, want [A1 B1 C1] and 5 idle", claimed, idle)
	}
	c, err := q.Clock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.Ticket != 3 {
		t.Fatalf("ticket %d after the race, want 3", c.Ticket)
	}
}
