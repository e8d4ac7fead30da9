package daemon_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/console"
	"github.com/a2ad/a2ad/mcpedge"
)

// consoleClient talks to a live daemon's console as a browser would, with
// the session cookie set by hand (net/http's cookie jar keeps Secure
// cookies off http://, which browsers send to 127.0.0.1).
type consoleClient struct {
	t      *testing.T
	base   string
	cookie string
	key    string // the page key, sent in console.KeyHeader unless hdr names it ("" there: none)
}

func noRedirect() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (c *consoleClient) do(method, path string, body io.Reader, hdr map[string]string) (*http.Response, string) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if c.cookie != "" {
		req.Header.Set("Cookie", console.CookieName+"="+c.cookie)
	}
	if _, named := hdr[console.KeyHeader]; c.key != "" && !named {
		req.Header.Set(console.KeyHeader, c.key)
	}
	for k, v := range hdr {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	resp, err := noRedirect().Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// login posts a pasted token (form=token) or a code (form=code).
func (c *consoleClient) login(field, value string, hdr map[string]string) (*http.Response, string) {
	c.t.Helper()
	h := map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Sec-Fetch-Site": "same-origin"}
	for k, v := range hdr {
		h[k] = v
	}
	return c.do("POST", "/console/login", strings.NewReader(url.Values{field: {value}}.Encode()), h)
}

func sessionCookie(resp *http.Response) *http.Cookie {
	for _, ck := range resp.Cookies() {
		if ck.Name == console.CookieName {
			return ck
		}
	}
	return nil
}

func errCode(t *testing.T, body string) string {
	t.Helper()
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("not a JSON error: %q", body)
	}
	return e.Error.Code
}

