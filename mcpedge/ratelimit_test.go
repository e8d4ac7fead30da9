package mcpedge

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/broker"
)

// Allow spends a principal's and its tenant's buckets together: a refusal
// by one spends nothing of the other, and a request over the burst is
// refused with no time to wait (it never fits).
func TestRateLimiterAllow(t *testing.T) {
	l := NewRateLimiter(RateLimits{
		PerPrincipal: RateClasses{Writes: Rate{PerSecond: 1, Burst: 2}},
		PerTenant:    RateClasses{Writes: Rate{PerSecond: 1, Burst: 3}},
	})
	now := time.Now()
	alice, bob := broker.Principal{Subject: "alice", Tenant: "t"}, broker.Principal{Subject: "bob", Tenant: "t"}
	for i := range 2 {
		if ok, _, _ := l.Allow(alice, ClassWrite, 1, now); !ok {
			t.Fatalf("alice's write %d refused within her burst", i+1)
		}
	}
	if ok, wait, scope := l.Allow(alice, ClassWrite, 1, now); ok || scope != "principal" || wait != time.Second {
		t.Errorf("alice's third write: %v %v %q, want refused by principal, 1 s to wait", ok, wait, scope)
	}
	if ok, _, _ := l.Allow(alice, ClassRead, 1, now); !ok {
		t.Error("alice's read refused while only her writes are spent")
	}
	if ok, _, _ := l.Allow(bob, ClassWrite, 1, now); !ok {
		t.Error("bob's first write (the tenant's third) refused")
	}
	if ok, wait, scope := l.Allow(bob, ClassWrite, 1, now); ok || scope != "tenant" || wait != time.Second {
		t.Errorf("bob's second write: %v %v %q, want refused by tenant, 1 s to wait", ok, wait, scope)
	}
	// The tenant's refusal gave bob's own token back: one second later
	// the tenant has one again and bob still has his second.
	if ok, _, _ := l.Allow(bob, ClassWrite, 1, now.Add(time.Second)); !ok {
		t.Error("bob's write a second later refused")
	}
	if ok, wait, scope := l.Allow(broker.Principal{Subject: "carol", Tenant: "u"}, ClassWrite, 3, now); ok || wait != 0 || scope != "principal" {
		t.Errorf("a batch of 3 writes over a burst of 2: %v %v %q, want refused, never fitting", ok, wait, scope)
	}
}

// Buckets stay bounded: once MaxRateBuckets principals have one, idle
// (full again) ones are dropped for new ones; busy ones are kept, and a
// principal with no room shares the overflow bucket.
func TestRateLimiterBucketsAreBounded(t *testing.T) {
	l := NewRateLimiter(RateLimits{})
	now := time.Now()
	for i := range MaxRateBuckets {
		l.Allow(broker.Principal{Subject: "p", Tenant: fmt.Sprint(i)}, ClassWrite, 1, now)
	}
	if n := l.principals.len(); n != MaxRateBuckets {
		t.Fatalf("%d principals' buckets, want %d", n, MaxRateBuckets)
	}
	l.Allow(broker.Principal{Subject: "busy", Tenant: "t"}, ClassWrite, 1, now)
	if n := l.principals.len(); n != MaxRateBuckets {
		t.Errorf("with every bucket busy: %d buckets, want %d (the newcomer shares the overflow)", n, MaxRateBuckets)
	}
	l.Allow(broker.Principal{Subject: "later", Tenant: "t"}, ClassWrite, 1, now.Add(time.Hour))
	if n := l.principals.len(); n != 1 {
		t.Errorf("an hour later (every bucket full again): %d buckets, want 1", n)
	}
}

func TestRateLimitsCheckNamesTheKey(t *testing.T) {
	for _, c := range []struct {
		l    RateLimits
		want string
	}{
		{RateLimits{PerPrincipal: RateClasses{Reads: Rate{PerSecond: -1}}}, "rate_limits.per_principal.reads.per_second -1: want a number above 0"},
		{RateLimits{PerTenant: RateClasses{Writes: Rate{Burst: -2}}}, "rate_limits.per_tenant.writes.burst -2: want at least 1"},
	} {
		err := c.l.Or(DefaultRateLimits).Check()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Check: %v, want %q", err, c.want)
		}
	}
	if err := DefaultRateLimits.Check(); err != nil {
		t.Errorf("the defaults: %v", err)
	}
}
