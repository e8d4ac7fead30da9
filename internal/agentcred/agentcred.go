// Package agentcred mints and verifies agent credentials: the JWTs that
// identify an agent to a2ad on NATS (docs/nats-binding.md §10). An agent
// presents its credential as the token of its NATS CONNECT on the embedded
// server, which then gives the connection the permissions of that agent id
// only, and in the Authorization header of its registration, where a2ad
// checks that the card is registered under the credential's own id.
//
// A credential is a JWT (RFC 7519) signed with Ed25519 (EdDSA, RFC 8037):
//
//	header  {"alg":"EdDSA","typ":"JWT"}
//	claims  {"iss":"a2ad","aud":"urn:a2ad:agent","sub":"<agentId>",
//	         "iat":…, "nbf":…, "exp":…, "jti":"<random>"}
//
// The signing key is derived from a 32-byte seed that every a2ad instance on
// one NATS account shares (KV bucket a2ad_secrets), so any instance verifies
// what another minted. Host tokens (mcpedge) use other keys and another
// audience: neither kind of token is accepted in place of the other.
package agentcred

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/golang-jwt/jwt/v5"
)

// Issuer and Audience are the iss and aud of every agent credential.
const (
	Issuer   = "a2ad"
	Audience = "urn:a2ad:agent"
)

// DefaultTTL is the lifetime of a credential minted without one: 90 days.
// MaxTTL bounds any lifetime: 400 days.
const (
	DefaultTTL = 90 * 24 * time.Hour
	MaxTTL     = 400 * 24 * time.Hour
)

// leeway tolerates clock skew between the instance that minted a credential
// and the one verifying it.
const leeway = 30 * time.Second

// maxTokenBytes bounds what Verify parses: a credential is about 300 bytes.
const maxTokenBytes = 2048

// ErrInvalid is wrapped by every verification failure. Its messages name
// the check that failed (signature, expiry, audience, subject), never the
// token.
var ErrInvalid = errors.New("agent credential invalid")

// Claims are a verified credential's claims.
type Claims struct {
	// AgentID is the credential's sub: the only agent id it speaks for.
	AgentID string
	// IssuedAt and Expires are its iat and exp.
	IssuedAt, Expires time.Time
	// ID is its jti.
	ID string
}

// Keys mint and verify credentials. Build one with [NewKeys].
type Keys struct {
	priv ed25519.PrivateKey
	pub  ed25519.PublicKey

	// verified caches the claims of credentials that verified, by the
	// SHA-256 of the token: an agent presents the same credential at
	// every connection and registration, and an Ed25519 check costs
	// about 50 µs. Expiry is checked again at every use.
	mu       sync.Mutex
	verified map[[sha256.Size]byte]Claims
	// revoked, if set, are credentials refused before their expiry.
	revoked *Revocations
}

// maxVerified bounds the cache of verified credentials; when it is full an
// arbitrary half is forgotten.
const maxVerified = 4096

// NewKeys derives the Ed25519 key pair from a 32-byte seed (RFC 8032 §5.1.5).
func NewKeys(seed []byte) (*Keys, error) {
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("agentcred: seed is %d bytes, want %d", len(seed), ed25519.SeedSize)
	}
	priv := ed25519.NewKeyFromSeed(seed)
	return &Keys{priv: priv, pub: priv.Public().(ed25519.PublicKey)}, nil
}

// Mint signs a credential for agentID (one NATS subject token: 1..128 of
// [A-Za-z0-9_-]) valid from now for ttl (0 means [DefaultTTL]; at most
// [MaxTTL]). It returns the compact JWS and its expiry.
func (k *Keys) Mint(agentID string, ttl time.Duration, now time.Time) (string, time.Time, error) {
	tok, c, err := k.MintClaims(agentID, ttl, now)
	return tok, c.Expires, err
}

// MintClaims is [Keys.Mint] returning the credential's claims too: its jti
// (32 hex digits) is what `a2ad agents revoke ID --credential JTI` names.
// Its iat is now in whole seconds, or, if the agent's credentials were
// revoked ([Keys.SetRevocations]) up to a later time (at most a second
// ahead, [RevokedBefore]), that time: a credential minted after a
// revocation is never refused by it.
func (k *Keys) MintClaims(agentID string, ttl time.Duration, now time.Time) (string, Claims, error) {
	if !natsbind.ValidToken(agentID) {
		return "", Claims{}, fmt.Errorf("agentcred: agent id %q: want 1 to 128 of [A-Za-z0-9_-]", agentID)
	}
	switch {
	case ttl == 0:
		ttl = DefaultTTL
	case ttl < 0 || ttl > MaxTTL:
		return "", Claims{}, fmt.Errorf("agentcred: ttl %s: want more than 0 and at most %s", ttl, MaxTTL)
	}
	var jti [16]byte
	if _, err := rand.Read(jti[:]); err != nil {
		return "", Claims{}, err
	}
	now = now.Truncate(time.Second)
	if r := k.revocations(); r != nil {
		if t, ok := r.Before(agentID); ok && t.After(now) {
			now = t
		}
	}
	exp := now.Add(ttl)
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.RegisteredClaims{
		Issuer:    Issuer,
		Audience:  jwt.ClaimStrings{Audience},
		Subject:   agentID,
		IssuedAt:  jwt.NewNumericDate(now),
		NotBefore: jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(exp),
		ID:        hex.EncodeToString(jti[:]),
	})
	s, err := tok.SignedString(k.priv)
	if err != nil {
		return "", Claims{}, err
	}
	return s, Claims{AgentID: agentID, IssuedAt: now, Expires: exp, ID: hex.EncodeToString(jti[:])}, nil
}

