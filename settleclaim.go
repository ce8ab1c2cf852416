package fairrelay

import (
	"context"

	"github.com/fairrelay/fairrelay/internal/faultpoint"
	"github.com/fairrelay/fairrelay/internal/store"
)

// SettleAndClaim settles the tokens of ps and then claims up to k heads, all
// at tick at in ONE transaction: exactly the answers of SettleBatch(at, ps)
// followed by ClaimBatch(at, k), with one commit (one fsync) instead of two.
// It is a worker's loop step — settle the last event, take the next — and
// changes neither fencing nor fairness: the claims see the settles, as they
// would in two transactions at the same tick (issue 4). ps may be empty; k 0
// claims nothing. The claims are empty when nothing is eligible (idle).
// The fault points are the settle's (before_settle_commit,
// after_settle_commit): a crash before the commit keeps neither part.
// Under WithSkipHeldFlows a settle whose flow another transaction holds is
// skipped, as in SettleBatch.
// Errors: those of SettleBatch (an unknown event id fails the whole call and
// nothing changes), ErrInvalidInput (field "k") for k < 0.
func (q *Queue) SettleAndClaim(ctx context.Context, at int64, ps []SettleParams, k int) ([]SettleResult, []Claim, error) {
	if err := checkSettles(ps); err != nil {
		return nil, nil, err
	}
	if k < 0 {
		return nil, nil, invalid("k", "must not be negative, got %d", k)
	}
	var rs []SettleResult
	var cs []Claim
	// The claims must see the settles' writes: a backend that reads the
	// pick ahead adds the flows the settles make runnable (pgstore's
	// rowCache.flowWritten).
	hint := store.TxHint{Events: settleIDs(ps), Pick: k, PickOrder: q.pickOrder(), SkipHeld: skipHeld(ctx)}
	err := q.writeTx(ctx, store.LaneSettle|store.LaneClaim, hint, "settle and claim", at, faultpoint.BeforeSettleCommit, faultpoint.AfterSettleCommit, func(tx store.Tx, c *store.Clock) error {
		var err error
		if rs, err = q.settleBatch(ctx, tx, c.Tick, ps); err != nil {
			return err
		}
		cs = nil
		if k > 0 {
			cs, err = q.claimBatch(ctx, tx, c, c.Tick, k)
		}
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return rs, cs, nil
}
