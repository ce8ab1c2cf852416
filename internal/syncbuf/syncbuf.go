// Package syncbuf holds Buffer, a bytes.Buffer that goroutines (a handler's,
// a child process's copier) write while a test reads it: the tests' log and
// output destinations.
package syncbuf

import (
	"bytes"
	"log/slog"
	"sync"
	"testing"
)

// Buffer is a bytes.Buffer safe for concurrent Write and String. The zero
// value is empty and ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p; it never fails.
func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns what was written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// DefaultLogger makes h the process's default logger (slog.SetDefault)
// until t ends, when the one before comes back. A test that calls it is
// not parallel: the default logger is the process's.
func DefaultLogger(t testing.TB, h slog.Handler) {
	t.Helper()
	old := slog.Default()
	slog.SetDefault(slog.New(h))
	t.Cleanup(func() { slog.SetDefault(old) })
}

// DefaultLog is DefaultLogger with a text handler (slog's defaults: info
// and above) writing to the Buffer it returns.
func DefaultLog(t testing.TB) *Buffer {
	t.Helper()
	var b Buffer
	DefaultLogger(t, slog.NewTextHandler(&b, nil))
	return &b
}
