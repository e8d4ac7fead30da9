package mcpedge

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/a2ad/a2ad/internal/broker"
	"github.com/golang-jwt/jwt/v5"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// Scopes a2ad knows (the `scope` claim of a host's token, RFC 8693 §4.2).
const (
	ScopeRead     = "a2a:read"     // agents_list, task_get; needed for /mcp at all
	ScopeDelegate = "a2a:delegate" // delegate, task_respond, task_cancel
	ScopeAdmin    = "a2a:admin"    // the operators' admin API (/v1/)
)

// ToolScopes names the scope each tool needs.
var ToolScopes = map[string]string{
	"agents_list":  ScopeRead,
	"task_get":     ScopeRead,
	"delegate":     ScopeDelegate,
	"task_respond": ScopeDelegate,
	"task_cancel":  ScopeDelegate,
}

// MetadataPath is where the RFC 9728 protected resource metadata is served
// (also under MetadataPath + "/mcp", the path-suffixed form of §3.1).
const MetadataPath = "/.well-known/oauth-protected-resource"

// DevIssuer is the issuer of tokens `a2ad token mint` signs with the
// development key in the data directory.
const DevIssuer = "urn:a2ad:dev"

// AuthConfig configures how hosts' bearer tokens (JWT, RFC 7519) are verified
// on HTTP. With no key source (PublicKeyFile, JWKSURL, HS256SecretFile)
// a2ad uses the development key it generates in its data directory
// (Ed25519, EdDSA) and the issuer DevIssuer: enough for one instance and
// `a2ad token mint`; several instances need a shared key source.
type AuthConfig struct {
	// Issuer is the required `iss`.
	Issuer string `yaml:"issuer"`
	// Audience is a2ad's resource identifier, the required `aud` (RFC 8707);
	// default: the URL of its MCP endpoint, e.g. http://127.0.0.1:8080/mcp.
	Audience string `yaml:"audience"`
	// Algorithms allowed: any of ES256, EdDSA, RS256; HS256 only with
	// HS256SecretFile. Default: the one the key's type implies.
	Algorithms []string `yaml:"algorithms"`
	// PublicKeyFile is a PEM file holding a public key (PKIX) or a
	// certificate.
	PublicKeyFile string `yaml:"public_key_file"`
	// JWKSURL is a JWK Set (RFC 7517) fetched and refreshed in the background.
	JWKSURL string `yaml:"jwks_url"`
	// HS256SecretFile holds a shared secret: for local development only.
	HS256SecretFile string `yaml:"hs256_secret_file"`
	// TenantClaim names the claim carrying the tenant (default "tenant").
	TenantClaim string `yaml:"tenant_claim"`
	// LeewaySeconds is the clock skew allowed on exp, nbf and iat (default 30).
	LeewaySeconds int `yaml:"leeway_seconds"`
	// AuthorizationServers are announced in the protected resource metadata
	// (default: Issuer, when it is an https URL).
	AuthorizationServers []string `yaml:"authorization_servers"`
}

// Authenticator verifies hosts' bearer tokens and answers with RFC 6750
// challenges. Build it with NewAuthenticator.
type Authenticator struct {
	cfg         AuthConfig
	parser      *jwt.Parser
	keyfunc     jwt.Keyfunc
	metadataURL string
	dev         bool

	// OnRefused, if set before serving, is called for each refused HTTP
	// request with a reason code: missing_token, malformed,
	// bad_signature, unknown_key, claim_missing, expired, not_yet_valid,
	// wrong_audience, wrong_issuer, unsupported_header, invalid_claim,
	// insufficient_scope or invalid_token. It must not block.
	OnRefused func(reason string)

	tokens tokenCache // tokens verified lately ([Authenticator.Verify])
}

// TokenError is why a token was refused; its text is safe to show (it never
// contains the token).
type TokenError struct{ Reason string }

func (e *TokenError) Error() string { return "invalid token: " + e.Reason }

// Unwrap makes a TokenError match auth.ErrInvalidToken.
func (e *TokenError) Unwrap() error { return auth.ErrInvalidToken }

