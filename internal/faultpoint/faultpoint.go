// Package faultpoint is the crash-injection mechanism of the experiments
// (SPEC §5 item 8). A point is a named place in the real code path; when the
// process was started with FAIRRELAY_FAULT=<name>, reaching that point exits
// the process at once with code 73, as a crash would. Unarmed, Hit costs one
// atomic load.
package faultpoint

import (
	"os"
	"sync/atomic"
)

// The points, in the order a delivery passes them.
const (
	BeforeClaimCommit   = "before_claim_commit"
	AfterClaimCommit    = "after_claim_commit"
	BeforeReceiptCommit = "before_receipt_commit"
	AfterReceiptCommit  = "after_receipt_commit"
	BeforeSettleCommit  = "before_settle_commit"
	AfterSettleCommit   = "after_settle_commit"
)

// Points lists every point.
func Points() []string {
	return []string{BeforeClaimCommit, AfterClaimCommit, BeforeReceiptCommit, AfterReceiptCommit, BeforeSettleCommit, AfterSettleCommit}
}

// ExitCode is the status a process exits with at an armed point.
const ExitCode = 73

// EnvVar names the environment variable that arms a point at start-up.
const EnvVar = "FAIRRELAY_FAULT"

var armed atomic.Pointer[string]

func init() {
	if v := os.Getenv(EnvVar); v != "" {
		armed.Store(&v)
	}
}

// Hit exits the process with ExitCode when name is the armed point.
func Hit(name string) {
	if p := armed.Load(); p != nil && *p == name {
		os.Exit(ExitCode)
	}
}
