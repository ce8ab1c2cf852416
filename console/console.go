// Package console is fairrelay's operator console: a small web
// application, rendered on the server with html/template (no JavaScript
// build; assets embedded), over the library's read views and operator
// actions (SPEC §2 redrive, §9 expedite, pause, resume).
//
// Pages: the overview (events by state, blocked flows, deliveries per
// second and delivery latency over the last hour, the oldest event not
// acked), flows (search by id prefix, keyset paging, why each is not
// moving), a flow (why it is not moving, its events by seq, keyset paging,
// each linked to its page), an event (body, state, attempt history, the
// actions that apply), the quarantine (filter, select many, redrive with one reason),
// the audit log and, with an inbox, the receiver's projection. Every page reads bounded
// ranges of indexes, so a page costs the same on a store of any size; the
// backlog, which PostgreSQL can only count by reading every flow, is
// counted in the background (backlogCount).
//
// Authentication: a token file (LoadTokens) with a sign-in form, or a
// header set by an authenticating proxy (Config.AuthHeader), or none on a
// loopback address (CheckAddr refuses other addresses without one).
// Read-only users see everything and act on nothing. Each action records
// the authenticated name as the audit operator, and needs the session's
// CSRF token; cookies are HttpOnly, SameSite=Strict, and Secure over TLS.
package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/loopback"
)

//go:embed templates/*.html static/*
var assets embed.FS

// Config configures a console.
type Config struct {
	// Queue is the queue the console shows and acts on (required).
	Queue *fairrelay.Queue
	// Inbox, when set, adds the receiver's projection page.
	Inbox *inbox.Inbox
	// Tokens, when set, requires signing in with a token of the file.
	Tokens *Tokens
	// AuthHeader, when set, trusts this request header (set by an
	// authenticating proxy in front of the console) to name the user. Only
	// configure it when every request comes through that proxy.
	AuthHeader string
	// ReadOnlyUsers are the users of AuthHeader who may only read.
	ReadOnlyUsers []string
	// LocalOperator names the operator when there is no authentication
	// (loopback only); "console" when empty.
	LocalOperator string
	// SecureCookies marks cookies Secure even on plain HTTP (behind a
	// proxy that terminates TLS); over TLS they always are.
	SecureCookies bool
	// Logger receives the console's log lines (slog.Default when nil).
	Logger *slog.Logger
	// Now is the wall clock (time.Now when nil).
	Now func() time.Time
}

// Server is the console's HTTP handler.
type Server struct {
	cfg      Config
	q        *fairrelay.Queue
	log      *slog.Logger
	now      func() time.Time
	tmpl     *template.Template
	mux      *http.ServeMux
	sessions *sessions
	readOnly map[string]bool
	backlog  *backlogCount
	msgKey   []byte // signs the result messages of actions (msgSig)
}

// New makes a console. Errors: a missing queue (field "queue"), an
// AuthHeader together with Tokens (field "auth-header"), a bad
// LocalOperator (field "operator").
func New(cfg Config) (*Server, error) {
	if cfg.Queue == nil {
		return nil, fairrelay.InvalidInput("queue", "missing")
	}
	if cfg.AuthHeader != "" && cfg.Tokens != nil {
		return nil, fairrelay.InvalidInput("auth-header", "give a token file or a proxy header, not both")
	}
	if cfg.AuthHeader != "" {
		if err := CheckAuthHeader(cfg.AuthHeader); err != nil {
			return nil, err
		}
	}
	if cfg.LocalOperator == "" {
		cfg.LocalOperator = "console"
	}
	if err := fairrelay.CheckID("operator", cfg.LocalOperator); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, q: cfg.Queue, log: cfg.Logger, now: cfg.Now,
		sessions: &sessions{m: map[string]*session{}, ttl: 12 * time.Hour}, readOnly: map[string]bool{}}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	for _, u := range cfg.ReadOnlyUsers {
		s.readOnly[u] = true
	}
	s.msgKey = make([]byte, 32)
	if _, err := rand.Read(s.msgKey); err != nil {
		return nil, err
	}
	s.backlog = &backlogCount{count: s.q.Backlog, now: s.now, timeout: time.Minute, wait: pageWait, log: s.log}
	s.backlog.view() // the first count, so that the first overview has one
	t, err := template.New("").Funcs(funcs).ParseFS(assets, "templates/*.html")
	if err != nil {
		return nil, err
	}
	s.tmpl = t
	m := http.NewServeMux()
	m.Handle("GET /static/", http.FileServerFS(assets))
	m.HandleFunc("/login", s.login)
	m.HandleFunc("POST /logout", s.logout)
	m.HandleFunc("GET /{$}", s.page("overview", s.overview))
	m.HandleFunc("GET /flows", s.page("flows", s.flows))
	m.HandleFunc("GET /event/{id}", s.page("event", s.event))
	m.HandleFunc("GET /event", s.page("event", s.event)) // ids "." and ".." (eventPath)
	m.HandleFunc("GET /flow/{flow}", s.page("flow", s.flow))
	m.HandleFunc("GET /flow", s.page("flow", s.flow)) // flows "." and ".." (flowPath)
	m.HandleFunc("GET /quarantine", s.page("quarantine", s.quarantine))
	m.HandleFunc("GET /groups", s.page("groups", s.groups))
	m.HandleFunc("GET /audit", s.page("audit", s.audit))
	m.HandleFunc("GET /inbox", s.page("inbox", s.inbox))
	m.HandleFunc("GET /inbox/held", s.page("held", s.held))
	m.HandleFunc("GET /inbox/waivers", s.page("waivers", s.waivers))
	m.HandleFunc("POST /action/{action}", s.act)
	s.mux = m
	return s, nil
}