// NewAuthenticator loads the key source of cfg. dataDir holds the
// development key (created if absent and no other key source is set);
// baseURL is the HTTP listener's base URL, for the default audience and the
// metadata URL. Errors name the bad setting.
func NewAuthenticator(cfg AuthConfig, dataDir, baseURL string) (*Authenticator, error) {
	a := &Authenticator{cfg: cfg, metadataURL: strings.TrimSuffix(baseURL, "/") + MetadataPath}
	if a.cfg.Audience == "" {
		a.cfg.Audience = strings.TrimSuffix(baseURL, "/") + "/mcp"
	}
	if a.cfg.TenantClaim == "" {
		a.cfg.TenantClaim = "tenant"
	}
	if a.cfg.LeewaySeconds == 0 {
		a.cfg.LeewaySeconds = 30
	}
	sources := 0
	for _, s := range []string{cfg.PublicKeyFile, cfg.JWKSURL, cfg.HS256SecretFile} {
		if s != "" {
			sources++
		}
	}
	var implied []string
	switch {
	case sources > 1:
		return nil, errors.New("auth: set one of public_key_file, jwks_url, hs256_secret_file")
	case cfg.PublicKeyFile != "":
		key, err := readPublicKey(cfg.PublicKeyFile)
		if err != nil {
			return nil, err
		}
		a.keyfunc = func(*jwt.Token) (any, error) { return key, nil }
		implied = algorithmsFor(key)
	case cfg.JWKSURL != "":
		if u, err := url.Parse(cfg.JWKSURL); err != nil || (u.Scheme != "https" && !LoopbackHost(u.Hostname())) {
			return nil, errors.New("auth: jwks_url must be https (http only on loopback)")
		}
		kf, err := keyfunc.NewDefaultOverrideCtx(context.Background(), []string{cfg.JWKSURL}, keyfunc.Override{HTTPTimeout: 10 * time.Second})
		if err != nil {
			return nil, fmt.Errorf("auth: jwks_url: %w", err)
		}
		a.keyfunc = kf.Keyfunc
		implied = []string{"ES256", "EdDSA", "RS256"}
	case cfg.HS256SecretFile != "":
		secret, err := os.ReadFile(cfg.HS256SecretFile)
		if err != nil {
			return nil, fmt.Errorf("auth: hs256_secret_file: %w", err)
		}
		secret = bytes.TrimSpace(secret)
		if len(secret) < 32 {
			return nil, errors.New("auth: hs256_secret_file: the secret must be at least 32 bytes")
		}
		a.keyfunc = func(*jwt.Token) (any, error) { return secret, nil }
		implied = []string{"HS256"}
	default:
		priv, err := EnsureDevKey(dataDir)
		if err != nil {
			return nil, err
		}
		pub := priv.Public()
		a.keyfunc = func(*jwt.Token) (any, error) { return pub, nil }
		implied = []string{"EdDSA"}
		a.dev = true
		if a.cfg.Issuer == "" {
			a.cfg.Issuer = DevIssuer
		}
	}
	if a.cfg.Issuer == "" {
		return nil, errors.New("auth: issuer is required with a configured key source")
	}
	algs := cfg.Algorithms
	if len(algs) == 0 {
		algs = implied
	}
	for _, alg := range algs {
		switch {
		case alg == "HS256" && cfg.HS256SecretFile == "":
			return nil, errors.New("auth: HS256 is allowed only with hs256_secret_file (local development)")
		case alg != "HS256" && cfg.HS256SecretFile != "":
			return nil, fmt.Errorf("auth: algorithm %s does not fit hs256_secret_file", alg)
		case !slices.Contains([]string{"ES256", "EdDSA", "RS256", "HS256"}, alg):
			return nil, fmt.Errorf("auth: algorithm %q is not one of ES256, EdDSA, RS256 (HS256 for development)", alg)
		}
	}
	a.parser = jwt.NewParser(
		jwt.WithValidMethods(algs), // refuses alg "none" and algorithm confusion
		jwt.WithIssuer(a.cfg.Issuer),
		jwt.WithAudience(a.cfg.Audience),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(time.Duration(a.cfg.LeewaySeconds)*time.Second),
	)
	return a, nil
}

