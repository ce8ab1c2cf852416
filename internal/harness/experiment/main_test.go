package experiment_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/fairrelay/fairrelay/internal/harness/experiment"
)

// workerEnv makes the test binary act as the experiment worker, so the
// process scenarios need no separately built fairrelay binary.
const workerEnv = "FAIRRELAY_EXPERIMENT_WORKER"

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "1" {
		if err := experiment.RunWorker(context.Background(), os.Args[1:], os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "experiment worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// testWorker starts this test binary as the worker.
func testWorker(t *testing.T) experiment.Worker {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return experiment.Worker{Path: exe, Env: []string{workerEnv + "=1"}}
}
