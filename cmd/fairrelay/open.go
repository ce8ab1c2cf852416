package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/store"
	"github.com/fairrelay/fairrelay/internal/store/pgstore"
	"github.com/fairrelay/fairrelay/internal/store/sqlitestore"
	"github.com/fairrelay/fairrelay/sink"
	"github.com/fairrelay/fairrelay/sink/webhook"
)

// policyFlags are the protocol numbers every queue command accepts. Times
// are durations (30s, 5m) for the commands that work on a daemon's store,
// where 1 tick = 1 ms, and ticks for script, whose logical time is the
// SPEC's.
type policyFlags struct {
	// set reports whether the user gave --policy (set by register).
	set func() bool
	// changed reports whether the user gave the named flag (set by
	// register).
	changed func(name string) bool
	entry   string
	budget  int64
	jitter  float64
	// ticks: the lease, backoff and tick jump in ticks (script); else the
	// durations.
	ticks                      bool
	lease, base, cap, jump     int64
	leaseD, baseD, capD, jumpD time.Duration
}

// register adds the policy flags with def's values as defaults: the
// daemon's (fairrelay.DaemonPolicy, ticks = ms) as durations for the relay
// and the tools that act on its store, the article's
// (fairrelay.ReferencePolicy) in ticks (ticks true) for script.
func (p *policyFlags) register(cmd *cobra.Command, def fairrelay.Policy, ticks bool) {
	f := cmd.Flags()
	p.ticks = ticks
	p.set = func() bool { return f.Changed("policy") }
	p.changed = f.Changed
	f.StringVar(&p.entry, "policy", string(def.Entry), "entry and tie rule of a new store: seed (the article's) or fair (SPEC §7); an existing store opens under the rule it records, and naming the other rule is refused (invalid_input naming policy)")
	f.Int64Var(&p.budget, "budget", def.Budget, "claims per round before a transient failure quarantines")
	f.Float64Var(&p.jitter, "jitter", def.Jitter, "jitter j in [0,1): each delay d becomes a value in [d*(1-j), d]")
	if p.ticks {
		f.Int64Var(&p.lease, "lease", def.Lease, "lease length, in ticks (the SPEC's logical time)")
		f.Int64Var(&p.base, "backoff-base", def.BackoffBase, "first retry delay, in ticks")
		f.Int64Var(&p.cap, "backoff-cap", def.BackoffCap, "largest retry delay, in ticks")
		f.Int64Var(&p.jump, "max-tick-jump", def.MaxTickJump, "refuse a write whose tick lies more than this many ticks ahead of the stored tick (0: no limit; SPEC §7)")
		return
	}
	p.leaseD, p.baseD, p.capD = ticksToDuration(def.Lease), ticksToDuration(def.BackoffBase), ticksToDuration(def.BackoffCap)
	p.jumpD = ticksToDuration(def.MaxTickJump)
	f.Var(durationFlag{&p.jumpD}, "max-tick-jump", "refuse a write whose tick lies further ahead of the stored tick than this, a duration (0: no limit; SPEC §7)")
	f.Var(durationFlag{&p.leaseD}, "lease", "lease length, a duration (a whole number of milliseconds, the daemon's tick)")
	f.Var(durationFlag{&p.baseD}, "backoff-base", "first retry delay, a duration")
	f.Var(durationFlag{&p.capD}, "backoff-cap", "largest retry delay, a duration")
}

// registerAdmin registers the policy flags for a command that neither
// claims nor settles (enqueue, redrive, configure, prune, pause, resume,
// expedite): the lease, backoff, budget and jitter change nothing there, so
// their flags are hidden from its help. They are still accepted, so that
// one set of flags can be passed to every command.
func (p *policyFlags) registerAdmin(cmd *cobra.Command) {
	p.register(cmd, fairrelay.DaemonPolicy(), false)
	for _, name := range []string{"lease", "backoff-base", "backoff-cap", "budget", "jitter"} {
		if err := cmd.Flags().MarkHidden(name); err != nil {
			panic(err) // a flag register did not add: a bug here
		}
	}
}

