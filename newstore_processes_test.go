package fairrelay_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
)

// Several processes opening one new SQLite store at once all open it, a
// queue store and an inbox alike. Each connection asks for WAL mode as it
// opens, and on a new file SQLite takes that switch's lock without waiting
// for the busy timeout: 8 of 40 opens of a new inbox by four processes
// started together failed at once with "database is locked" (a breaker's
// report), a receiver or a relay that exited 2 at its start. Real child
// processes (this test binary), released together through their stdin.
func TestANewStoreOpenedByProcessesAtOnce(t *testing.T) {
	if kind := os.Getenv("FAIRRELAY_TEST_OPENER"); kind != "" {
		openAsChild(kind, os.Getenv("FAIRRELAY_TEST_OPENER_PATH"))
		return
	}
	t.Parallel()
	const rounds, processes = 25, 4
	for _, kind := range []string{"queue", "inbox"} {
		failed := 0
		for round := range rounds {
			path := filepath.Join(t.TempDir(), fmt.Sprintf("%s%d.db", kind, round))
			type child struct {
				cmd   *exec.Cmd
				in    interface{ Close() error }
				lines *bufio.Scanner
			}
			var children []child
			for range processes {
				cmd := exec.Command(os.Args[0], "-test.run=^TestANewStoreOpenedByProcessesAtOnce$")
				cmd.Env = append(os.Environ(), "FAIRRELAY_TEST_OPENER="+kind, "FAIRRELAY_TEST_OPENER_PATH="+path)
				in, err := cmd.StdinPipe()
				if err != nil {
					t.Fatal(err)
				}
				out, err := cmd.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				c := child{cmd: cmd, in: in, lines: bufio.NewScanner(out)}
				if !c.lines.Scan() || c.lines.Text() != "ready" {
					t.Fatalf("a child said %q, want ready", c.lines.Text())
				}
				children = append(children, c)
			}
			for _, c := range children {
				c.in.Close() // the barrier: every child waits for its stdin's end
			}
			for _, c := range children {
				var said []string
				for c.lines.Scan() {
					said = append(said, c.lines.Text())
				}
				if err := c.cmd.Wait(); err != nil {
					t.Fatalf("a child: %v: %s", err, said)
				}
				if len(said) == 0 || !strings.HasPrefix(said[0], "opened") {
					failed++
					if failed <= 2 {
						t.Errorf("%s, round %d: %s", kind, round, strings.Join(said, "; "))
					}
				}
			}
		}
		if failed > 0 {
			t.Errorf("%s: %d of %d opens of a new store failed", kind, failed, rounds*processes)
		}
	}
}

// openAsChild is TestANewStoreOpenedByProcessesAtOnce's child: it says
// ready, waits for its stdin to end, opens a store of kind at path and
// says how that went.
func openAsChild(kind, path string) {
	fmt.Println("ready")
	bufio.NewReader(os.Stdin).ReadString(0)
	var err error
	switch kind {
	case "queue":
		var q *fairrelay.Queue
		if q, err = fairrelay.Open(context.Background(), path, fairrelay.Config{Policy: fairrelay.DaemonPolicy()}); err == nil {
			q.Close()
		}
	default:
		var in *inbox.Inbox
		if in, err = inbox.Open(context.Background(), path, inbox.Options{}); err == nil {
			in.Close()
		}
	}
	if err != nil {
		fmt.Println("failed:", err)
		return
	}
	fmt.Println("opened")
}
