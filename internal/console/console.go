// Package console serves a2ad's web console under /console/: a one-page
// application (assets embedded in the binary, no build step) that reads and
// acts through the operators' admin API (internal/admin), with the
// logged-in operator's own token.
//
// Security model (docs/console.md):
//
//   - Login: POST /console/login (form-encoded) with token=<a JWT with scope
//     a2a:admin>, verified by the daemon's own verifier (Options.Verify), or
//     code=<a one-time code> minted by POST /console/api/code (what `a2ad
//     console` calls with its admin token). A code is 32 random bytes, valid
//     for CodeTTL, used once, and is not the token. login.js posts a link's
//     code without a click only on a page the operator opened
//     (Sec-Fetch-Site none or same-origin).
//   - The session: a random 32-byte id in cookie __Host-a2ad_console
//     (HttpOnly, Secure, SameSite=Strict, Path=/, Max-Age the session's
//     life), mapped in memory to the verified token, plus a page key (32
//     random bytes) the login's redirect hands the page in its fragment
//     and every /console/api/ request carries (KeyHeader, or KeyParam on a
//     watch stream): cookies do not separate ports, so the cookie alone,
//     which a page on another port of the host also gets, is no session.
//     The session ends at the token's expiry or after SessionTTL,
//     whichever is first. The token is never in a URL, in the page or in
//     JS-readable storage.
//   - CSRF: every POST but the login needs the page key, and every POST,
//     the login included, passes net/http's CrossOriginProtection
//     (Sec-Fetch-Site same-origin or none, else an Origin equal to the
//     Host). Refusals are JSON errors.
//   - Every response carries CSP, X-Content-Type-Options nosniff,
//     Referrer-Policy same-origin (no-referrer would make the
//     login form's Origin "null"), X-Frame-Options DENY and Cache-Control
//     no-store.
//
// /console/api/v1/... is the admin API's /v1/...: the request goes to
// Options.Admin with the session's token as its Authorization header (and
// without the cookie), so the operator is named by the token's subject.
package console

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"sync"
	"time"
)

// CSP is the Content-Security-Policy of every console response.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// CookieName is the session cookie's name. The __Host- prefix (RFC 6265bis
// §4.1.3.2) makes browsers take it only with Secure, Path=/ and no Domain:
// a page on another port of the same host (cookies do not separate ports)
// can neither set one nor shadow it with a longer path.
const CookieName = "__Host-a2ad_console"

// KeyHeader carries the session's page key on every /console/api/
// request: the cookie says which session, the key proves the request
// comes from a2ad's own pages. The key reaches the page once, in the
// fragment of the login's redirect (/console/#key=…), and the page keeps it
// in its origin's localStorage, which no other origin — no other port —
// can read. A GET of a watch stream, which EventSource sends without
// headers, carries it as query parameter KeyParam instead.
const (
	KeyHeader = "X-Console-Key"
	KeyParam  = "console_key"
)

// Bounds of the in-memory state.
const (
	// SessionTTL is a session's longest life (shorter when its token
	// expires first).
	SessionTTL = 8 * time.Hour
	// CodeTTL is a one-time login code's life.
	CodeTTL = 60 * time.Second
	// MaxSessions and MaxCodes bound what a console keeps; past them a
	// login or a code is refused with 503 until some expire.
	MaxSessions = 1000
	MaxCodes    = 100
	// MaxSessionsPerSubject and MaxCodesPerSubject bound one operator's
	// (one token subject's) share: a login or a code past them replaces
	// that subject's oldest, so that one token, or a script that logs in
	// on every run, cannot fill the console and lock others out.
	MaxSessionsPerSubject = 16
	MaxCodesPerSubject    = 4
	// maxLoginBytes bounds a login form.
	maxLoginBytes = 64 << 10
)

//go:embed assets
var assets embed.FS

// Identity is what a verified admin token says.
type Identity struct {
	Subject string
	Tenant  string
	// Expires is the token's expiry (zero: none).
	Expires time.Time
}