// TestConsoleRefusals checks every refusal of the console against a live
// daemon whose tokens come from an identity provider: no session, a token
// without a2a:admin, a cross-site login, a missing or wrong page key (the
// cookie alone, as a page on another port of this host gets it), a
// cross-site change, two session cookies, a reused one-time code, an
// expired session; and the exact CSP and cookie attributes an operator's
// browser relies on.
func TestConsoleRefusals(t *testing.T) {
	p := startIDP(t)
	c := &consoleClient{t: t, base: p.s.d.HTTPURL}

	resp, _ := c.do("GET", "/console/", nil, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/login" {
		t.Fatalf("no session: %d %q, want 303 to /console/login", resp.StatusCode, resp.Header.Get("Location"))
	}
	if got := resp.Header.Get("Content-Security-Policy"); got != "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'" {
		t.Errorf("CSP: %q", got)
	}
	for h, want := range map[string]string{"X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin", "X-Frame-Options": "DENY", "Cache-Control": "no-store"} {
		if got := resp.Header.Get(h); got != want {
			t.Errorf("%s: %q, want %q", h, got, want)
		}
	}
	if resp, body := c.do("GET", "/console/api/v1/tasks", nil, nil); resp.StatusCode != http.StatusUnauthorized || errCode(t, body) != "not_logged_in" {
		t.Errorf("API without a session: %d %s", resp.StatusCode, body)
	}
	if resp, body := c.do("GET", "/console/login", nil, nil); resp.StatusCode != http.StatusOK || !strings.Contains(body, `<form id="token-form" method="post" action="/console/login">`) ||
		strings.Contains(body, "<script>") {
		t.Errorf("login page: %d %s", resp.StatusCode, body)
	}
	// A link's code is posted by itself only on a page the operator opened
	// (red team: a page navigating a browser to its own link logged it in).
	for site, want := range map[string]bool{"none": true, "same-origin": true, "cross-site": false, "same-site": false, "": false} {
		_, body := c.do("GET", "/console/login", nil, map[string]string{"Sec-Fetch-Site": site})
		if got := strings.Contains(body, `<body data-autopost="1">`); got != want {
			t.Errorf("login page with Sec-Fetch-Site %q: auto-post %v, want %v", site, got, want)
		}
	}

	// Logins refused.
	if resp, body := c.login("token", p.sign(t, claims("alice", "default", mcpedge.ScopeRead)), nil); resp.StatusCode != http.StatusUnauthorized ||
		!strings.Contains(body, "Token refused: the token has no scope a2a:admin") || sessionCookie(resp) != nil {
		t.Errorf("login with a read token: %d %v %s", resp.StatusCode, resp.Cookies(), body)
	}
	if resp, body := c.login("token", "not-a-jwt", nil); resp.StatusCode != http.StatusUnauthorized ||
		!strings.Contains(body, "Token refused: invalid token: ") || sessionCookie(resp) != nil {
		t.Errorf("login with garbage: %d %s", resp.StatusCode, body)
	}
	admin := p.sign(t, claims("alice", "default", mcpedge.ScopeAdmin))
	if resp, body := c.login("token", admin, map[string]string{"Sec-Fetch-Site": "cross-site"}); resp.StatusCode != http.StatusForbidden ||
		errCode(t, body) != "cross_origin" || sessionCookie(resp) != nil {
		t.Errorf("cross-site login: %d %s", resp.StatusCode, body)
	}

	// A pasted token.
	resp, body := c.login("token", admin, nil)
	ck := sessionCookie(resp)
	loc := regexp.MustCompile(`^/console/#key=([A-Za-z0-9_-]{43})$`).FindStringSubmatch(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusSeeOther || loc == nil || ck == nil {
		t.Fatalf("login: %d %q %s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	raw := resp.Header.Get("Set-Cookie")
	if !regexp.MustCompile(`^__Host-a2ad_console=[A-Za-z0-9_-]{43}; Path=/; Max-Age=(3599|3600); HttpOnly; Secure; SameSite=Strict$`).MatchString(raw) {
		t.Errorf("Set-Cookie: %q", raw)
	}
	if strings.Contains(raw, admin) || strings.Contains(body, admin) || strings.Contains(raw, loc[1]) {
		t.Error("the token is in the cookie or the page, or the key in the cookie")
	}
	c.cookie = ck.Value
	// The cookie alone — what a page on another port of this host gets,
	// since cookies do not separate ports (red team) — is no session.
	for path, hdr := range map[string]map[string]string{
		"/console/api/session":          {console.KeyHeader: ""},
		"/console/api/v1/tasks":         {console.KeyHeader: ""},
		"/console/api/v1/tasks?limit=1": {console.KeyHeader: strings.Repeat("A", 43)},
	} {
		if resp, body := c.do("GET", path, nil, hdr); resp.StatusCode != http.StatusUnauthorized || errCode(t, body) != "console_key_invalid" {
			t.Errorf("GET %s with the cookie and key %q: %d %s, want 401 console_key_invalid", path, hdr[console.KeyHeader], resp.StatusCode, body)
		}
	}
	c.key = loc[1]
	resp, body = c.do("GET", "/console/api/session", nil, nil)
	var sess map[string]any
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &sess) != nil || sess["subject"] != "alice" || sess["tenant"] != "default" || len(sess) != 3 {
		t.Fatalf("session: %d %s, want subject, tenant and expires_at", resp.StatusCode, body)
	}
	// Two session cookies (one planted by another port's page, with a
	// longer path) are refused, never the first one taken.
	if resp, body := c.do("GET", "/console/api/v1/tasks", nil, map[string]string{"Cookie": console.CookieName + "=planted; " + console.CookieName + "=" + c.cookie}); resp.StatusCode != http.StatusBadRequest || errCode(t, body) != "cookie_conflict" {
		t.Errorf("two session cookies: %d %s, want 400 cookie_conflict", resp.StatusCode, body)
	}
	// The watch stream takes the key as a query parameter (EventSource
	// sends no headers), which the admin API never sees.
	if resp, _ := c.do("GET", "/console/api/v1/tasks/watch?state=bogus&"+console.KeyParam+"="+c.key, nil, map[string]string{console.KeyHeader: ""}); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("watch with the key in the query: %d, want the admin API's 400 for state=bogus", resp.StatusCode)
	}
	if resp, body := c.do("GET", "/console/", nil, nil); resp.StatusCode != http.StatusOK || !strings.Contains(body, `<script src="/console/assets/app.js" defer></script>`) {
		t.Errorf("the application: %d %s", resp.StatusCode, body)
	}

	// Changes: CSRF token and same-origin, else 403 and nothing changed.
	quarantine := func(hdr map[string]string) (*http.Response, string) {
		h := map[string]string{"Content-Type": "application/json"}
		for k, v := range hdr {
			h[k] = v
		}
		return c.do("POST", "/console/api/v1/agents/fraud-review/quarantine", strings.NewReader(`{"reason":"console test"}`), h)
	}
	for name, hdr := range map[string]map[string]string{
		"no key":                 {"Sec-Fetch-Site": "same-origin", console.KeyHeader: ""},
		"another key":            {"Sec-Fetch-Site": "same-origin", console.KeyHeader: strings.Repeat("A", 43)},
		"cross-site":             {"Sec-Fetch-Site": "cross-site"},
		"same-site, not origin":  {"Sec-Fetch-Site": "same-site"},
		"another Origin":         {"Origin": "http://evil.example"},
		"another Origin, no SFS": {"Origin": "http://127.0.0.1:1"},
	} {
		resp, body := quarantine(hdr)
		status, want := http.StatusForbidden, ""
		if strings.Contains(name, "key") {
			status, want = http.StatusUnauthorized, "console_key_invalid"
		}
		if resp.StatusCode != status || (want != "" && errCode(t, body) != want) {
			t.Errorf("%s: %d %s", name, resp.StatusCode, body)
		}
	}
	if resp, body := c.do("GET", "/console/api/v1/agents/fraud-review", nil, nil); resp.StatusCode != http.StatusOK || !strings.Contains(body, `"status": "approved"`) {
		t.Fatalf("after refused changes the agent is not approved: %d %s", resp.StatusCode, body)
	}
	if resp, body := quarantine(map[string]string{"Sec-Fetch-Site": "same-origin"}); resp.StatusCode != http.StatusOK ||
		!strings.Contains(body, `"status": "quarantined"`) {
		t.Fatalf("quarantine with the key: %d %s", resp.StatusCode, body)
	}
	// The operator is the token's subject.
	if resp, body := c.do("GET", "/console/api/v1/audit?kind=agent.quarantined", nil, nil); resp.StatusCode != http.StatusOK ||
		!strings.Contains(body, `"subject":"alice"`) && !strings.Contains(body, `"subject": "alice"`) {
		t.Errorf("audit of the console's quarantine: %d %s", resp.StatusCode, body)
	}

	// One-time codes.
	code := func(tok string) (*http.Response, string) {
		h := map[string]string{}
		if tok != "" {
			h["Authorization"] = "Bearer " + tok
		}
		return (&consoleClient{t: t, base: c.base}).do("POST", "/console/api/code", nil, h)
	}
	if resp, body := code(""); resp.StatusCode != http.StatusUnauthorized || errCode(t, body) != "unauthorized" {
		t.Errorf("code without a token: %d %s", resp.StatusCode, body)
	}
	if resp, body := code(p.sign(t, claims("bob", "default", mcpedge.ScopeRead))); resp.StatusCode != http.StatusUnauthorized || errCode(t, body) != "invalid_token" {
		t.Errorf("code with a read token: %d %s", resp.StatusCode, body)
	}
	resp, body = code(admin)
	var cd struct{ Code string }
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &cd) != nil || len(cd.Code) != 43 || strings.Contains(body, admin) {
		t.Fatalf("code: %d %s", resp.StatusCode, body)
	}
	fresh := &consoleClient{t: t, base: c.base}
	if resp, _ := fresh.login("code", cd.Code, nil); resp.StatusCode != http.StatusSeeOther || sessionCookie(resp) == nil {
		t.Fatalf("login with the code: %d", resp.StatusCode)
	}
	if resp, body := fresh.login("code", cd.Code, nil); resp.StatusCode != http.StatusUnauthorized || sessionCookie(resp) != nil ||
		!strings.Contains(body, "unknown, already used or expired") {
		t.Errorf("the code again: %d %s", resp.StatusCode, body)
	}

	// Logout ends the session (with the key only).
	if resp, _ := c.do("POST", "/console/logout", nil, map[string]string{"Sec-Fetch-Site": "same-origin", console.KeyHeader: ""}); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("logout without the key: %d", resp.StatusCode)
	}
	if resp, _ := c.do("POST", "/console/logout", nil, map[string]string{"Sec-Fetch-Site": "same-origin"}); resp.StatusCode != http.StatusOK {
		t.Errorf("logout: %d", resp.StatusCode)
	}
	if resp, _ := c.do("GET", "/console/api/session", nil, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("session after logout: %d", resp.StatusCode)
	}

	// A session ends with its token.
	short := claims("alice", "default", mcpedge.ScopeAdmin)
	short["exp"] = time.Now().Add(2 * time.Second).Unix()
	resp, _ = c.login("token", p.sign(t, short), nil)
	if ck := sessionCookie(resp); ck == nil || ck.MaxAge < 0 || ck.MaxAge > 2 {
		t.Fatalf("short token's cookie: %v", resp.Cookies())
	} else {
		c.cookie, c.key = ck.Value, strings.TrimPrefix(resp.Header.Get("Location"), "/console/#key=")
	}
	time.Sleep(time.Until(time.Unix(short["exp"].(int64), 0)) + 100*time.Millisecond)
	if resp, body := c.do("GET", "/console/api/v1/tasks", nil, nil); resp.StatusCode != http.StatusUnauthorized || errCode(t, body) != "not_logged_in" {
		t.Errorf("expired session: %d %s", resp.StatusCode, body)
	}
}
