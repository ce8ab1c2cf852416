package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
)

// cpuMeter reads the CPU time (user + system, seconds) spent so far by this
// process and by the PostgreSQL server: its postmaster, the backends it has
// reaped (cutime, cstime) and the live ones. The server must run on this
// machine (the benchmark only targets loopback); a difference of two
// readings is what a workload cost the machine, whatever else ran beside it
// on other processes.
type cpuMeter struct {
	postmaster int
	tick       float64 // clock ticks per second of /proc/*/stat
}

var meter *cpuMeter

// startMeter finds the postmaster of the server at url through a backend's
// parent process.
func startMeter(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var backend int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		return err
	}
	f, err := procStat(backend)
	if err != nil {
		return fmt.Errorf("the server's processes are not readable here: %w", err)
	}
	ppid, _ := strconv.Atoi(f[1])
	meter = &cpuMeter{postmaster: ppid, tick: 100} // USER_HZ is 100 on Linux
	return nil
}

// procStat returns the fields of /proc/pid/stat after the command name:
// [0] state, [1] ppid, … [11] utime, [12] stime, [13] cutime, [14] cstime.
func procStat(pid int) ([]string, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	return strings.Fields(string(b[i+1:])), nil
}

func (m *cpuMeter) read() float64 {
	if m == nil {
		return 0
	}
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	self := float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
	ticks := 0
	add := func(f []string, from, to int) {
		for k := from; k <= to; k++ {
			v, _ := strconv.Atoi(f[k])
			ticks += v
		}
	}
	if f, err := procStat(m.postmaster); err == nil {
		add(f, 11, 14)
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, err := procStat(pid)
		if err != nil || f[1] != strconv.Itoa(m.postmaster) {
			continue
		}
		add(f, 11, 12)
	}
	return self + float64(ticks)/m.tick
}
