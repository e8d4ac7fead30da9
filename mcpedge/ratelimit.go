package mcpedge

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/a2ad/a2ad/internal/broker"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"golang.org/x/time/rate"
)

// Rate is a token bucket (golang.org/x/time/rate): PerSecond requests a
// second on average, up to Burst at once.
type Rate struct {
	PerSecond float64 `yaml:"per_second"`
	Burst     int     `yaml:"burst"`
}

// RateClasses are the rates of the two classes of request: writes are the
// tools that change or create tasks (delegate, task_respond, task_cancel,
// and any tool that needs more than a2a:read), the MCP Tasks extension's
// tasks/update and tasks/cancel, and the admin API's POSTs;
// reads are every other MCP request (agents_list, task_get, initialize,
// tools/list, notifications, …) and the admin API's GETs.
type RateClasses struct {
	Reads  Rate `yaml:"reads"`
	Writes Rate `yaml:"writes"`
}

// RateLimits bound the HTTP requests of each principal (a token's tenant
// and sub) and of each tenant (all its principals together). A request
// spends one token of its principal's bucket and one of its tenant's, of
// its class; over either, it is answered 429 with Retry-After. Buckets are
// per instance. Zero fields take [DefaultRateLimits].
type RateLimits struct {
	PerPrincipal RateClasses `yaml:"per_principal"`
	PerTenant    RateClasses `yaml:"per_tenant"`
}

// DefaultRateLimits are far above what an AI host does (a few calls a
// second) and below what one instance sustains (about 650 delegations a
// second), so that one tenant cannot take an instance from the others.
var DefaultRateLimits = RateLimits{
	PerPrincipal: RateClasses{Reads: Rate{PerSecond: 200, Burst: 400}, Writes: Rate{PerSecond: 50, Burst: 100}},
	PerTenant:    RateClasses{Reads: Rate{PerSecond: 2000, Burst: 4000}, Writes: Rate{PerSecond: 500, Burst: 1000}},
}

// Or returns l with each zero field taken from d.
func (l RateLimits) Or(d RateLimits) RateLimits {
	or := func(r, d Rate) Rate {
		return Rate{PerSecond: cmp.Or(r.PerSecond, d.PerSecond), Burst: cmp.Or(r.Burst, d.Burst)}
	}
	l.PerPrincipal.Reads = or(l.PerPrincipal.Reads, d.PerPrincipal.Reads)
	l.PerPrincipal.Writes = or(l.PerPrincipal.Writes, d.PerPrincipal.Writes)
	l.PerTenant.Reads = or(l.PerTenant.Reads, d.PerTenant.Reads)
	l.PerTenant.Writes = or(l.PerTenant.Writes, d.PerTenant.Writes)
	return l
}

// Check refuses rates no host could work under, naming the key
// (rate_limits.per_principal.writes.burst, …).
func (l RateLimits) Check() error {
	for _, r := range []struct {
		key string
		r   Rate
	}{
		{"per_principal.reads", l.PerPrincipal.Reads}, {"per_principal.writes", l.PerPrincipal.Writes},
		{"per_tenant.reads", l.PerTenant.Reads}, {"per_tenant.writes", l.PerTenant.Writes},
	} {
		if !(r.r.PerSecond > 0) || math.IsInf(r.r.PerSecond, 0) {
			return fmt.Errorf("config: rate_limits.%s.per_second %v: want a number above 0", r.key, r.r.PerSecond)
		}
		if r.r.Burst < 1 {
			return fmt.Errorf("config: rate_limits.%s.burst %d: want at least 1", r.key, r.r.Burst)
		}
	}
	return nil
}

// Request classes, as a2ad_rate_limited_total labels them.
const (
	ClassRead  = "read"
	ClassWrite = "write"
)

// MaxRateBuckets bounds the principals' (and, apart, the tenants')
// buckets a RateLimiter keeps. Idle ones (full again) are dropped when it
// is reached; should that many be busy at once, principals without a
// bucket share one, of the same rate.
const MaxRateBuckets = 100_000

// RateLimiter applies RateLimits to HTTP requests. Build it with
// NewRateLimiter; it is safe for concurrent use.
type RateLimiter struct {
	limits RateLimits

	// OnLimited, if set before serving, is called for each refused
	// request with its edge (mcp, admin), class (read, write) and scope
	// (principal, tenant). It must not block.
	OnLimited func(edge, class, scope string)

	principals, tenants buckets
}

// NewRateLimiter returns a limiter of l (zero fields: DefaultRateLimits).
func NewRateLimiter(l RateLimits) *RateLimiter {
	l = l.Or(DefaultRateLimits)
	return &RateLimiter{limits: l,
		principals: buckets{reads: l.PerPrincipal.Reads, writes: l.PerPrincipal.Writes},
		tenants:    buckets{reads: l.PerTenant.Reads, writes: l.PerTenant.Writes}}
}

// Allow spends n requests of class (ClassRead, ClassWrite) for principal
// p at now. If its principal's or its tenant's bucket lacks them it
// spends nothing and returns false, how long until they are there (0 if
// n is over the bucket's burst: never) and the scope that refused.
func (l *RateLimiter) Allow(p broker.Principal, class string, n int, now time.Time) (ok bool, retryAfter time.Duration, scope string) {
	pb := l.principals.get(strconv.Quote(p.Tenant)+"/"+strconv.Quote(p.Subject), class, now)
	tb := l.tenants.get(p.Tenant, class, now)
	pr := pb.ReserveN(now, n)
	if !pr.OK() {
		return false, 0, "principal"
	}
	if d := pr.DelayFrom(now); d > 0 {
		pr.CancelAt(now)
		return false, d, "principal"
	}
	tr := tb.ReserveN(now, n)
	if !tr.OK() || tr.DelayFrom(now) > 0 {
		d := time.Duration(0)
		if tr.OK() {
			d = tr.DelayFrom(now)
		}
		tr.CancelAt(now)
		pr.CancelAt(now)
		return false, d, "tenant"
	}
	return true, 0, ""
}

