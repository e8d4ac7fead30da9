package console_test

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
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
func fixture(t *testing.T) (*httptest.Server, *clock, func(ttl time.Duration, sub ...string) string) {
	t.Helper()
	return fixtureWith(t, http.NotFoundHandler())
}

// fixtureWith is fixture with admin as the admin API; mint's optional
// sub is the token's subject (default "op").
func fixtureWith(t *testing.T, admin http.Handler) (*httptest.Server, *clock, func(ttl time.Duration, sub ...string) string) {
	t.Helper()
	dir := t.TempDir()
	auth, err := mcpedge.NewAuthenticator(mcpedge.AuthConfig{}, dir, "http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Now()}
	c := console.New(console.Options{Now: clk.now, Admin: admin, Verify: func(tok string) (console.Identity, error) {
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
	mint := func(ttl time.Duration, sub ...string) string {
		tok, err := mcpedge.MintDevToken(dir, auth.Audience(), cmp.Or(append(sub, "op")...), "default", mcpedge.ScopeAdmin, ttl)
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
	for _, ck := range resp.Cookies() { // a login: remember the session's page key
		if k, ok := strings.CutPrefix(resp.Header.Get("Location"), "/console/#key="); ok && ck.Name == console.CookieName {
			keys.Store(ck.Value, k)
		}
	}
	return resp
}

// keys maps each session id a test logged in with to its page key.
var keys sync.Map

func keyOf(sid string) string {
	k, _ := keys.Load(sid)
	s, _ := k.(string)
	return s
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
		req.Header.Set(console.KeyHeader, keyOf(cks[0].Value))
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

// sessionOf is the subject of the session cookie sid, or the status of
// GET /console/api/session when it is not 200.
func sessionOf(t *testing.T, srv *httptest.Server, sid string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", srv.URL+"/console/api/session", nil)
	req.AddCookie(&http.Cookie{Name: console.CookieName, Value: sid})
	req.Header.Set(console.KeyHeader, keyOf(sid))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return strconv.Itoa(resp.StatusCode)
	}
	var out struct{ Subject string }
	_ = decode(resp, &out)
	return out.Subject
}

// login posts form (with cookie sid when not empty) and returns the
// status and the new session's cookie value ("" without one).
func login(t *testing.T, srv *httptest.Server, form url.Values, sid string) (int, string) {
	t.Helper()
	hdr := map[string]string{}
	if sid != "" {
		hdr["Cookie"] = console.CookieName + "=" + sid
	}
	resp := post(t, srv, "/console/login", form, hdr)
	for _, ck := range resp.Cookies() {
		if ck.Name == console.CookieName {
			return resp.StatusCode, ck.Value
		}
	}
	return resp.StatusCode, ""
}

// One token logging in again and again (a script, an attacker with one
// admin token) replaces its own oldest sessions past
// MaxSessionsPerSubject: it cannot fill the console and lock others out
// (red team: 995 logins with one token left every other operator 503 for
// the token's life).
func TestOneSubjectCannotFillTheConsole(t *testing.T) {
	srv, _, mint := fixture(t)
	tok := mint(time.Hour, "flooder")
	var sids []string
	for range console.MaxSessions + 10 {
		status, sid := login(t, srv, url.Values{"token": {tok}}, "")
		if status != http.StatusSeeOther || sid == "" {
			t.Fatalf("login %d: %d", len(sids), status)
		}
		sids = append(sids, sid)
	}
	live := 0
	for i, sid := range sids {
		got := sessionOf(t, srv, sid)
		if got == "flooder" {
			live++
			if i < len(sids)-console.MaxSessionsPerSubject {
				t.Errorf("session %d of %d is live; only the newest %d should be", i, len(sids), console.MaxSessionsPerSubject)
			}
		} else if got != "401" {
			t.Errorf("session %d: %s", i, got)
		}
	}
	if live != console.MaxSessionsPerSubject {
		t.Errorf("%d of flooder's sessions live, want %d", live, console.MaxSessionsPerSubject)
	}
	if status, sid := login(t, srv, url.Values{"token": {mint(time.Hour, "alice")}}, ""); status != http.StatusSeeOther || sessionOf(t, srv, sid) != "alice" {
		t.Errorf("alice's login after the flood: %d", status)
	}
}

// One subject's unused one-time codes replace each other past
// MaxCodesPerSubject: `a2ad console` run in a loop, or a token minting
// codes, cannot use up the console's MaxCodes.
func TestOneSubjectCannotUseUpTheCodes(t *testing.T) {
	srv, _, mint := fixture(t)
	tok := mint(time.Hour, "flooder")
	var cds []string
	for range console.MaxCodes + 5 {
		cds = append(cds, code(t, srv, tok)) // code fails the test on anything but 200
	}
	alice := code(t, srv, mint(time.Hour, "alice"))
	if status, sid := login(t, srv, url.Values{"code": {alice}}, ""); status != http.StatusSeeOther || sessionOf(t, srv, sid) != "alice" {
		t.Errorf("alice's code after the flood: %d", status)
	}
	for i, cd := range cds {
		status, _ := login(t, srv, url.Values{"code": {cd}}, "")
		want := http.StatusUnauthorized
		if i >= len(cds)-console.MaxCodesPerSubject {
			want = http.StatusSeeOther
		}
		if status != want {
			t.Errorf("flooder's code %d of %d: %d, want %d", i, len(cds), status, want)
		}
	}
}

// A code is not used up by a login the console refuses for want of room:
// it works once a session ends.
func TestCodeKeptWhenTheConsoleIsFull(t *testing.T) {
	srv, _, mint := fixture(t)
	var last string
	for i := 0; i < console.MaxSessions; i++ {
		tok := mint(time.Hour, fmt.Sprintf("op-%d", i/console.MaxSessionsPerSubject))
		status, sid := login(t, srv, url.Values{"token": {tok}}, "")
		if status != http.StatusSeeOther {
			t.Fatalf("login %d: %d", i, status)
		}
		last = sid
	}
	cd := code(t, srv, mint(time.Hour, "late"))
	if status, _ := login(t, srv, url.Values{"code": {cd}}, ""); status != http.StatusServiceUnavailable {
		t.Fatalf("a code with %d sessions open: %d, want 503", console.MaxSessions, status)
	}
	if resp := post(t, srv, "/console/logout", nil, map[string]string{"Cookie": console.CookieName + "=" + last, console.KeyHeader: keyOf(last), "Sec-Fetch-Site": "same-origin"}); resp.StatusCode != http.StatusOK {
		t.Fatalf("logout: %d", resp.StatusCode)
	}
	if status, sid := login(t, srv, url.Values{"code": {cd}}, ""); status != http.StatusSeeOther || sessionOf(t, srv, sid) != "late" {
		t.Errorf("the same code once a session ended: %d", status)
	}
}

// A one-time link opened in a browser that already has a session does not
// switch it to the link's operator by itself: the console asks, and only
// the confirmation (switch=1, a click) uses the code (red team: a page on
// another site navigated alice's browser to eve's link and alice was eve).
func TestCodeAsksBeforeReplacingASession(t *testing.T) {
	srv, _, mint := fixture(t)
	_, alice := login(t, srv, url.Values{"token": {mint(time.Hour, "alice")}}, "")
	cd := code(t, srv, mint(time.Hour, "eve"))

	req, _ := http.NewRequest("POST", srv.URL+"/console/login", strings.NewReader(url.Values{"code": {cd}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(&http.Cookie{Name: console.CookieName, Value: alice})
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || len(resp.Cookies()) != 0 {
		t.Fatalf("a code posted with alice's session: %d %v, want 409 and no cookie", resp.StatusCode, resp.Cookies())
	}
	for _, want := range []string{"You are logged in as <strong>alice (default)</strong>. This link logs you in as <strong>eve (default)</strong> instead",
		`<input type="hidden" name="switch" value="1">`, `<button type="submit" id="switch-login">Log in as eve (default)</button>`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("the question lacks %q:\n%s", want, body)
		}
	}
	if got := sessionOf(t, srv, alice); got != "alice" {
		t.Errorf("alice's session after the question: %s", got)
	}
	status, eve := login(t, srv, url.Values{"code": {cd}, "switch": {"1"}}, alice)
	if status != http.StatusSeeOther || sessionOf(t, srv, eve) != "eve" {
		t.Fatalf("confirmed: %d", status)
	}
	if got := sessionOf(t, srv, alice); got != "401" {
		t.Errorf("alice's session after switching: %s, want 401 (ended)", got)
	}
	// A link of the browser's own operator (same subject and tenant) has
	// nothing to ask: it logs in, ending the older session.
	again := code(t, srv, mint(time.Hour, "eve"))
	if status, sid := login(t, srv, url.Values{"code": {again}}, eve); status != http.StatusSeeOther || sessionOf(t, srv, sid) != "eve" || sessionOf(t, srv, eve) != "401" {
		t.Errorf("eve's own link with eve's session: %d", status)
	}
}

// A request the console forwards for a session — the task watch — ends
// when the session does: at logout, and at the session's expiry (red
// team: a watch went on streaming after logout and after the token's
// expiry).
func TestForwardedStreamEndsWithTheSession(t *testing.T) {
	ended := make(chan time.Duration, 4)
	admin := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, ": watching\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		ended <- time.Since(start)
	})
	srv, _, mint := fixtureWith(t, admin)
	watch := func(sid string) *bufio.Reader {
		req, _ := http.NewRequest("GET", srv.URL+"/console/api/v1/tasks/watch?"+console.KeyParam+"="+keyOf(sid), nil)
		req.AddCookie(&http.Cookie{Name: console.CookieName, Value: sid})
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		br := bufio.NewReader(resp.Body)
		if line, _ := br.ReadString('\n'); line != ": watching\n" {
			t.Fatalf("watch: %d %q", resp.StatusCode, line)
		}
		return br
	}
	waitEOF := func(what string, br *bufio.Reader) {
		t.Helper()
		done := make(chan error, 1)
		go func() { _, err := io.Copy(io.Discard, br); done <- err }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the stream still runs after 10 s", what)
		}
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the admin handler's request did not end", what)
		}
	}

	_, sid := login(t, srv, url.Values{"token": {mint(time.Hour)}}, "")
	br := watch(sid)
	if resp := post(t, srv, "/console/logout", nil, map[string]string{"Cookie": console.CookieName + "=" + sid, console.KeyHeader: keyOf(sid), "Sec-Fetch-Site": "same-origin"}); resp.StatusCode != http.StatusOK {
		t.Fatalf("logout: %d", resp.StatusCode)
	}
	waitEOF("after logout", br)

	// A token of 2 s: the session, and its stream, end with it.
	_, sid = login(t, srv, url.Values{"token": {mint(2 * time.Second)}}, "")
	br = watch(sid)
	waitEOF("after the session's expiry", br)
}

// The assets are files: /console/assets/ is not the application's page.
func TestAssetsAreFilesOnly(t *testing.T) {
	srv, _, _ := fixture(t)
	for path, want := range map[string]int{"/console/assets/": 404, "/console/assets/app.js": 200, "/console/assets/login.js": 200} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want || resp.Header.Get("Content-Security-Policy") != console.CSP {
			t.Errorf("GET %s: %d (CSP %q), want %d with the CSP", path, resp.StatusCode, resp.Header.Get("Content-Security-Policy"), want)
		}
	}
}
