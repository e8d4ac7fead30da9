package natsagent

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	wire "github.com/a2ad/a2ad/internal/a2a"
	"github.com/a2ad/a2ad/internal/natsbind"
)

// Publish retry (docs/nats-binding.md §6.4): backoff from 50 ms doubling
// to 2 s, each attempt waiting up to 2 s for the stream's ack, until acked
// or the task's context ends. Every error is retried, as the binding asks
// (internal/jsretry stops at errors it deems final, and caps at 1 s).
const (
	publishBackoffMin     = 50 * time.Millisecond
	publishBackoffMax     = 2 * time.Second
	publishAttemptTimeout = 2 * time.Second
)

// publish sends one event of t to its events subject as a JetStream
// publish with Nats-Msg-Id <a2adTaskId>.<seq>, retrying the same bytes
// until acknowledged. false: ctx ended first.
func (s *Server) publish(ctx context.Context, t *task, ev a2a.Event) bool {
	switch e := ev.(type) {
	case *a2a.Task:
		ev = stripHistory(e)
		stamp(&ev.(*a2a.Task).Status)
	case *a2a.TaskStatusUpdateEvent:
		c := *e
		stamp(&c.Status)
		ev = &c
	}
	body, err := json.Marshal(a2a.StreamResponse{Event: ev})
	if err != nil {
		s.log.Error("event not encodable; publishing nothing more", "task", t.id, "err", err)
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seq++
	msgID := t.a2adTaskID + "." + strconv.Itoa(t.seq)
	wait := publishBackoffMin
	for attempt := 1; ; attempt++ {
		m := nats.NewMsg(t.subject)
		m.Data = body
		m.Header.Set(natsbind.HeaderMsgID, msgID)
		m.Header.Set(natsbind.HeaderA2AVersion, wire.Version)
		m.Header.Set(natsbind.HeaderReplica, s.replica) // §6.3: the replica that holds the task
		if t.traceparent != "" {
			m.Header.Set(natsbind.HeaderTraceparent, t.traceparent)
		}
		actx, cancel := context.WithTimeout(ctx, publishAttemptTimeout)
		_, err := s.js.PublishMsg(actx, m, jetstream.WithRetryAttempts(0))
		cancel()
		if err == nil {
			s.mu.Lock()
			s.stats.EventsPublished++
			s.mu.Unlock()
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		s.mu.Lock()
		s.stats.PublishRetries++
		s.mu.Unlock()
		lvl := slog.LevelDebug
		if attempt == 1 || attempt%20 == 0 {
			lvl = slog.LevelWarn
		}
		s.log.Log(ctx, lvl, "event not acknowledged, retrying", "task", t.id, "msgId", msgID, "attempt", attempt, "err", err)
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return false
		case <-timer.C:
		}
		wait = min(2*wait, publishBackoffMax)
	}
}

// stamp gives a status without a timestamp the time now (the binding's
// events carry one, §6.2).
func stamp(st *a2a.TaskStatus) {
	if st.Timestamp == nil {
		now := time.Now().UTC()
		st.Timestamp = &now
	}
}
