//go:build unix

package fsfault

import "golang.org/x/sys/unix"

// writable asks the kernel whether this process may write path (read and
// write a file, create files in a directory). access(2) answers EROFS for
// a read-only file system even to root, who passes every permission check.
func writable(path string) error {
	return unix.Access(path, unix.R_OK|unix.W_OK)
}