// ServeHTTP serves the console.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'")
	w.Header().Set("Referrer-Policy", "same-origin")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if s.cfg.Tokens == nil && s.cfg.AuthHeader == "" && !LoopbackHost(r.Host) {
		// Without sign-in, the console trusts whoever reaches it, which
		// must be this machine: a page elsewhere that points its own host
		// name at 127.0.0.1 (DNS rebinding) must not be served.
		s.fail(w, r, http.StatusMisdirectedRequest, "this console has no sign-in and answers only to a loopback host name (localhost, 127.0.0.1, [::1]), not "+strconv.Quote(r.Host))
		return
	}
	if r.Method == http.MethodPost {
		if o := r.Header.Get("Origin"); o != "" && o != "null" {
			if u, err := url.Parse(o); err != nil || u.Host != r.Host {
				s.fail(w, r, http.StatusForbidden, "cross-origin request refused")
				return
			}
		}
	}
	s.mux.ServeHTTP(w, r)
}

// CheckAuthHeader checks Config.AuthHeader: an HTTP header field name, one
// or more token characters (RFC 9110 §5.1). A name no request can carry
// left the console answering every request 401 (a breaker's report).
// Errors: ErrInvalidInput naming "auth-header".
func CheckAuthHeader(name string) error {
	ok := name != ""
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
	}
	if !ok {
		return fairrelay.InvalidInput("auth-header", "%q is not an HTTP header name (letters, digits and !#$%%&'*+-.^_`|~ only)", name)
	}
	return nil
}

// LoopbackHost reports whether host (a request's Host, or a listen
// address's host, with or without a port) names this machine only:
// localhost or a loopback address, with or without a port.
func LoopbackHost(host string) bool { return loopback.Host(host) }

// ErrCertificate is in the chain of Serve's error when it could not load
// its certFile and keyFile (unreadable, not PEM, not a matching pair):
// it served nothing.
var ErrCertificate = errors.New("cannot load the TLS certificate and key")

// Serve serves the console on ln until ctx is done, then shuts down
// within 5 seconds, and returns nil. With certFile and keyFile it serves
// TLS, with the pair it loads when it starts. Errors (logged at error
// level too, "console: server stopped"): ErrCertificate (wrapped), or the
// server's when it stops on its own; ln is closed then.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, certFile, keyFile string, log *slog.Logger) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 60 * time.Second, IdleTimeout: 2 * time.Minute}
	if certFile != "" {
		// Loaded here, not by ServeTLS, so that a pair that cannot be
		// loaded says so (ErrCertificate) apart from a server's error.
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			ln.Close()
			err = fmt.Errorf("%w: %w", ErrCertificate, err)
			if log != nil {
				log.Error("console: server stopped", "err", err)
			}
			return err
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	var err error
	if certFile != "" {
		err = srv.ServeTLS(ln, "", "")
	} else {
		err = srv.Serve(ln)
	}
	if errors.Is(err, http.ErrServerClosed) {
		<-done
		return nil
	}
	if log != nil {
		log.Error("console: server stopped", "err", err)
	}
	return err
}

// view is what every page template gets.
type view struct {
	Title    string
	Nav      string
	User     User
	CSRF     string
	Auth     bool // signed in with a token: show sign-out
	Msg      string
	Path     string
	Data     any
	ReadOnly bool
}

// page wraps a read handler: authentication, then render its data.
func (s *Server) page(name string, load func(r *http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ss := s.identify(w, r)
		if ss == nil {
			if s.cfg.Tokens != nil {
				http.Redirect(w, r, "/login", http.StatusSeeOther)
				return
			}
			s.fail(w, r, http.StatusUnauthorized, "not authenticated: the proxy header "+s.cfg.AuthHeader+" is missing")
			return
		}
		data, err := load(r)
		if err != nil {
			s.failErr(w, r, err, "page", name)
			return
		}
		s.render(w, r, http.StatusOK, name, ss, data)
	}
}

