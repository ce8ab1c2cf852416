package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
)

// policyFlags are the protocol numbers every queue command accepts.
type policyFlags struct {
	// set reports whether the user gave --policy (set by register).
	set    func() bool
	entry  string
	lease  int64
	budget int64
	base   int64
	cap    int64
	jitter float64
}

// secretEnv names the environment variable that relay and receive read the
// webhook secret from when --secret is not given: a command line is visible
// to every user of the machine (ps, /proc/*/cmdline), the environment is not.
const secretEnv = "FAIRRELAY_SECRET"

// secretFlag returns --secret when given, else $FAIRRELAY_SECRET.
func secretFlag(cmd *cobra.Command, secret string) string {
	if cmd.Flags().Changed("secret") {
		return secret
	}
	return os.Getenv(secretEnv)
}

// atUsage is the help of every one-shot command's --at flag.
const atUsage = "tick of the write; default: the store's current tick, read in the same transaction (safe while a relay runs)"

// atFlag returns --at when given, else fairrelay.AtStored.
func atFlag(cmd *cobra.Command, at int64) int64 {
	if cmd.Flags().Changed("at") {
		return at
	}
	return fairrelay.AtStored
}

// register adds the policy flags with def's values as defaults: the
// daemon's (fairrelay.DaemonPolicy, ticks = ms) for the relay and the tools
// that act on its store, the article's (fairrelay.ReferencePolicy) for
// script.
func (p *policyFlags) register(cmd *cobra.Command, def fairrelay.Policy) {
	f := cmd.Flags()
	p.set = func() bool { return f.Changed("policy") }
	f.StringVar(&p.entry, "policy", string(def.Entry), "entry and tie rule: seed (the article's) or fair (SPEC §7); an existing store keeps the rule it records unless this is given")
	f.Int64Var(&p.lease, "lease", def.Lease, "lease length, in ticks (the relay's tick is 1 ms)")
	f.Int64Var(&p.budget, "budget", def.Budget, "claims per round before a transient failure quarantines")
	f.Int64Var(&p.base, "backoff-base", def.BackoffBase, "first retry delay, in ticks")
	f.Int64Var(&p.cap, "backoff-cap", def.BackoffCap, "largest retry delay, in ticks")
	f.Float64Var(&p.jitter, "jitter", def.Jitter, "jitter j in [0,1): each delay d becomes a value in [d*(1-j), d]")
}

func (p *policyFlags) policy() (fairrelay.Policy, error) {
	e, err := fairrelay.ParseEntry(p.entry)
	if err != nil {
		return fairrelay.Policy{}, err
	}
	pol := fairrelay.Policy{Entry: e, Lease: p.lease, Budget: p.budget, BackoffBase: p.base, BackoffCap: p.cap, Jitter: p.jitter}
	// A zero here is a typed 0, not "the default" as in the library.
	for name, v := range map[string]int64{"lease": p.lease, "budget": p.budget, "backoff-base": p.base, "backoff-cap": p.cap} {
		if v < 1 {
			return fairrelay.Policy{}, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: name, Message: fmt.Sprintf("must be at least 1, got %d", v)}
		}
	}
	return pol, pol.Validate()
}

// adopt reports whether an existing store keeps the entry rule it records
// (SPEC §7): when the user gave no --policy (or the command has none).
func (p *policyFlags) adopt() bool { return p == nil || p.set == nil || !p.set() }

// openQueue opens (creating if missing) a queue store under pol; pf, when
// not nil, says whether the user named the entry rule (else an existing
// store keeps its own).
func openQueue(ctx context.Context, dsn string, pol fairrelay.Policy, pf *policyFlags) (*fairrelay.Queue, error) {
	return openQueueConfig(ctx, dsn, fairrelay.Config{Policy: pol, AdoptStoredEntry: pf.adopt()})
}

// openExistingQueue opens a queue store that must already exist: claim,
// settle, redrive and inspect never create one from a mistyped path.
func openExistingQueue(ctx context.Context, dsn string, pol fairrelay.Policy, pf *policyFlags) (*fairrelay.Queue, error) {
	return openQueueConfig(ctx, dsn, fairrelay.Config{Policy: pol, MustExist: true, AdoptStoredEntry: pf.adopt()})
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

// distinctStores refuses a queue and an inbox that name one store (SPEC §4:
// separate stores), before either is opened, so that nothing is created:
// one SQLite file, or one schema of one PostgreSQL database.
func distinctStores(queue, inboxDSN string) error {
	if !sameStore(queue, inboxDSN) {
		return nil
	}
	return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "inbox",
		Message: "names the same store as --queue: give the inbox a file (or a PostgreSQL schema) of its own (SPEC §4: separate stores)"}
}

// sameStore reports whether two store arguments name one SQLite file, or
// one schema (schema=NAME) of one PostgreSQL database on one server.
func sameStore(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	if a == b {
		return true
	}
	if strings.Contains(a, "://") || strings.Contains(b, "://") {
		ua, err1 := url.Parse(a)
		ub, err2 := url.Parse(b)
		return err1 == nil && err2 == nil && ua.Host == ub.Host && strings.TrimPrefix(ua.Path, "/") == strings.TrimPrefix(ub.Path, "/") &&
			ua.Query().Get("schema") == ub.Query().Get("schema")
	}
	aa, err1 := filepath.Abs(a)
	bb, err2 := filepath.Abs(b)
	if err1 == nil && err2 == nil && aa == bb {
		return true
	}
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}
