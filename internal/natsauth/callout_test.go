package natsauth

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

type keys struct {
	issuer, server, user, xkey, serverXKey nkeys.KeyPair
}

func newKeys(t testing.TB) keys {
	t.Helper()
	var k keys
	var err error
	for _, f := range []struct {
		kp  *nkeys.KeyPair
		new func() (nkeys.KeyPair, error)
	}{{&k.issuer, nkeys.CreateAccount}, {&k.server, nkeys.CreateServer}, {&k.user, nkeys.CreateUser},
		{&k.xkey, nkeys.CreateCurveKeys}, {&k.serverXKey, nkeys.CreateCurveKeys}} {
		if *f.kp, err = f.new(); err != nil {
			t.Fatal(err)
		}
	}
	return k
}

func pub(kp nkeys.KeyPair) string { p, _ := kp.PublicKey(); return p }

// request is an authorization request as nats-server 2.15 signs it for a
// CONNECT with this token.
func (k keys) request(t testing.TB, token string) []byte {
	t.Helper()
	rc := jwt.NewAuthorizationRequestClaims(pub(k.issuer))
	rc.Audience = "nats-authorization-request"
	rc.UserNkey = pub(k.user)
	rc.Server = jwt.ServerID{Name: "n1", ID: pub(k.server)}
	rc.ClientInformation = jwt.ClientInformation{Host: "10.0.0.7", ID: 42}
	rc.ConnectOptions = jwt.ConnectOptions{Token: token}
	rc.Expires = time.Now().Add(2 * time.Second).Unix()
	s, err := rc.Encode(k.server)
	if err != nil {
		t.Fatal(err)
	}
	return []byte(s)
}

var (
	issued  = time.Now().Truncate(time.Second)
	expires = issued.Add(time.Hour)
)

func grantFraudReview(c Connect) (Grant, error) {
	if c.Token != "good" {
		return Grant{}, errors.New("agent credential invalid: not a JWS")
	}
	return Grant{AgentID: "fraud-review", JTI: "0123456789abcdef0123456789abcdef", IssuedAt: issued, Expires: expires,
		Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{"a2a.events.fraud-review.>", "a2a.registry.register"}},
			Subscribe: &server.SubjectPermission{Allow: []string{"a2a.agent.fraud-review.>", "_INBOX_fraud-review.>"}},
			Response:  &server.ResponsePermission{MaxMsgs: 1, Expires: time.Minute},
		}, MaxSubscriptions: 1024, MaxPayload: 1 << 20}, nil
}

// decodeResponse checks what nats-server checks of an answer (signed by the
// issuer, for the user and the server) and returns it.
func (k keys) decodeResponse(t *testing.T, b []byte) *jwt.AuthorizationResponseClaims {
	t.Helper()
	rc, err := jwt.DecodeAuthorizationResponseClaims(string(b))
	if err != nil {
		t.Fatalf("response: %v", err)
	}
	if rc.Issuer != pub(k.issuer) || rc.Subject != pub(k.user) || rc.Audience != pub(k.server) {
		t.Fatalf("response issuer %s subject %s audience %s, want the issuer, the user nkey and the server id", rc.Issuer, rc.Subject, rc.Audience)
	}
	return rc
}

