package daemon

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/internal/httpbind"
)

// agentHTTPFaults are the faults of every agent's HTTP binding keys
// (bindings, allowed_origins, http.auth), each a [*KeyError] without its
// line (LoadConfig finds it), all at once:
//
//   - bindings: each JSONRPC or HTTP+JSON, none twice;
//   - allowed_origins: each an origin scheme://host[:port] (RFC 6454),
//     https, or http on a loopback host, with no path;
//   - http.auth: at most one of bearer_token_file and oauth2; a
//     bearer_token_file, and oauth2's client_secret_file, a readable file
//     that is not empty; oauth2's token_url an https URL (http only on a
//     loopback host) and its client_id set (RFC 6749 §4.4, §2.3.1).
func (c Config) agentHTTPFaults() []error {
	var faults []error
	for i, a := range c.Agents {
		at := "agents[" + strconv.Itoa(i) + "]"
		if a.ID != "" {
			at = "agents[" + a.ID + "]"
		}
		for _, e := range flatten(agentcard.CheckHTTPConfig(agentcard.AgentConfig{Bindings: a.Bindings, AllowedOrigins: a.AllowedOrigins})) {
			key, reason, _ := strings.Cut(e.Error(), ": ")
			faults = append(faults, &KeyError{Key: at + "." + key, Reason: reason})
		}
		faults = append(faults, authFaults(at+".http.auth", a.HTTP.Auth)...)
	}
	return faults
}

func authFaults(at string, auth httpbind.Auth) []error {
	var faults []error
	fault := func(key, format string, args ...any) {
		faults = append(faults, &KeyError{Key: at + key, Reason: fmt.Sprintf(format, args...)})
	}
	if auth.BearerTokenFile != "" && auth.OAuth2 != nil {
		fault("", "want one of bearer_token_file and oauth2, not both")
	}
	if auth.BearerTokenFile != "" {
		if why := secretFileFault(auth.BearerTokenFile); why != "" {
			fault(".bearer_token_file", "%s", why)
		}
	}
	if o := auth.OAuth2; o != nil {
		if why := tokenURLFault(o.TokenURL); why != "" {
			fault(".oauth2.token_url", "%s", why)
		}
		if strings.TrimSpace(o.ClientID) == "" {
			fault(".oauth2.client_id", "required: the OAuth 2.0 client id a2ad authenticates as (RFC 6749 §2.2)")
		}
		if o.ClientSecretFile == "" {
			fault(".oauth2.client_secret_file", "required: the file holding the client secret (RFC 6749 §2.3.1)")
		} else if why := secretFileFault(o.ClientSecretFile); why != "" {
			fault(".oauth2.client_secret_file", "%s", why)
		}
		for j, s := range o.Scopes {
			if s == "" || strings.ContainsAny(s, " \t\r\n\"\\") {
				fault(".oauth2.scopes["+strconv.Itoa(j)+"]", "want a scope token (RFC 6749 §3.3: no spaces, quotes or backslashes), got %q", s)
			}
		}
	}
	return faults
}

// secretFileFault says why path cannot serve as a token or secret file:
// it cannot be read, or holds nothing but white space; "" when it can.
func secretFileFault(path string) string {
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Sprintf("file %s does not exist", path)
	case errors.Is(err, os.ErrPermission):
		return fmt.Sprintf("file %s is not readable by a2ad", path)
	case err != nil:
		return fmt.Sprintf("cannot read file %s: want a readable file", path)
	case strings.TrimSpace(string(b)) == "":
		return fmt.Sprintf("file %s is empty", path)
	}
	return ""
}

// tokenURLFault says why s cannot be an OAuth 2.0 token endpoint a2ad
// posts client credentials to, or "" when it can.
func tokenURLFault(s string) string {
	if s == "" {
		return "required: the authorization server's token endpoint (RFC 6749 §3.2), an https URL"
	}
	u, err := url.Parse(s)
	switch {
	case err != nil || u.Host == "" || u.Opaque != "":
		return fmt.Sprintf("want an absolute https URL, got %q", s)
	case u.User != nil:
		return "must not carry user info: the client secret goes in client_secret_file"
	case u.Scheme == "https":
		return ""
	case u.Scheme == "http" && agentcard.OriginOf(s) != "":
		return "" // loopback
	}
	return fmt.Sprintf("want an https URL (http only on a loopback host), got %q", u.Redacted())
}

// outboundAuth is the kind of auth a2ad presents to an agent over HTTP,
// for the registry's auth findings (agentcard.AuthFindings).
func outboundAuth(a httpbind.Auth) string {
	switch {
	case a.OAuth2 != nil:
		return agentcard.AuthOAuth2
	case a.BearerTokenFile != "":
		return agentcard.AuthBearer
	}
	return agentcard.AuthNone
}
