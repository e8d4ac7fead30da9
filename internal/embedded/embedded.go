// Package embedded runs the NATS server with JetStream that `a2ad serve`
// embeds when no --nats-url is given.
package embedded

import (
	"cmp"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Options configure the embedded server. Zero limits get the defaults below;
// the server never falls back to NATS's own default of 75% of RAM and disk.
type Options struct {
	// StoreDir holds JetStream state (required).
	StoreDir string
	// Listen is host:port for NATS clients; port -1 picks a free one.
	// Default 127.0.0.1:4222.
	Listen string
	// MaxMemory and MaxStore are JetStream limits in bytes (default 256 MiB
	// and 4 GiB).
	MaxMemory int64
	MaxStore  int64
	// DaemonPassword, when set, turns authorization on: user "a2ad" with
	// this password (the daemon's own connection and operators' tools on
	// the host) may do anything but erase or reconfigure the audit stream
	// ([DaemonPermissions]). Every other client (but AuditAdmin's)
	// is an agent and must present an agent credential, checked by
	// VerifyAgent, as its CONNECT token; it gets AgentPermissions for the
	// credential's agent id until the credential expires. Clients without
	// one are refused.
	DaemonPassword string
	// AuditAdmin, when set with DaemonPassword, lets AuditAdminUser in
	// too, on in-process connections only, until it is revoked.
	AuditAdmin *AuditAdmin
	// VerifyAgent checks agent credentials (nil: every agent is refused).
	VerifyAgent VerifyAgentFunc
	// Bars, if set, are agents refused at connect for a while, or while
	// they hold as many connections as they may ([GuardAgents]).
	Bars *Bars
	// AuthRefused, if set, is told of each refused connection (remote
	// address and reason; never the credential).
	AuthRefused func(remote string, err error)
	// Sessions, if set, remember each agent connection's credential, for
	// [CloseRefused].
	Sessions *Sessions
	// TLS, if set, is the server's TLS configuration for clients over TCP
	// (its certificate, TLS 1.2 at least); the server then requires TLS
	// of every TCP client, unless AllowNonTLS. In-process connections
	// (a2ad's own) never need it: nothing crosses a network.
	TLS *tls.Config
	// AllowNonTLS, with TLS, lets plain-text TCP clients in beside TLS
	// ones (nats-server's allow_non_tls).
	AllowNonTLS bool
	// Limits bound each client connection and the server's connections;
	// zero fields take [DefaultLimits].
	Limits Limits
}

// Limits bound what one client connection can make the embedded server
// hold, and how many connections it holds; they apply to every client,
// a2ad's own in-process connection included. What one agent holds over
// all its connections is bounded by [GuardAgents] as well.
type Limits struct {
	// MaxConnections is the most client connections the server holds at
	// once (nats-server max_connections); beyond, a new connection is
	// refused with "maximum connections exceeded" and those open are
	// unharmed.
	MaxConnections int
	// MaxSubscriptions is the most subscriptions one connection may hold
	// (nats-server max_subscriptions); a SUB beyond is refused with
	// "maximum subscriptions exceeded" and the connection stays open.
	MaxSubscriptions int
	// MaxPendingBytes is the most bytes the server buffers for one
	// connection that does not read fast enough (nats-server
	// max_pending); beyond, or when a write to it takes longer than
	// WriteDeadline, the server closes it as a slow consumer.
	MaxPendingBytes int64
	WriteDeadline   time.Duration
	// AuthTimeout is how long a new connection has to send its CONNECT
	// (its credential), TLS handshake included (nats-server
	// auth_timeout); then it is closed.
	AuthTimeout time.Duration
	// PingInterval and MaxPingsOut: a connection that leaves MaxPingsOut
	// pings, sent every PingInterval, unanswered is closed as stale.
	PingInterval time.Duration
	MaxPingsOut  int
}

// DefaultLimits are the embedded server's limits that Options.Limits
// leaves zero.
var DefaultLimits = Limits{MaxConnections: 4096, MaxSubscriptions: 1024, MaxPendingBytes: 64 << 20,
	WriteDeadline: 10 * time.Second, AuthTimeout: 5 * time.Second, PingInterval: 2 * time.Minute, MaxPingsOut: 2}

// Or returns l with each zero field taken from d.
func (l Limits) Or(d Limits) Limits {
	l.MaxConnections = cmp.Or(l.MaxConnections, d.MaxConnections)
	l.MaxSubscriptions = cmp.Or(l.MaxSubscriptions, d.MaxSubscriptions)
	l.MaxPendingBytes = cmp.Or(l.MaxPendingBytes, d.MaxPendingBytes)
	l.WriteDeadline = cmp.Or(l.WriteDeadline, d.WriteDeadline)
	l.AuthTimeout = cmp.Or(l.AuthTimeout, d.AuthTimeout)
	l.PingInterval = cmp.Or(l.PingInterval, d.PingInterval)
	l.MaxPingsOut = cmp.Or(l.MaxPingsOut, d.MaxPingsOut)
	return l
}

// MaxPayload is the largest message, headers and body, in bytes, that a
// client may publish to the embedded server (nats-server max_payload):
// the largest agent event a2ad accepts (agent_limits.max_event_bytes at
// most) and the largest brief or record a2ad writes fit in it. A larger
// publish is refused with nats.ErrMaxPayload by the client library, or,
// sent regardless, closes that connection only.
const MaxPayload = 1 << 20

// MaxControlLine is the longest protocol line (a PUB or SUB with its
// subject) a client may send, in bytes (nats-server max_control_line):
// agent ids and task ids are at most 128 bytes each, so subjects stay far
// below it.
const MaxControlLine = 4096

// DaemonUser is the NATS user of a2ad's own connection.
const DaemonUser = "a2ad"

// VerifyAgentFunc checks an agent credential (the token of a NATS CONNECT)
// and returns the agent id it speaks for and when it expires.
type VerifyAgentFunc func(token string) (agentID string, expires time.Time, err error)

// AgentPermissions are what a connection authenticated as agentID may do on
// the embedded server (docs/nats-binding.md §10): publish its own events
// and registrations, subscribe to its own RPC subjects and its own inbox
// (prefix _INBOX_<agentID>, for replies and publish acknowledgements), and
// answer requests it received. Everything else is refused by the server
// with a permissions violation: another agent's subjects, JetStream's API,
// the KV buckets, a2ad's inbox, the system account.
func AgentPermissions(agentID string) *server.Permissions {
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{"a2a.events." + agentID + ".>", "a2a.registry.register"}},
		Subscribe: &server.SubjectPermission{Allow: []string{"a2a.agent." + agentID + ".>", AgentInboxPrefix(agentID) + ".>"}},
		Response:  &server.ResponsePermission{MaxMsgs: 1, Expires: time.Minute},
	}
}

