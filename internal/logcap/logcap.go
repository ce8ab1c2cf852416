// Package logcap bounds how many lines of one kind a daemon logs at their
// level: Burst at once, then Rate a second; the lines over that go out at
// DEBUG instead, and the next line of the kind logged at its level says
// how many did. A daemon whose store fails under load would otherwise
// write a line per delivery, request or message: the relay's failed
// deliveries (an operator's drill: 223 WARN lines for a receiver down 8 s),
// the receiver's and the console's failed requests. Each kind has its own
// allowance, so the first line of a kind is always logged at its level,
// however many of another kind came before it.
package logcap

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Rate and Burst are the allowance of each kind of line: Burst at once,
// then Rate a second.
const (
	Rate  = rate.Limit(1)
	Burst = 20
)

// Cap counts the lines of each kind against its allowance. The zero value
// is not usable: make one with New. Safe for concurrent use.
type Cap struct {
	mu    sync.Mutex
	kinds map[string]*kind
}

type kind struct {
	lim   *rate.Limiter
	quiet int64 // lines over the allowance since the last one within it
}

// New returns a Cap with no line counted yet.
func New() *Cap { return &Cap{kinds: map[string]*kind{}} }

// Allow reports whether a line of kind k written at time at is within its
// allowance, to be logged at its level, and, when it is, how many lines of
// k were not (logged at DEBUG instead) since the last one that was: the
// caller says that count in the line. at is the caller's clock (the
// relay's, which a test moves by hand), read the same way each time.
func (c *Cap) Allow(k string, at time.Time) (ok bool, quiet int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	kc := c.kinds[k]
	if kc == nil {
		kc = &kind{lim: rate.NewLimiter(Rate, Burst)}
		c.kinds[k] = kc
	}
	if !kc.lim.AllowN(at, 1) {
		kc.quiet++
		return false, 0
	}
	quiet, kc.quiet = kc.quiet, 0
	return true, quiet
}

// NewHandler returns h with the lines at WARN and above capped by c (a
// fresh Cap when nil): a line's kind is its message and code(err) of its
// "err" attribute (the caller's error codes: fairrelay.CodeOf, which this
// package, below the root one, does not import), so that a store failing
// with a new code says so at once; a line over its kind's allowance goes
// to h at DEBUG (dropped when h leaves DEBUG out), and the next one within
// it carries key with how many did. Lines below WARN pass as they are.
func NewHandler(h slog.Handler, c *Cap, key string, code func(error) string) slog.Handler {
	if c == nil {
		c = New()
	}
	return &handler{h: h, c: c, key: key, code: code}
}

type handler struct {
	h    slog.Handler
	c    *Cap
	key  string
	code func(error) string
}

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.h.Enabled(ctx, l) }

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return h.h.Handle(ctx, r)
	}
	at := r.Time
	if at.IsZero() {
		at = time.Now()
	}
	ok, quiet := h.c.Allow(h.kindOf(r), at)
	switch {
	case !ok:
		if !h.h.Enabled(ctx, slog.LevelDebug) {
			return nil
		}
		r.Level = slog.LevelDebug
	case quiet > 0:
		r = r.Clone()
		r.AddAttrs(slog.Int64(h.key, quiet))
	}
	return h.h.Handle(ctx, r)
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	return &handler{h: h.h.WithAttrs(as), c: h.c, key: h.key, code: h.code}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{h: h.h.WithGroup(name), c: h.c, key: h.key, code: h.code}
}

// kindOf is r's message, with the code of its "err" attribute when it has
// one.
func (h *handler) kindOf(r slog.Record) string {
	k := r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key != "err" {
			return true
		}
		if err, ok := a.Value.Any().(error); ok {
			k += "\x00" + h.code(err)
		}
		return false
	})
	return k
}