func (p *policyFlags) policy() (fairrelay.Policy, error) {
	e, err := fairrelay.ParseEntry(p.entry)
	if err != nil {
		return fairrelay.Policy{}, err
	}
	if !p.ticks {
		for _, d := range []struct {
			name string
			d    time.Duration
			to   *int64
		}{{"lease", p.leaseD, &p.lease}, {"backoff-base", p.baseD, &p.base}, {"backoff-cap", p.capD, &p.cap}, {"max-tick-jump", p.jumpD, &p.jump}} {
			if d.d%time.Millisecond != 0 {
				return fairrelay.Policy{}, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: d.name, Message: fmt.Sprintf("must be a whole number of milliseconds (the daemon's tick), got %s", d.d)}
			}
			*d.to = d.d.Milliseconds()
		}
	}
	if p.jump < 0 {
		// Named as typed: a duration where the flag takes one (a breaker's
		// report: -5s read "got -5000").
		got := fmt.Sprint(p.jump)
		if !p.ticks {
			got = p.jumpD.String()
		}
		return fairrelay.Policy{}, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "max-tick-jump", Message: "must not be negative, got " + got}
	}
	pol := fairrelay.Policy{Entry: e, Lease: p.lease, Budget: p.budget, BackoffBase: p.base, BackoffCap: p.cap, Jitter: p.jitter, MaxTickJump: p.jump}
	// A zero here is a typed 0, not "the default" as in the library.
	for name, v := range map[string]int64{"lease": p.lease, "budget": p.budget, "backoff-base": p.base, "backoff-cap": p.cap} {
		if v < 1 {
			unit := ""
			if !p.ticks && name != "budget" {
				unit = "ms"
			}
			return fairrelay.Policy{}, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: name, Message: fmt.Sprintf("must be at least 1%s, got %d%s", unit, v, unit)}
		}
	}
	if p.base > p.cap {
		// Name the flag the user gave: the other one is its default.
		name, other, v, w := "backoff-cap", "backoff-base", p.cap, p.base
		if p.changed != nil && p.changed("backoff-base") && !p.changed("backoff-cap") {
			name, other, v, w = "backoff-base", "backoff-cap", p.base, p.cap
		}
		shown := func(n int64) string {
			if p.ticks {
				return fmt.Sprintf("%d", n)
			}
			return ticksToDuration(n).String()
		}
		rel := "at least"
		if name == "backoff-base" {
			rel = "at most"
		}
		return fairrelay.Policy{}, &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: name,
			Message: fmt.Sprintf("must be %s --%s (%s), got %s: give both", rel, other, shown(w), shown(v))}
	}
	return pol, pol.Validate()
}

// ticksToDuration reads a daemon tick count as the time it stands for.
func ticksToDuration(ticks int64) time.Duration { return time.Duration(ticks) * time.Millisecond }

// durationFlag is a duration flag ("30s", "1500ms") that explains a bare
// number instead of guessing its unit: the policy flags were in
// milliseconds once.
type durationFlag struct{ d *time.Duration }

func (f durationFlag) String() string {
	if f.d == nil {
		return "0s"
	}
	return f.d.String()
}

func (f durationFlag) Type() string { return "duration" }

func (f durationFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		if hint := durationHint(s); hint != "" {
			return errors.New(hint)
		}
		return err
	}
	*f.d = d
	return nil
}

// durationHint explains the two usual mistakes in a duration flag, or
// returns "": a bare number (which unit?) and days ("7d": Go's durations
// stop at hours), for every duration flag (durationFlag's and pflag's,
// through badValue) in the same words.
func durationHint(s string) string {
	if _, err := strconv.ParseInt(s, 10, 64); err == nil {
		return fmt.Sprintf("%q has no unit: give a duration such as 30s, 5m or 1500ms", s)
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.ParseFloat(days, 64); err == nil && n >= 0 {
			return fmt.Sprintf("%q: durations have no days; give hours: %gd is %gh", s, n, n*24)
		}
	}
	if durationSyntax.MatchString(s) {
		// Written as a duration, refused for its size: Go's "invalid
		// duration" for both made it "not a duration" (a breaker's
		// 9999999h).
		return fmt.Sprintf("%q is out of range: a duration is at most %s (about 292 years)", s, time.Duration(math.MaxInt64).Truncate(time.Second))
	}
	return ""
}

