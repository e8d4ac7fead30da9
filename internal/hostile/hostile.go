// Package hostile is a hostile A2A agent on a2ad's NATS binding, for the
// tests that prove agents are kept apart and for `a2ad bench --flood`
// (docs/isolation.md). It is a plain nats.go client holding nothing but its
// own a2ad-minted agent credential, so it can do exactly what any agent's
// connection may: publish to its own events subjects, send registrations,
// and answer requests on its own RPC subject. Everything it does is within
// those permissions; what it attacks is a2ad's handling of what arrives.
package hostile

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a2ad/a2ad"
	"github.com/a2ad/a2ad/internal/a2a"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Agent is a connected hostile agent.
type Agent struct {
	ID   string
	nc   *nats.Conn
	js   jetstream.JetStream
	cred string

	mu    sync.Mutex
	tasks []string // a2ad task ids of the briefs it received, in order
	got   chan string
}

// Connect connects to the NATS server at url as agent id with its
// credential, as the binding says an agent does (the credential as the
// CONNECT token, inbox prefix _INBOX_<id>).
func Connect(url, id, credential string) (*Agent, error) {
	nc, err := nats.Connect(url, nats.Token(credential), nats.CustomInboxPrefix("_INBOX_"+id), nats.Name("hostile-"+id),
		nats.MaxReconnects(-1), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &Agent{ID: id, nc: nc, js: js, cred: credential, got: make(chan string, 1024)}, nil
}

// Close closes the connection.
func (a *Agent) Close() { a.nc.Close() }

// Card is the reference card with this agent's id in its NATS interface
// and its name, for a registration a2ad accepts; edit, if not nil,
// changes the decoded card before it is encoded.
func (a *Agent) Card(edit func(map[string]any)) []byte {
	raw := bytes.ReplaceAll(a2ad.FraudReviewCard(), []byte("a2a.agent.fraud-review"), []byte("a2a.agent."+a.ID))
	var c map[string]any
	if err := json.Unmarshal(raw, &c); err != nil {
		panic(err)
	}
	c["name"] = "Agent " + a.ID
	if edit != nil {
		edit(c)
	}
	b, _ := json.Marshal(c)
	return b
}

// Register registers card with the agent's credential and returns a2ad's
// answer.
func (a *Agent) Register(ctx context.Context, card []byte, credential bool) (natsbind.RegisterResponse, error) {
	body, _ := json.Marshal(natsbind.RegisterRequest{AgentID: a.ID, Card: card})
	m := nats.NewMsg(natsbind.RegisterSubject)
	m.Data = body
	m.Header.Set(natsbind.HeaderA2AVersion, a2a.Version)
	if credential {
		m.Header.Set("Authorization", "Bearer "+a.cred)
	}
	reply, err := a.nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		return natsbind.RegisterResponse{}, err
	}
	var r natsbind.RegisterResponse
	err = json.Unmarshal(reply.Data, &r)
	return r, err
}

// Serve answers SendMessage on the agent's RPC subject with a task in
// TASK_STATE_SUBMITTED, and remembers the a2ad task id of each brief
// ([Agent.NextTask]); it never does any work. Other methods get -32601.
func (a *Agent) Serve() error {
	_, err := a.nc.Subscribe(natsbind.RPCSubject(a.ID), func(m *nats.Msg) {
		req, err := a2a.DecodeRequest(m.Data)
		if err != nil {
			return
		}
		if req.Method != a2a.MethodSendMessage {
			b, _ := json.Marshal(a2a.Response{JSONRPC: "2.0", ID: req.ID, Error: &a2a.RPCError{Code: -32601, Message: "no"}})
			_ = m.Respond(b)
			return
		}
		var p struct {
			Message struct {
				Metadata map[string]string `json:"metadata"`
			} `json:"message"`
		}
		_ = json.Unmarshal(req.Params, &p)
		id := p.Message.Metadata["a2ad/taskId"]
		result, _ := json.Marshal(a2a.SendMessageResponse{Task: &a2a.Task{ID: "evil-" + id, ContextID: "ctx-evil",
			Status: a2a.TaskStatus{State: a2a.TaskStateSubmitted, Timestamp: time.Now().UTC().Format(time.RFC3339Nano)}}})
		b, _ := json.Marshal(a2a.Response{JSONRPC: "2.0", ID: req.ID, Result: result})
		_ = m.Respond(b)
		a.mu.Lock()
		a.tasks = append(a.tasks, id)
		a.mu.Unlock()
		select {
		case a.got <- id:
		default:
		}
	})
	return err
}

// ServeGarbled answers every request on the agent's RPC subject with a
// JSON-RPC response whose id is text, not the request's: an answer a2ad
// must refuse, and whose text (an instruction to a model, say) must never
// reach a host.
func (a *Agent) ServeGarbled(text string) error {
	_, err := a.nc.Subscribe(natsbind.RPCSubject(a.ID), func(m *nats.Msg) {
		b, _ := json.Marshal(a2a.Response{JSONRPC: "2.0", ID: text, Result: json.RawMessage(`{"task":{"id":"x","status":{"state":"TASK_STATE_SUBMITTED"}}}`)})
		_ = m.Respond(b)
	})
	return err
}

