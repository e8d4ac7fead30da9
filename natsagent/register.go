package natsagent

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"

	wire "github.com/a2ad/a2ad/internal/a2a"
	"github.com/a2ad/a2ad/internal/natsbind"
)

// Registration retry (docs/nats-binding.md §9): one attempt a second, each
// waiting up to registerTimeout for a2ad's answer; after rate_limited, the
// retryAfterSeconds a2ad named (at most 10 minutes; 1 minute if it named
// none).
const (
	registerInterval = time.Second
	registerTimeout  = 2 * time.Second
	rateLimitedWait  = time.Minute
)

func (s *Server) kickRegister() {
	select {
	case s.kick <- struct{}{}:
	default: // one is already pending
	}
}

// registerLoop registers the card each time it is kicked: at start and
// after every reconnection.
func (s *Server) registerLoop() {
	for {
		select {
		case <-s.regStop:
			return
		case <-s.kick:
			s.register()
		}
	}
}

// registerBody is the registration request JSON with the card spliced in
// byte for byte: json.Marshal would compact and re-escape a
// json.RawMessage, and a2ad fingerprints the bytes it receives.
func registerBody(agentID string, card []byte) []byte {
	id, _ := json.Marshal(agentID) // a string: cannot fail
	b := make([]byte, 0, len(card)+len(id)+24)
	b = append(b, `{"agentId":`...)
	b = append(b, id...)
	b = append(b, `,"card":`...)
	b = append(b, card...)
	return append(b, '}')
}

// register sends the card until a2ad answers, and records the answer.
func (s *Server) register() {
	body := registerBody(s.cfg.AgentID, s.card)
	for attempt := 1; ; attempt++ {
		if !s.nc.IsConnected() { // the reconnection kicks us again
			return
		}
		msg := nats.NewMsg(natsbind.RegisterSubject)
		msg.Header.Set(natsbind.HeaderA2AVersion, wire.Version)
		if s.cfg.Credential != "" {
			msg.Header.Set("Authorization", "Bearer "+s.cfg.Credential)
		}
		msg.Data = body
		ctx, cancel := context.WithTimeout(context.Background(), registerTimeout)
		stop := context.AfterFunc(s.base, cancel)
		go func() {
			select {
			case <-s.regStop:
				cancel()
			case <-ctx.Done():
			}
		}()
		reply, err := s.nc.RequestMsgWithContext(ctx, msg)
		stop()
		cancel()
		if err == nil {
			var r natsbind.RegisterResponse
			switch {
			case json.Unmarshal(reply.Data, &r) != nil:
				s.log.Warn("registration answer is not a RegisterResponse", "bytes", len(reply.Data))
			case r.Code == natsbind.RegisterRateLimited:
				wait := rateLimitedWait
				if r.RetryAfterSeconds > 0 {
					wait = min(time.Duration(r.RetryAfterSeconds)*time.Second, 10*rateLimitedWait)
				}
				s.record(r)
				s.log.Info("registration rate-limited; retrying", "after", wait)
				if !s.sleep(wait) {
					return
				}
				continue
			case r.Error != "":
				s.log.Warn("registration refused", "code", r.Code, "error", bound(r.Error, maxAgentText))
			default:
				s.log.Info("registered", "status", r.Status, "fingerprint", r.Fingerprint)
			}
			s.record(r)
			s.ansOnce.Do(func() { close(s.answered) })
			return
		}
		if attempt == 1 {
			s.log.Info("registry not answering yet; retrying every second", "err", err)
		}
		if !s.sleep(registerInterval) {
			return
		}
	}
}

func (s *Server) record(r natsbind.RegisterResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Registrations++
	s.reg = Registration{Status: r.Status, Fingerprint: r.Fingerprint, Code: r.Code, Error: bound(r.Error, maxAgentText)}
	if r.Error != "" {
		s.reg.Status = ""
	}
}

// sleep waits for d; false if the Server is shutting down.
func (s *Server) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.regStop:
		return false
	case <-t.C:
		return true
	}
}