// ErrNotAdmin is returned by Options.Verify for a valid token without
// scope a2a:admin.
var ErrNotAdmin = errors.New("the token has no scope a2a:admin")

// Options configure a Console.
type Options struct {
	// Verify checks an admin token (signature, claims, scope a2a:admin):
	// the daemon's own verifier. Its error's text is shown to the operator
	// and must be a2ad's words (mcpedge.TokenError, ErrNotAdmin).
	Verify func(token string) (Identity, error)
	// Admin is the admin API handler (paths /v1/...), token check included.
	Admin http.Handler
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Console is the web console's state: sessions and one-time codes, in
// memory (a restart logs every operator out).
type Console struct {
	opts     Options
	cop      *http.CrossOriginProtection
	login    *template.Template
	static   http.Handler
	mu       sync.Mutex
	sessions map[string]*session
	codes    map[string]code
	seq      uint64 // orders sessions and codes by creation (c.mu)
}

type session struct {
	token, key string
	id         Identity
	sid        string // its key in Console.sessions (the cookie's value)
	seq        uint64 // creation order
	expires    time.Time
	// ctx ends (end called) when the session does: at logout, expiry or
	// replacement. Requests forwarded for it, the task watch included,
	// end with it.
	ctx context.Context
	end context.CancelFunc
}

type code struct {
	token   string
	id      Identity
	seq     uint64 // creation order
	expires time.Time
}

// New returns a console; Handler serves it.
func New(opts Options) *Console {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	sub, _ := fs.Sub(assets, "assets")
	c := &Console{opts: opts, cop: http.NewCrossOriginProtection(), sessions: map[string]*session{}, codes: map[string]code{},
		login:  template.Must(template.ParseFS(assets, "assets/login.html")),
		static: http.StripPrefix("/console/assets/", http.FileServerFS(sub))}
	c.cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeErr(w, http.StatusForbidden, "cross_origin", "refused: a state-changing request from another site (Sec-Fetch-Site / Origin)")
	}))
	return c
}

// Handler serves /console/ (paths under it; mount it at "/console/"):
//
//	GET  /console/                  the application (303 to /console/login without a session)
//	GET  /console/login             the login form
//	POST /console/login             token=… or code=… → 303 /console/ with the cookie; 401 with the form and why
//	POST /console/logout            (CSRF) ends the session
//	GET  /console/api/session       {"subject","tenant","expires_at"}
//	POST /console/api/code          Authorization: Bearer <admin token> → {"code","expires_at"}
//	     /console/api/v1/…          the admin API (POST needs CSRF)
//	GET  /console/assets/…          app.js, app.css, login.js
func (c *Console) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /console/{$}", func(w http.ResponseWriter, r *http.Request) {
		if c.session(r) == nil {
			http.Redirect(w, r, "/console/login", http.StatusSeeOther)
			return
		}
		http.ServeFileFS(w, r, assets, "assets/index.html")
	})
	mux.HandleFunc("GET /console/login", func(w http.ResponseWriter, r *http.Request) {
		// A one-time link's code is posted without a click only when the
		// operator opened the page (typed, pasted, or a link opened from a
		// terminal: Sec-Fetch-Site none) or a2ad's own page led here; a
		// page of another site, or of another port of this host, that
		// navigates the browser to a link gets a button to press, never a
		// silent login under the link's operator (login CSRF).
		site := r.Header.Get("Sec-Fetch-Site")
		c.renderLogin(w, http.StatusOK, loginData{AutoPost: site == "none" || site == "same-origin"})
	})
	mux.Handle("POST /console/login", c.cop.Handler(http.HandlerFunc(c.doLogin)))
	mux.Handle("POST /console/logout", c.guard(func(w http.ResponseWriter, r *http.Request, s *session) {
		c.mu.Lock()
		c.endSession(s.sid)
		c.mu.Unlock()
		http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode})
		writeJSON(w, http.StatusOK, map[string]bool{"logged_out": true})
	}))
	mux.Handle("GET /console/api/session", c.guard(func(w http.ResponseWriter, r *http.Request, s *session) {
		writeJSON(w, http.StatusOK, map[string]any{"subject": s.id.Subject, "tenant": s.id.Tenant, "expires_at": s.expires.UTC()})
	}))
	mux.HandleFunc("POST /console/api/code", c.mintCode)
	mux.Handle("/console/api/v1/", c.guard(c.forward))
	mux.HandleFunc("GET /console/assets/", func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") { // files only: no directory's index.html
			http.NotFound(w, r)
			return
		}
		c.static.ServeHTTP(w, r)
	})
	return headers(mux)
}

