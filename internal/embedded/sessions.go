package embedded

import (
	"context"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Sessions remember with which credential each agent connection to the
// embedded server authenticated, by the connection's remote address, so
// that [CloseRefused] can close the connections whose credential is
// refused since (revoked: docs/operations.md). The zero value is ready.
// The tokens stay in this process's memory, as the server's own copy of
// each CONNECT does; they are never logged.
type Sessions struct {
	mu     sync.Mutex
	byAddr map[string]session
}

type session struct {
	token string
	at    time.Time
}

// sessionGrace is how long a session whose connection Connz does not list
// is kept: a connection being authenticated may not be listed yet.
const sessionGrace = 10 * time.Second

func (s *Sessions) note(addr net.Addr, token string) {
	if s == nil || addr == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byAddr == nil {
		s.byAddr = map[string]session{}
	}
	s.byAddr[addr.String()] = session{token: token, at: time.Now()}
}

// CloseRefused closes every agent connection to srv whose credential
// verify refuses now, and returns how many it closed per agent id.
// Connections it has no session for (not authenticated with an agent
// credential through this package) are left alone. Sessions of
// connections gone are forgotten.
func CloseRefused(srv *server.Server, s *Sessions, verify VerifyAgentFunc) map[string]int {
	cz, err := srv.Connz(&server.ConnzOptions{Username: true, Limit: 1 << 20})
	if err != nil || s == nil {
		return nil
	}
	closed := map[string]int{}
	live := make(map[string]bool, len(cz.Conns))
	for _, c := range cz.Conns {
		agent := c.AuthorizedUser
		if agent == "" || agent == DaemonUser || agent == AuditAdminUser {
			continue
		}
		addr := net.JoinHostPort(c.IP, strconv.Itoa(c.Port))
		live[addr] = true
		s.mu.Lock()
		ses, ok := s.byAddr[addr]
		s.mu.Unlock()
		if !ok {
			continue
		}
		if _, _, err := verify(ses.token); err != nil {
			if srv.DisconnectClientByID(c.Cid) == nil {
				closed[agent]++
			}
		}
	}
	s.forget(live)
	return closed
}

// forget drops the sessions of connections not in live, once past
// sessionGrace.
func (s *Sessions) forget(live map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for addr, ses := range s.byAddr {
		if !live[addr] && time.Since(ses.at) > sessionGrace {
			delete(s.byAddr, addr)
		}
	}
}

// KeepSessions forgets, every 10 s until ctx ends, the sessions of
// connections to srv that are gone: s then holds about the agent
// connections open, plus those opened in the last 20 s.
func KeepSessions(ctx context.Context, srv *server.Server, s *Sessions) {
	t := time.NewTicker(sessionGrace)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cz, err := srv.Connz(&server.ConnzOptions{Limit: 1 << 20})
		if err != nil {
			continue
		}
		live := make(map[string]bool, len(cz.Conns))
		for _, c := range cz.Conns {
			live[net.JoinHostPort(c.IP, strconv.Itoa(c.Port))] = true
		}
		s.forget(live)
	}
}

// len is the number of sessions held.
func (s *Sessions) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byAddr)
}
