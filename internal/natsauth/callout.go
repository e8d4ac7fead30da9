// Package natsauth makes a2ad the authorization service of an external NATS
// server: the NATS auth callout (nats-server 2.10+, ADR-26
// "NATS Authorization Callouts"). The server hands each CONNECT it cannot
// authorize from its own configuration to [Callout] as a signed
// authorization request; a2ad checks the agent credential in it (the
// CONNECT token, or the password) as the embedded server does and answers
// with a user JWT that places the agent in a2ad's account with its own
// subjects only, until its credential expires, or with a refusal.
// [Kicker] closes live connections through the system account, so that a
// revoked credential is cut off on every server of a cluster.
//
// Only the configuration ("server config") mode of nats-server is served,
// not operator mode: the issuer is an account nkey the server is configured
// with (authorization { auth_callout { issuer } }), and the user JWT's
// audience names the account (deploy/nats-cluster/auth-callout.conf).
package natsauth

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// Subject is where the server sends authorization requests, in the
// callout account (ADR-26).
const Subject = "$SYS.REQ.USER.AUTH"

// QueueGroup is the queue group of every a2ad instance's callout
// subscription: each request is answered by one of them.
const QueueGroup = "a2ad-auth-callout"

// MaxRequestBytes bounds an authorization request (a signed JWT, sealed
// with the xkey when one is configured). A CONNECT is at most the server's
// max_control_line (4 KiB by default) and a client certificate chain a few
// KiB more.
const MaxRequestBytes = 64 << 10

// Tag prefixes of the user JWT a2ad issues: the server shows them as the
// connection's tags in CONNZ, from which [Kicker] learns which credential
// a connection authenticated with. jwt.TagList lowercases tags; a jti is
// lowercase hex, an iat decimal.
const (
	TagJTI = "a2ad-jti:"
	TagIAT = "a2ad-iat:"
)

// xkeyHeader is the header of a request sealed for the service's xkey: the
// server's public curve key, for which the response is sealed too.
const xkeyHeader = "Nats-Server-Xkey"

// ErrRequest is wrapped by the refusal of a request that is not a valid
// authorization request from a NATS server.
var ErrRequest = errors.New("not a valid authorization request")

// Grant is what an agent connection may do, as [Callout.Authorize] decides.
type Grant struct {
	// AgentID is the credential's agent id; it becomes the connection's
	// user name (CONNZ "authorized_user").
	AgentID string
	// JTI and IssuedAt are the credential's jti and iat, tagged on the
	// connection for [Kicker].
	JTI      string
	IssuedAt time.Time
	// Expires is the credential's expiry: the server closes the
	// connection then (user JWT exp).
	Expires time.Time
	// Permissions are the connection's publish, subscribe and response
	// permissions.
	Permissions *server.Permissions
	// MaxSubscriptions and MaxPayload bound the connection (0: the
	// server's own limits).
	MaxSubscriptions int64
	MaxPayload       int64
}

// Connect is what a client sent in its CONNECT, as the request carries it.
type Connect struct {
	// Token is the CONNECT auth_token, else its password.
	Token string
	// User is the CONNECT user name ("" if none).
	User string
	// Remote is the client's address (host only; the server gives no port).
	Remote string
}

// Callout answers authorization requests. Set its fields before [Callout.Serve].
type Callout struct {
	// Issuer signs the responses and the user JWTs: an account key pair
	// whose public key is the server's auth_callout issuer.
	Issuer nkeys.KeyPair
	// XKey, if set, is the curve key pair whose public key is the
	// server's auth_callout xkey: requests are then sealed and answered
	// sealed.
	XKey nkeys.KeyPair
	// Account is the account agents are placed in (the user JWT's
	// audience, in configuration mode an account name of the server).
	Account string
	// Authorize checks one CONNECT; its error, in a2ad's words, is the
	// refusal the server logs. The client sees only "Authorization
	// Violation".
	Authorize func(Connect) (Grant, error)
	// Refused, if set, is told of each refusal.
	Refused func(remote string, err error)
}

// Serve subscribes c to the authorization requests on nc, in [QueueGroup].
func (c *Callout) Serve(nc *nats.Conn) (*nats.Subscription, error) {
	if c.Issuer == nil || c.Authorize == nil || c.Account == "" {
		return nil, errors.New("natsauth: Issuer, Account and Authorize are required")
	}
	// An answer costs three signature operations (about 0.1–0.3 ms): on
	// every core, not only on the subscription's goroutine, so that a burst
	// of connects (a flood included) is answered at the machine's rate.
	// Beyond that many at once the subscription waits (and, if it falls
	// far behind, nats.go drops requests as a slow consumer: those clients
	// time out and retry).
	sem := make(chan struct{}, 2*runtime.GOMAXPROCS(0))
	return nc.QueueSubscribe(Subject, QueueGroup, func(m *nats.Msg) {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			resp, ok := c.Respond(m.Data, m.Header.Get(xkeyHeader), time.Now())
			if ok && m.Reply != "" {
				_ = m.Respond(resp)
			}
		}()
	})
}

