package bench

import (
	"bytes"
	"cmp"
	"fmt"
	"os"
	"strconv"
)

// A virtual machine's CPUs stop whenever its hypervisor runs something
// else on them: Linux counts that time as "steal". On the 2-core machine
// of BENCHMARKS.md the hypervisor took 2-15 % of the CPUs in a second
// (vmstat's "st"), and a runtime/trace of the prune benchmark caught one
// prune write of 16.8 ms in which nothing of the process ran for 15.2 ms:
// the pruning goroutine inside SQLite's commit with no system call or Go
// event, the other P idle, then preempted for having run 10 ms. Dispatch
// steps meet such stops with or without a prune. The prune benchmark
// therefore records, for each prune call and each dispatch step, whether
// the machine's steal counter moved during it, and reports the tails of
// the calls and steps it did not move in beside the whole (RunPrune).

// stealTicks reads the machine's steal time in clock ticks (USER_HZ, 10
// ms on Linux): the 8th number of /proc/stat's first line, summed over
// every CPU. Errors: the file's, and a line it cannot parse.
func stealTicks(f *os.File, buf []byte) (int64, error) {
	n, err := f.ReadAt(buf, 0)
	if n == 0 && err != nil {
		return 0, err
	}
	return parseSteal(buf[:n])
}

// parseSteal parses the first line of /proc/stat ("cpu  user nice system
// idle iowait irq softirq steal ...") and returns its steal field.
func parseSteal(b []byte) (int64, error) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := bytes.Fields(line)
	if len(f) < 9 || string(f[0]) != "cpu" {
		return 0, fmt.Errorf("/proc/stat: first line %q has no steal field", line)
	}
	v, err := strconv.ParseInt(string(f[8]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/stat: steal field: %w", err)
	}
	return v, nil
}

// stealClock returns a function that reads the steal counter, one per
// goroutine (it owns a buffer), and a function that closes it; ok is false
// where /proc/stat cannot be read (not Linux), and the benchmark then
// reports no steal figures.
func stealClock() (read func() (int64, error), closeFn func(), ok bool) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return nil, func() {}, false
	}
	buf := make([]byte, 512)
	if _, err := stealTicks(f, buf); err != nil {
		f.Close()
		return nil, func() {}, false
	}
	return func() (int64, error) { return stealTicks(f, buf) }, func() { f.Close() }, true
}

// stealWatch tells, for consecutive intervals, whether the steal counter
// moved during each: mark starts an interval, stolen ends it. A nil
// *stealWatch (no counter on this system) answers false, as does a read
// that failed (the interval is then counted with the others, and err
// keeps the first failure: RunPrune fails with it).
type stealWatch struct {
	read func() (int64, error)
	last int64
	err  error
}

// newStealWatch returns a stealWatch on its own reader of the counter, and
// its closer; nil where the counter cannot be read.
func newStealWatch() (*stealWatch, func()) {
	read, closeFn, ok := stealClock()
	if !ok {
		return nil, closeFn
	}
	return &stealWatch{read: read}, closeFn
}

func (w *stealWatch) mark() {
	if w == nil {
		return
	}
	v, err := w.read()
	if err != nil {
		w.err = cmp.Or(w.err, err)
		return
	}
	w.last = v
}

func (w *stealWatch) stolen() bool {
	if w == nil {
		return false
	}
	v, err := w.read()
	if err != nil {
		w.err = cmp.Or(w.err, err)
		return false
	}
	moved := v != w.last
	w.last = v
	return moved
}