// AuditStream is the audit trail's stream (internal/audit.Stream).
const AuditStream = "A2AD_AUDIT"

// DaemonPermissions are those of a2ad's own user: everything, except
// changing the audit stream's configuration, deleting it, purging it or
// deleting a record of it through the JetStream API ([AuditDenied]).
func DaemonPermissions() *server.Permissions {
	return &server.Permissions{Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: AuditDenied()}}
}

// AuditDenied are the JetStream API subjects with which a user could
// erase audit records, at once or later: an update of the stream's
// configuration (a max_age of one second expires the whole trail;
// allow_rollup_hdrs would let one publish purge it), a delete of the
// stream, a purge, a delete of one record. The stream's deny_delete and
// deny_purge refuse the last two as well, but no stream setting refuses an
// update or a delete of the stream itself, so a2ad's own user is denied
// all four, here and in deploy/nats-cluster/accounts.conf. Creating the
// stream stays allowed: JetStream refuses a create of an existing stream
// with another configuration, so a create cannot change it.
func AuditDenied() []string {
	return []string{"$JS.API.STREAM.UPDATE." + AuditStream, "$JS.API.STREAM.DELETE." + AuditStream,
		"$JS.API.STREAM.PURGE." + AuditStream, "$JS.API.STREAM.MSG.DELETE." + AuditStream}
}

// AuditAdminUser is the embedded server's user through which a2ad gives
// the audit stream its configured settings at start. It exists because
// DaemonUser may not update that stream ([AuditDenied]) and the embedded
// server has no other administrator who could, while a2ad's configuration
// (audit.max_age, audit.max_bytes) should take effect there. It may only
// read, create and update A2AD_AUDIT (no delete, no purge) and receive the
// answers on its inbox ([AuditAdminInboxPrefix]); its credential is an
// [AuditAdmin].
const AuditAdminUser = "a2ad-audit-admin"

// AuditAdminInboxPrefix is the inbox prefix of [AuditAdminUser]'s
// connection.
const AuditAdminInboxPrefix = "_A2AD_AUDIT_ADMIN_INBOX"

