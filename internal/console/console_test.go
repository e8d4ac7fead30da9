package console_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/console"
	"github.com/a2ad/a2ad/mcpedge"
)

// clock is a settable time.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// fixture is a console whose tokens a real development-key Authenticator
// verifies, on a clock the test moves (codes live 60 s, sessions 8 h:
// too long to wait for).
func fixture(t *testing.T) (*httptest.Server, *clock, func(ttl time.Duration) string) {
	t.Helper()
	dir := t.TempDir()
	auth, err := mcpedge.NewAuthenticator(mcpedge.AuthConfig{}, dir, "http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Now()}
	c := console.New(console.Options{Now: clk.now, Admin: http.NotFoundHandler(), Verify: func(tok string) (console.Identity, error) {
		ti, err := auth.Verify(tok)
		if err != nil {
			return console.Identity{}, err
		}
		if !slices.Contains(ti.Scopes, mcpedge.ScopeAdmin) {
			return console.Identity{}, console.ErrNotAdmin
		}
		return console.Identity{Subject: ti.Extra["sub"].(string), Tenant: ti.Extra["tenant"].(string), Expires: ti.Expiration}, nil
	}})
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(srv.Close)
	mint := func(ttl time.Duration) string {
		tok, err := mcpedge.MintDevToken(dir, auth.Audience(), "op", "default", mcpedge.ScopeAdmin, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	return srv, clk, mint
}

func post(t *testing.T, srv *httptest.Server, path string, form url.Values, hdr map[string]string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

func code(t *testing.T, srv *httptest.Server, tok string) string {
	t.Helper()
	req, _ := http.NewRequest("POST", srv.URL+"/console/api/code", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ Code string }
	if resp.StatusCode != 200 {
		t.Fatalf("code: %d", resp.StatusCode)
	}
	_ = decode(resp, &out)
	return out.Code
}

// A one-time code is refused after CodeTTL, even unused.
func TestCodeExpires(t *testing.T) {
	srv, clk, mint := fixture(t)
	tok := mint(time.Hour)
	cd := code(t, srv, tok)
	clk.add(console.CodeTTL)
	if resp := post(t, srv, "/console/login", url.Values{"code": {cd}}, nil); resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
		t.Errorf("a code %s old: %d %v", console.CodeTTL, resp.StatusCode, resp.Cookies())
	}
	cd = code(t, srv, tok)
	clk.add(console.CodeTTL - time.Second)
	if resp := post(t, srv, "/console/login", url.Values{"code": {cd}}, nil); resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
		t.Errorf("a code 59 s old: %d", resp.StatusCode)
	}
}

// A session lasts SessionTTL at most, whatever its token's life.
func TestSessionLastsAtMostEightHours(t *testing.T) {
	srv, clk, mint := fixture(t)
	resp := post(t, srv, "/console/login", url.Values{"token": {mint(24 * time.Hour)}}, nil)
	cks := resp.Cookies()
	if resp.StatusCode != http.StatusSeeOther || len(cks) != 1 || cks[0].MaxAge != int(console.SessionTTL/time.Second) {
		t.Fatalf("login: %d %v", resp.StatusCode, cks)
	}
	get := func() int {
		req, _ := http.NewRequest("GET", srv.URL+"/console/api/session", nil)
		req.AddCookie(&http.Cookie{Name: console.CookieName, Value: cks[0].Value})
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	clk.add(console.SessionTTL - time.Second)
	if got := get(); got != http.StatusOK {
		t.Errorf("just before 8 h: %d", got)
	}
	clk.add(time.Second)
	if got := get(); got != http.StatusUnauthorized {
		t.Errorf("at 8 h: %d", got)
	}
}

func decode(resp *http.Response, v any) error { return json.NewDecoder(resp.Body).Decode(v) }
