package agentcred

import (
	"errors"
	"testing"
	"time"
)

// Revoking all of an agent's credentials refuses every one issued before,
// cached or not, and not one minted after (even in the same second), nor
// another agent's; revoking one jti refuses that credential only.
func TestRevocationsRefuseWhatWasRevokedOnly(t *testing.T) {
	k := keys(t, 7)
	r := &Revocations{}
	k.SetRevocations(r)
	now := time.Now()
	old, oldC, err := k.MintClaims("fraud-review", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	if !ValidJTI(oldC.ID) {
		t.Fatalf("jti %q is not 32 hex digits", oldC.ID)
	}
	sibling, sibC, _ := k.MintClaims("fraud-review", time.Hour, now)
	other, _, _ := k.MintClaims("mallory", time.Hour, now)
	if _, err := k.Verify(old); err != nil { // cached from here on
		t.Fatal(err)
	}

	r.AddCredential("fraud-review", oldC.ID)
	_, err = k.Verify(old)
	if !errors.Is(err, ErrRevoked) || !errors.Is(err, ErrInvalid) {
		t.Fatalf("revoked jti: %v, want ErrRevoked and ErrInvalid", err)
	}
	if want := "agent credential invalid: agent credential revoked (credential " + oldC.ID + ")"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if c, err := k.Verify(sibling); err != nil || c.ID != sibC.ID {
		t.Fatalf("sibling credential: %+v %v, want it accepted", c, err)
	}

	before := RevokedBefore(now)
	r.SetAgent("fraud-review", before)
	if _, err := k.Verify(sibling); !errors.Is(err, ErrRevoked) {
		t.Fatalf("credential issued before the revocation: %v, want ErrRevoked", err)
	}
	if _, err := k.Verify(other); err != nil {
		t.Fatalf("another agent's credential: %v", err)
	}
	fresh, freshC, err := k.MintClaims("fraud-review", time.Hour, now) // same second as the revocation
	if err != nil {
		t.Fatal(err)
	}
	if !freshC.IssuedAt.Equal(before) {
		t.Errorf("iat %v, want the revocation time %v", freshC.IssuedAt, before)
	}
	if _, err := k.Verify(fresh); err != nil {
		t.Fatalf("credential minted after the revocation: %v", err)
	}
	// A second revocation earlier than the first does not undo it.
	r.SetAgent("fraud-review", before.Add(-time.Hour))
	if _, err := k.Verify(sibling); !errors.Is(err, ErrRevoked) {
		t.Fatalf("after an earlier revocation time: %v, want still revoked", err)
	}
	r.RemoveCredential(oldC.ID)
	if got := r.Credentials("fraud-review"); len(got) != 0 {
		t.Errorf("jtis %v after removal", got)
	}
}

// Measured before: `a2ad agents revoke bystander --credential <jti of
// fraud-review's credential>` revoked fraud-review's credential while the
// audit trail said bystander's. A jti is revoked for the agent named.
func TestRevokedJTIIsTheNamedAgents(t *testing.T) {
	k := keys(t, 8)
	r := &Revocations{}
	k.SetRevocations(r)
	tok, c, err := k.MintClaims("fraud-review", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	r.AddCredential("bystander", c.ID)
	if _, err := k.Verify(tok); err != nil {
		t.Fatalf("fraud-review's credential after a revocation of its jti for bystander: %v, want it valid", err)
	}
	r.AddCredential("fraud-review", c.ID)
	if _, err := k.Verify(tok); !errors.Is(err, ErrRevoked) {
		t.Fatalf("fraud-review's credential revoked for fraud-review: %v, want ErrRevoked", err)
	}
	r.RemoveCredential(c.ID)
	if _, err := k.Verify(tok); err != nil || len(r.Credentials("bystander")) != 0 {
		t.Fatalf("after RemoveCredential: %v, bystander's %v; want valid and none left", err, r.Credentials("bystander"))
	}
}
