package console

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/fairrelay/fairrelay"
)

// A token file holds one user a line: "NAME SHA256-HEX" for an operator
// (who may act) or "NAME SHA256-HEX readonly" for a read-only user; blank
// lines and lines starting with # are ignored. NAME follows
// fairrelay.CheckID's rule and becomes the audit operator of the user's
// actions; SHA256-HEX is the lowercase hex SHA-256 of the token (tokens
// are 32 random bytes, so a plain hash suffices). Only hashes are stored.

// RoleReadOnly marks a read-only user in a token file.
const RoleReadOnly = "readonly"

// User is an authenticated user of the console.
type User struct {
	// Name is the user's name, the audit operator of their actions.
	Name string
	// ReadOnly users may read every page but act on nothing.
	ReadOnly bool
}

// Tokens are the users of a token file, by token hash.
type Tokens struct {
	byHash map[[sha256.Size]byte]User
}

// LoadTokens reads a token file (format above). Errors name the file and
// line of a malformed entry, or say the file could not be read.
func LoadTokens(path string) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokens: %w", err)
	}
	defer f.Close()
	t := &Tokens{byHash: map[[sha256.Size]byte]User{}}
	names := map[string]bool{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if n == 1 {
			// A UTF-8 byte order mark (Notepad's) is not part of the
			// first name (a breaker's report: "name: format character
			// U+FEFF at byte 0", and token add refused the file too).
			line = strings.TrimPrefix(line, "\ufeff")
		}
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		u, h, err := parseTokenLine(line)
		if err != nil {
			return nil, fmt.Errorf("tokens: %s:%d: %w", path, n, err)
		}
		if names[u.Name] {
			return nil, fmt.Errorf("tokens: %s:%d: name %q appears twice", path, n, u.Name)
		}
		names[u.Name] = true
		t.byHash[h] = u
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("tokens: %s: %w", path, err)
	}
	return t, nil
}

func parseTokenLine(line string) (User, [sha256.Size]byte, error) {
	var h [sha256.Size]byte
	fs := strings.Fields(line)
	if len(fs) < 2 || len(fs) > 3 || (len(fs) == 3 && fs[2] != RoleReadOnly) {
		return User{}, h, errors.New(`want "NAME SHA256-HEX" or "NAME SHA256-HEX readonly"`)
	}
	if err := fairrelay.CheckID("name", fs[0]); err != nil {
		return User{}, h, err
	}
	b, err := hex.DecodeString(fs[1])
	if err != nil || len(b) != sha256.Size {
		return User{}, h, errors.New("hash: want 64 hex digits (a SHA-256)")
	}
	copy(h[:], b)
	return User{Name: fs[0], ReadOnly: len(fs) == 3}, h, nil
}

// Len is the number of users.
func (t *Tokens) Len() int { return len(t.byHash) }

// Lookup returns the user of a token; ok is false for an unknown token.
func (t *Tokens) Lookup(token string) (User, bool) {
	h := sha256.Sum256([]byte(token))
	u, ok := t.byHash[h]
	return u, ok
}

// AddToken appends a user to the token file at path (created 0600 when
// missing) and returns the new token, which is stored nowhere: only its
// hash is written. Errors: ErrInvalidInput naming "name" for a name that
// breaks fairrelay.CheckID's rule, holds white space (the file's separator)
// or starts with "#" (a comment line), or is in the file already; the file
// cannot be read or written. Nothing is written on an error.
func AddToken(path, name string, readOnly bool) (string, error) {
	if err := fairrelay.CheckID("name", name); err != nil {
		return "", err
	}
	// LoadTokens splits a line at white space and skips a line that
	// starts with "#": such a name would be written, and every later load
	// of the file would fail or lose the user (a breaker's report: one
	// "al ice" locked every user out of the console).
	if strings.ContainsFunc(name, unicode.IsSpace) {
		return "", fairrelay.InvalidInput("name", "%q holds white space, which separates a token file's fields", name)
	}
	if strings.HasPrefix(name, "#") {
		return "", fairrelay.InvalidInput("name", "%q starts with #, which makes a token file's line a comment", name)
	}
	sep := "" // what goes before the new line
	if _, err := os.Stat(path); err == nil {
		if _, err := LoadTokens(path); err != nil {
			return "", err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("tokens: %w", err)
		}
		if len(b) > 0 && b[len(b)-1] != '\n' {
			// A file written by hand without a last newline: appended
			// to, its last entry and the new one became one line that
			// no load takes (a breaker's report).
			sep = "\n"
		}
		for _, line := range strings.Split(strings.TrimPrefix(string(b), "\ufeff"), "\n") {
			if fs := strings.Fields(line); len(fs) > 0 && fs[0] == name {
				return "", fairrelay.InvalidInput("name", "%q is in %s already", name, path)
			}
		}
	}
	token := "frc_" + randomString(32)
	h := sha256.Sum256([]byte(token))
	line := name + " " + hex.EncodeToString(h[:])
	if readOnly {
		line += " " + RoleReadOnly
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return "", fmt.Errorf("tokens: %w", err)
	}
	if _, err := fmt.Fprint(f, sep+line+"\n"); err != nil {
		f.Close()
		return "", fmt.Errorf("tokens: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("tokens: %w", err)
	}
	return token, nil
}

// randomString is n random bytes, base64url without padding.
func randomString(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// CheckAddr refuses to serve on a non-loopback address without a way to
// authenticate (a token file or a trusted proxy header): anyone who can
// reach it could redrive. Errors name the field "addr".
func CheckAddr(addr string, cfg Config) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fairrelay.InvalidInput("addr", "want HOST:PORT, got %q", addr)
	}
	if cfg.Tokens != nil || cfg.AuthHeader != "" {
		return nil
	}
	if LoopbackHost(host) {
		return nil
	}
	if host == "" {
		host = "every interface"
	}
	return fairrelay.InvalidInput("addr", "%s is not a loopback address, and the console has no sign-in (fairrelay console and relay take --tokens FILE or --auth-header NAME; the demo's console is loopback only)", host)
}

