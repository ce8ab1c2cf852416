package relay

import "github.com/fairrelay/fairrelay"

// settleMode decides who settles the answers waiting (pipeline): the
// claimer, with its next claim in one transaction (SettleMany with a
// ClaimLimit: combine), or the settler, in transactions of its own beside
// the claims. Which mode a Relay uses depends on its store: withClaims on
// a store with one writer at a time, besideClaims on one with concurrent
// writers.
type settleMode interface {
	// start returns whether the claimer settles the answers with its
	// claims when Run starts.
	start() bool
	// next returns whether the claimer settles the answers with its
	// claims from now on (pipeline.combine was combine), after a write of
	// the claimer that settled settled (none for a plain claim) and
	// claimed cs of the k heads it asked for, with waiting answers waiting
	// for or in the settler's transaction.
	next(combine bool, settled []Settled, k int, cs []fairrelay.Claim, waiting int) bool
	// String names the mode in the relay's start log.
	String() string
}

var (
	_ settleMode = withClaims{}
	_ settleMode = besideClaims{}
)

// withClaims is the mode of a store with one writer at a time (SQLite):
// a settler's transaction beside the claims would only wait for the
// claimer's, so the claimer settles every answer with its next claim, and
// the settler settles only what is left once the claimer stopped.
type withClaims struct{}

func (withClaims) start() bool { return true }

func (withClaims) next(bool, []Settled, int, []fairrelay.Claim, int) bool { return true }

func (withClaims) String() string { return "with the claims" }

// besideClaims is the mode of a store with concurrent writers
// (PostgreSQL): the settler settles beside the claims, like River's
// completer beside its producer, except while the claims wait for those
// very settles (ordered traffic), when the claimer settles them with its
// claims (next).
type besideClaims struct{}

func (besideClaims) start() bool { return false }

func (besideClaims) String() string { return "beside the claims" }

// next, beside the claims: the settler settles, but the claimer does from
// this write on when the claims wait for the settles:
//   - a plain claim came back short while answers wait: the heads it did
//     not find may be the events behind them, eligible once they are acked
//     (ordered traffic), so the claimer settles them with its next claim;
//   - a settle with a claim (SettleMany with a ClaimLimit) took all k
//     heads, most of them of flows it did not just ack: the claims did
//     not need those settles, so the settler settles beside the claims
//     again;
//   - otherwise, as before.
func (besideClaims) next(combine bool, settled []Settled, k int, cs []fairrelay.Claim, waiting int) bool {
	switch {
	case len(settled) == 0 && len(cs) < k && waiting > 0:
		return true
	case len(settled) > 0 && k > 0 && len(cs) == k && 2*behind(settled, cs) < len(cs):
		return false
	}
	return combine
}

// behind counts the claims of flows whose answers settled says were acked:
// heads that waited for those acks.
func behind(settled []Settled, cs []fairrelay.Claim) int {
	acked := make(map[string]bool, len(settled))
	for _, s := range settled {
		if s.Result.Status == fairrelay.SettleAcked {
			acked[s.Claim.Flow] = true
		}
	}
	n := 0
	for _, c := range cs {
		if acked[c.Flow] {
			n++
		}
	}
	return n
}
