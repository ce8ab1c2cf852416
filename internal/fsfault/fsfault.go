// Package fsfault explains why SQLite could not open or write a store file
// when the cause is the file system — a read-only mount, a directory or
// file this process may not write — which the driver reports only as
// "unable to open database file" or "attempt to write a readonly
// database".
package fsfault

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// access reports whether the process may read and write path (a file) or
// create files in it (a directory): nil, or the errno of access(2) —
// EROFS for a read-only file system, EACCES for missing permission. Tests
// replace it.
var access = writable

// ErrNotWritable is wrapped by the errors Explain explains.
var ErrNotWritable = errors.New("not writable")

// Explain returns err with its cause named when err is SQLite's failure to
// open or write the store at path (SQLITE_CANTOPEN, SQLITE_READONLY,
// SQLITE_PERM or SQLITE_IOERR), or the store's failure to create its file
// (an *fs.PathError of EROFS, EACCES or EPERM), and the file system
// explains it: the
// directory, the file or its -wal or -shm companion is on a read-only file
// system or not writable by this process. The result wraps ErrNotWritable,
// the access(2) errno (syscall.EROFS, syscall.EACCES) and err. SQLite in
// WAL mode writes the -wal and -shm files beside the store even to read
// it, so a store on a read-only file system cannot be opened at all. Any
// other err is returned as it is.
func Explain(path string, err error) error {
	var se *sqlite.Error
	var pe *fs.PathError
	switch {
	case errors.As(err, &se):
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM, sqlite3.SQLITE_IOERR:
		default:
			return err
		}
	case errors.As(err, &pe):
		// The store's own creation of the file (sqlitestore.CreateFile),
		// before SQLite opens it.
		if !errors.Is(err, syscall.EROFS) && !errors.Is(err, syscall.EACCES) && !errors.Is(err, syscall.EPERM) {
			return err
		}
	default:
		return err
	}
	if x := check(path, err); x != nil {
		return x
	}
	return err
}

// Check is Explain for a store that opened: SQLite opens a file this
// process may not write read-only, without an error, and its first write
// then fails "attempt to write a readonly database". Check returns the
// explained error (wrapping ErrNotWritable) when the file, its -wal or
// -shm companion or its directory is not writable, else nil.
func Check(path string) error {
	if x := check(path, errors.New("opened read-only")); x != nil {
		return x
	}
	return nil
}

// check is the test of Explain and Check: nil when nothing is unwritable.
func check(path string, err error) error {
	abs, aerr := filepath.Abs(path)
	if aerr != nil {
		return nil
	}
	dir := filepath.Dir(abs)
	if cause := access(dir); cause != nil {
		return &explained{fmt.Sprintf("%s: %s; SQLite writes the store's -wal and -shm files beside it, even to read it", ErrNotWritable, why("the directory "+dir, cause)), cause, err}
	}
	for _, f := range []string{abs, abs + "-wal", abs + "-shm"} {
		if _, serr := os.Stat(f); serr != nil {
			continue
		}
		if cause := access(f); cause != nil {
			return &explained{fmt.Sprintf("%s: %s", ErrNotWritable, why(f, cause)), cause, err}
		}
	}
	return nil
}

// why says in words what access's errno means for what.
func why(what string, errno error) string {
	switch {
	case errors.Is(errno, syscall.EROFS):
		return what + " is on a read-only file system"
	case errors.Is(errno, syscall.EACCES), errors.Is(errno, syscall.EPERM):
		return what + " is not writable by this process (permission denied)"
	}
	return fmt.Sprintf("%s is not writable: %v", what, errno)
}

// explained is Explain's error: its message names the cause first, and it
// wraps ErrNotWritable, the errno and the driver's error.
type explained struct {
	msg        string
	cause, err error
}

func (e *explained) Error() string   { return e.msg + ": " + e.err.Error() }
func (e *explained) Unwrap() []error { return []error{ErrNotWritable, e.cause, e.err} }