// NextTask waits for the next brief Serve receives and returns its a2ad
// task id.
func (a *Agent) NextTask(ctx context.Context) (string, error) {
	select {
	case id := <-a.got:
		return id, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// Stats count what an attack sent and how a2ad's side answered.
type Stats struct {
	Sent    int64 `json:"sent"`
	Acked   int64 `json:"acked"`   // stored by JetStream
	Refused int64 `json:"refused"` // refused by JetStream (the agent's limits), or no stream answered
	// Errors counts the other failures by their text.
	Errors map[string]int64 `json:"errors,omitempty"`
}

func (s *Stats) String() string {
	return fmt.Sprintf("sent %d, stored %d, refused %d, other errors %v", s.Sent, s.Acked, s.Refused, s.Errors)
}

// counter gathers Stats from concurrent publishes.
type counter struct {
	sent, acked, refused atomic.Int64
	mu                   sync.Mutex
	errs                 map[string]int64
}

func (c *counter) settle(err error) {
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		c.acked.Add(1)
	case errors.As(err, &apiErr), errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		c.refused.Add(1)
	default:
		c.mu.Lock()
		if c.errs == nil {
			c.errs = map[string]int64{}
		}
		if len(c.errs) < 16 {
			c.errs[err.Error()]++
		}
		c.mu.Unlock()
	}
}

func (c *counter) stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{Sent: c.sent.Load(), Acked: c.acked.Load(), Refused: c.refused.Load(), Errors: c.errs}
}

// window is how many publishes a flood keeps awaiting their
// acknowledgements: as fast as JetStream and the agent's limits allow.
const window = 256

// flood publishes events made by next until ctx ends, d has passed (d ≤ 0:
// no end) or limit events were sent (limit ≤ 0: no limit), perSecond at
// most (≤ 0: as fast as the window of unacknowledged publishes allows).
func (a *Agent) flood(ctx context.Context, d time.Duration, limit int64, perSecond float64, next func(n int64) *nats.Msg) Stats {
	if d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	var c counter
	sem := make(chan struct{}, window)
	var wg sync.WaitGroup
	start := time.Now()
	for n := int64(0); ctx.Err() == nil && (limit <= 0 || n < limit); n++ {
		if perSecond > 0 {
			if wait := time.Until(start.Add(time.Duration(float64(n) / perSecond * float64(time.Second)))); wait > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(wait):
				}
			}
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			continue
		}
		c.sent.Add(1)
		f, err := a.js.PublishMsgAsync(next(n), jetstream.WithRetryAttempts(0))
		if err != nil {
			<-sem
			c.settle(err)
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			select {
			case <-f.Ok():
				c.settle(nil)
			case err := <-f.Err():
				c.settle(err)
			case <-time.After(5 * time.Second):
				c.settle(nats.ErrTimeout)
			}
		})
	}
	wg.Wait()
	return c.stats()
}

// event is a stream item as an agent would publish it.
func event(subject, msgID string, body []byte) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = body
	m.Header.Set(natsbind.HeaderA2AVersion, a2a.Version)
	if msgID != "" {
		m.Header.Set(natsbind.HeaderMsgID, msgID)
	}
	return m
}

var working = []byte(`{"statusUpdate":{"taskId":"evil","contextId":"ctx-evil","status":{"state":"TASK_STATE_WORKING"}}}`)

// HugeIDs publishes n events for the agent's own task taskID, each with a
// Nats-Msg-Id of idBytes bytes (the measured attack: 60 KB ids grew the
// task record past the KV value limit).
func (a *Agent) HugeIDs(ctx context.Context, taskID string, n, idBytes int) Stats {
	return a.flood(ctx, 0, int64(n), 0, func(i int64) *nats.Msg {
		return event(natsbind.EventsSubject(a.ID, taskID), fmt.Sprintf("%s.%d", strings.Repeat("x", idBytes), i), working)
	})
}

// FloodUnknown publishes tiny events for task ids that do not exist, for
// d, perSecond at most (≤ 0: as fast as its limits allow).
func (a *Agent) FloodUnknown(ctx context.Context, d time.Duration, perSecond float64) Stats {
	prefix := "tsk-nope" + randHex(4)
	return a.flood(ctx, d, 0, perSecond, func(i int64) *nats.Msg {
		id := fmt.Sprintf("%s%d", prefix, i)
		return event(natsbind.EventsSubject(a.ID, id), id+".1", working)
	})
}

