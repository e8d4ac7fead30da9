package agentcard

import (
	"errors"
	"testing"
	"time"
)

// eventually polls cond until it holds, failing the test after a generous
// deadline (the test asserts the outcome, not how soon it comes).
func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A quarantine made through another instance reaches this one's in-memory
// view (its watcher of the bucket), and so does the approval that lifts it.
func TestForDelegationSeesAnotherInstancesChanges(t *testing.T) {
	cfg := AgentConfig{ID: agent, Tenants: []string{"default"}, TrustOnFirstUse: true}
	a, js := newRegistry(t, cfg)
	b, err := NewRegistry(t.Context(), js, []AgentConfig{cfg}, 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	register(t, b, agent, fixture(t))
	eventually(t, "a delegates to the agent b registered", func() error {
		_, _, err := a.ForDelegation(ctx, "default", agent, skill)
		return err
	})
	if _, err := b.Quarantine(ctx, agent, "incident 7"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a sees b's quarantine", func() error {
		_, _, err := a.ForDelegation(ctx, "default", agent, skill)
		var nd *NotDelegableError
		if !errors.As(err, &nd) {
			return errors.New("still delegable")
		}
		if nd.Reason != "quarantined: incident 7" {
			t.Fatalf("reason %q", nd.Reason)
		}
		return nil
	})
	if _, err := b.Approve(ctx, agent, fixtureFingerprint); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a sees b's approval", func() error {
		_, _, err := a.ForDelegation(ctx, "default", agent, skill)
		return err
	})
	// A record removed behind the registries' back: the agent is unknown.
	kv, err := js.KeyValue(ctx, Bucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(ctx, agent); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a sees the record removed", func() error {
		if _, _, err := a.ForDelegation(ctx, "default", agent, skill); !errors.Is(err, ErrAgentNotFound) {
			return errors.New("still visible")
		}
		return nil
	})
}

// A change made through this registry applies to its next delegation at
// once, whatever its watcher has delivered.
func TestForDelegationSeesOwnChangesAtOnce(t *testing.T) {
	r, _ := newRegistry(t, AgentConfig{ID: agent, Tenants: []string{"default"}, TrustOnFirstUse: true})
	ctx := t.Context()
	register(t, r, agent, fixture(t))
	for i := range 20 {
		if _, _, err := r.ForDelegation(ctx, "default", agent, skill); err != nil {
			t.Fatalf("round %d: approved agent: %v", i, err)
		}
		if _, err := r.Quarantine(ctx, agent, "round"); err != nil {
			t.Fatal(err)
		}
		var nd *NotDelegableError
		if _, _, err := r.ForDelegation(ctx, "default", agent, skill); !errors.As(err, &nd) {
			t.Fatalf("round %d: right after the quarantine: %v, want NotDelegableError", i, err)
		}
		if _, err := r.Approve(ctx, agent, fixtureFingerprint); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := r.ForDelegation(ctx, "acme", agent, skill); !errors.Is(err, ErrAgentNotFound) {
		t.Errorf("another tenant: %v, want ErrAgentNotFound", err)
	}
	if _, _, err := r.ForDelegation(ctx, "default", agent, "wire_money"); !errors.Is(err, ErrSkillNotFound) {
		t.Errorf("unknown skill: %v, want ErrSkillNotFound", err)
	}
}