// A valid credential gets a user JWT, signed by the issuer, that places
// the agent in the account with exactly its own subjects, one response per
// request, the connection limits, the credential's expiry and its jti and
// iat as tags; anything else gets a signed refusal with a2ad's reason and
// no JWT.
func TestRespondGrantsOnlyTheAgentsSubjects(t *testing.T) {
	k := newKeys(t)
	var refused []string
	c := &Callout{Issuer: k.issuer, Account: "A2A", Authorize: grantFraudReview,
		Refused: func(remote string, err error) { refused = append(refused, remote+" "+err.Error()) }}
	out, ok := c.Respond(k.request(t, "good"), "", time.Now())
	if !ok {
		t.Fatal("no response to a valid request")
	}
	rc := k.decodeResponse(t, out)
	if rc.Error != "" {
		t.Fatalf("response error %q", rc.Error)
	}
	uc, err := jwt.DecodeUserClaims(rc.Jwt)
	if err != nil {
		t.Fatal(err)
	}
	vr := jwt.CreateValidationResults()
	uc.Validate(vr)
	if len(vr.Errors()) > 0 {
		t.Fatalf("user JWT invalid: %v", vr.Errors())
	}
	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"issuer", uc.Issuer, pub(k.issuer)},
		{"subject", uc.Subject, pub(k.user)},
		{"name", uc.Name, "fraud-review"},
		{"audience (account)", uc.Audience, "A2A"},
		{"expires", uc.Expires, expires.Unix()},
		{"publish allow", []string(uc.Pub.Allow), []string{"a2a.events.fraud-review.>", "a2a.registry.register"}},
		{"publish deny", len(uc.Pub.Deny), 0},
		{"subscribe allow", []string(uc.Sub.Allow), []string{"a2a.agent.fraud-review.>", "_INBOX_fraud-review.>"}},
		{"responses", *uc.Resp, jwt.ResponsePermission{MaxMsgs: 1, Expires: time.Minute}},
		{"tags", []string(uc.Tags), []string{"a2ad-jti:0123456789abcdef0123456789abcdef", "a2ad-iat:" + strconv.FormatInt(issued.Unix(), 10)}},
		{"max subscriptions", uc.Limits.Subs, int64(1024)},
		{"max payload", uc.Limits.Payload, int64(1 << 20)},
		{"max data", uc.Limits.Data, int64(jwt.NoLimit)},
	} {
		if !equal(c.got, c.want) {
			t.Errorf("user JWT %s = %v, want %v", c.what, c.got, c.want)
		}
	}
	jti, iat, ok := credentialOf(uc.Tags)
	if !ok || jti != "0123456789abcdef0123456789abcdef" || !iat.Equal(issued) {
		t.Errorf("credential from the tags: %q %v %v", jti, iat, ok)
	}
	if len(refused) != 0 {
		t.Errorf("refusals for a valid credential: %v", refused)
	}

	out, ok = c.Respond(k.request(t, "forged"), "", time.Now())
	if !ok {
		t.Fatal("no response to a refused credential (the server would wait for its timeout)")
	}
	if rc := k.decodeResponse(t, out); rc.Error != "agent credential invalid: not a JWS" || rc.Jwt != "" {
		t.Errorf("refusal: error %q jwt %q, want a2ad's reason and no JWT", rc.Error, rc.Jwt)
	}
	if want := []string{"10.0.0.7 agent credential invalid: not a JWS"}; !slices.Equal(refused, want) {
		t.Errorf("refusals %q, want %q", refused, want)
	}
}

func equal(a, b any) bool {
	if as, ok := a.([]string); ok {
		bs, _ := b.([]string)
		return slices.Equal(as, bs)
	}
	return a == b
}

// With an xkey, the sealed request is opened and the answer sealed for the
// server's key; a request sealed while a2ad has no xkey, or not sealed
// while it has one, is not answered (the server's and a2ad's settings
// disagree).
func TestRespondSealsWithTheXKey(t *testing.T) {
	k := newKeys(t)
	c := &Callout{Issuer: k.issuer, XKey: k.xkey, Account: "A2A", Authorize: grantFraudReview}
	sealed, err := k.serverXKey.Seal(k.request(t, "good"), pub(k.xkey))
	if err != nil {
		t.Fatal(err)
	}
	out, ok := c.Respond(sealed, pub(k.serverXKey), time.Now())
	if !ok {
		t.Fatal("no response to a sealed request")
	}
	opened, err := k.serverXKey.Open(out, pub(k.xkey))
	if err != nil {
		t.Fatalf("response not sealed for the server: %v", err)
	}
	if rc := k.decodeResponse(t, opened); rc.Error != "" || rc.Jwt == "" {
		t.Fatalf("sealed answer: error %q", rc.Error)
	}
	if _, ok := c.Respond(k.request(t, "good"), "", time.Now()); ok {
		t.Error("an unsealed request answered while an xkey is configured")
	}
	plain := &Callout{Issuer: k.issuer, Account: "A2A", Authorize: grantFraudReview}
	if _, ok := plain.Respond(sealed, pub(k.serverXKey), time.Now()); ok {
		t.Error("a sealed request answered without an xkey")
	}
}