// Audience is the resource identifier tokens must name in `aud`.
func (a *Authenticator) Audience() string { return a.cfg.Audience }

// Issuer is the `iss` tokens must carry.
func (a *Authenticator) Issuer() string { return a.cfg.Issuer }

// Development reports whether tokens are verified with the development key.
func (a *Authenticator) Development() bool { return a.dev }

// Verify checks a compact JWS: signature (allowed algorithms only), iss,
// aud, exp (required, with leeway), nbf and iat when present, a non-empty
// sub and tenant claim. It returns the token's subject, tenant and scopes
// as an auth.TokenInfo (Extra "sub", "tenant"; UserID "<tenant>/<sub>"), or
// a *TokenError.
//
// A token that verified is remembered, by the SHA-256 of its exact bytes,
// for TokenCacheTTL (at most TokenCacheSize tokens): the same token again
// within that time is not verified again, except for its expiry, which is
// checked on every use (exp plus the leeway, as the full check allows). A
// refused token is never remembered. So a key removed from the JWKS (or a
// configuration changed) stops a token signed with it at most TokenCacheTTL
// after that token last verified in full.
func (a *Authenticator) Verify(token string) (*auth.TokenInfo, error) {
	key := sha256.Sum256([]byte(token))
	leeway := time.Duration(a.cfg.LeewaySeconds) * time.Second
	if ti, ok := a.tokens.get(key, time.Now(), leeway); ok {
		return ti, nil
	}
	ti, err := a.verify(token)
	if err == nil {
		a.tokens.put(key, ti, time.Now())
	}
	return ti, err
}

// verify is Verify without the cache.
func (a *Authenticator) verify(token string) (*auth.TokenInfo, error) {
	claims := jwt.MapClaims{}
	tok, err := a.parser.ParseWithClaims(token, claims, a.keyfunc)
	if err != nil {
		return nil, &TokenError{Reason: reason(err)}
	}
	if _, crit := tok.Header["crit"]; crit {
		// RFC 7515 §4.1.11: extensions a2ad does not understand.
		return nil, &TokenError{Reason: "critical header extensions are not supported"}
	}
	sub, _ := claims["sub"].(string)
	tenant, _ := claims[a.cfg.TenantClaim].(string)
	if sub == "" {
		return nil, &TokenError{Reason: "no sub claim"}
	}
	if tenant == "" {
		return nil, &TokenError{Reason: "no " + a.cfg.TenantClaim + " claim"}
	}
	if !printable(sub) || !printable(tenant) {
		return nil, &TokenError{Reason: "sub or " + a.cfg.TenantClaim + " holds control characters or is longer than 256 bytes"}
	}
	scope, _ := claims["scope"].(string)
	exp, _ := claims.GetExpirationTime()
	return &auth.TokenInfo{
		// UserID binds sessions to the token's user: quoted, so that no
		// tenant and sub pair reads as another.
		Scopes: strings.Fields(scope), Expiration: exp.Time, UserID: strconv.Quote(tenant) + "/" + strconv.Quote(sub),
		Extra: map[string]any{"sub": sub, "tenant": tenant},
	}, nil
}

// TokenCacheTTL is how long a verified token is used without verifying its
// signature and claims again (its expiry is checked on every use), and
// TokenCacheSize how many such tokens an Authenticator remembers.
const (
	TokenCacheTTL  = time.Minute
	TokenCacheSize = 10_000
)

// tokenCache remembers verified tokens by the SHA-256 of their bytes.
type tokenCache struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]cachedToken
}

type cachedToken struct {
	ti       *auth.TokenInfo // as verified; copied out, never handed out
	verified time.Time
}

// get returns a copy of the remembered token's info if it verified less
// than TokenCacheTTL ago and has not expired (exp plus leeway) at now.
func (c *tokenCache) get(key [sha256.Size]byte, now time.Time, leeway time.Duration) (*auth.TokenInfo, bool) {
	c.mu.Lock()
	e, ok := c.m[key]
	if ok && (now.Sub(e.verified) >= TokenCacheTTL || now.Before(e.verified) || now.After(e.ti.Expiration.Add(leeway))) {
		delete(c.m, key)
		ok = false
	}
	c.mu.Unlock()
	if !ok {
		return nil, false
	}
	return cloneTokenInfo(e.ti), true
}