// Respond answers one request, whose body is data (sealed for XKey when
// serverXKey, the request's Nats-Server-Xkey header, is set), at now. It
// returns the response body and false only when no response can be built
// (a request not from a server, or one it cannot decode: the server then
// times the client out).
func (c *Callout) Respond(data []byte, serverXKey string, now time.Time) ([]byte, bool) {
	req, err := c.decode(data, serverXKey)
	if err != nil {
		c.refused("", err)
		return nil, false
	}
	conn := Connect{Token: req.ConnectOptions.Token, User: req.ConnectOptions.Username, Remote: req.ClientInformation.Host}
	if conn.Token == "" {
		conn.Token = req.ConnectOptions.Password
	}
	rc := jwt.NewAuthorizationResponseClaims(req.UserNkey)
	rc.Audience = req.Server.ID
	rc.Expires = now.Add(time.Minute).Unix()
	if g, err := c.Authorize(conn); err != nil {
		c.refused(conn.Remote, err)
		rc.Error = err.Error()
	} else if rc.Jwt, err = c.userJWT(req.UserNkey, g, now); err != nil {
		c.refused(conn.Remote, err)
		rc.Error = "a2ad could not issue the user JWT"
	}
	out, err := rc.Encode(c.Issuer)
	if err != nil {
		return nil, false
	}
	if serverXKey == "" || c.XKey == nil {
		return []byte(out), true
	}
	sealed, err := c.XKey.Seal([]byte(out), serverXKey)
	if err != nil {
		return nil, false
	}
	return sealed, true
}

func (c *Callout) refused(remote string, err error) {
	if c.Refused != nil {
		c.Refused(remote, err)
	}
}

// decode opens (with XKey) and decodes a request, checking that a server
// signed it for the authorization service and names the user nkey to
// authorize.
func (c *Callout) decode(data []byte, serverXKey string) (*jwt.AuthorizationRequestClaims, error) {
	if len(data) > MaxRequestBytes {
		return nil, fmt.Errorf("%w: longer than %d bytes", ErrRequest, MaxRequestBytes)
	}
	switch {
	case serverXKey != "" && c.XKey == nil:
		return nil, fmt.Errorf("%w: sealed for an xkey, and nats_auth_callout.xkey_seed_file is not set", ErrRequest)
	case serverXKey == "" && c.XKey != nil:
		return nil, fmt.Errorf("%w: not sealed, and nats_auth_callout.xkey_seed_file is set (the server's auth_callout has no xkey)", ErrRequest)
	case serverXKey != "":
		if !nkeys.IsValidPublicCurveKey(serverXKey) {
			return nil, fmt.Errorf("%w: header %s is not a curve key", ErrRequest, xkeyHeader)
		}
		opened, err := c.XKey.Open(data, serverXKey)
		if err != nil {
			return nil, fmt.Errorf("%w: cannot be opened with the xkey", ErrRequest)
		}
		data = opened
	}
	req, err := jwt.DecodeAuthorizationRequestClaims(string(data))
	if err != nil {
		return nil, fmt.Errorf("%w: not a signed authorization request JWT", ErrRequest)
	}
	vr := jwt.CreateValidationResults()
	req.Validate(vr)
	switch {
	case len(vr.Errors()) > 0:
		return nil, fmt.Errorf("%w: %v", ErrRequest, vr.Errors()[0])
	case !nkeys.IsValidPublicServerKey(req.Issuer):
		return nil, fmt.Errorf("%w: not signed by a server key", ErrRequest)
	case req.Audience != "nats-authorization-request":
		return nil, fmt.Errorf("%w: audience is not nats-authorization-request", ErrRequest)
	case !nkeys.IsValidPublicUserKey(req.UserNkey):
		return nil, fmt.Errorf("%w: user_nkey is not a user key", ErrRequest)
	case req.Server.ID == "":
		return nil, fmt.Errorf("%w: no server_id.id", ErrRequest)
	}
	return req, nil
}

// userJWT issues the user JWT of g for userNkey, signed by Issuer.
func (c *Callout) userJWT(userNkey string, g Grant, now time.Time) (string, error) {
	if g.AgentID == "" || g.Permissions == nil || !g.Expires.After(now) {
		return "", errors.New("natsauth: a grant needs an agent id, permissions and an expiry in the future")
	}
	uc := jwt.NewUserClaims(userNkey)
	uc.Name = g.AgentID
	uc.Audience = c.Account
	uc.Expires = g.Expires.Unix()
	uc.Tags.Add(TagJTI+g.JTI, TagIAT+strconv.FormatInt(g.IssuedAt.Unix(), 10))
	if p := g.Permissions.Publish; p != nil {
		uc.Pub.Allow.Add(p.Allow...)
		uc.Pub.Deny.Add(p.Deny...)
	}
	if s := g.Permissions.Subscribe; s != nil {
		uc.Sub.Allow.Add(s.Allow...)
		uc.Sub.Deny.Add(s.Deny...)
	}
	if r := g.Permissions.Response; r != nil {
		uc.Resp = &jwt.ResponsePermission{MaxMsgs: r.MaxMsgs, Expires: r.Expires}
	}
	if g.MaxSubscriptions > 0 {
		uc.Limits.Subs = g.MaxSubscriptions
	}
	if g.MaxPayload > 0 {
		uc.Limits.Payload = g.MaxPayload
	}
	return uc.Encode(c.Issuer)
}

// credentialOf reads the credential a connection authenticated with from
// the tags of its user JWT ([TagJTI], [TagIAT]); false if it has none.
func credentialOf(tags []string) (jti string, iat time.Time, ok bool) {
	var haveIAT bool
	for _, t := range tags {
		if v, found := strings.CutPrefix(t, TagJTI); found {
			jti = v
		} else if v, found := strings.CutPrefix(t, TagIAT); found {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return "", time.Time{}, false
			}
			iat, haveIAT = time.Unix(n, 0), true
		}
	}
	return jti, iat, haveIAT
}
