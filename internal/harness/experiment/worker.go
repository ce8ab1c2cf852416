package experiment

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/faultpoint"
)

// The worker modes.
const (
	// modeClaim opens the queue, prints "ready", waits until its standard
	// input is closed (the parent's starting gun), claims once and prints
	// the answer as one JSON line (claimRecord).
	modeClaim = "claim"
	// modeDeliver claims, delivers to the inbox and settles at one tick,
	// then prints the delivery as one JSON line. With a fault point armed
	// (FAIRRELAY_FAULT), the process exits 73 at that point instead.
	modeDeliver = "deliver"
)

// claimRecord is a claim worker's answer.
type claimRecord struct {
	Status string         `json:"status"` // claimed, idle or error
	ID     string         `json:"id,omitempty"`
	Code   fairrelay.Code `json:"code,omitempty"`
	Error  string         `json:"error,omitempty"`
}

// RunWorker is the body of a worker process: args are "claim" or "deliver"
// followed by --queue PATH, --inbox PATH (deliver only) and --at TICK. It
// reads stdin (claim: the release) and writes its answer to stdout. The
// stores use the article's reference policy. Errors: bad arguments, or a
// store that fails; a claim worker reports a failing claim in its answer
// instead, so the parent can count errors.
func RunWorker(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("worker: want a mode: claim or deliver")
	}
	mode := args[0]
	fs := flag.NewFlagSet("worker "+mode, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	queue := fs.String("queue", "", "queue store file")
	inboxPath := fs.String("inbox", "", "inbox file")
	at := fs.Int64("at", 0, "tick")
	if err := fs.Parse(args[1:]); err != nil {
		return fmt.Errorf("worker %s: %w", mode, err)
	}
	if *queue == "" {
		return fmt.Errorf("worker %s: --queue is missing", mode)
	}
	q, err := fairrelay.Open(ctx, *queue, fairrelay.Config{Policy: fairrelay.ReferencePolicy()})
	if err != nil {
		return err
	}
	defer q.Close()
	switch mode {
	case modeClaim:
		if _, err := fmt.Fprintln(stdout, "ready"); err != nil {
			return err
		}
		// Block until the parent closes our stdin: every worker is open and
		// waiting, so the claims start together.
		if _, err := io.Copy(io.Discard, stdin); err != nil {
			return err
		}
		rec := claimRecord{Status: idle}
		cr, err := q.Claim(ctx, fairrelay.ClaimParams{At: *at})
		c := cr.First()
		switch {
		case err != nil:
			rec = claimRecord{Status: "error", Code: fairrelay.CodeOf(err), Error: err.Error()}
		case c != nil:
			rec = claimRecord{Status: "claimed", ID: c.Token.EventID}
		}
		return json.NewEncoder(stdout).Encode(rec)
	case modeDeliver:
		if *inboxPath == "" {
			return errors.New("worker deliver: --inbox is missing")
		}
		in, err := inbox.Open(ctx, *inboxPath, inbox.Options{})
		if err != nil {
			return err
		}
		defer in.Close()
		d, err := deliver(ctx, q, in, *at)
		if err != nil {
			return err
		}
		return json.NewEncoder(stdout).Encode(d)
	}
	return fmt.Errorf("worker: unknown mode %q, want claim or deliver", mode)
}

// command prepares a worker process running mode with args, with the fault
// point fault armed ("" for none). Any fault point armed in this process's
// environment is not passed on.
func (s *session) command(ctx context.Context, fault, mode string, args ...string) (*exec.Cmd, error) {
	if s.worker.Path == "" {
		return nil, errors.New("no worker executable configured (Options.Worker)")
	}
	argv := append(slices.Clone(s.worker.Args), mode)
	cmd := exec.CommandContext(ctx, s.worker.Path, append(argv, args...)...)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, faultpoint.EnvVar+"=") {
			env = append(env, kv)
		}
	}
	env = append(env, s.worker.Env...)
	if fault != "" {
		env = append(env, faultpoint.EnvVar+"="+fault)
	}
	cmd.Env = env
	cmd.Dir = s.dir
	// After the context kills a hung worker, don't wait forever for pipes.
	cmd.WaitDelay = 5 * time.Second
	return cmd, nil
}
