package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
)

// policyFlags are the protocol numbers every queue command accepts.
type policyFlags struct {
	entry  string
	lease  int64
	budget int64
	base   int64
	cap    int64
	jitter float64
}

func (p *policyFlags) register(cmd *cobra.Command, defaultEntry string, defaultJitter float64) {
	f := cmd.Flags()
	f.StringVar(&p.entry, "policy", defaultEntry, "entry and tie rule: seed (the article's) or fair (SPEC §7)")
	f.Int64Var(&p.lease, "lease", 5, "lease length, in ticks")
	f.Int64Var(&p.budget, "budget", 3, "claims per round before a transient failure quarantines")
	f.Int64Var(&p.base, "backoff-base", 2, "first retry delay, in ticks")
	f.Int64Var(&p.cap, "backoff-cap", 8, "largest retry delay, in ticks")
	f.Float64Var(&p.jitter, "jitter", defaultJitter, "jitter j in [0,1): each delay d becomes a value in [d*(1-j), d]")
}

func (p *policyFlags) policy() (fairrelay.Policy, error) {
	e, err := fairrelay.ParseEntry(p.entry)
	if err != nil {
		return fairrelay.Policy{}, err
	}
	pol := fairrelay.Policy{Entry: e, Lease: p.lease, Budget: p.budget, BackoffBase: p.base, BackoffCap: p.cap, Jitter: p.jitter}
	return pol, pol.Validate()
}

func openQueue(ctx context.Context, dsn string, pol fairrelay.Policy) (*fairrelay.Queue, error) {
	return openQueueConfig(ctx, dsn, fairrelay.Config{Policy: pol})
}

// openExistingQueue opens a queue store that must already exist: claim,
// settle, redrive and inspect never create one from a mistyped path.
func openExistingQueue(ctx context.Context, dsn string, pol fairrelay.Policy) (*fairrelay.Queue, error) {
	return openQueueConfig(ctx, dsn, fairrelay.Config{Policy: pol, MustExist: true})
}

func openQueueConfig(ctx context.Context, dsn string, cfg fairrelay.Config) (*fairrelay.Queue, error) {
	if dsn == "" {
		return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "queue", Message: "missing: give --queue PATH or a postgres:// URL"}
	}
	return fairrelay.Open(ctx, dsn, cfg)
}

func openInbox(ctx context.Context, dsn string, opts inbox.Options) (*inbox.Inbox, error) {
	if dsn == "" {
		return nil, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "inbox", Message: "missing: give --inbox PATH or a postgres:// URL"}
	}
	in, err := inbox.Open(ctx, dsn, opts)
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	return in, nil
}