// session is a signed-in browser: its user and its CSRF token.
type session struct {
	user    User
	csrf    string
	expires time.Time
}

// maxSessions bounds the sessions kept (clients that drop cookies make a
// new one on each request under a proxy header or without sign-in).
const maxSessions = 10000

// sessions are kept in memory: a restart signs everyone out.
type sessions struct {
	mu  sync.Mutex
	m   map[string]*session
	ttl time.Duration
}

func (s *sessions) create(u User, now time.Time) (string, *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, ss := range s.m {
		if now.After(ss.expires) {
			delete(s.m, id)
		}
	}
	// Bounded: past maxSessions, some session (the map's choice) goes.
	for id := range s.m {
		if len(s.m) < maxSessions {
			break
		}
		delete(s.m, id)
	}
	id := randomString(32)
	ss := &session{user: u, csrf: randomString(32), expires: now.Add(s.ttl)}
	s.m[id] = ss
	return id, ss
}

func (s *sessions) get(id string, now time.Time) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.m[id]
	if ss == nil || now.After(ss.expires) {
		return nil
	}
	return ss
}

func (s *sessions) drop(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
}

const (
	sessionCookie = "fr_console"
	loginCookie   = "fr_login"
)

func (s *Server) setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: "/", MaxAge: maxAge, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil || s.cfg.SecureCookies})
}

// identify finds the session of a request, making one when the console
// trusts a proxy header or runs without authentication (loopback). nil
// when the request is not authenticated.
func (s *Server) identify(w http.ResponseWriter, r *http.Request) *session {
	now := s.now()
	var ss *session
	if c, err := r.Cookie(sessionCookie); err == nil {
		ss = s.sessions.get(c.Value, now)
	}
	var want User
	switch {
	case s.cfg.AuthHeader != "":
		name := strings.TrimSpace(r.Header.Get(s.cfg.AuthHeader))
		if name == "" || fairrelay.CheckID("operator", name) != nil {
			return nil
		}
		want = User{Name: name, ReadOnly: s.readOnly[name]}
	case s.cfg.Tokens != nil:
		return ss
	default:
		want = User{Name: s.cfg.LocalOperator}
	}
	if ss != nil && ss.user == want {
		return ss
	}
	id, ss := s.sessions.create(want, now)
	s.setCookie(w, r, sessionCookie, id, int(s.sessions.ttl/time.Second))
	return ss
}

// checkCSRF compares the form's csrf field with the session's.
func checkCSRF(r *http.Request, ss *session) bool {
	got := r.PostFormValue("csrf")
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(ss.csrf)) == 1
}

// login shows the sign-in form (GET) or checks a token (POST). The form
// carries a CSRF token of its own, double-submitted in a cookie.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Tokens == nil {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	if r.Method == http.MethodPost {
		c, err := r.Cookie(loginCookie)
		form := r.PostFormValue("csrf")
		if err != nil || form == "" || subtle.ConstantTimeCompare([]byte(c.Value), []byte(form)) != 1 {
			s.fail(w, r, http.StatusForbidden, "csrf: the sign-in form expired; load it again")
			return
		}
		u, ok := s.cfg.Tokens.Lookup(strings.TrimSpace(r.PostFormValue("token")))
		if !ok {
			s.log.Warn("console: sign-in refused", "remote", r.RemoteAddr)
			s.render(w, r, http.StatusUnauthorized, "login", nil, s.loginPage(w, r, "token: unknown token"))
			return
		}
		id, _ := s.sessions.create(u, s.now())
		s.setCookie(w, r, sessionCookie, id, int(s.sessions.ttl/time.Second))
		s.setCookie(w, r, loginCookie, "", -1)
		s.log.Info("console: signed in", "user", u.Name, "readonly", u.ReadOnly)
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	s.render(w, r, http.StatusOK, "login", nil, s.loginPage(w, r, ""))
}

type loginData struct {
	CSRF, Error string
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request, msg string) loginData {
	tok := randomString(24)
	s.setCookie(w, r, loginCookie, tok, 3600)
	return loginData{CSRF: tok, Error: msg}
}

// logout ends the session (a POST with its CSRF token).
func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	ss := s.identify(w, r)
	if ss == nil || !checkCSRF(r, ss) {
		s.fail(w, r, http.StatusForbidden, "csrf: missing or wrong token")
		return
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		s.sessions.drop(c.Value)
	}
	s.setCookie(w, r, sessionCookie, "", -1)
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}