// Requests that are not a server's authorization request get no answer
// and are reported, each with its reason.
func TestRespondRefusesWhatIsNotARequest(t *testing.T) {
	k := newKeys(t)
	account, _ := nkeys.CreateAccount()
	byAccount := func() []byte {
		rc := jwt.NewAuthorizationRequestClaims(pub(k.issuer))
		rc.Audience, rc.UserNkey, rc.Server = "nats-authorization-request", pub(k.user), jwt.ServerID{ID: pub(k.server)}
		s, _ := rc.Encode(account)
		return []byte(s)
	}()
	wrongAudience := func() []byte {
		rc := jwt.NewAuthorizationRequestClaims(pub(k.issuer))
		rc.Audience, rc.UserNkey, rc.Server = "something-else", pub(k.user), jwt.ServerID{ID: pub(k.server)}
		s, _ := rc.Encode(k.server)
		return []byte(s)
	}()
	for name, c := range map[string]struct {
		data []byte
		want string
	}{
		"not a JWT":            {[]byte("hello"), "not a valid authorization request: not a signed authorization request JWT"},
		"too long":             {[]byte(strings.Repeat("a", MaxRequestBytes+1)), "not a valid authorization request: longer than 65536 bytes"},
		"signed by an account": {byAccount, "not a valid authorization request: not a signed authorization request JWT"},
		"wrong audience":       {wrongAudience, "not a valid authorization request: audience is not nats-authorization-request"},
	} {
		var got []string
		cb := &Callout{Issuer: k.issuer, Account: "A2A", Authorize: grantFraudReview, Refused: func(_ string, err error) {
			if !errors.Is(err, ErrRequest) {
				t.Errorf("refusal %v does not wrap ErrRequest", err)
			}
			got = append(got, err.Error())
		}}
		if _, ok := cb.Respond(c.data, "", time.Now()); ok || len(got) != 1 || got[0] != c.want {
			t.Errorf("%s: answered %v, refusals %q, want none answered and %q", name, ok, got, c.want)
		}
	}
}

// Whatever arrives on the callout subject, no answer grants anything unless
// the request was a server's, for a credential Authorize accepted.
func FuzzRespond(f *testing.F) {
	k := newKeys(f)
	f.Add(k.request(f, "good"))
	f.Add(k.request(f, "forged"))
	f.Add([]byte("eyJhbGciOiJlZDI1NTE5LW5rZXkiLCJ0eXAiOiJKV1QifQ.e30.AAAA"))
	f.Add([]byte{})
	c := &Callout{Issuer: k.issuer, Account: "A2A", Authorize: grantFraudReview}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, ok := c.Respond(data, "", time.Now())
		if !ok {
			return
		}
		rc, err := jwt.DecodeAuthorizationResponseClaims(string(out))
		if err != nil {
			t.Fatalf("answer is not a response JWT: %v", err)
		}
		if rc.Jwt == "" {
			return
		}
		req, err := jwt.DecodeAuthorizationRequestClaims(string(data))
		if err != nil || !nkeys.IsValidPublicServerKey(req.Issuer) || req.ConnectOptions.Token+req.ConnectOptions.Password != "good" {
			t.Fatalf("granted a user JWT for %q", data)
		}
	})
}

// BenchmarkRespond is one authorization answered: the request's signature
// checked, the user JWT and the response signed (Authorize itself, a
// cached credential check in a2ad, excluded).
func BenchmarkRespond(b *testing.B) {
	k := newKeys(b)
	c := &Callout{Issuer: k.issuer, Account: "A2A", Authorize: grantFraudReview}
	req := k.request(b, "good")
	for b.Loop() {
		if _, ok := c.Respond(req, "", time.Now()); !ok {
			b.Fatal("no answer")
		}
	}
}
