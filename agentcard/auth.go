package agentcard

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Outbound authentication a2ad is configured to present to an HTTP agent
// (AgentConfig.OutboundAuth, from the agent's http.auth): none, a bearer
// token from a file (RFC 6750), or an OAuth 2.0 client-credentials grant
// (RFC 6749 §4.4) whose access token is sent as a bearer token.
const (
	AuthNone   = ""
	AuthBearer = "bearer"
	AuthOAuth2 = "oauth2"
)

// AuthFindings compares what the card's security block asks of a client
// (A2A 1.0 §4.5: securitySchemes, and the card's securityRequirements,
// each entry an alternative whose schemes are all required) with the
// outbound authentication the operator configured (auth: [AuthNone],
// [AuthBearer], [AuthOAuth2]). It matters only for an agent a2ad reaches
// over HTTP; the NATS binding authenticates with NATS credentials.
//
// warnings are the cases a2ad cannot authenticate as the card requires:
// no alternative of securityRequirements is met by auth. A scheme is met
// by:
//
//   - httpAuthSecurityScheme with scheme Bearer (RFC 9110 §11: any case):
//     a bearer token file or OAuth 2.0 client credentials;
//   - oauth2SecurityScheme with a clientCredentials flow: OAuth 2.0 client
//     credentials, or a bearer token file (a token the operator obtains
//     and renews: see the note);
//   - openIdConnectSecurityScheme: a bearer token file, or client
//     credentials against the provider's token endpoint;
//   - never by apiKeySecurityScheme, mtlsSecurityScheme, other HTTP
//     schemes (Basic…), or OAuth 2.0 flows that need a user
//     (authorizationCode, deviceCode…), which a2ad does not support.
//
// notes are the mismatches that still let a2ad authenticate: a bearer
// token sent for an OAuth 2.0 or OpenID Connect scheme (a2ad does not
// renew it), and authentication configured for a card that requires none
// (it is sent anyway). Each finding points at the scheme concerned
// (/securitySchemes/<name>) or at /securityRequirements.
func AuthFindings(c *Card, auth string) (warnings, notes []Note) {
	return authFindings(c.SecuritySchemes, c.SecurityRequirements, auth)
}

// schemeFit is how a configured auth meets one declared scheme.
type schemeFit int

const (
	fitNo schemeFit = iota
	fitAsIs
	fitYes
)

func authFindings(schemes map[string]json.RawMessage, reqs []json.RawMessage, auth string) (warnings, notes []Note) {
	var alternatives [][]string // each the scheme names one entry requires, sorted
	for _, raw := range reqs {
		var r struct {
			Schemes map[string]json.RawMessage `json:"schemes"`
		}
		if json.Unmarshal(raw, &r) != nil {
			continue
		}
		alternatives = append(alternatives, slices.Sorted(maps.Keys(r.Schemes)))
	}
	if len(alternatives) == 0 || slices.ContainsFunc(alternatives, func(a []string) bool { return len(a) == 0 }) {
		if auth != AuthNone {
			notes = append(notes, Note{Pointer: "/securityRequirements",
				Reason: "the card requires no authentication; the configured http.auth (" + auth + ") is sent all the same"})
		}
		return nil, notes
	}
	var unmet []string // per alternative, the first scheme auth does not meet
	for _, alt := range alternatives {
		met, asIs := true, ""
		for _, name := range alt {
			fit, why := schemeFits(schemes[name], auth)
			if fit == fitNo {
				unmet = append(unmet, displayPointer("/securitySchemes/"+escapePointer(name))+" "+why)
				met = false
				break
			}
			if fit == fitAsIs && asIs == "" {
				asIs = name
			}
		}
		if met {
			if asIs != "" {
				notes = append(notes, Note{Pointer: "/securitySchemes/" + escapePointer(asIs),
					Reason: "a2ad sends the bearer_token_file's token as it is: it does not obtain or renew tokens for this scheme (configure http.auth.oauth2 for that)"})
			}
			return nil, notes
		}
	}
	configured := "no http.auth is configured"
	switch auth {
	case AuthBearer:
		configured = "http.auth is a bearer_token_file"
	case AuthOAuth2:
		configured = "http.auth is oauth2 client credentials"
	}
	reason := "a2ad cannot authenticate as the card requires: " + configured + ", and no alternative of securityRequirements is met ("
	const max = 4
	shown := unmet[:min(len(unmet), max)]
	reason += strings.Join(shown, "; ")
	if more := len(unmet) - len(shown); more > 0 {
		reason += "; and " + strconv.Itoa(more) + " more"
	}
	return []Note{{Pointer: "/securityRequirements", Reason: reason + ")"}}, nil
}

// schemeFits says how auth meets the declared scheme raw (a2a.proto
// SecurityScheme), and why not when it does not.
func schemeFits(raw json.RawMessage, auth string) (schemeFit, string) {
	var s struct {
		APIKey *json.RawMessage `json:"apiKeySecurityScheme"`
		HTTP   *struct {
			Scheme string `json:"scheme"`
		} `json:"httpAuthSecurityScheme"`
		OAuth2 *struct {
			Flows map[string]json.RawMessage `json:"flows"`
		} `json:"oauth2SecurityScheme"`
		OIDC *json.RawMessage `json:"openIdConnectSecurityScheme"`
		MTLS *json.RawMessage `json:"mtlsSecurityScheme"`
	}
	if json.Unmarshal(raw, &s) != nil {
		return fitNo, "is not a security scheme a2ad reads"
	}
	switch {
	case s.HTTP != nil:
		if !strings.EqualFold(s.HTTP.Scheme, "bearer") {
			return fitNo, "is an HTTP authentication scheme other than Bearer, which a2ad does not support"
		}
		if auth == AuthNone {
			return fitNo, "needs a bearer token (http.auth.bearer_token_file or http.auth.oauth2)"
		}
		return fitYes, ""
	case s.OAuth2 != nil:
		if _, ok := s.OAuth2.Flows["clientCredentials"]; !ok {
			return fitNo, "is OAuth 2.0 without a clientCredentials flow: a2ad supports only client credentials"
		}
		switch auth {
		case AuthOAuth2:
			return fitYes, ""
		case AuthBearer:
			return fitAsIs, ""
		}
		return fitNo, "needs OAuth 2.0 client credentials (http.auth.oauth2)"
	case s.OIDC != nil:
		switch auth {
		case AuthOAuth2:
			return fitYes, ""
		case AuthBearer:
			return fitAsIs, ""
		}
		return fitNo, "is OpenID Connect: it needs a token (http.auth.bearer_token_file or http.auth.oauth2)"
	case s.APIKey != nil:
		return fitNo, "is an API key, which a2ad does not support"
	case s.MTLS != nil:
		return fitNo, "is mutual TLS, which a2ad does not support for HTTP agents"
	}
	return fitNo, "is not a security scheme a2ad knows"
}