// durationSyntax matches what time.ParseDuration reads, whatever its size.
// Each unit needs a number before it ("1hh", "s" and ".s" are not
// durations: helper-171).
var durationSyntax = regexp.MustCompile(`^[-+]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`)

// secretEnv names the environment variable that relay and receive read the
// webhook secret from when --secret is not given: a command line is visible
// to every user of the machine (ps, /proc/*/cmdline), the environment is not.
const secretEnv = "FAIRRELAY_SECRET"

// secretFlag returns --secret when given, else $FAIRRELAY_SECRET. The
// variable set but empty is ErrInvalidInput naming it, as --secret "" is
// (refuseEmptyFlags): an empty secret would turn signing off without a
// word, say from an env file whose value was lost.
func secretFlag(cmd *cobra.Command, secret string) (string, error) {
	if cmd.Flags().Changed("secret") {
		return secret, nil
	}
	v, set := os.LookupEnv(secretEnv)
	if set && v == "" {
		return "", fairrelay.InvalidInput(secretEnv, "is set but empty, which would turn signing off: unset it, or set it to the secret")
	}
	return v, nil
}

// webhookKey is the HMAC key of --secret for command (relay, receive):
// webhook.ParseSecret's, refused when it is a list of secrets
// (checkSecretList), and warned of when short (warnShortSecret).
func webhookKey(log *slog.Logger, command, secret string) ([]byte, error) {
	key, err := webhook.ParseSecret(secret)
	if err != nil {
		return nil, err
	}
	if err := checkSecretList(log, "secret", secret); err != nil {
		return nil, err
	}
	warnShortSecret(log, command, key)
	return key, nil
}

// minSecretBytes is the shortest HMAC key relay and receive take without a
// warning: 16 bytes (128 bits); the Standard Webhooks libraries make keys
// of 24 to 64 random bytes.
const minSecretBytes = 16

// warnShortSecret logs a warning when key, the decoded webhook secret, is
// shorter than minSecretBytes: any non-empty string is a valid secret
// (sink/webhook.ParseSecret), so "secret" signed deliveries without a word
// while a malformed whsec_ value was refused (a fresh user's report). It
// warns rather than refuses, since both ends must change together.
func warnShortSecret(log *slog.Logger, command string, key []byte) {
	if len(key) < minSecretBytes {
		log.Warn(command+": the webhook secret is short: anyone who guesses it can forge deliveries; use at least 16 random bytes, e.g. whsec_ followed by the output of `openssl rand -base64 32`",
			"key_bytes", len(key), "want_at_least", minSecretBytes)
	}
}

