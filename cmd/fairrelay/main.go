// Command fairrelay is the CLI and daemon of fairrelay: scenario scripts,
// one-shot queue operations, inspection, migrations and the demo. Each
// subcommand lives in its own file and registers itself with the root
// command; the logic lives in the library packages.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/fairrelay/fairrelay"
)

var rootCmd = &cobra.Command{
	Use:           "fairrelay",
	Short:         "A durable, fair, per-flow-ordered event relay",
	SilenceUsage:  true,
	SilenceErrors: true,
}

// exitError carries an exit code chosen by a subcommand.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := rootCmd.ExecuteContext(ctx)
	if err == nil {
		return
	}
	fmt.Fprintln(os.Stderr, "fairrelay: "+errorLine(err))
	var ee *exitError
	if errors.As(err, &ee) {
		os.Exit(ee.code)
	}
	os.Exit(1)
}

// errorLine renders an error as one line that names the code and field;
// line breaks inside driver messages are folded so the line stays one, and
// any other character a terminal would act on is escaped (\u001b): an
// error may quote what a user or a store gave.
func errorLine(err error) string {
	msg := err.Error()
	var fe *fairrelay.Error
	if errors.As(err, &fe) {
		msg = fmt.Sprintf("%s: %s", fe.Code, fe.Error())
	}
	return string(escapeUnsafe([]byte(strings.Join(strings.Fields(strings.ReplaceAll(msg, "\n", " ")), " "))))
}