// AuditAdminPermissions are those of [AuditAdminUser].
func AuditAdminPermissions() *server.Permissions {
	api := "$JS.API.STREAM."
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{api + "INFO." + AuditStream, api + "CREATE." + AuditStream, api + "UPDATE." + AuditStream}},
		Subscribe: &server.SubjectPermission{Allow: []string{AuditAdminInboxPrefix + ".>"}},
	}
}

// AuditAdmin is the credential of [AuditAdminUser] for one process: a
// random password made by [NewAuditAdmin] at each start, held in this
// process's memory only — never written to disk, never logged, no
// accessor — and accepted by the server only on in-process connections
// and only until [AuditAdmin.Revoke]. a2ad opens one connection with it,
// applies the audit stream's settings, closes it and revokes it.
type AuditAdmin struct {
	mu       sync.Mutex
	password string // "" once revoked
}

// NewAuditAdmin returns a credential with a fresh random password (128
// bits, crypto/rand).
func NewAuditAdmin() *AuditAdmin { return &AuditAdmin{password: rand.Text()} }

// ErrAuditAdminRevoked is Connect's error after Revoke.
var ErrAuditAdminRevoked = errors.New("embedded: the audit admin credential is revoked")

// Connect opens an in-process connection to s as [AuditAdminUser], with
// inbox prefix [AuditAdminInboxPrefix]; the caller closes it.
func (a *AuditAdmin) Connect(s *server.Server, opts ...nats.Option) (*nats.Conn, error) {
	a.mu.Lock()
	pw := a.password
	a.mu.Unlock()
	if pw == "" {
		return nil, ErrAuditAdminRevoked
	}
	opts = append(opts, nats.InProcessServer(s), nats.Name(AuditAdminUser), nats.UserInfo(AuditAdminUser, pw),
		nats.CustomInboxPrefix(AuditAdminInboxPrefix), nats.MaxReconnects(0))
	return nats.Connect("", opts...)
}

// Revoke forgets the password: the server refuses [AuditAdminUser] from
// then on. A connection already open stays open; close it first.
func (a *AuditAdmin) Revoke() {
	if a == nil {
		return
	}
	a.mu.Lock()
	a.password = ""
	a.mu.Unlock()
}

// accepts reports whether pw is the credential's password, not revoked.
func (a *AuditAdmin) accepts(pw string) bool {
	if a == nil {
		return false
	}
	a.mu.Lock()
	want := a.password
	a.mu.Unlock()
	return want != "" && subtle.ConstantTimeCompare([]byte(pw), []byte(want)) == 1
}

// AgentInboxPrefix is the inbox prefix an agent's connection must use
// (nats.CustomInboxPrefix): _INBOX_<agentID>.
func AgentInboxPrefix(agentID string) string { return "_INBOX_" + agentID }

// auth is the embedded server's client authentication: the daemon's user
// and password, the audit admin on an in-process connection, or an agent
// credential as the CONNECT token.
type auth struct {
	password string
	admin    *AuditAdmin
	verify   VerifyAgentFunc
	bars     *Bars
	refused  func(remote string, err error)
	sessions *Sessions
}

// Check implements server.Authentication.
func (a *auth) Check(c server.ClientAuthentication) bool {
	o := c.GetOpts()
	if c.Kind() != server.CLIENT {
		return false
	}
	if o.Username == DaemonUser {
		if subtle.ConstantTimeCompare([]byte(o.Password), []byte(a.password)) != 1 {
			a.fail(c, errors.New("wrong password for user "+DaemonUser))
			return false
		}
		c.RegisterUser(&server.User{Username: DaemonUser, Permissions: DaemonPermissions()})
		return true
	}
	if o.Username == AuditAdminUser {
		// In-process connections are net.Pipe ends: no network client can
		// be the audit admin, whatever it knows.
		if addr := c.RemoteAddress(); addr == nil || addr.Network() != "pipe" || !a.admin.accepts(o.Password) {
			a.fail(c, errors.New("user "+AuditAdminUser+" is a2ad's own, in-process and at start only"))
			return false
		}
		c.RegisterUser(&server.User{Username: AuditAdminUser, Permissions: AuditAdminPermissions()})
		return true
	}
	token := o.Token
	if token == "" {
		token = o.Password // nats.UserInfo("<agentId>", credential) works too
	}
	if token == "" {
		a.fail(c, errors.New("no agent credential (connect with the credential from `a2ad agents credential ID --out FILE` as the token)"))
		return false
	}
	if a.verify == nil {
		a.fail(c, errors.New("agent credentials are not accepted yet (a2ad is starting)"))
		return false
	}
	id, exp, err := a.verify(token)
	if err != nil {
		a.fail(c, err)
		return false
	}
	if o.Username != "" && o.Username != id {
		a.fail(c, fmt.Errorf("user %q is not the credential's agent id %q", o.Username, id))
		return false
	}
	if until, ok := a.bars.barred(id); ok {
		a.fail(c, fmt.Errorf("%w: agent %s may connect again at %s", ErrBarred, id, until.UTC().Format(time.RFC3339)))
		return false
	}
	if a.bars.atConnectionLimit(id) {
		a.fail(c, fmt.Errorf("%w: agent %s has as many connections as agent_limits.max_connections allows", ErrBarred, id))
		return false
	}
	a.sessions.note(c.RemoteAddress(), token)
	c.RegisterUser(&server.User{Username: id, Permissions: AgentPermissions(id), ConnectionDeadline: exp})
	return true
}

