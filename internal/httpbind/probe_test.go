package httpbind

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/a2a"
)

// A probe is answered by any HTTP answer — the agent's TaskNotFound, a
// 503, a 401 — over both bindings, and takes nothing from the agent; a
// server that is gone, or that holds the request past the probe's
// deadline, is unreachable, in a2ad's words.
func TestProbe(t *testing.T) {
	for _, bnd := range bindings {
		t.Run(bnd, func(t *testing.T) {
			a := startAgent(t, bnd, agentOpts{})
			b := bindingFor(t, a, Config{})
			if err := b.Probe(t.Context(), "fraud"); err != nil {
				t.Errorf("probe of a running agent: %v", err)
			}
			if got := a.requests(); len(got) != 1 || got[0].RPC != "GetTask" {
				t.Errorf("the agent saw %+v, want one GetTask", got)
			}
			for _, status := range []int{http.StatusServiceUnavailable, http.StatusUnauthorized} {
				s := startAgent(t, bnd, agentOpts{wrap: func(http.Handler) http.Handler {
					return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) })
				}})
				if err := bindingFor(t, s, Config{}).Probe(t.Context(), "fraud"); err != nil {
					t.Errorf("probe answered %d: %v, want reachable", status, err)
				}
			}
			hang := make(chan struct{})
			defer close(hang)
			slow := startAgent(t, bnd, agentOpts{wrap: func(http.Handler) http.Handler {
				return http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-hang })
			}})
			ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
			defer cancel()
			if err := bindingFor(t, slow, Config{}).Probe(ctx, "fraud"); !errors.Is(err, ErrNoAnswer) ||
				err.Error() != "agent fraud: agent offline: no HTTP answer before the probe's deadline" {
				t.Errorf("probe of a server that never answers: %v, want ErrNoAnswer", err)
			}
			a.Close()
			// The kept-alive connection is gone with the server.
			if err := b.Probe(t.Context(), "fraud"); !errors.Is(err, a2a.ErrAgentUnreachable) {
				t.Errorf("probe over the closed server's connection: %v, want unreachable", err)
			}
			err := bindingFor(t, a, Config{}).Probe(t.Context(), "fraud")
			if !errors.Is(err, a2a.ErrAgentUnreachable) ||
				err.Error() != "agent fraud: probe not sent: the agent's address cannot be reached (connection, DNS or TLS handshake failed): agent offline" {
				t.Errorf("probe of a closed server: %v", err)
			}
		})
	}
}