// checkSecretList refuses a secret flag's value that is a comma-separated
// list of whsec_ secrets ("whsec_a,whsec_b"), which would be taken as one
// secret matching neither, and warns of any other comma in it: list flags
// elsewhere take commas (--permanent-status 400,404), so a rotation's
// --previous-secret old1,old2 was taken as one key and the relays still on
// either got 401 until their budget ran out (a fresh user's report).
func checkSecretList(log *slog.Logger, field, v string) error {
	if strings.Contains(v, ",whsec_") {
		return fairrelay.InvalidInput(field, "holds a comma-separated list of secrets: give --%s once per secret", field)
	}
	if strings.Contains(v, ",") {
		log.Warn("the secret holds a comma and is taken whole, as one secret; to give several, repeat --previous-secret", "flag", field)
	}
	return nil
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

// openReadOnlyQueue opens a queue store for a command that only reads
// (inspect): it must exist and be migrated by this version, and nothing is
// written — a newer binary's inspect does not migrate a store that older
// relays still run on (they would refuse it at their next start).
func openReadOnlyQueue(ctx context.Context, dsn string) (*fairrelay.Queue, error) {
	return openQueueConfig(ctx, dsn, fairrelay.Config{MustExist: true, AdoptStoredEntry: true, ReadOnly: true})
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
	var fe *fairrelay.Error
	if errors.As(err, &fe) && fe.Field != "" {
		return nil, err // it names its field ("inbox: inbox: …" otherwise)
	}
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
		ka, err1 := pgStoreKey(a)
		kb, err2 := pgStoreKey(b)
		return err1 == nil && err2 == nil && ka == kb
	}
	aa, err1 := filepath.Abs(a)
	bb, err2 := filepath.Abs(b)
	if err1 == nil && err2 == nil && aa == bb {
		return true
	}
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	if err1 == nil && err2 == nil && os.SameFile(sa, sb) {
		return true
	}
	// A symbolic link to a file not made yet (migrate --queue q.db --inbox
	// link-to-q.db made q.db, then failed on the link: a breaker's report).
	ra, rb := linkTarget(a), linkTarget(b)
	return ra != "" && ra == rb
}

// linkTarget returns p's absolute path with its last element's symbolic
// links followed, even to a file that does not exist yet; "" when that
// cannot be told.
func linkTarget(p string) string {
	for range 40 { // the kernel's own limit on links in a row
		t, err := os.Readlink(p)
		if err != nil {
			break
		}
		if !filepath.IsAbs(t) {
			t = filepath.Join(filepath.Dir(p), t)
		}
		p = t
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return ""
	}
	return abs
}

// isDir reports whether p is a directory.
func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// pgStoreKey names the store a PostgreSQL URL reaches as the server sees
// it, however the URL spells it: the server (host and port as pgconn reads
// them, host=, port= and dbname= parameters included; localhost, 127.0.0.1
// and ::1 as one loopback host), the database and the schema — schema=,
// else the first schema of search_path (a parameter in any case, or a -c
// setting of options), folded to lower case unless quoted, as the server
// folds an identifier; public for the server's default. A search_path whose
// first schema does not exist falls through to the next on the server,
// which the key cannot know.
func pgStoreKey(dsn string) (string, error) {
	// The store's own reading: schema= apart, the rest as pgx gets it.
	conn, schema, err := pgstore.ParseDSN(dsn)
	if err != nil {
		return "", err
	}
	cfg, err := pgconn.ParseConfig(conn)
	if err != nil {
		return "", err
	}
	if schema == "" {
		path := ""
		for k, v := range cfg.RuntimeParams {
			switch {
			case strings.EqualFold(k, "search_path"):
				path = v
			case strings.EqualFold(k, "options") && path == "":
				// -c search_path=x, --search_path=x, -csearch_path=x
				o := strings.ReplaceAll(v, "-", "_")
				if i := strings.Index(strings.ToLower(o), "search_path="); i >= 0 {
					path, _, _ = strings.Cut(v[i+len("search_path="):], " ")
				}
			}
		}
		first, _, _ := strings.Cut(path, ",")
		first = strings.TrimSpace(first)
		if unq, ok := strings.CutPrefix(first, `"`); ok {
			schema = strings.TrimSuffix(unq, `"`)
		} else {
			schema = strings.ToLower(first)
		}
		if schema == "" {
			// The server's default search_path, "$user", public: public
			// unless a schema named as the user exists. Counted as public,
			// so that the two spellings are one store (a false "same"
			// refuses a pair that would work; a false "different" lets
			// two commands share a store).
			schema = "public"
		}
	}
	host := cfg.Host
	switch host {
	case "localhost", "127.0.0.1", "::1":
		host = "loopback"
	}
	return fmt.Sprintf("%s\x00%d\x00%s\x00%s", host, cfg.Port, cfg.Database, schema), nil
}