// put remembers a verified token, evicting another when full.
func (c *tokenCache) put(key [sha256.Size]byte, ti *auth.TokenInfo, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[[sha256.Size]byte]cachedToken{}
	}
	if _, ok := c.m[key]; !ok && len(c.m) >= TokenCacheSize {
		for k := range c.m { // an arbitrary one: map order is random
			delete(c.m, k)
			break
		}
	}
	c.m[key] = cachedToken{ti: cloneTokenInfo(ti), verified: now}
}

// cloneTokenInfo copies what a caller could change.
func cloneTokenInfo(ti *auth.TokenInfo) *auth.TokenInfo {
	c := *ti
	c.Scopes = slices.Clone(ti.Scopes)
	c.Extra = maps.Clone(ti.Extra)
	return &c
}

// printable reports a claim fit to name a principal: at most 256 bytes, no
// control characters.
func printable(s string) bool {
	if len(s) > 256 {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// LoopbackHost reports whether h, a URL's host name without port, is
// localhost or a loopback IP address (127.0.0.0/8, ::1): where a bearer
// token may travel in plain text.
func LoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// reason is a short, token-free description of a verification failure.
func reason(err error) string {
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "malformed"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return "bad signature or algorithm not allowed"
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return "no key to verify it"
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return "a required claim is missing"
	case errors.Is(err, jwt.ErrTokenExpired):
		return "expired"
	case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return "not valid yet"
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return "minted for another audience"
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return "wrong issuer"
	}
	return "not verifiable"
}

type principalKey struct{}

// PrincipalOf returns the principal a verified token names: subject and
// tenant from its claims, scopes from `scope`. ok is false without one.
func PrincipalOf(ti *auth.TokenInfo) (broker.Principal, bool) {
	if ti == nil {
		return broker.Principal{}, false
	}
	sub, _ := ti.Extra["sub"].(string)
	tenant, _ := ti.Extra["tenant"].(string)
	if sub == "" || tenant == "" {
		return broker.Principal{}, false
	}
	return broker.Principal{Subject: sub, Tenant: tenant, Scopes: slices.Clone(ti.Scopes)}, true
}

// challenge writes an RFC 6750 §3 error response: status, and a
// WWW-Authenticate Bearer challenge with resource_metadata (RFC 9728 §5.1)
// and, when code is set, error, error_description and scope.
func (a *Authenticator) challenge(w http.ResponseWriter, status int, code, desc, scope string) {
	params := []string{fmt.Sprintf("resource_metadata=%q", a.metadataURL)}
	if code != "" {
		params = append(params, fmt.Sprintf("error=%q", code))
		if desc != "" {
			params = append(params, fmt.Sprintf("error_description=%q", desc))
		}
	}
	if scope != "" {
		params = append(params, fmt.Sprintf("scope=%q", scope))
	}
	w.Header().Set("WWW-Authenticate", "Bearer "+strings.Join(params, ", "))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	msg := code
	if msg == "" {
		msg = "a bearer token is required"
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": cmpOr(code, "unauthorized"), "message": cmpOr(desc, msg)}})
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// authenticate verifies the request's bearer token and checks that it
// holds scope; on failure it has written the challenge and returns nil.
func (a *Authenticator) authenticate(w http.ResponseWriter, r *http.Request, scope string) *auth.TokenInfo {
	h := r.Header.Get("Authorization")
	scheme, token, found := strings.Cut(h, " ")
	if h == "" || !found || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		a.refused("missing_token")
		a.challenge(w, http.StatusUnauthorized, "", "", "") // RFC 6750 §3.1: no error code without credentials
		return nil
	}
	ti, err := a.Verify(strings.TrimSpace(token))
	if err != nil {
		var te *TokenError
		desc := "token not verifiable"
		if errors.As(err, &te) {
			desc = te.Reason
		}
		a.refused(refusalCode(desc))
		a.challenge(w, http.StatusUnauthorized, "invalid_token", desc, "")
		return nil
	}
	if scope != "" && !slices.Contains(ti.Scopes, scope) {
		a.refused("insufficient_scope")
		a.challenge(w, http.StatusForbidden, "insufficient_scope", "this request needs scope "+scope, scope)
		return nil
	}
	return ti
}

func (a *Authenticator) refused(code string) {
	if a.OnRefused != nil {
		a.OnRefused(code)
	}
}

// refusalCode maps a TokenError's reason to a bounded code for metrics.
func refusalCode(reason string) string {
	switch {
	case reason == "malformed":
		return "malformed"
	case reason == "bad signature or algorithm not allowed":
		return "bad_signature"
	case reason == "no key to verify it":
		return "unknown_key"
	case reason == "a required claim is missing", strings.HasPrefix(reason, "no ") && strings.HasSuffix(reason, " claim"):
		return "claim_missing"
	case reason == "expired":
		return "expired"
	case reason == "not valid yet":
		return "not_yet_valid"
	case reason == "minted for another audience":
		return "wrong_audience"
	case reason == "wrong issuer":
		return "wrong_issuer"
	case strings.HasPrefix(reason, "critical header"):
		return "unsupported_header"
	case strings.HasPrefix(reason, "sub or "):
		return "invalid_claim"
	}
	return "invalid_token"
}

// RequireScope protects an HTTP handler (the admin API): a valid token with
// scope, else the RFC 6750 challenge. The principal is in the request
// context (PrincipalFromContext), and so is the instant the token stops
// being valid (TokenExpiryFromContext: its exp plus the leeway), for a
// long request such as the admin API's task watch to end then rather
// than outlive the token that opened it. Short requests are not cut.
func (a *Authenticator) RequireScope(scope string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ti := a.authenticate(w, r, scope)
		if ti == nil {
			return
		}
		p, _ := PrincipalOf(ti)
		ctx := context.WithValue(r.Context(), principalKey{}, p)
		if !ti.Expiration.IsZero() {
			ctx = context.WithValue(ctx, expiryKey{}, ti.Expiration.Add(time.Duration(a.cfg.LeewaySeconds)*time.Second))
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

type expiryKey struct{}

// TokenExpiryFromContext is when the token RequireScope verified stops
// being accepted (its exp plus the leeway); false for a token without exp.
func TokenExpiryFromContext(ctx context.Context) (time.Time, bool) {
	t, ok := ctx.Value(expiryKey{}).(time.Time)
	return t, ok
}

// ContextWithTokenExpiry is ctx carrying at as TokenExpiryFromContext's
// answer: for a handler behind another verifier than RequireScope.
func ContextWithTokenExpiry(ctx context.Context, at time.Time) context.Context {
	return context.WithValue(ctx, expiryKey{}, at)
}

// ContextWithPrincipal is ctx carrying p as the verified principal
// PrincipalFromContext returns: for a handler behind another verifier
// than Require (tests, an embedding server that checked the token itself).
func ContextWithPrincipal(ctx context.Context, p broker.Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFromContext is the principal RequireScope verified.
func PrincipalFromContext(ctx context.Context) (broker.Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(broker.Principal)
	return p, ok
}

// maxPeek bounds the request body read to learn which tool a call names.
const maxPeek = 4 << 20

// ProtectMCP guards the MCP endpoint: every request needs a valid token
// with a2a:read, and a tools/call needs the scope of its tool, a tasks/*
// request that of its method ([TaskMethodScopes]) (HTTP 403
// insufficient_scope naming it: MCP step-up authorization). The verified
// token reaches tool handlers as req.Extra.TokenInfo, through the go-sdk's
// own bearer middleware (which also binds sessions to the token's user).
func (a *Authenticator) ProtectMCP(next http.Handler) http.Handler {
	sdk := auth.RequireBearerToken(func(ctx context.Context, _ string, _ *http.Request) (*auth.TokenInfo, error) {
		ti, ok := ctx.Value(tokenInfoKey{}).(*auth.TokenInfo)
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return ti, nil
	}, &auth.RequireBearerTokenOptions{ResourceMetadataURL: a.metadataURL, ClockSkew: time.Duration(a.cfg.LeewaySeconds) * time.Second})(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ti := a.authenticate(w, r, ScopeRead)
		if ti == nil {
			return
		}
		r, call, err := peek(r)
		if err != nil {
			bodyError(w, err)
			return
		}
		if call.method == "tools/call" {
			if need, known := requiredScope(call.tool); known && !slices.Contains(ti.Scopes, need) {
				a.refused("insufficient_scope")
				a.challenge(w, http.StatusForbidden, "insufficient_scope", "tool "+call.tool+" needs scope "+need, need)
				return
			}
		}
		if need, known := TaskMethodScopes[call.method]; known && !slices.Contains(ti.Scopes, need) {
			a.refused("insufficient_scope")
			a.challenge(w, http.StatusForbidden, "insufficient_scope", call.method+" needs scope "+need, need)
			return
		}
		sdk.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tokenInfoKey{}, ti)))
	})
}

type tokenInfoKey struct{}

type readCloser struct {
	io.Reader
	io.Closer
}

// call is what a POST to /mcp names: its JSON-RPC method and, for
// tools/call, the tool, or for a JSON-RPC batch the number of its messages
// (and no method). It is read once per request (peek) and shared by the
// scope check, the rate limits and the era routing.
type call struct {
	method, tool string
	batch        int
	// id is a call's JSON-RPC id, canonical ([canonicalID]; "" for a
	// notification); cancels, for notifications/cancelled, the id of the
	// call cancelled.
	id, cancels string
	// refused is what [screen] refuses in the body (not for batches):
	// answered with its JSON-RPC error before the go-sdk reads it.
	refused *screenError
	// taskID is the params.taskId of a tasks/* request (MCP Tasks
	// extension), for its Mcp-Name routing header ([taskRouting]).
	taskID string
}

type callKey struct{}

// errNotOneJSONValue is peek's error for a POST body that is not exactly
// one JSON value (RFC 8259): one JSON-RPC message or one batch.
var errNotOneJSONValue = errors.New("the request body is not one JSON value")

// peek returns r with its body readable again and what it names; a
// request already peeked gets the result of that peek. Only POSTs are read
// (at most maxPeek bytes).
func peek(r *http.Request) (*http.Request, call, error) {
	if c, ok := r.Context().Value(callKey{}).(call); ok {
		return r, c, nil
	}
	if r.Method != http.MethodPost || r.Body == nil {
		return r, call{}, nil
	}
	// One byte past maxPeek: a body bounded to maxPeek (http_limits)
	// fails here, not later in the SDK.
	body, err := io.ReadAll(io.LimitReader(r.Body, maxPeek+1))
	if err != nil {
		return r, call{}, err
	}
	r.Body = readCloser{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
	if len(body) <= maxPeek && !json.Valid(body) {
		// Not one JSON value (malformed, or followed by more): the SDK
		// would decode the first value only and run it, while the scope
		// check and the rate limits could not read it. Refused.
		return r, call{}, errNotOneJSONValue
	}
	c := parseCall(body)
	c.batch = batchLen(body)
	if trimmed := bytes.TrimSpace(body); len(body) <= maxPeek && (len(trimmed) == 0 || trimmed[0] != '[' || isEmptyArray(trimmed)) {
		// A batch (before 2025-06-18) goes on to the go-sdk, one message
		// or more.
		c.refused = screen(body)
	}
	return r.WithContext(context.WithValue(r.Context(), callKey{}, c)), c, nil
}

// parseCall reads a JSON-RPC request's method and, for tools/call, tool.
//
// Keys are matched exactly, as the SDK matches them (encoding/json alone
// folds case, so {"name":…,"Name":…} could name another tool than the one
// the SDK calls); a tools/call with a near-miss key is taken to name the
// tool with the strongest scope.
func parseCall(body []byte) call {
	var m map[string]json.RawMessage
	var c call
	if json.Unmarshal(body, &m) != nil || json.Unmarshal(m["method"], &c.method) != nil || foldedDuplicate(m, "method") {
		return call{}
	}
	c.id = canonicalID(m["id"])
	if c.method == "notifications/cancelled" {
		var params struct {
			RequestID json.RawMessage `json:"requestId"`
		}
		if json.Unmarshal(m["params"], &params) == nil {
			c.cancels = canonicalID(params.RequestID)
		}
	}
	if _, ok := TaskMethodScopes[c.method]; ok {
		var params struct {
			TaskID string `json:"taskId"`
		}
		if json.Unmarshal(m["params"], &params) == nil {
			c.taskID = params.TaskID
		}
	}
	if c.method != "tools/call" {
		return c
	}
	var params map[string]json.RawMessage
	if json.Unmarshal(m["params"], &params) != nil || json.Unmarshal(params["name"], &c.tool) != nil || foldedDuplicate(params, "name") {
		c.tool = "delegate" // unclear: demand the strongest tool scope
	}
	return c
}

// foldedDuplicate reports a key other than key that equals it under case folding.
func foldedDuplicate(m map[string]json.RawMessage, key string) bool {
	for k := range m {
		if k != key && strings.EqualFold(k, key) {
			return true
		}
	}
	return false
}

// MetadataHandler serves the RFC 9728 protected resource metadata.
func (a *Authenticator) MetadataHandler() http.Handler {
	servers := a.cfg.AuthorizationServers
	if len(servers) == 0 && strings.HasPrefix(a.cfg.Issuer, "https://") {
		servers = []string{a.cfg.Issuer}
	}
	return auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource:               a.cfg.Audience,
		AuthorizationServers:   servers,
		ScopesSupported:        []string{ScopeRead, ScopeDelegate, ScopeAdmin},
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "a2ad",
	})
}