// headers sets the headers of every console response.
func headers(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", CSP)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "same-origin") // not no-referrer: with it a form post's Origin is "null", which the Origin guard refuses
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}

// guard runs h for a request with a live session and its page key: in
// header KeyHeader, or for a GET of a watch stream in query parameter
// KeyParam. A POST (any method but GET and HEAD) must also pass
// CrossOriginProtection. The key is the CSRF token too: a page of another
// site cannot read it, and one of another port of this host, which gets
// the cookie (cookies do not separate ports), cannot either.
func (c *Console) guard(h func(http.ResponseWriter, *http.Request, *session)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.CookiesNamed(CookieName)) > 1 {
			writeErr(w, http.StatusBadRequest, "cookie_conflict", "the request carries more than one console session cookie: log in again at /console/login")
			return
		}
		s := c.session(r)
		if s == nil {
			writeErr(w, http.StatusUnauthorized, "not_logged_in", "no console session, or it expired: log in at /console/login")
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if err := c.cop.Check(r); err != nil {
				writeErr(w, http.StatusForbidden, "cross_origin", "refused: a state-changing request from another site (Sec-Fetch-Site / Origin)")
				return
			}
		}
		got := r.Header.Get(KeyHeader)
		if got == "" && r.Method == http.MethodGet && isWatch(r) {
			got = r.URL.Query().Get(KeyParam)
		}
		if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(s.key)) != 1 {
			writeErr(w, http.StatusUnauthorized, "console_key_invalid", "refused: the console's page key ("+KeyHeader+") is missing or is not this session's: log in again at /console/login")
			return
		}
		h(w, r, s)
	})
}

// session is the live session of r's cookie, or nil.
func (c *Console) session(r *http.Request) *session {
	ck, err := r.Cookie(CookieName)
	if err != nil || ck.Value == "" {
		return nil
	}
	now := c.opts.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sessions[ck.Value]
	if s == nil {
		return nil
	}
	if !now.Before(s.expires) {
		c.endSession(ck.Value)
		return nil
	}
	return s
}

// endSession forgets session sid and ends its requests; c.mu is held.
func (c *Console) endSession(sid string) {
	if s := c.sessions[sid]; s != nil {
		s.end()
		delete(c.sessions, sid)
	}
}

func (c *Console) loginPage(w http.ResponseWriter, status int, msg string) {
	c.renderLogin(w, status, loginData{Error: msg})
}

// loginData fills login.html: an error, or the question a one-time link
// asks of a browser that already has a session (Switch); AutoPost lets
// login.js post a link's code without a click.
type loginData struct {
	Error    string
	Switch   *switchData
	AutoPost bool
}

// switchData names the identities as "subject (tenant)".
type switchData struct{ From, To, Code string }

func (c *Console) renderLogin(w http.ResponseWriter, status int, d loginData) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_ = c.login.Execute(w, d)
}