// openQueueCreating opens the queue store of enqueue or relay, creating a
// missing SQLite file (or a store in an empty one) and saying which in
// created ("" when the store existed): a misspelt --queue then starts an
// empty store, and the command says so instead of working in silence. A
// PostgreSQL schema that holds no store is refused, not created
// (invalid_input naming queue; fairrelay migrate creates it): there a
// store lives among the application's own tables, in public when the URL
// names no schema=, and a misspelt schema would take events that no relay
// reads. An existing SQLite file that holds data but no store (another
// application's database: a misspelt path, or the application's own file
// before its outbox is made) is refused alike (a breaker's report: enqueue
// wrote the store's tables into it, saying the file "did not exist").
//
// rehearse, when not nil, is the command's first write: before a store is
// created for it, it runs on a new store of the same policy in a scratch
// directory, and its error is returned with nothing created (bad input
// changes nothing: an enqueue whose --at, id or body the store refuses
// left a new, empty store behind).
//
// With mustExist (relay --must-exist) a missing store is refused instead:
// invalid_input naming queue, nothing created.
func openQueueCreating(ctx context.Context, dsn string, pol fairrelay.Policy, pf *policyFlags, rehearse func(*fairrelay.Queue) error, mustExist bool) (q *fairrelay.Queue, created string, err error) {
	q, err = openExistingQueue(ctx, dsn, pol, pf)
	if err == nil || mustExist || !missingStore(err, "queue") || isPostgresURL(dsn) {
		return q, "", err
	}
	// Missing (or refused for another reason about the path, which the
	// second open reports the same way).
	created, err = creatingIn(ctx, dsn, "queue", "fairrelay migrate --queue")
	if err != nil {
		return nil, "", err
	}
	if rehearse != nil && created != "" {
		if err := rehearseOnScratch(ctx, pol, pf, rehearse); err != nil {
			return nil, "", err
		}
	}
	q, err = openQueue(ctx, dsn, pol, pf)
	if err != nil {
		return nil, "", err
	}
	if len(q.Migrated()) == 0 {
		created = "" // another process made it meanwhile
	}
	return q, created, nil
}

// rehearseOnScratch runs rehearse on a new queue store of policy pol in a
// scratch directory, removed afterwards, and returns rehearse's refusal of
// the input (invalid_input, clock_regressed): what the same write answers
// on a store about to be created (its tick 0, no event, no setting), so
// that a refused one creates nothing. Anything else — no temporary
// directory to write in (a read-only container), the scratch store's own
// errors — returns nil: the write then runs on the new store and answers
// there, as it did before the rehearsal.
func rehearseOnScratch(ctx context.Context, pol fairrelay.Policy, pf *policyFlags, rehearse func(*fairrelay.Queue) error) error {
	dir, err := os.MkdirTemp("", "fairrelay-rehearsal-")
	if err != nil {
		return nil
	}
	defer os.RemoveAll(dir)
	scratch, err := openQueue(ctx, filepath.Join(dir, "queue.db"), pol, pf)
	if err != nil {
		return nil
	}
	defer scratch.Close()
	err = rehearse(scratch)
	if errors.Is(err, fairrelay.ErrInvalidInput) || errors.Is(err, fairrelay.ErrClockRegressed) {
		return err
	}
	return nil
}

// logCreated is creatingIn's answer as the daemons log it: a new store
// is "created empty".
func logCreated(created string) string {
	if created == createdNew {
		return created + " empty"
	}
	return created
}

const createdNew = "did not exist and was created"

// migrationTable is the table that records a SQLite store's migrations,
// by creatingIn's field: the mark of a store of that kind.
var migrationTable = map[string]string{"queue": "fairrelay_migration", "inbox": inbox.MigrationTable}