// scopeFilter is server middleware: tools/list shows a principal only the
// tools its scopes allow, and a tools/call of another tool is refused
// (defence in depth behind ProtectMCP; on stdio the configured scopes).
//
// scope names the scope each tool needs ("" for none a2ad lists).
func scopeFilter(principal func(*mcp.RequestExtra) broker.Principal, scope func(tool string) string) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			switch method {
			case "tools/list":
				res, err := next(ctx, method, req)
				if lr, ok := res.(*mcp.ListToolsResult); ok && err == nil {
					p := principal(req.GetExtra())
					lr.Tools = slices.DeleteFunc(slices.Clone(lr.Tools), func(t *mcp.Tool) bool {
						return !slices.Contains(p.Scopes, scope(t.Name))
					})
					lr.CacheScope = "private" // filtered for this principal
				}
				return res, err
			case "tools/call":
				if cr, ok := req.(*mcp.CallToolRequest); ok {
					p := principal(req.GetExtra())
					if need := scope(cr.Params.Name); need != "" && !slices.Contains(p.Scopes, need) {
						return nil, &jsonrpc.Error{Code: CodeInsufficientScope,
							Message: fmt.Sprintf("insufficient_scope: tool %s needs scope %s, which this principal does not have", cr.Params.Name, need)}
					}
				}
			}
			return next(ctx, method, req)
		}
	}
}