// doLogin exchanges a pasted token or a one-time code for a session.
//
// A code posted by a browser that already has a live session is not used
// at once: the page asks the operator (409, "You are logged in as X; this
// link logs you in as Y") and a click posts it again with switch=1. Else
// a page on another site could navigate the operator's browser to a link
// with its own code and have the operator act, unawares, under another
// name (login.js posts a link's code by itself).
func (c *Console) doLogin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginBytes)
	if err := r.ParseForm(); err != nil {
		c.loginPage(w, http.StatusBadRequest, "The login form did not arrive whole (at most 64 KiB of form fields).")
		return
	}
	tok, cd := strings.TrimSpace(r.PostForm.Get("token")), strings.TrimSpace(r.PostForm.Get("code"))
	now := c.opts.Now()
	cur := c.session(r) // the browser's live session, if any
	var id Identity
	switch {
	case cd != "":
		c.mu.Lock()
		got, ok := c.codes[cd]
		if ok && !now.Before(got.expires) {
			delete(c.codes, cd)
			ok = false
		}
		c.mu.Unlock()
		if !ok {
			c.loginPage(w, http.StatusUnauthorized, "This login link is unknown, already used or expired (links last 60 s and work once): run `a2ad console` again.")
			return
		}
		if cur != nil && r.PostForm.Get("switch") != "1" && (cur.id.Subject != got.id.Subject || cur.id.Tenant != got.id.Tenant) {
			c.renderLogin(w, http.StatusConflict, loginData{Switch: &switchData{From: cur.id.Subject + " (" + cur.id.Tenant + ")", To: got.id.Subject + " (" + got.id.Tenant + ")", Code: cd}})
			return
		}
		tok, id = got.token, got.id
	case tok != "":
		tok = strings.TrimPrefix(tok, "Bearer ")
		var err error
		if id, err = c.opts.Verify(tok); err != nil {
			c.loginPage(w, http.StatusUnauthorized, "Token refused: "+err.Error())
			return
		}
	default:
		c.loginPage(w, http.StatusBadRequest, "Paste an admin token (scope a2a:admin), or open the link `a2ad console` prints.")
		return
	}
	exp := now.Add(SessionTTL)
	if !id.Expires.IsZero() && id.Expires.Before(exp) {
		exp = id.Expires
	}
	if !now.Before(exp) {
		c.loginPage(w, http.StatusUnauthorized, "Token refused: it has expired.")
		return
	}
	sid, ns := random(), newSession(tok, id, exp)
	c.mu.Lock()
	c.sweep(now)
	if _, ok := c.codes[cd]; cd != "" && !ok { // used by a concurrent login meanwhile
		c.mu.Unlock()
		ns.end()
		c.loginPage(w, http.StatusUnauthorized, "This login link is unknown, already used or expired (links last 60 s and work once): run `a2ad console` again.")
		return
	}
	full := !c.makeRoom(id)
	if cd != "" {
		if !full {
			delete(c.codes, cd) // used once; kept when the console is full, to be tried again
		}
	}
	if !full {
		c.seq++
		ns.seq, ns.sid = c.seq, sid
		c.sessions[sid] = ns
		if cur != nil { // logging in again, or switching: the old session ends
			c.endSession(cur.sid)
		}
	}
	c.mu.Unlock()
	if full {
		ns.end()
		c.loginPage(w, http.StatusServiceUnavailable, "Too many console sessions are open; try again when some have expired.")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: sid, Path: "/", MaxAge: int(exp.Sub(now) / time.Second),
		HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode})
	// The page key, in the fragment: it reaches a2ad's page and no request
	// line or log (app.js keeps it and takes it off the address bar).
	http.Redirect(w, r, "/console/#key="+ns.key, http.StatusSeeOther)
}

// newSession is a session with its own page key and context.
func newSession(tok string, id Identity, exp time.Time) *session {
	ctx, end := context.WithCancel(context.Background())
	return &session{token: tok, key: random(), id: id, expires: exp, ctx: ctx, end: end}
}

// makeRoom reports whether a session for id may be added, ending the
// oldest of its subject (in its tenant) when it has MaxSessionsPerSubject;
// c.mu is held.
func (c *Console) makeRoom(id Identity) bool {
	oldest, n := oldestOf(c.sessions, id, func(s *session) (Identity, uint64) { return s.id, s.seq })
	if n >= MaxSessionsPerSubject {
		c.endSession(oldest)
		return true
	}
	return len(c.sessions) < MaxSessions
}

