// Package embedded runs the NATS server with JetStream that `a2ad serve`
// embeds when no --nats-url is given.
package embedded

import (
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
}

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
	s, err := server.NewServer(&server.Options{
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
	})
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