// DevKeyPath is where the development signing key lives in a data directory.
func DevKeyPath(dataDir string) string { return filepath.Join(dataDir, "auth", "dev-signing-key.pem") }

// EnsureDevKey returns the Ed25519 development key of dataDir, generating
// it (PKCS #8 PEM, mode 0600) on first use.
func EnsureDevKey(dataDir string) (ed25519.PrivateKey, error) {
	p := DevKeyPath(dataDir)
	if b, err := os.ReadFile(p); err == nil {
		return parseDevKey(b)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return nil, fmt.Errorf("auth: dev key: %w", err)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if errors.Is(err, os.ErrExist) { // another process made it first
		b, rerr := os.ReadFile(p)
		if rerr != nil {
			return nil, rerr
		}
		return parseDevKey(b)
	}
	if err != nil {
		return nil, fmt.Errorf("auth: dev key: %w", err)
	}
	defer f.Close()
	if err := pem.Encode(f, &pem.Block{Type: "PRIVATE KEY", Bytes: der}); err != nil {
		return nil, err
	}
	return priv, f.Sync()
}

func parseDevKey(b []byte) (ed25519.PrivateKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("auth: dev key: not PEM")
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("auth: dev key: %w", err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, errors.New("auth: dev key: not Ed25519")
	}
	return priv, nil
}

// MintDevToken signs a development token with dataDir's key: iss DevIssuer,
// aud audience, sub, tenant, scope (space-separated), iat now, exp now+ttl.
func MintDevToken(dataDir, audience, sub, tenant, scope string, ttl time.Duration) (string, error) {
	priv, err := EnsureDevKey(dataDir)
	if err != nil {
		return "", err
	}
	return MintToken(priv, DevIssuer, audience, sub, tenant, scope, ttl)
}

// MintToken signs a token with key (Ed25519: EdDSA, ECDSA P-256: ES256,
// RSA: RS256) for the given issuer and audience; see MintDevToken.
func MintToken(key crypto.PrivateKey, issuer, audience, sub, tenant, scope string, ttl time.Duration) (string, error) {
	if sub == "" || tenant == "" {
		return "", errors.New("token mint: --sub and --tenant are required")
	}
	if ttl <= 0 || ttl > 30*24*time.Hour {
		return "", errors.New("token mint: --ttl must be between 1s and 720h")
	}
	var method jwt.SigningMethod
	switch k := key.(type) {
	case ed25519.PrivateKey:
		method = jwt.SigningMethodEdDSA
	case *ecdsa.PrivateKey:
		if k.Curve.Params().BitSize != 256 {
			return "", errors.New("token mint: ECDSA keys must be P-256 (ES256)")
		}
		method = jwt.SigningMethodES256
	case *rsa.PrivateKey:
		method = jwt.SigningMethodRS256
	default:
		return "", fmt.Errorf("token mint: unsupported key type %T", key)
	}
	now := time.Now()
	return jwt.NewWithClaims(method, jwt.MapClaims{
		"iss": issuer, "aud": audience, "sub": sub, "tenant": tenant, "scope": scope,
		"iat": now.Unix(), "exp": now.Add(ttl).Unix(),
	}).SignedString(key)
}

// ReadPrivateKey reads a PKCS #8 (or SEC 1 EC, or PKCS #1 RSA) PEM private key.
func ReadPrivateKey(path string) (crypto.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("%s: not PEM", path)
	}
	if k, err := x509.ParsePKCS8PrivateKey(blk.Bytes); err == nil {
		return k, nil
	}
	if k, err := x509.ParseECPrivateKey(blk.Bytes); err == nil {
		return k, nil
	}
	if k, err := x509.ParsePKCS1PrivateKey(blk.Bytes); err == nil {
		return k, nil
	}
	return nil, fmt.Errorf("%s: not a PKCS #8, EC or RSA private key", path)
}

