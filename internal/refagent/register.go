package refagent

import (
	"context"
	"encoding/json"
	"time"

	"github.com/a2ad/a2ad/internal/a2a"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/nats-io/nats.go"
)

// Registration retry: one attempt a second, each waiting up to
// registerTimeout for a2ad's answer.
const (
	registerInterval = time.Second
	registerTimeout  = 2 * time.Second
)

// registerBody is the [natsbind.RegisterRequest] JSON with the card spliced
// in byte for byte: json.Marshal would compact and re-escape a
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

// rateLimitedWait is how long the agent waits after a rate_limited answer
// that does not say (a2ad's always does: retryAfterSeconds).
const rateLimitedWait = time.Minute

// register sends the card to a2a.registry.register until a2ad answers (no
// responders and timeouts are retried every second; a rate_limited answer
// after the time it names) and logs the outcome. Registration is
// informative: the agent serves whatever the status.
func (a *Agent) register() {
	body := registerBody(a.agentID, a.card)
	for attempt := 1; ; attempt++ {
		if !a.nc.IsConnected() { // not yet (or no longer) connected: wait, do not count
			attempt--
			if !a.sleep(registerInterval) {
				return
			}
			continue
		}
		msg := nats.NewMsg(natsbind.RegisterSubject)
		msg.Header.Set(natsbind.HeaderA2AVersion, a2a.Version)
		if a.cred != "" {
			msg.Header.Set("Authorization", "Bearer "+a.cred)
		}
		msg.Data = body
		ctx, cancel := context.WithTimeout(a.ctx, registerTimeout)
		reply, err := a.nc.RequestMsgWithContext(ctx, msg)
		cancel()
		if err == nil {
			var r natsbind.RegisterResponse
			switch {
			case json.Unmarshal(reply.Data, &r) != nil:
				a.log.Warn("registration answer is not a RegisterResponse", "bytes", len(reply.Data))
			case r.Code == natsbind.RegisterRateLimited:
				wait := rateLimitedWait
				if r.RetryAfterSeconds > 0 {
					wait = min(time.Duration(r.RetryAfterSeconds)*time.Second, 10*rateLimitedWait)
				}
				a.log.Info("registration rate-limited; retrying", "after", wait)
				if !a.sleep(wait) {
					return
				}
				continue
			case r.Error != "":
				a.log.Warn("registration refused", "code", r.Code, "error", r.Error)
			default:
				a.log.Info("registered", "status", r.Status, "fingerprint", r.Fingerprint)
			}
			return
		}
		if a.ctx.Err() != nil {
			return
		}
		if attempt == 1 {
			a.log.Info("registry not answering yet; retrying every second", "err", err)
		}
		if !a.sleep(registerInterval) {
			return
		}
	}
}

// sleep waits for d; false if the agent stopped meanwhile.
func (a *Agent) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-a.ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