// FloodLarge publishes events of size bytes for task ids that do not
// exist, for d, as fast as its limits allow: the agent's share of the
// JetStream store fills.
func (a *Agent) FloodLarge(ctx context.Context, d time.Duration, size int) Stats {
	body := []byte(`{"statusUpdate":{"taskId":"evil","contextId":"ctx-evil","status":{"state":"TASK_STATE_WORKING","message":{"messageId":"m","role":"ROLE_AGENT","parts":[{"text":"` +
		strings.Repeat("A", max(0, size-200)) + `"}]}}}}`)
	prefix := "tsk-big" + randHex(4)
	return a.flood(ctx, d, 0, 0, func(i int64) *nats.Msg {
		id := fmt.Sprintf("%s%d", prefix, i)
		return event(natsbind.EventsSubject(a.ID, id), id+".1", body)
	})
}

// Rewrites grows each of the agent's own tasks (a2ad task ids) to about
// size bytes — WORKING, then an artifact chunk of size bytes that stays
// pending —, then, for d, publishes same-state WORKING updates with new
// status text to them as fast as its limits allow: each is a few hundred
// bytes for the agent and a rewrite of the whole record for a2ad.
func (a *Agent) Rewrites(ctx context.Context, tasks []string, size int, d time.Duration) Stats {
	var c counter
	seq := map[string]int{}
	next := func(task string, body []byte) {
		seq[task]++
		c.sent.Add(1)
		_, err := a.js.PublishMsg(ctx, event(natsbind.EventsSubject(a.ID, task), fmt.Sprintf("%s.%d", task, seq[task]), body))
		c.settle(err)
	}
	chunk := []byte(`{"artifactUpdate":{"taskId":"evil","contextId":"ctx-evil","artifact":{"artifactId":"big","parts":[{"text":"` +
		strings.Repeat("B", size) + `"}]}}}`)
	for _, task := range tasks {
		next(task, working)
		next(task, chunk)
	}
	grown := c.stats()
	st := a.flood(ctx, d, 0, 0, func(n int64) *nats.Msg {
		task := tasks[int(n)%len(tasks)]
		seq[task]++
		body := fmt.Sprintf(`{"statusUpdate":{"taskId":"evil","contextId":"ctx-evil","status":{"state":"TASK_STATE_WORKING","message":{"messageId":"m%d","role":"ROLE_AGENT","parts":[{"text":"still working %d"}]}}}}`, n, n)
		return event(natsbind.EventsSubject(a.ID, task), fmt.Sprintf("%s.%d", task, seq[task]), []byte(body))
	})
	st.Sent += grown.Sent
	st.Acked += grown.Acked
	st.Refused += grown.Refused
	return st
}

// Prepublish publishes the event ids taskID.1 … taskID.n on the agent's
// own subject for taskID (another agent's task, whose id it learnt or
// computed), hoping JetStream's deduplication drops the owner's events.
func (a *Agent) Prepublish(ctx context.Context, taskID string, n int) Stats {
	var c counter
	for i := 1; i <= n; i++ {
		c.sent.Add(1)
		_, err := a.js.PublishMsg(ctx, event(natsbind.EventsSubject(a.ID, taskID), fmt.Sprintf("%s.%d", taskID, i), working))
		c.settle(err)
	}
	return c.stats()
}

// BadRegistrations sends n registrations a2ad refuses (a card that does
// not validate), with or without the agent's credential, perSecond at most,
// without waiting for answers, and counts the answers that came by their
// refusal code ("none": no answer within a second of the last).
func (a *Agent) BadRegistrations(ctx context.Context, n int, credential bool, perSecond float64) map[string]int {
	codes := map[string]int{}
	var mu sync.Mutex
	prefix := "_INBOX_" + a.ID + ".reg" + randHex(4)
	sub, err := a.nc.Subscribe(prefix+".*", func(m *nats.Msg) {
		var r natsbind.RegisterResponse
		code := "undecodable"
		if json.Unmarshal(m.Data, &r) == nil {
			code = r.Code
		}
		mu.Lock()
		codes[code]++
		mu.Unlock()
	})
	if err != nil {
		return map[string]int{"error: " + err.Error(): n}
	}
	defer func() { _ = sub.Unsubscribe() }()
	_ = sub.SetPendingLimits(-1, -1)
	body, _ := json.Marshal(natsbind.RegisterRequest{AgentID: a.ID, Card: []byte(`{"name":"x"}`)})
	start := time.Now()
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		if wait := time.Until(start.Add(time.Duration(float64(i) / perSecond * float64(time.Second)))); wait > 0 {
			time.Sleep(wait)
		}
		m := nats.NewMsg(natsbind.RegisterSubject)
		m.Reply = fmt.Sprintf("%s.%d", prefix, i)
		m.Data = body
		m.Header.Set(natsbind.HeaderA2AVersion, a2a.Version)
		if credential {
			m.Header.Set("Authorization", "Bearer "+a.cred)
		}
		if err := a.nc.PublishMsg(m); err != nil {
			mu.Lock()
			codes["error: "+err.Error()]++
			mu.Unlock()
		}
	}
	_ = a.nc.Flush()
	time.Sleep(time.Second)
	mu.Lock()
	defer mu.Unlock()
	answered := 0
	for _, c := range codes {
		answered += c
	}
	codes["none"] = n - answered
	return codes
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