func readPublicKey(path string) (crypto.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: public_key_file: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("auth: public_key_file %s: not PEM", path)
	}
	switch blk.Type {
	case "CERTIFICATE":
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("auth: public_key_file %s: %w", path, err)
		}
		return c.PublicKey, nil
	case "PUBLIC KEY":
		k, err := x509.ParsePKIXPublicKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("auth: public_key_file %s: %w", path, err)
		}
		return k, nil
	}
	return nil, fmt.Errorf("auth: public_key_file %s: PEM block %q is not PUBLIC KEY or CERTIFICATE", path, blk.Type)
}

func algorithmsFor(key crypto.PublicKey) []string {
	switch key.(type) {
	case *ecdsa.PublicKey:
		return []string{"ES256"}
	case ed25519.PublicKey:
		return []string{"EdDSA"}
	case *rsa.PublicKey:
		return []string{"RS256"}
	}
	return nil
}

// BearerClient returns an HTTP client that sends token as `Authorization:
// Bearer` on every request: for Go hosts (StreamableClientTransport's
// HTTPClient), the demo and tests.
func BearerClient(token string) *http.Client {
	return &http.Client{Transport: BearerTransport(token, http.DefaultTransport)}
}

// BearerTransport is an http.RoundTripper that adds Authorization: Bearer
// token to every request (on a copy) and sends it with next.
func BearerTransport(token string, next http.RoundTripper) http.RoundTripper {
	return bearerTransport{token: token, next: next}
}

type bearerTransport struct {
	token string
	next  http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}
