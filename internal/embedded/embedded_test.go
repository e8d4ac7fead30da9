package embedded

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The audit admin gets in on an in-process connection with its password,
// never over the network, never after Revoke, and may only read, create
// and update the audit stream.
func TestAuditAdminIsInProcessOneShotAndNarrow(t *testing.T) {
	admin := NewAuditAdmin()
	var mu sync.Mutex
	var refused []string
	s, err := Start(Options{StoreDir: t.TempDir(), Listen: "127.0.0.1:-1", MaxStore: 64 << 20, DaemonPassword: strings.Repeat("p", 32),
		AuditAdmin: admin, AuthRefused: func(_ string, err error) {
			mu.Lock()
			defer mu.Unlock()
			refused = append(refused, err.Error())
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	password := admin.password
	if len(password) < 26 {
		t.Fatalf("password %d characters long, want at least 26 (128 bits)", len(password))
	}
	if other := NewAuditAdmin(); other.password == password {
		t.Fatal("two credentials with one password")
	}

	if nc, err := nats.Connect(s.ClientURL(), nats.UserInfo(AuditAdminUser, password), nats.MaxReconnects(0)); !errors.Is(err, nats.ErrAuthorization) {
		if nc != nil {
			nc.Close()
		}
		t.Errorf("over TCP with the right password: %v, want an authorization violation", err)
	}

	var asyncErrs []string
	nc, err := admin.Connect(s, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		mu.Lock()
		defer mu.Unlock()
		asyncErrs = append(asyncErrs, err.Error())
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	cfg := jetstream.StreamConfig{Name: AuditStream, Subjects: []string{"a2ad.audit.>"}, MaxAge: time.Hour, DenyDelete: true, DenyPurge: true}
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatalf("create: %v", err)
	}
	cfg.MaxAge = 2 * time.Hour
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatalf("update: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if err := js.DeleteStream(short, AuditStream); err == nil {
		t.Error("the audit admin deleted the audit stream")
	}
	if _, err := js.Stream(short, "KV_a2ad_tasks"); err == nil || errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("another stream's info: %v, want a refusal (timeout), not an answer", err)
	}
	_ = nc.Publish("a2ad.audit.agent.approved", []byte(`{}`))
	_ = nc.Flush()
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		got := strings.Join(asyncErrs, "\n")
		mu.Unlock()
		if strings.Contains(got, `"$JS.API.STREAM.DELETE.A2AD_AUDIT"`) && strings.Contains(got, `"a2ad.audit.agent.approved"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("permission violations:\n%s\nwant the delete and the publish", got)
		}
		time.Sleep(10 * time.Millisecond)
	}

	admin.Revoke()
	if _, err := admin.Connect(s); !errors.Is(err, ErrAuditAdminRevoked) {
		t.Errorf("Connect after Revoke: %v", err)
	}
	// (A real in-process connection refused here can stall for the
	// server's 10 s write deadline on the pipe: ask auth directly.)
	a := &auth{password: strings.Repeat("p", 32), admin: admin}
	if a.Check(&fakeClient{user: AuditAdminUser, password: password, network: "pipe"}) {
		t.Error("the revoked password is accepted in process")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(refused) != 1 || strings.Contains(refused[0], password) {
		t.Errorf("refusals %q, want the one over TCP, without the password", refused)
	}
}

// The audit admin's password is accepted on in-process connections only.
func TestAuditAdminNeedsAnInProcessConnection(t *testing.T) {
	admin := NewAuditAdmin()
	a := &auth{password: strings.Repeat("p", 32), admin: admin}
	for _, c := range []struct {
		network, password string
		want              bool
	}{
		{"pipe", admin.password, true},
		{"tcp", admin.password, false},
		{"pipe", admin.password + "x", false},
		{"pipe", "", false},
	} {
		if got := a.Check(&fakeClient{user: AuditAdminUser, password: c.password, network: c.network}); got != c.want {
			t.Errorf("%s, password %q: accepted %v, want %v", c.network, c.password, got, c.want)
		}
	}
	if (&auth{password: strings.Repeat("p", 32)}).Check(&fakeClient{user: AuditAdminUser, network: "pipe"}) {
		t.Error("accepted without an AuditAdmin configured")
	}
}

// fakeClient is a CLIENT connection presenting user and password from an
// address on network.
type fakeClient struct {
	user, password, network string
	registered              *server.User
}

func (f *fakeClient) GetOpts() *server.ClientOpts {
	return &server.ClientOpts{Username: f.user, Password: f.password}
}
func (f *fakeClient) GetTLSConnectionState() *tls.ConnectionState { return nil }
func (f *fakeClient) RegisterUser(u *server.User)                 { f.registered = u }
func (f *fakeClient) RemoteAddress() net.Addr                     { return fakeAddr(f.network) }
func (f *fakeClient) GetNonce() []byte                            { return nil }
func (f *fakeClient) Kind() int                                   { return server.CLIENT }
func (f *fakeClient) GetID() uint64                               { return 1 }

type fakeAddr string

func (a fakeAddr) Network() string { return string(a) }
func (a fakeAddr) String() string  { return string(a) }
