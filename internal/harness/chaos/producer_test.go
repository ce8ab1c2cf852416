//go:build unix

package chaos

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// event is one event the producer writes: its flow, its seq in the flow
// (the producer writes each flow's events in order, so the k-th is seq k)
// and its ledger delta.
type event struct {
	ID    string
	Flow  string
	Seq   int64
	Delta int64
}

// The producer's workload: every 50 ms, 0 to 4 events on random flows of
// producerFlows, or now and then a burst of 3 to 8 on one flow — about 45
// events a second.
const (
	producerFlows = 80
	producerTick  = 50 * time.Millisecond
)

// producer runs `fairrelay enqueue` with JSON lines on its stdin for as
// long as the chaos lasts, starting it again whenever it dies. Answers come
// in input order, so the events answered are a prefix of those written; a
// new process is given the rest again (answering existing where they were
// stored), so each flow's events are stored in the order written.
type producer struct {
	bin, queue, log string
	rng             *rand.Rand
	stop            chan struct{} // closed: write no more events
	abort           chan struct{} // closed: give up now (the test ends early)
	done            chan error    // the run's end: nil once every event is answered
	finished        bool          // done was read

	mu       sync.Mutex
	events   []event
	perFlow  map[string]int64
	answered int       // events[:answered] are stored
	cur      *exec.Cmd // the process now running, for kill
	starts   int       // processes started
	problems []string  // answers that are not what they must be
}

func newProducer(bin, queue, dir string, seed uint64) *producer {
	return &producer{bin: bin, queue: queue, log: filepath.Join(dir, "producer.log"),
		rng:  rand.New(rand.NewPCG(seed, 0x9d0d)),
		stop: make(chan struct{}), abort: make(chan struct{}), done: make(chan error, 1), perFlow: map[string]int64{}}
}

// start runs the producer until finish, or until the test ends.
func (p *producer) start(t *testing.T, deadline time.Time) {
	go func() { p.done <- p.loop(deadline) }()
	t.Cleanup(func() {
		if p.finished {
			return
		}
		close(p.abort)
		p.kill()
		<-p.done
	})
}

// generate appends one tick's events.
func (p *producer) generate() {
	p.mu.Lock()
	defer p.mu.Unlock()
	add := func(flow string) {
		p.perFlow[flow]++
		p.events = append(p.events, event{ID: fmt.Sprintf("e%06d", len(p.events)+1), Flow: flow, Seq: p.perFlow[flow], Delta: 1 + p.rng.Int64N(9)})
	}
	if p.rng.IntN(10) == 0 {
		flow := fmt.Sprintf("f%03d", p.rng.IntN(producerFlows))
		for range 3 + p.rng.IntN(6) {
			add(flow)
		}
		return
	}
	for range p.rng.IntN(5) {
		add(fmt.Sprintf("f%03d", p.rng.IntN(producerFlows)))
	}
}

// loop writes events until stop is closed and every event is answered,
// starting a new process whenever one ends before. It gives up at
// deadline.
func (p *producer) loop(deadline time.Time) error {
	for {
		select {
		case <-p.abort:
			return errors.New("producer: aborted")
		default:
		}
		if time.Now().After(deadline) {
			return errors.New("producer: deadline passed with events unanswered")
		}
		finished, err := p.once()
		if err != nil {
			return err
		}
		if finished {
			return nil
		}
	}
}

// once runs one process: it writes the unanswered events and then new ones
// until stop, reads the answers, and reports whether every event is
// answered and the process exited 0.
func (p *producer) once() (finished bool, err error) {
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return false, err
	}
	defer f.Close()
	cmd := exec.Command(p.bin, "enqueue", "--queue", p.queue)
	cmd.Stderr = f
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return false, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return false, err
	}
	p.mu.Lock()
	p.starts++
	fmt.Fprintf(f, "=== producer incarnation %d, %s, from event %d\n", p.starts, time.Now().Format(time.TimeOnly+".000"), p.answered+1)
	if err := cmd.Start(); err != nil {
		p.mu.Unlock()
		return false, err
	}
	p.cur = cmd
	next := p.answered
	p.mu.Unlock()

	read := make(chan struct{})
	go func() {
		defer close(read)
		p.readAnswers(stdout, next)
	}()
	p.write(stdin, next, read)
	<-read // stdout ends when the process does
	werr := cmd.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cur = nil
	if werr != nil {
		fmt.Fprintf(f, "=== exit: %v\n", werr)
	}
	select {
	case <-p.stop:
		return werr == nil && p.answered == len(p.events), nil
	default:
		return false, nil
	}
}

// write writes events[next:] and then each tick's new events to w, and
// after stop the rest, then closes w. It returns early when a write fails
// or the process's answers end (it died).
func (p *producer) write(w io.WriteCloser, next int, died <-chan struct{}) {
	defer w.Close()
	tick := time.NewTicker(producerTick)
	defer tick.Stop()
	bw := bufio.NewWriter(w)
	for {
		p.mu.Lock()
		pending := p.events[next:]
		p.mu.Unlock()
		for _, e := range pending {
			fmt.Fprintf(bw, `{"id":%q,"flow":%q,"delta":%d}`+"\n", e.ID, e.Flow, e.Delta)
		}
		next += len(pending)
		if bw.Flush() != nil {
			return
		}
		select {
		case <-p.stop:
			p.mu.Lock()
			all := next == len(p.events)
			p.mu.Unlock()
			if all {
				return
			}
		case <-tick.C:
			select {
			case <-p.stop:
			default:
				p.generate()
			}
		case <-died:
			return
		case <-p.abort:
			return
		}
	}
}

// answer is one line of enqueue's output.
type answer struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Seq    int64  `json:"seq"`
}

// readAnswers reads the answers to events[next:], in order, and moves
// answered on past each one that says the event is stored with the seq it
// must have.
func (p *producer) readAnswers(r io.Reader, next int) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var a answer
		err := json.Unmarshal(sc.Bytes(), &a)
		p.mu.Lock()
		switch {
		case err != nil:
			p.problems = append(p.problems, fmt.Sprintf("enqueue answered %q: %v", sc.Text(), err))
		case next >= len(p.events):
			p.problems = append(p.problems, fmt.Sprintf("enqueue answered %q to no line", sc.Text()))
		default:
			e := p.events[next]
			if a.ID != e.ID || (a.Status != "created" && a.Status != "existing") || a.Seq != e.Seq {
				p.problems = append(p.problems, fmt.Sprintf("enqueue answered %s to %s (flow %s, seq %d must be stored)", sc.Text(), e.ID, e.Flow, e.Seq))
			} else if next == p.answered {
				p.answered++
			}
			next++
		}
		p.mu.Unlock()
	}
}

// kill kills the process now running, if any; run starts another.
func (p *producer) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur != nil {
		p.cur.Process.Kill()
	}
}

// finish stops the writing and waits for every event to be answered.
func (p *producer) finish(t *testing.T) []event {
	t.Helper()
	close(p.stop)
	err := <-p.done
	p.finished = true
	if err != nil {
		t.Fatalf("%v\n%s", err, tail(p.log, 30))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, pr := range p.problems {
		if i == 20 {
			t.Errorf("… and %d more", len(p.problems)-i)
			break
		}
		t.Error(pr)
	}
	return p.events
}