func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name string, ss *session, data any) {
	nav := name
	if name == "held" || name == "waivers" {
		nav = "inbox"
	}
	v := view{Title: name, Nav: nav, Msg: s.shownMsg(r), Path: r.URL.RequestURI(), Data: data, Auth: s.cfg.Tokens != nil}
	if ss != nil {
		v.User, v.CSRF, v.ReadOnly = ss.user, ss.csrf, ss.user.ReadOnly
	}
	var b strings.Builder
	if err := s.tmpl.ExecuteTemplate(&b, name, v); err != nil {
		s.log.Error("console: render failed", "page", name, "err", err)
		http.Error(w, "internal error: see the console's log", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write([]byte(b.String()))
}

// fail answers an error page (plain text: it may come before any session).
func (s *Server) fail(w http.ResponseWriter, _ *http.Request, status int, msg string) {
	w.Header().Set("Cache-Control", "no-store")
	http.Error(w, msg, status)
}

// failErr answers err: bad input and not found with the library's message
// (about the request); busy as a 503 and anything else (a database error)
// as a 500, whose store text goes to the log only, with the context given
// (key, value pairs). An error that is the request's own context's (the
// client went away) is no failure: logged at info level, not answered.
func (s *Server) failErr(w http.ResponseWriter, r *http.Request, err error, context ...any) {
	if ctxErr := r.Context().Err(); ctxErr != nil && errors.Is(err, ctxErr) {
		// The client went away (a browser that navigated on while a read
		// waited for a lock): its own context ended the store's calls, and
		// nobody is left to answer. Not a failure of the store; what an
		// action did before is in the audit, and err says how far it got.
		s.log.Info("console: the client went away before its request was answered", append(context, "err", err)...)
		return
	}
	st := statusOf(err)
	if st == http.StatusServiceUnavailable {
		s.log.Warn("console: store busy", append(context, "err", err)...)
		s.fail(w, r, st, "the store is busy (a lock held too long): try again; see the console's log")
		return
	}
	if st != http.StatusInternalServerError {
		s.fail(w, r, st, err.Error())
		return
	}
	if errors.Is(err, fairrelay.ErrNotDatabase) {
		// The store's tables are gone (a schema dropped, a file replaced):
		// no retry cures it, and the store's own text ("relation flow does
		// not exist") did not say so (a fresh user's report).
		s.log.Error("console: the queue store is gone (its schema or tables dropped?): restart the console once it is restored from a backup", append(context, "err", err)...)
		s.fail(w, r, st, "the queue store is gone (its schema or tables dropped?): restart the console once it is restored from a backup; see the console's log")
		return
	}
	s.log.Error("console: request failed", append(context, "err", err)...)
	s.fail(w, r, st, "internal error: the store failed; see the console's log")
}

// statusOf maps a library error to an HTTP status: bad input 400, not
// found 404, busy 503, anything else (a database error) 500.
func statusOf(err error) int {
	switch {
	case errors.Is(err, fairrelay.ErrInvalidInput):
		return http.StatusBadRequest
	case errors.Is(err, fairrelay.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, fairrelay.ErrBusy):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// intParam reads an optional non-negative integer query parameter.
func intParam(r *http.Request, name string, def int64) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fairrelay.InvalidInput(name, "want a non-negative integer, got %q", v)
	}
	return n, nil
}

// boolParam reads an optional query parameter of "1" (true) or "0"
// (false; also when absent or empty).
func boolParam(r *http.Request, name string) (bool, error) {
	switch v := r.URL.Query().Get(name); v {
	case "", "0":
		return false, nil
	case "1":
		return true, nil
	default:
		return false, fairrelay.InvalidInput(name, "want 1 or 0, got %q", v)
	}
}

// localPath is back when it is a path of this site, else "/".
func localPath(back string) string {
	u, err := url.Parse(back)
	if err != nil || back == "" || u.IsAbs() || u.Host != "" || !strings.HasPrefix(back, "/") || strings.HasPrefix(back, "//") {
		return "/"
	}
	return back
}

// withMsg adds msg to path's query, signed (msgSig) so that the page
// shows it: an action's result, after its redirect.
func (s *Server) withMsg(path, msg string) string {
	u, _ := url.Parse(path)
	q := u.Query()
	q.Set("msg", msg)
	q.Set("msgsig", s.msgSig(msg))
	u.RawQuery = q.Encode()
	return u.String()
}

// msgSig is the signature of a page's msg: an HMAC-SHA256 under a key
// made at New, base64url. A page shows a msg only with its signature, so a
// link made elsewhere cannot make the console say what it did not do
// ("all events deleted").
func (s *Server) msgSig(msg string) string {
	m := hmac.New(sha256.New, s.msgKey)
	m.Write([]byte(msg))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// shownMsg is the request's msg when its signature is good, else "".
func (s *Server) shownMsg(r *http.Request) string {
	q := r.URL.Query()
	msg := q.Get("msg")
	if msg == "" || !hmac.Equal([]byte(q.Get("msgsig")), []byte(s.msgSig(msg))) {
		return ""
	}
	return msg
}
