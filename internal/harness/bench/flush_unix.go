//go:build unix

package bench

import "syscall"

// FlushToDisk writes every dirty page of the machine's file cache to disk
// (sync(2)), so that the writeback of a freshly loaded store does not compete
// with the commits being measured.
func FlushToDisk() { syscall.Sync() }
