package experiment

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"slices"

	"github.com/fairrelay/fairrelay/internal/errs"
)

// raceProcesses is how many OS processes claim at once (SPEC §5 item 7).
const raceProcesses = 8

type raceFacts struct {
	Processes int `json:"processes"`
	// Claimed is the set of claimed ids, sorted: which process won which is
	// not a fact of the protocol and is not recorded.
	Claimed []string `json:"claimed"`
	Idle    int      `json:"idle"`
	Errors  int      `json:"errors"`
	Final   state    `json:"final"`
}

// racer is one worker process of the race.
type racer struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr bytes.Buffer
}

// eightProcessClaimRace is SPEC §5 item 7: A, B, C with two events each;
// eight processes open the queue, wait at a common starting line (their
// stdin), then each claims once at tick 0. One lease per flow and head
// blocking mean exactly A1, B1, C1 are claimed, whoever wins the lock.
func eightProcessClaimRace(ctx context.Context, s *session) (any, error) {
	q, in, err := s.open(ctx)
	if err != nil {
		return nil, err
	}
	var evs []ledgerEvent
	for _, f := range []string{"A", "B", "C"} {
		evs = append(evs, ledgerEvent{f + "1", f, 1}, ledgerEvent{f + "2", f, 1})
	}
	if err := enqueue(ctx, q, 0, evs...); err != nil {
		return nil, err
	}
	racers := make([]*racer, 0, raceProcesses)
	defer func() {
		// On an early return, release and reap whoever was started.
		for _, r := range racers {
			r.stdin.Close()
			r.cmd.Wait()
		}
	}()
	for range raceProcesses {
		cmd, err := s.command(ctx, "", modeClaim, "--queue", s.queuePath(), "--at", "0")
		if err != nil {
			return nil, err
		}
		r := &racer{cmd: cmd}
		cmd.Stderr = &r.stderr
		if r.stdin, err = cmd.StdinPipe(); err != nil {
			return nil, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		r.stdout = bufio.NewReader(out)
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start worker: %w", err)
		}
		racers = append(racers, r)
	}
	for i, r := range racers {
		line, err := r.stdout.ReadString('\n')
		if err != nil || line != "ready\n" {
			return nil, fmt.Errorf("worker %d not ready (%q, %v): %s", i, line, err, r.stderr.String())
		}
	}
	// The starting gun: every worker is blocked reading its stdin.
	for _, r := range racers {
		r.stdin.Close()
	}
	f := raceFacts{Processes: raceProcesses}
	for i, r := range racers {
		line, readErr := r.stdout.ReadBytes('\n')
		waitErr := r.cmd.Wait()
		if readErr != nil || waitErr != nil {
			return nil, fmt.Errorf("worker %d: %v: %s", i, errs.Join(readErr, waitErr), r.stderr.String())
		}
		var rec claimRecord
		if err := json.Unmarshal(line, &rec); err != nil {
			return nil, fmt.Errorf("worker %d answered %q: %w", i, line, err)
		}
		switch rec.Status {
		case "claimed":
			f.Claimed = append(f.Claimed, rec.ID)
		case idle:
			f.Idle++
		default:
			f.Errors++
		}
	}
	racers = nil
	slices.Sort(f.Claimed)
	if f.Final, err = snapshot(ctx, q, in); err != nil {
		return nil, err
	}
	s.expect(slices.Equal(f.Claimed, []string{"A1", "B1", "C1"}), "claimed %v, want exactly A1 B1 C1", f.Claimed)
	s.expect(f.Idle == raceProcesses-3, "%d idle answers, want %d", f.Idle, raceProcesses-3)
	s.expect(f.Errors == 0, "%d workers failed to claim, want none", f.Errors)
	s.expect(f.Final.Clock.Ticket == 3, "ticket %d after the race, want 3", f.Final.Clock.Ticket)
	return f, nil
}