// creatingIn says what creating the SQLite store of field ("queue" or
// "inbox") at path does: "did not exist and was created" for a new file,
// "was an empty database; a store was created in it" for one of 0 bytes
// or with no table (also a store another process is making: its first
// migration not committed yet). An existing database with tables of its
// own and no store is refused: invalid_input naming field, pointing at
// migrate (the command that makes a store in an existing database on
// purpose). A read of the file's tables that fails (but for a file that
// is not a database, which the open refuses) is an error, with nothing
// created: readTablesError.
func creatingIn(ctx context.Context, path, field, migrate string) (string, error) {
	st, err := os.Stat(path)
	switch {
	case err != nil:
		return createdNew, nil
	case st.IsDir():
		return "", nil // the open refuses it, saying so
	case st.Size() == 0:
		return "was an empty database; a store was created in it", nil
	}
	tables, marked, err := sqlitestore.HasTables(ctx, path, 5*time.Second, migrationTable[field])
	switch {
	case errors.Is(err, store.ErrNotDatabase), err == nil && !tables:
		// Not a database (the open says so), or an empty one.
		return "was an empty database; a store was created in it", nil
	case err != nil:
		// The tables could not be read (another process holds the file
		// under an exclusive lock, a signal): taken for an empty
		// database, the open wrote the store's tables into another
		// application's once the lock was released. Nothing is created.
		return "", readTablesError(path, err)
	case marked:
		// A store of this kind, or one another process is making now:
		// its migrations commit one by one, and one that saw the first
		// few was refused as another application's database (a
		// breaker's report: two processes starting on a new file). The
		// open applies the rest after that process's, in turn.
		return "", nil
	}
	return "", &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: field,
		Message: fmt.Sprintf("%s is a database that holds no %s store (another application's? a misspelt path?); to make one in it on purpose, run %s %s first", path, field, migrate, path)}
}

// readTablesError is creatingIn's error for a read of path's tables that
// failed: busy (a lock held past the busy timeout: a daemon starting waits
// it out, untilStoreAnswers) or a database error, the read's error in the
// chain (a signal's context.Canceled included).
func readTablesError(path string, err error) error {
	code := fairrelay.CodeDatabase
	if errors.Is(err, store.ErrBusy) {
		code = fairrelay.CodeBusy
	}
	return &fairrelay.Error{Code: code, Message: "read the tables of " + path + " (nothing was created)", Err: err}
}

// checkBothStores is what migrate and script check of their two store
// arguments before either store is made (a breaker's report: the queue
// store was made, then the inbox refused, with exit 2, "nothing
// changed"). First checkStorePaths; then each store is opened read-only,
// writing nothing:
//   - PostgreSQL: a server that does not answer (or refuses the user) is
//     the command's error now, and a store that does not exist yet in a
//     schema whose name is not lower case is refused as making it would be;
//   - SQLite, with foreign (script, not migrate, which makes a store in an
//     existing database on purpose): a database with tables of its own and
//     no store of the argument's kind is refused, as creatingIn refuses it
//     for enqueue, relay and receive (script added its tables to it).
//
// A store that exists, or one the open decides on (a migration to apply,
// another kind of store), passes.
func checkBothStores(ctx context.Context, queue, inboxDSN string, foreign bool) error {
	if err := checkStorePaths(queue, inboxDSN); err != nil {
		return err
	}
	for _, s := range []struct{ field, dsn string }{{"queue", queue}, {"inbox", inboxDSN}} {
		if s.dsn == "" || (!foreign && !isPostgresURL(s.dsn)) {
			continue
		}
		err := openWritingNothing(ctx, s.field, s.dsn)
		switch {
		case err == nil:
		case !isPostgresURL(s.dsn):
			if missingStore(err, s.field) {
				if _, err := creatingIn(ctx, s.dsn, s.field, "fairrelay migrate --"+s.field); err != nil {
					return err
				}
			}
		case missingStore(err, s.field):
			if _, schema, perr := pgstore.ParseDSN(s.dsn); perr == nil && schema != strings.ToLower(schema) {
				return fairrelay.InvalidInput(s.field, "schema %q holds no store, and a new store's schema is lower case: use schema=%s", schema, strings.ToLower(schema))
			}
		case errors.Is(err, fairrelay.ErrDatabase), errors.Is(err, fairrelay.ErrBusy):
			return err
		}
	}
	return nil
}

