// Package embedded runs the NATS server with JetStream that `a2ad serve`
// embeds when no --nats-url is given.
package embedded

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
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
	// ([DaemonPermissions]). Every other client is an agent and must
	// present an agent credential, checked by VerifyAgent, as its CONNECT
	// token; it gets AgentPermissions for the credential's agent id until
	// the credential expires. Clients without one are refused.
	DaemonPassword string
	// VerifyAgent checks agent credentials (nil: every agent is refused).
	VerifyAgent VerifyAgentFunc
	// AuthRefused, if set, is told of each refused connection (remote
	// address and reason; never the credential).
	AuthRefused func(remote string, err error)
}

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

// AgentInboxPrefix is the inbox prefix an agent's connection must use
// (nats.CustomInboxPrefix): _INBOX_<agentID>.
func AgentInboxPrefix(agentID string) string { return "_INBOX_" + agentID }

// auth is the embedded server's client authentication: the daemon's user
// and password, or an agent credential as the CONNECT token.
type auth struct {
	password string
	verify   VerifyAgentFunc
	refused  func(remote string, err error)
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
	token := o.Token
	if token == "" {
		token = o.Password // nats.UserInfo("<agentId>", credential) works too
	}
	if token == "" {
		a.fail(c, errors.New("no agent credential (connect with the credential from `a2ad agents credential ID` as the token)"))
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
		MaxPayload:         1 << 20,
	}
	if o.DaemonPassword != "" {
		opts.CustomClientAuthentication = &auth{password: o.DaemonPassword, verify: o.VerifyAgent, refused: o.AuthRefused}
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