// Verify checks a credential: EdDSA signature under these keys (no other
// algorithm, no key named by the token), iss, aud, exp (required), nbf,
// and a sub that is a valid agent id, and that the credential is not
// revoked ([Keys.SetRevocations]; such errors wrap [ErrRevoked] too).
// Errors wrap [ErrInvalid].
func (k *Keys) Verify(token string) (Claims, error) {
	if len(token) > maxTokenBytes {
		return Claims{}, fmt.Errorf("%w: longer than %d bytes", ErrInvalid, maxTokenBytes)
	}
	sum := sha256.Sum256([]byte(token))
	k.mu.Lock()
	c, ok := k.verified[sum]
	k.mu.Unlock()
	if ok {
		if now := time.Now(); now.After(c.Expires.Add(leeway)) {
			return Claims{}, fmt.Errorf("%w: expired", ErrInvalid)
		}
		if err := k.revocations().Check(c); err != nil {
			return Claims{}, err
		}
		return c, nil
	}
	c, err := k.verify(token)
	if err == nil {
		k.mu.Lock()
		if k.verified == nil {
			k.verified = map[[sha256.Size]byte]Claims{}
		}
		if len(k.verified) >= maxVerified {
			n := 0
			for h := range k.verified { // map order is random
				delete(k.verified, h)
				if n++; n >= maxVerified/2 {
					break
				}
			}
		}
		k.verified[sum] = c
		k.mu.Unlock()
		if err := k.revocations().Check(c); err != nil {
			return Claims{}, err
		}
	}
	return c, err
}

// Known reports whether token verified before and is in the cache of
// verified credentials: [Keys.Verify] then costs a hash, not a signature
// check.
func (k *Keys) Known(token string) bool {
	sum := sha256.Sum256([]byte(token))
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.verified[sum]
	return ok
}

func (k *Keys) verify(token string) (Claims, error) {
	var rc jwt.RegisteredClaims
	_, err := jwt.ParseWithClaims(token, &rc, func(*jwt.Token) (any, error) { return k.pub, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodEdDSA.Alg()}),
		jwt.WithIssuer(Issuer), jwt.WithAudience(Audience),
		jwt.WithExpirationRequired(), jwt.WithLeeway(leeway), jwt.WithStrictDecoding())
	if err != nil {
		return Claims{}, fmt.Errorf("%w: %s", ErrInvalid, reason(err))
	}
	if !natsbind.ValidToken(rc.Subject) {
		return Claims{}, fmt.Errorf("%w: sub is not an agent id", ErrInvalid)
	}
	c := Claims{AgentID: rc.Subject, Expires: rc.ExpiresAt.Time, ID: rc.ID}
	if rc.IssuedAt != nil {
		c.IssuedAt = rc.IssuedAt.Time
	}
	return c, nil
}

// reason names the failed check without quoting the token.
func reason(err error) string {
	if errors.Is(err, jwt.ErrTokenSignatureInvalid) && strings.Contains(err.Error(), "signing method") {
		return "algorithm is not EdDSA"
	}
	for _, r := range []struct {
		err error
		msg string
	}{
		{jwt.ErrTokenMalformed, "malformed"},
		{jwt.ErrTokenSignatureInvalid, "signature does not verify"},
		{jwt.ErrTokenUnverifiable, "unverifiable"},
		{jwt.ErrTokenExpired, "expired"},
		{jwt.ErrTokenNotValidYet, "not valid yet"},
		{jwt.ErrTokenRequiredClaimMissing, "exp missing"},
		{jwt.ErrTokenInvalidIssuer, "iss is not " + Issuer},
		{jwt.ErrTokenInvalidAudience, "aud is not " + Audience},
		{jwt.ErrTokenUsedBeforeIssued, "issued in the future"},
	} {
		if errors.Is(err, r.err) {
			return r.msg
		}
	}
	return "does not verify"
}
