// Package embedded runs the NATS server with JetStream that `a2ad serve`
// embeds when no --nats-url is given.
package embedded

import (
	"crypto/rand"
	"encoding/hex"
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
	// this password may do anything (the daemon's own connection); every
	// client without credentials is an agent, which may only serve its RPC
	// subjects, reply, publish events and register (AgentPermissions):
	// never JetStream's API, the KV buckets or the shared secrets.
	DaemonPassword string
}

// DaemonUser is the NATS user of a2ad's own connection.
const DaemonUser = "a2ad"

// AgentPermissions are what a client without credentials may do on the
// embedded server (docs/nats-binding.md §10). They do not yet tell agents
// apart: per-agent credentials are a later step.
//
// Subscriptions are a deny list because agents choose their inbox prefix
// (the binding suggests _INBOX_<agentId>): they may not read JetStream's
// API, KV or system subjects, the daemon's inbox (DaemonInboxPrefix, where
// KV watches deliver task records), other agents' events or registrations.
func AgentPermissions() *server.Permissions {
	return &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{"a2a.events.>", "a2a.registry.register"}},
		Subscribe: &server.SubjectPermission{Allow: []string{">"},
			Deny: []string{"$JS.>", "$KV.>", "$O.>", "$SYS.>", DaemonInboxPrefix + ".>", "a2a.events.>", "a2a.registry.>"}},
		Response: &server.ResponsePermission{MaxMsgs: 1, Expires: time.Minute},
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
		opts.Users = []*server.User{
			{Username: DaemonUser, Password: o.DaemonPassword},
			{Username: "agent", Password: randomPassword(), Permissions: AgentPermissions()},
		}
		opts.NoAuthUser = "agent"
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

func randomPassword() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
