package outboxbench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// selfCPU is the CPU time (user + system) this process has used so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on Linux.
const clockTicks = 100

// procCPU is the CPU time (user + system) process pid has used so far, from
// /proc/PID/stat.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	// After the command name, in parentheses: state, ppid, … utime (11),
	// stime (12).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad times %q %q", pid, f[11], f[12])
	}
	return time.Duration(u+s) * time.Second / clockTicks, nil
}

// serverMeter reads the CPU time the PostgreSQL server's processes serving
// one application name (the relay's connections) have used. The server must
// run on this machine and its processes be readable (/proc).
type serverMeter struct {
	pids  []int
	start time.Duration
}

// startServerMeter finds the backends of appName now and reads their CPU.
func startServerMeter(ctx context.Context, url, appName string) (*serverMeter, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, appName)
	if err != nil {
		return nil, err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, err
	}
	if len(pids) == 0 {
		return nil, fmt.Errorf("no server process serves %s", appName)
	}
	m := &serverMeter{}
	for _, p := range pids {
		m.pids = append(m.pids, int(p))
	}
	if m.start, err = m.read(); err != nil {
		return nil, err
	}
	return m, nil
}

// read sums the CPU of the backends found at the start (one that exited
// since counts as nothing more).
func (m *serverMeter) read() (time.Duration, error) {
	var sum time.Duration
	found := 0
	for _, p := range m.pids {
		d, err := procCPU(p)
		if err != nil {
			continue
		}
		sum += d
		found++
	}
	if found == 0 {
		return 0, fmt.Errorf("the server's processes %v are not readable here", m.pids)
	}
	return sum, nil
}

// used is the CPU time used since the start.
func (m *serverMeter) used() (time.Duration, error) {
	now, err := m.read()
	if err != nil {
		return 0, err
	}
	return max(0, now-m.start), nil
}
