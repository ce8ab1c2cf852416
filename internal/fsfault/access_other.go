//go:build !unix

package fsfault

// writable cannot tell on this platform; Explain then leaves the error as
// the driver wrote it.
func writable(string) error { return nil }
