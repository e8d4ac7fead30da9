package httpbind

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/a2ad/a2ad/internal/a2a"
)

// Auth kinds, as errors and logs name them.
const (
	AuthKindNone   = "none"
	AuthKindBearer = "bearer token"
	AuthKindOAuth2 = "OAuth 2.0 client credentials"
)

// A2A error codes a2a-go (and A2A 1.0's gRPC mapping) use for an
// authentication failure: UNAUTHENTICATED and PERMISSION_DENIED. An HTTP
// 401 or 403 from the agent is an *a2a.RPCError with one of them.
const (
	CodeUnauthenticated = -31401
	CodeUnauthorized    = -31403
)

// AuthError: a2ad could not authenticate to the agent. Status is the
// agent's HTTP answer (401 or 403; the agent took nothing, and the error
// unwraps to an *a2a.RPCError with CodeUnauthenticated or
// CodeUnauthorized), or 0 when a2ad had no credential to send (its file
// unreadable, the OAuth 2.0 token endpoint failing: nothing was sent, and
// the error wraps a2a.ErrAgentUnreachable). It never carries the token,
// the secret or the agent's text.
type AuthError struct {
	AgentID string
	Kind    string // AuthKindNone, AuthKindBearer or AuthKindOAuth2
	Status  int
	// Reason says, in a2ad's words, what failed.
	Reason string
}

func (e *AuthError) Error() string {
	if e.Status != 0 {
		code := CodeUnauthenticated
		if e.Status == http.StatusForbidden {
			code = CodeUnauthorized
		}
		return fmt.Sprintf("agent %s refused a2ad's credentials (%s): HTTP %d %s (A2A error %d)", e.AgentID, e.Kind, e.Status, e.Reason, code)
	}
	return fmt.Sprintf("agent %s: no credential to send (%s): %s", e.AgentID, e.Kind, e.Reason)
}

// Unwrap gives the error its broker class.
func (e *AuthError) Unwrap() error {
	switch e.Status {
	case 0:
		return a2a.ErrAgentUnreachable
	case http.StatusForbidden:
		return &a2a.RPCError{Code: CodeUnauthorized, Message: "permission denied"}
	}
	return &a2a.RPCError{Code: CodeUnauthenticated, Message: "unauthenticated"}
}

// credential sets a request's Authorization header.
type credential interface {
	kind() string
	// apply sets the header, or returns an *AuthError (Status 0).
	apply(ctx context.Context, h http.Header) error
}

func newCredential(agentID string, a Auth, tokenClient *http.Client) (credential, error) {
	switch {
	case a.BearerTokenFile != "" && a.OAuth2 != nil:
		return nil, fmt.Errorf("agent %s: auth sets both bearer_token_file and oauth2; want at most one", agentID)
	case a.BearerTokenFile != "":
		c := &bearerFile{agentID: agentID, path: a.BearerTokenFile}
		if _, err := c.token(); err != nil {
			return nil, err
		}
		return c, nil
	case a.OAuth2 != nil:
		return newOAuth2(agentID, a.OAuth2, tokenClient)
	}
	return nil, nil
}

// bearerFile is a bearer token (RFC 6750 §2.1) read from a file, read
// again whenever the file's modification time or size changes, so a
// rotated token is used without a restart.
type bearerFile struct {
	agentID, path string

	mu    sync.Mutex
	mtime time.Time
	size  int64
	tok   string
}

func (c *bearerFile) kind() string { return AuthKindBearer }

func (c *bearerFile) token() (string, error) {
	fi, err := os.Stat(c.path)
	if err != nil {
		return "", &AuthError{AgentID: c.agentID, Kind: AuthKindBearer, Reason: "bearer_token_file " + c.path + " cannot be read"}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tok != "" && fi.ModTime().Equal(c.mtime) && fi.Size() == c.size {
		return c.tok, nil
	}
	b, err := os.ReadFile(c.path)
	if err != nil {
		return "", &AuthError{AgentID: c.agentID, Kind: AuthKindBearer, Reason: "bearer_token_file " + c.path + " cannot be read"}
	}
	tok := string(bytes.TrimSpace(b))
	if tok == "" || !validToken(tok) {
		return "", &AuthError{AgentID: c.agentID, Kind: AuthKindBearer, Reason: "bearer_token_file " + c.path + " holds no token (want one line of RFC 6750 b64token characters)"}
	}
	c.tok, c.mtime, c.size = tok, fi.ModTime(), fi.Size()
	return tok, nil
}

// validToken: RFC 6750 §2.1 b64token = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=".
func validToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '-', c == '.', c == '_', c == '~', c == '+', c == '/', c == '=':
		default:
			return false
		}
	}
	return true
}

func (c *bearerFile) apply(_ context.Context, h http.Header) error {
	tok, err := c.token()
	if err != nil {
		return err
	}
	h.Set("Authorization", "Bearer "+tok)
	return nil
}

// oauth2Credential is the OAuth 2.0 client-credentials grant (RFC 6749
// §4.4): golang.org/x/oauth2 caches the access token and fetches a new one
// shortly before it expires. The client secret is read from its file
// when the token source is built.
type oauth2Credential struct {
	agentID string
	ts      oauth2.TokenSource
}

func newOAuth2(agentID string, o *OAuth2, tokenClient *http.Client) (*oauth2Credential, error) {
	switch {
	case o.TokenURL == "":
		return nil, fmt.Errorf("agent %s: auth.oauth2.token_url is empty; want the token endpoint's https URL", agentID)
	case o.ClientID == "":
		return nil, fmt.Errorf("agent %s: auth.oauth2.client_id is empty", agentID)
	case o.ClientSecretFile == "":
		return nil, fmt.Errorf("agent %s: auth.oauth2.client_secret_file is empty; want a file holding the client secret", agentID)
	}
	if _, err := checkURL(agentID, o.TokenURL); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(o.ClientSecretFile)
	if err != nil {
		return nil, &AuthError{AgentID: agentID, Kind: AuthKindOAuth2, Reason: "client_secret_file " + o.ClientSecretFile + " cannot be read"}
	}
	secret := string(bytes.TrimSpace(b))
	if secret == "" {
		return nil, &AuthError{AgentID: agentID, Kind: AuthKindOAuth2, Reason: "client_secret_file " + o.ClientSecretFile + " is empty"}
	}
	cc := &clientcredentials.Config{ClientID: o.ClientID, ClientSecret: secret, TokenURL: o.TokenURL, Scopes: o.Scopes}
	ctx := context.WithValue(context.Background(), oauth2.HTTPClient, tokenClient)
	return &oauth2Credential{agentID: agentID, ts: cc.TokenSource(ctx)}, nil
}

func (c *oauth2Credential) kind() string { return AuthKindOAuth2 }

func (c *oauth2Credential) apply(_ context.Context, h http.Header) error {
	tok, err := c.ts.Token()
	if err != nil {
		reason := "the token endpoint did not issue an access token"
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && re.Response != nil {
			reason = fmt.Sprintf("the token endpoint answered HTTP %d", re.Response.StatusCode)
		}
		return &AuthError{AgentID: c.agentID, Kind: AuthKindOAuth2, Reason: reason}
	}
	if !validToken(tok.AccessToken) || tok.AccessToken == "" {
		return &AuthError{AgentID: c.agentID, Kind: AuthKindOAuth2, Reason: "the token endpoint issued an access token a2ad cannot send"}
	}
	h.Set("Authorization", "Bearer "+tok.AccessToken)
	return nil
}
