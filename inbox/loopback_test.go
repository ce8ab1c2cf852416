package inbox_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fairrelay/fairrelay/inbox"
)

// LoopbackOnly, the guard an unsigned receiver needs (fairrelay receive
// without --secret had it; a library user's Handler with Verify nil took a
// request with Host: evil.example.com and applied it): requests addressed to
// another host name, or cross-origin, never reach the handler.
func TestLoopbackOnlyServesOnlyThisMachineByName(t *testing.T) {
	t.Parallel()
	reached := 0
	h := inbox.LoopbackOnly(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached++ }))
	for _, c := range []struct {
		host, origin string
		want         int
		cause        string
	}{
		{"127.0.0.1:8080", "", http.StatusOK, ""},
		{"localhost:8080", "", http.StatusOK, ""},
		{"[::1]:8080", "", http.StatusOK, ""},
		{"LOCALHOST", "", http.StatusOK, ""},
		{"127.0.0.1:8080", "http://127.0.0.1:8080", http.StatusOK, ""},
		{"evil.example.com", "", http.StatusMisdirectedRequest, `"cause":"host"`},
		{"evil.example.com:8080", "http://evil.example.com:8080", http.StatusMisdirectedRequest, `"cause":"host"`},
		{"10.0.0.5:8080", "", http.StatusMisdirectedRequest, `"cause":"host"`},
		{"127.0.0.1:8080", "http://evil.example.com", http.StatusForbidden, `"cause":"origin"`},
		{"127.0.0.1:8080", "::not a url", http.StatusForbidden, `"cause":"origin"`},
	} {
		before := reached
		req := httptest.NewRequest(http.MethodPost, "http://"+c.host+"/", strings.NewReader(`{}`))
		req.Host = c.host
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		passed := reached > before
		if rec.Code != c.want || passed != (c.want == http.StatusOK) || !strings.Contains(rec.Body.String(), c.cause) {
			t.Errorf("Host %q, Origin %q: %d %q, handler reached %v; want %d with %s", c.host, c.origin, rec.Code, rec.Body.String(), passed, c.want, c.cause)
		}
	}
}
