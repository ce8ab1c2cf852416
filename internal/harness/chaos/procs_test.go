//go:build unix

package chaos

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// daemon is one relay or the receiver: the command line it is started with
// and its current process. Only the supervisor's goroutine touches it.
type daemon struct {
	name string
	args []string
	log  string // stdout and stderr of every incarnation, appended
	cur  *incarnation
	n    int // incarnations started
}

// incarnation is one process of a daemon.
type incarnation struct {
	d      *daemon
	no     int
	cmd    *exec.Cmd
	killed bool          // the supervisor sent SIGKILL (or SIGTERM at the end)
	done   chan struct{} // closed once the process is reaped
	err    error         // Wait's answer, set before done closes
}

// silent reports whether the incarnation wrote nothing to its daemon's log
// (after the supervisor's "=== NAME incarnation N" line, the log's last).
func (i *incarnation) silent() bool {
	b, err := os.ReadFile(i.d.log)
	if err != nil {
		return false
	}
	marker := fmt.Sprintf("=== %s incarnation %d,", i.d.name, i.no)
	at := bytes.LastIndex(b, []byte(marker))
	if at < 0 {
		return false
	}
	rest := b[at:]
	nl := bytes.IndexByte(rest, '\n')
	return nl >= 0 && len(bytes.TrimSpace(rest[nl+1:])) == 0
}

func (i *incarnation) exited() bool {
	select {
	case <-i.done:
		return true
	default:
		return false
	}
}

// supervisor runs the daemons in one goroutine, the test's: it starts,
// signals and restarts them, and notices every exit it did not cause.
type supervisor struct {
	t       *testing.T
	bin     string
	logs    string // the directory of the daemons' logs
	daemons []*daemon
	exits   chan *incarnation
	// unexpected counts exits nobody caused; each is reported with the
	// daemon's log.
	unexpected int
}

func newSupervisor(t *testing.T, bin, logs string) *supervisor {
	s := &supervisor{t: t, bin: bin, logs: logs, exits: make(chan *incarnation, 1024)}
	t.Cleanup(s.killAll)
	return s
}

// add registers a daemon; start starts it.
func (s *supervisor) add(name string, args ...string) *daemon {
	d := &daemon{name: name, args: args, log: filepath.Join(s.logs, name+".log")}
	s.daemons = append(s.daemons, d)
	return d
}

// start starts a new incarnation of d, once the previous one is reaped (a
// receiver must find its port free).
func (s *supervisor) start(d *daemon) {
	if d.cur != nil && !d.cur.exited() {
		if !d.cur.killed {
			return // running: an unexpected exit was already made up for
		}
		s.waitReaped(d.cur)
	}
	d.n++
	f, err := os.OpenFile(d.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.t.Fatal(err)
	}
	defer f.Close() // the child has its own copy
	fmt.Fprintf(f, "=== %s incarnation %d, %s\n", d.name, d.n, time.Now().Format(time.TimeOnly+".000"))
	cmd := exec.Command(s.bin, d.args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start %s: %v", d.name, err)
	}
	inc := &incarnation{d: d, no: d.n, cmd: cmd, done: make(chan struct{})}
	d.cur = inc
	go func() {
		inc.err = cmd.Wait()
		close(inc.done)
		s.exits <- inc
	}()
}

// waitReaped waits for a killed incarnation to be reaped, handling other
// exits meanwhile.
func (s *supervisor) waitReaped(inc *incarnation) {
	deadline := time.After(10 * time.Second)
	for !inc.exited() {
		select {
		case <-inc.done:
		case e := <-s.exits:
			s.exited(e)
		case <-deadline:
			s.t.Fatalf("%s (pid %d) not reaped 10s after SIGKILL", inc.d.name, inc.cmd.Process.Pid)
		}
	}
}

// signal sends sig to d's current process, if it runs.
func (s *supervisor) signal(d *daemon, sig syscall.Signal) {
	if d.cur == nil || d.cur.exited() {
		return
	}
	if sig == syscall.SIGKILL || sig == syscall.SIGTERM {
		d.cur.killed = true
	}
	// os.Process signals through a pidfd: never a recycled pid.
	if err := d.cur.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		s.t.Errorf("%s: %v: %v", d.name, sig, err)
	}
}

// exited handles an exit: expected after a signal of ours; otherwise the
// daemon failed by itself, which is reported, and it is started again.
func (s *supervisor) exited(inc *incarnation) {
	if inc.killed || inc != inc.d.cur {
		return
	}
	s.unexpected++
	s.t.Errorf("%s (incarnation %d) exited by itself: %v\n%s", inc.d.name, inc.no, inc.err, tail(inc.d.log, 30))
	if s.unexpected > 10 {
		s.t.Fatal("more than 10 processes exited by themselves: giving up")
	}
	s.start(inc.d)
}

// until handles exits until t.
func (s *supervisor) until(t time.Time) {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	for {
		select {
		case <-timer.C:
			return
		case e := <-s.exits:
			s.exited(e)
		}
	}
}

// stopAll sends SIGTERM to every daemon (continuing any stopped one) and
// requires each to exit 0 within 30s — the relays let their deliveries
// finish, the receiver its requests.
func (s *supervisor) stopAll() {
	for _, d := range s.daemons {
		s.signal(d, syscall.SIGTERM)
		s.signal(d, syscall.SIGCONT)
	}
	deadline := time.After(30 * time.Second)
	for _, d := range s.daemons {
		if d.cur == nil {
			continue
		}
		select {
		case <-d.cur.done:
			switch {
			case d.cur.err == nil:
			case d.cur.silent():
				// SIGTERM came before the process had run main (it had
				// written nothing, so it had no handler yet: CI saw one 130
				// ms after its start on a loaded machine) and ended it, as
				// it ends any Go program then: no graceful stop to check.
				s.t.Logf("%s: incarnation %d ended by SIGTERM before it had started (%v)", d.name, d.cur.no, d.cur.err)
			default:
				s.t.Errorf("%s: stopped by SIGTERM with %v, want exit 0\n%s", d.name, d.cur.err, tail(d.log, 30))
			}
		case <-deadline:
			s.t.Errorf("%s: still running 30s after SIGTERM\n%s", d.name, tail(d.log, 30))
		}
	}
}

// killAll kills whatever still runs and waits for it (t.Cleanup).
func (s *supervisor) killAll() {
	for _, d := range s.daemons {
		if d.cur != nil && !d.cur.exited() {
			d.cur.killed = true
			d.cur.cmd.Process.Kill()
			<-d.cur.done
		}
	}
}

// logTails returns the end of every daemon's log, for a failure's report.
func (s *supervisor) logTails(lines int) string {
	var b strings.Builder
	for _, d := range s.daemons {
		fmt.Fprintf(&b, "--- %s (%d incarnations):\n%s\n", d.name, d.n, tail(d.log, lines))
	}
	return b.String()
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
