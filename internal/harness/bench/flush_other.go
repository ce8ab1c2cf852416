//go:build !unix

package bench

// FlushToDisk does nothing where sync(2) does not exist.
func FlushToDisk() {}