// openWritingNothing opens the store of field ("queue" or "inbox") at dsn
// read-only, as it must exist, closes it, and returns the open's error.
func openWritingNothing(ctx context.Context, field, dsn string) error {
	if field == "queue" {
		q, err := fairrelay.Open(ctx, dsn, fairrelay.Config{MustExist: true, ReadOnly: true, AdoptStoredEntry: true})
		if err == nil {
			q.Close()
		}
		return err
	}
	in, err := inbox.Open(ctx, dsn, inbox.Options{MustExist: true, ReadOnly: true})
	if err == nil {
		in.Close()
	}
	return err
}

// isPostgresURL reports whether dsn names a PostgreSQL store (as
// fairrelay.Open reads it).
func isPostgresURL(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// openInboxCreating opens receive's inbox, creating a missing SQLite file
// (or an inbox in an empty one), and says how in created ("" when it
// existed). A PostgreSQL schema that holds no inbox is refused, not
// created (invalid_input naming inbox; fairrelay migrate --inbox creates
// it), as openQueueCreating refuses a schema without a queue store: a
// misspelt schema= made a new, empty inbox that answered gap for every
// flow (a fresh user's report). With mustExist (receive --must-exist) a
// missing inbox is refused on SQLite too.
func openInboxCreating(ctx context.Context, dsn string, opts inbox.Options, mustExist bool) (in *inbox.Inbox, created string, err error) {
	opts.MustExist = true
	in, err = openInbox(ctx, dsn, opts)
	if err == nil || mustExist || !missingStore(err, "inbox") || isPostgresURL(dsn) {
		return in, "", err
	}
	// An existing SQLite file with data and no inbox is refused, as
	// openQueueCreating's.
	if created, err = creatingIn(ctx, dsn, "inbox", "fairrelay migrate --inbox"); err != nil {
		return nil, "", err
	}
	opts.MustExist = false
	in, err = openInbox(ctx, dsn, opts)
	if err != nil {
		return nil, "", err
	}
	if len(in.Migrated()) == 0 {
		created = "" // another process made it meanwhile
	}
	return in, created, nil
}

// missingStore reports whether err is Open's refusal, under MustExist, of
// the store named by field ("queue" or "inbox") because there is none:
// not any input error naming it (a store this process may not write was
// taken for a missing one, and its file for another application's).
func missingStore(err error, field string) bool {
	var fe *fairrelay.Error
	return errors.As(err, &fe) && fe.Code == fairrelay.CodeInvalidInput && fe.Field == field && errors.Is(err, store.ErrMissing)
}

// redactDSN hides the secrets of a postgres:// or http(s):// URL for logs
// and output: the password of its user, and the value of every query
// parameter whose name says it holds one (password, secret, token, key,
// sig…). A file path is returned as it is.
func redactDSN(dsn string) string {
	if !strings.Contains(dsn, "://") {
		return dsn
	}
	// The password first, as written: one holding '#' or '/' parses as
	// something else (a port, a fragment) that u.Redacted shows.
	u, err := url.Parse(sink.RedactURL(dsn))
	if err != nil {
		return "(a URL that does not parse)"
	}
	// The query pair by pair as written, not through url.Query, which
	// drops a pair holding a ';' or a bad escape — and with it the
	// redaction, so ?password=S3CR;x was shown whole (a breaker's report).
	if u.RawQuery != "" {
		pairs := strings.Split(u.RawQuery, "&")
		for i, pair := range pairs {
			key, _, _ := strings.Cut(pair, "=")
			if k, err := url.QueryUnescape(key); err == nil {
				key = k
			}
			lk := strings.ToLower(key)
			for _, s := range []string{"pass", "secret", "token", "key", "sig", "auth"} {
				if strings.Contains(lk, s) {
					k, _, _ := strings.Cut(pair, "=")
					pairs[i] = k + "=xxxxx"
					break
				}
			}
		}
		u.RawQuery = strings.Join(pairs, "&")
	}
	if u.Fragment != "" {
		// A '#' not encoded, in a value: what follows it may be a secret's.
		u.Fragment, u.RawFragment = "xxxxx", ""
	}
	return u.Redacted()
}

// checkStorePaths refuses, before a command that opens both a queue and
// an inbox creates either, a store argument that cannot become a store: a
// PostgreSQL URL that does not parse (a schema name it refuses), a SQLite
// path whose directory does not exist, a directory, or a file with data
// that is not a SQLite database (not_a_database naming the flag; a file
// shorter than a database's header is one). A file that cannot be read
// (an I/O error) is a database error with the read's error, not
// not_a_database. What else the open refuses — another kind of store, a
// database of another version, a server that does not answer — it
// refuses as before, after the first store may have been made.
func checkStorePaths(queue, inboxDSN string) error {
	for _, s := range []struct{ field, path string }{{"queue", queue}, {"inbox", inboxDSN}} {
		if s.path == "" {
			continue
		}
		if isPostgresURL(s.path) {
			if _, _, err := pgstore.ParseDSN(s.path); err != nil {
				return fairrelay.InvalidInput(s.field, "%v", err)
			}
			continue
		}
		st, err := os.Stat(s.path)
		if errors.Is(err, fs.ErrNotExist) {
			// The open would create the file, but not its directory (a
			// breaker's report: the queue was made, then the inbox's
			// missing directory refused).
			if dir := filepath.Dir(s.path); !isDir(dir) {
				return fairrelay.InvalidInput(s.field, "directory %s does not exist", dir)
			}
			continue
		}
		if err != nil {
			continue // the open says why
		}
		if st.IsDir() {
			return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: s.field, Message: s.path + " is a directory, not a store's file"}
		}
		if st.Size() == 0 {
			continue
		}
		f, err := os.Open(s.path)
		if err != nil {
			continue // the open says why
		}
		head := make([]byte, len(sqliteHeader))
		n, err := io.ReadFull(f, head)
		f.Close()
		switch {
		case n == 0 && errors.Is(err, io.EOF):
			continue // emptied since the stat: an empty file, as above
		case err != nil && !errors.Is(err, io.ErrUnexpectedEOF):
			// The disk's or the file system's error, not the file's
			// content: it was called "not a SQLite database".
			return &fairrelay.Error{Code: fairrelay.CodeDatabase, Message: "read " + s.path + " (nothing was created)", Err: err}
		}
		// A file shorter than the header (ErrUnexpectedEOF) holds data
		// and no database: SQLite refuses it too (SQLITE_NOTADB).
		if string(head[:n]) != sqliteHeader {
			return &fairrelay.Error{Code: fairrelay.CodeNotDatabase, Field: s.field, Message: s.path + " is not a SQLite database"}
		}
	}
	return nil
}

// sqliteHeader is how every SQLite database file begins.
const sqliteHeader = "SQLite format 3\x00"

// checkStdin refuses a standard input that cannot give lines — a directory
// (`< /some/dir`) — before a command that reads it opens, or creates, a
// store: invalid_input naming "stdin" (the read failed after the store was
// made, with no error code: a breaker's sweep).
func checkStdin(r io.Reader) error {
	f, ok := r.(*os.File)
	if !ok {
		return nil
	}
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: "stdin", Message: "is a directory: give the lines on standard input (< FILE or a pipe)"}
	}
	return nil
}

// requireFlags refuses a command line that leaves out one of the named
// flags: invalid_input naming the first missing one as its field, and
// every missing one in its message, so that one try shows them all.
func requireFlags(cmd *cobra.Command, names ...string) error {
	var missing []string
	for _, name := range names {
		if !cmd.Flags().Changed(name) {
			missing = append(missing, "--"+name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	give := missing[0]
	if n := len(missing); n > 1 {
		give = strings.Join(missing[:n-1], ", ") + " and " + missing[n-1]
	}
	return &fairrelay.Error{Code: fairrelay.CodeInvalidInput, Field: missing[0][2:], Message: "missing: give " + give}
}