func (a *auth) fail(c server.ClientAuthentication, err error) {
	if a.refused != nil {
		remote := ""
		if addr := c.RemoteAddress(); addr != nil {
			remote = addr.String()
		}
		a.refused(remote, err)
	}
}

// DaemonInboxPrefix is the inbox prefix of a2ad's own connection, which
// agents may not subscribe to.
const DaemonInboxPrefix = "_A2AD_INBOX"

// Default limits, in bytes.
const (
	DefaultMaxMemory = 256 << 20
	DefaultMaxStore  = 4 << 30
)

// Start starts the server and waits up to 10 s for it to accept clients.
func Start(o Options) (*server.Server, error) {
	if o.StoreDir == "" {
		return nil, errors.New("embedded: StoreDir is required")
	}
	if o.Listen == "" {
		o.Listen = "127.0.0.1:4222"
	}
	host, portStr, err := net.SplitHostPort(o.Listen)
	if err != nil {
		return nil, fmt.Errorf("embedded: --nats-listen %q: %w", o.Listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("embedded: --nats-listen %q: bad port", o.Listen)
	}
	if port == 0 {
		// Port 0 is a free port, as for every other listener (nats-server
		// takes 0 for its default, 4222, and -1 for a free one).
		port = server.RANDOM_PORT
	}
	if o.MaxMemory == 0 {
		o.MaxMemory = DefaultMaxMemory
	}
	if o.MaxStore == 0 {
		o.MaxStore = DefaultMaxStore
	}
	opts := &server.Options{
		ServerName:         "a2ad-embedded",
		Host:               host,
		Port:               port,
		JetStream:          true,
		StoreDir:           o.StoreDir,
		JetStreamMaxMemory: o.MaxMemory,
		JetStreamMaxStore:  o.MaxStore,
		NoSigs:             true,
		NoLog:              true,
		MaxPayload:         MaxPayload,
		MaxControlLine:     MaxControlLine,
		// A consumer that does not read (an agent that subscribed and
		// stopped reading) must not stall the publisher — a2ad's own
		// connection, on which every tenant's task writes go — as NATS
		// does by default: its copies are dropped instead.
		NoFastProducerStall: true,
	}
	l := o.Limits.Or(DefaultLimits)
	opts.MaxConn, opts.MaxSubs, opts.MaxPending, opts.WriteDeadline = l.MaxConnections, l.MaxSubscriptions, l.MaxPendingBytes, l.WriteDeadline
	opts.AuthTimeout, opts.PingInterval, opts.MaxPingsOut = l.AuthTimeout.Seconds(), l.PingInterval, l.MaxPingsOut
	if o.TLS != nil {
		opts.TLSConfig, opts.AllowNonTLS = o.TLS, o.AllowNonTLS
		// The handshake must fit in the time for the CONNECT.
		opts.TLSTimeout = l.AuthTimeout.Seconds()
	}
	if o.DaemonPassword != "" {
		opts.CustomClientAuthentication = &auth{password: o.DaemonPassword, admin: o.AuditAdmin, verify: o.VerifyAgent, bars: o.Bars, refused: o.AuthRefused,
			sessions: o.Sessions}
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded: NATS server not ready on %s within 10s (port in use?)", o.Listen)
	}
	return s, nil
}
