package main

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/store"
	"github.com/fairrelay/fairrelay/internal/store/pgstore"
)

// startBackoff bounds the pause between a daemon's tries to reach its
// store at start: from startBackoffMin, doubling, up to startBackoffMax.
const (
	startBackoffMin = 250 * time.Millisecond
	startBackoffMax = 5 * time.Second
)

// untilStoreAnswers runs step (a daemon's open of its store, or its first
// read) until it succeeds, or fails for a reason waiting cannot cure, or
// ctx ends (a stop signal): a store that is busy (a lock held past the lock
// timeout: a migration, a VACUUM FULL) or a database server that cannot be
// reached or is restarting is waited for, as a running daemon waits for
// it, instead of exiting 2 into a supervisor's crash loop (an SRE's
// report). It logs at WARN when it starts waiting and again once a minute,
// and at INFO when the store answers. Any other error (bad input, refused
// credentials, a schema with no store, a file that is not a database) is
// returned at once, as is ctx's error when a signal stops the wait.
func untilStoreAnswers(ctx context.Context, log *slog.Logger, what string, step func() error) error {
	delay := startBackoffMin
	var since, told time.Time
	for {
		err := step()
		if err == nil {
			if !since.IsZero() {
				log.Info(what+": the store answers", "waited", time.Since(since).Round(time.Millisecond))
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !waitable(err) {
			return err
		}
		now := time.Now()
		if since.IsZero() {
			since = now
		}
		if told.IsZero() || now.Sub(told) >= time.Minute {
			told = now
			log.Warn(what+": the store does not answer yet; trying again until it does (a signal stops)", "err", err, "waiting", now.Sub(since).Round(time.Second))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, startBackoffMax)
	}
}

// waitable reports whether err, from opening or first reading a store,
// is one that passes by itself: busy (SPEC §2: nothing changed, try again),
// the store's disk full (store.ErrStorage: freeing space cures it),
// the server unreachable or refusing connections for now (starting, shutting
// down, too many connections), or a connection lost on the way.
func waitable(err error) bool {
	switch {
	case errors.Is(err, fairrelay.ErrBusy), errors.Is(err, store.ErrServer), errors.Is(err, store.ErrStorage):
		return true
	case !errors.Is(err, fairrelay.ErrDatabase):
		return false
	}
	return pgstore.ConnectionLost(err)
}

// errStarting is /readyz's answer while a daemon has not started yet.
var errStarting = errors.New("starting: the store is not open yet (see the log)")

// earlyProbes are a daemon's /metrics, /healthz and /readyz, served from
// the moment its ports are bound, before its store is open: /readyz answers
// errStarting until set gives the daemon's own check, and /healthz answers
// from the start, so a liveness probe does not kill a daemon that waits
// for its store.
type earlyProbes struct {
	check       atomic.Pointer[func(context.Context) error]
	stopServing func() // nil without --metrics-addr
}

func (p *earlyProbes) set(f func(context.Context) error) { p.check.Store(&f) }

func (p *earlyProbes) ready(ctx context.Context) error {
	if f := p.check.Load(); f != nil {
		return (*f)(ctx)
	}
	return errStarting
}

func (p *earlyProbes) stop() {
	if p.stopServing != nil {
		p.stopServing()
	}
}

// serveProbesEarly serves /metrics, /healthz and /readyz (starting, until
// set) on --metrics-addr, when given, before the daemon opens its store;
// reg is nil without it. A server that stops on an error calls fail
// (serveMetrics). Errors: the address's (invalid_input naming
// metrics-addr).
func serveProbesEarly(metricsAddr string, log *slog.Logger, fail func(what string, err error)) (*prometheus.Registry, *earlyProbes, error) {
	p := &earlyProbes{}
	if metricsAddr == "" {
		return nil, p, nil
	}
	ln, err := listenOn("metrics-addr", metricsAddr)
	if err != nil {
		return nil, p, err
	}
	reg := newMetricsRegistry()
	p.stopServing = serveMetrics(ln, reg, p.ready, log, fail)
	return reg, p, nil
}

// openInboxWaiting is openInboxCreating, waiting while the inbox's
// database does not answer (untilStoreAnswers); a signal during the wait
// ends it with context.Canceled (stoppedBeforeStart: a stop, exit 0). It
// logs an inbox it created (a warning: a misspelt --inbox makes one) or
// migrated (an upgrade's, said as migrate says it; an SRE's drill: the
// receiver migrated its inbox without a word).
func openInboxWaiting(ctx context.Context, dsn string, opts inbox.Options, mustExist bool, log *slog.Logger) (*inbox.Inbox, error) {
	var in *inbox.Inbox
	var created string
	err := untilStoreAnswers(ctx, log, "receive", func() (err error) {
		in, created, err = openInboxCreating(ctx, namedFor(dsn, "receive"), opts, mustExist)
		return err
	})
	if err != nil {
		return nil, err
	}
	if created != "" {
		log.Warn("receive: the inbox "+logCreated(created)+"; if --inbox is misspelt, stop and fix it", "inbox", redactDSN(dsn))
	} else if m := in.Migrated(); len(m) > 0 {
		log.Info("receive: migrated the inbox", "inbox", redactDSN(dsn), "applied", versionList(m))
	}
	return in, nil
}

// namedFor is dsn with application_name set to "fairrelay " + command (a
// daemon's connections named apart in pg_stat_activity: relays, receivers
// and consoles all showed as "fairrelay", so a query that terminated one
// kind's connections hit the others too: an SRE's report), when dsn is a
// PostgreSQL URL that names none (in any case of the key); dsn as it is
// otherwise. The URL's own name wins.
func namedFor(dsn, command string) string {
	if !isPostgresURL(dsn) {
		return dsn
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn // the open refuses it, saying why
	}
	for k := range u.Query() {
		if strings.EqualFold(k, "application_name") {
			return dsn
		}
	}
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	// %20, not QueryEscape's +: pgx reads a + in the URL as itself.
	return dsn + sep + "application_name=" + url.PathEscape("fairrelay "+command)
}
