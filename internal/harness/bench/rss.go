package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// PeakRSSMB returns the process's peak resident set size in MiB: the VmHWM
// line of /proc/self/status (Linux), which the kernel keeps as the high-water
// mark of VmRSS. Errors: /proc is missing or the line cannot be read.
func PeakRSSMB() (float64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("peak rss: %w", err)
	}
	s := bufio.NewScanner(bytes.NewReader(b))
	for s.Scan() {
		line := s.Text()
		if !strings.HasPrefix(line, "VmHWM:") {
			continue
		}
		// "VmHWM:     12345 kB"
		fields := strings.Fields(strings.TrimPrefix(line, "VmHWM:"))
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("peak rss: unexpected line %q", line)
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("peak rss: %q: %w", line, err)
		}
		return float64(kb) / 1024, nil
	}
	return 0, fmt.Errorf("peak rss: no VmHWM line in /proc/self/status")
}