// MCP limits the requests to the MCP endpoint, inside
// [Authenticator.ProtectMCP] (which has verified the token and read which
// method and tool the request names). A tools/call of a tool that needs
// more than a2a:read is a write, every other request a read; a JSON-RPC
// batch (MCP before 2025-06-18) spends one write for each of its
// messages. Over a limit the host gets 429, Retry-After in seconds and
// the error {"error":{"code":"rate_limited","message":…}}; the go-sdk
// client keeps its session over a 429.
func (l *RateLimiter) MCP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := PrincipalOf(auth.TokenInfoFromContext(r.Context()))
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		r, c, err := peek(r)
		if err != nil {
			bodyError(w, err)
			return
		}
		class, n := ClassRead, 1
		switch {
		case c.batch > 0:
			class, n = ClassWrite, c.batch
		case c.method == "tools/call" && ToolScopes[c.tool] != ScopeRead:
			class = ClassWrite
		case TaskMethodScopes[c.method] == ScopeDelegate: // tasks/update, tasks/cancel
			class = ClassWrite
		}
		if !l.admit(w, p, "mcp", class, n) {
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Admin limits the admin API's requests, inside [Authenticator.RequireScope]:
// GETs (and HEADs) are reads, every other method a write; over a limit,
// as [RateLimiter.MCP].
func (l *RateLimiter) Admin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := PrincipalFromContext(r.Context())
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		class := ClassWrite
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			class = ClassRead
		}
		if !l.admit(w, p, "admin", class, 1) {
			return
		}
		next.ServeHTTP(w, r)
	})
}

// admit spends n of class for p, or answers 429 and returns false.
func (l *RateLimiter) admit(w http.ResponseWriter, p broker.Principal, edge, class string, n int) bool {
	ok, wait, scope := l.Allow(p, class, n, time.Now())
	if ok {
		return true
	}
	if l.OnLimited != nil {
		l.OnLimited(edge, class, scope)
	}
	var msg string
	if wait == 0 {
		msg = fmt.Sprintf("a batch of %d %ss is more than the %s's burst allows at once; send fewer at a time", n, class, scope)
	} else {
		secs := int(math.Ceil(wait.Seconds()))
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		msg = fmt.Sprintf("too many %ss for this %s; retry after %d s", class, scope, secs)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusTooManyRequests)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": "rate_limited", "message": msg}})
	return false
}

// buckets are token buckets by key, one per class, bounded in number.
type buckets struct {
	reads, writes Rate

	mu    sync.Mutex
	m     map[string]*classBuckets
	swept time.Time
	// overflow is shared by the keys that found no room.
	overflow *classBuckets
}

type classBuckets struct{ read, write *rate.Limiter }

func (b *buckets) newClasses() *classBuckets {
	return &classBuckets{read: rate.NewLimiter(rate.Limit(b.reads.PerSecond), b.reads.Burst),
		write: rate.NewLimiter(rate.Limit(b.writes.PerSecond), b.writes.Burst)}
}

// get is key's bucket of class, made on first use.
func (b *buckets) get(key, class string, now time.Time) *rate.Limiter {
	b.mu.Lock()
	defer b.mu.Unlock()
	cb := b.m[key]
	if cb == nil {
		if b.m == nil {
			b.m = map[string]*classBuckets{}
			b.overflow = b.newClasses()
		}
		if len(b.m) >= MaxRateBuckets && now.Sub(b.swept) >= time.Second {
			b.swept = now
			for k, c := range b.m {
				// A full bucket is what a new one would be.
				if c.read.TokensAt(now) >= float64(c.read.Burst()) && c.write.TokensAt(now) >= float64(c.write.Burst()) {
					delete(b.m, k)
				}
			}
		}
		if len(b.m) < MaxRateBuckets {
			cb = b.newClasses()
			b.m[key] = cb
		} else {
			cb = b.overflow
		}
	}
	if class == ClassWrite {
		return cb.write
	}
	return cb.read
}

// len is the number of keys with a bucket.
func (b *buckets) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.m)
}

// bodyError answers a request whose body could not be read: 413 past
// http_limits.max_body_bytes, else 400, in a2ad's words.
func bodyError(w http.ResponseWriter, err error) {
	var mb *http.MaxBytesError
	w.Header().Set("Content-Type", "application/json")
	if errors.As(err, &mb) {
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": "request_too_large",
			"message": fmt.Sprintf("the request body is larger than %d bytes (http_limits.max_body_bytes)", mb.Limit)}})
		return
	}
	msg := "the request body could not be read to its end"
	if errors.Is(err, errNotOneJSONValue) {
		msg = "the request body is not one JSON value: send one JSON-RPC 2.0 message (or, before protocol 2025-06-18, one batch) per POST"
	}
	w.WriteHeader(http.StatusBadRequest)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": "invalid_request", "message": msg}})
}

// batchLen is the number of messages of a JSON-RPC batch, 0 for a body
// that is not one.
func batchLen(body []byte) int {
	if b := bytes.TrimLeft(body, " \t\r\n"); len(b) == 0 || b[0] != '[' {
		return 0
	}
	var msgs []json.RawMessage
	if json.Unmarshal(body, &msgs) != nil {
		return 1 // not valid JSON: the SDK refuses it; count it once
	}
	return max(len(msgs), 1)
}
