package agentcred

import (
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"
)

// ErrRevoked is wrapped (together with [ErrInvalid]) by the refusal of a
// credential an operator revoked before it expired.
var ErrRevoked = errors.New("agent credential revoked")

// MaxRevokedPerAgent bounds the credentials of one agent revoked one by
// one ([Revocations.AddCredential]) and not yet covered by a revocation of
// all its credentials: beyond it, revoke them all.
const MaxRevokedPerAgent = 100

// ErrTooManyRevoked is returned when an agent already has
// [MaxRevokedPerAgent] credentials revoked one by one.
var ErrTooManyRevoked = fmt.Errorf("agent has %d credentials revoked one by one: revoke all of its credentials instead (a2ad agents revoke ID)", MaxRevokedPerAgent)

var jtiPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

// ValidJTI reports whether jti has the form of the jti a2ad gives its
// credentials: 32 lowercase hex digits (128 random bits).
func ValidJTI(jti string) bool { return jtiPattern.MatchString(jti) }

// RevokedBefore is the revocation time of every credential of an agent
// issued until now: now rounded up to the next whole second. A credential's
// iat is in whole seconds (RFC 7519 §2 NumericDate, as [Keys.Mint] truncates
// it), so every credential minted before now has an iat before it; one
// minted after it, by keys that know the revocation, gets an iat of at
// least it ([Keys.MintClaims]).
func RevokedBefore(now time.Time) time.Time {
	return now.Truncate(time.Second).Add(time.Second).UTC()
}

// Revocations are the agent credentials revoked before their expiry, as
// this process knows them: per agent, a time before which every credential
// issued (iat) is refused, and single credentials by jti. The zero value is
// ready and safe for concurrent use. a2ad keeps them current from a KV
// bucket that every instance shares (internal/daemon).
type Revocations struct {
	mu     sync.RWMutex
	before map[string]time.Time       // agent id → revoked before
	jti    map[string]string          // jti → agent id
	byID   map[string]map[string]bool // agent id → its revoked jtis
}

// SetAgent refuses every credential of agentID issued before t (or before
// a later time already set).
func (r *Revocations) SetAgent(agentID string, t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.before == nil {
		r.before = map[string]time.Time{}
	}
	if t.After(r.before[agentID]) {
		r.before[agentID] = t
	}
}

// ClearAgent forgets agentID's revocation time.
func (r *Revocations) ClearAgent(agentID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.before, agentID)
}

// AddCredential refuses the credential with this jti (agentID is the agent
// it was revoked for).
func (r *Revocations) AddCredential(agentID, jti string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.jti == nil {
		r.jti, r.byID = map[string]string{}, map[string]map[string]bool{}
	}
	r.jti[jti] = agentID
	if r.byID[agentID] == nil {
		r.byID[agentID] = map[string]bool{}
	}
	r.byID[agentID][jti] = true
}

// RemoveCredential forgets the revocation of one credential.
func (r *Revocations) RemoveCredential(jti string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.jti, jti)
	for agent, set := range r.byID { // revoked under another agent's id too, maybe
		delete(set, jti)
		if len(set) == 0 {
			delete(r.byID, agent)
		}
	}
}

// Credentials returns the jtis revoked one by one for agentID.
func (r *Revocations) Credentials(agentID string) []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.byID[agentID]))
	for j := range r.byID[agentID] {
		out = append(out, j)
	}
	return out
}

// Before returns the time before which agentID's credentials are revoked
// (false: none are, as a whole).
func (r *Revocations) Before(agentID string) (time.Time, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, ok := r.before[agentID]
	return t, ok
}

// Check returns an error wrapping [ErrInvalid] and [ErrRevoked] if c is
// revoked: its jti is, for its agent (a jti revoked under another agent's
// id revokes nothing of this one), or it was issued (iat; none counts as
// the earliest) before its agent's revocation time.
func (r *Revocations) Check(c Claims) error {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if c.ID != "" && r.byID[c.AgentID][c.ID] {
		return fmt.Errorf("%w: %w (credential %s)", ErrInvalid, ErrRevoked, c.ID)
	}
	if t, ok := r.before[c.AgentID]; ok && c.IssuedAt.Before(t) {
		return fmt.Errorf("%w: %w (every credential of agent %s issued before %s)", ErrInvalid, ErrRevoked, c.AgentID, t.UTC().Format(time.RFC3339))
	}
	return nil
}

// SetRevocations makes Verify refuse the credentials r holds revoked, and
// MintClaims issue credentials that r does not refuse.
func (k *Keys) SetRevocations(r *Revocations) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.revoked = r
}

func (k *Keys) revocations() *Revocations {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.revoked
}