// oldestOf is the key of the oldest (lowest seq) entry of m of the
// operator id (subject and tenant), and how many entries of it m holds.
func oldestOf[V any](m map[string]V, id Identity, of func(V) (Identity, uint64)) (oldest string, n int) {
	var first uint64
	for k, v := range m {
		vid, seq := of(v)
		if vid.Subject != id.Subject || vid.Tenant != id.Tenant {
			continue
		}
		if n++; n == 1 || seq < first {
			oldest, first = k, seq
		}
	}
	return oldest, n
}

// mintCode answers POST /console/api/code: an admin token in the
// Authorization header (never a cookie: a page on another site cannot set
// that header) gets a one-time login code for a session with that token.
func (c *Console) mintCode(w http.ResponseWriter, r *http.Request) {
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || strings.TrimSpace(tok) == "" {
		writeErr(w, http.StatusUnauthorized, "unauthorized", "POST /console/api/code needs Authorization: Bearer <a token with scope a2a:admin>")
		return
	}
	id, err := c.opts.Verify(tok)
	if err != nil {
		writeErr(w, http.StatusUnauthorized, "invalid_token", err.Error())
		return
	}
	now := c.opts.Now()
	exp := now.Add(CodeTTL)
	if !id.Expires.IsZero() && id.Expires.Before(exp) {
		exp = id.Expires
	}
	cd := random()
	c.mu.Lock()
	c.sweep(now)
	if oldest, n := oldestOf(c.codes, id, func(v code) (Identity, uint64) { return v.id, v.seq }); n >= MaxCodesPerSubject {
		delete(c.codes, oldest) // one operator's unused codes replace each other
	}
	full := len(c.codes) >= MaxCodes
	if !full {
		c.seq++
		c.codes[cd] = code{token: tok, id: id, seq: c.seq, expires: exp}
	}
	c.mu.Unlock()
	if full {
		writeErr(w, http.StatusServiceUnavailable, "too_many_codes", "too many unused login codes; try again within a minute")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"code": cd, "expires_at": exp.UTC()})
}

// sweep forgets expired sessions and codes; c.mu is held.
func (c *Console) sweep(now time.Time) {
	for k, s := range c.sessions {
		if !now.Before(s.expires) {
			c.endSession(k)
		}
	}
	for k, cd := range c.codes {
		if !now.Before(cd.expires) {
			delete(c.codes, k)
		}
	}
}

// forward hands /console/api/v1/… to the admin API as /v1/… with the
// session's token.
//
// The request ends when the session does (logout, replacement) or expires,
// whichever is first: a task watch opened by a session does not outlive
// it.
func (c *Console) forward(w http.ResponseWriter, r *http.Request, s *session) {
	ctx := r.Context()
	if isWatch(r) { // a stream; other requests are short, and never cut halfway
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, time.Now().Add(s.expires.Sub(c.opts.Now())))
		defer cancel()
		defer context.AfterFunc(s.ctx, cancel)()
	}
	r2 := r.Clone(ctx)
	r2.URL.Path = strings.TrimPrefix(r.URL.Path, "/console/api")
	r2.URL.RawPath = ""
	if q := r2.URL.Query(); q.Has(KeyParam) {
		q.Del(KeyParam)
		r2.URL.RawQuery = q.Encode()
	}
	r2.RequestURI = ""
	r2.Header.Del("Cookie")
	r2.Header.Del(KeyHeader)
	r2.Header.Set("Authorization", "Bearer "+s.token)
	c.opts.Admin.ServeHTTP(w, r2)
}

// isWatch reports whether r asks for an admin API stream (GET /v1/tasks/watch).
func isWatch(r *http.Request) bool { return strings.HasSuffix(r.URL.Path, "/watch") }

// random is 32 random bytes, base64url.
func random() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24)
	return base64.RawURLEncoding.EncodeToString(b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
}
