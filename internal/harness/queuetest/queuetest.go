// Package queuetest holds small helpers for tests that drive a
// fairrelay.Queue: they unwrap the params-struct answers into the shapes a
// test asserts on. It sits above the root package (it imports it), with the
// other harnesses.
package queuetest

import (
	"context"

	"github.com/fairrelay/fairrelay"
)

// ClaimOne claims one head at tick at: nil when the claim was idle.
func ClaimOne(ctx context.Context, q *fairrelay.Queue, at int64) (*fairrelay.Claim, error) {
	r, err := q.Claim(ctx, fairrelay.ClaimParams{At: at})
	return r.First(), err
}

// Claims unwraps a Claim's result into its claims.
func Claims(r fairrelay.ClaimResult, err error) ([]fairrelay.Claim, error) {
	return r.Claims, err
}

// Settles unwraps a SettleMany's result into its settle answers.
func Settles(r fairrelay.SettleManyResult, err error) ([]fairrelay.SettleResult, error) {
	return r.Results, err
}

// SettleClaims unwraps a SettleMany's result into its settle answers and its
// claims.
func SettleClaims(r fairrelay.SettleManyResult, err error) ([]fairrelay.SettleResult, []fairrelay.Claim, error) {
	return r.Results, r.Claims, err
}
