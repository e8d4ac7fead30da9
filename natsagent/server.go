package natsagent

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	wire "github.com/a2ad/a2ad/internal/a2a"
	"github.com/a2ad/a2ad/internal/natsbind"
)

// Metadata keys a2ad puts in a SendMessage message's metadata
// (docs/nats-binding.md §5.2).
const (
	MetaTaskID        = "a2ad/taskId"
	MetaEventsSubject = "a2ad/eventsSubject"
)

// Bounds on what the Server accepts and holds.
const (
	// MaxRequestBytes bounds a request body; a larger one is refused
	// with -32600.
	MaxRequestBytes = 4 << 20
	// DefaultMaxRequestDepth is [Config.MaxRequestDepth]'s default.
	DefaultMaxRequestDepth = 128
	// maxInFlight bounds the requests answered at once; more wait in
	// the NATS subscription.
	maxInFlight = 256
	// firstEventWait bounds how long a SendMessage waits for the
	// handler's first event (a2ad waits 5 s for the reply).
	firstEventWait = 4 * time.Second
	// callTimeout bounds the handler's GetTask and CancelTask.
	callTimeout = 4 * time.Second
)

func newServer(nc *nats.Conn, h a2asrv.RequestHandler, cfg Config) (*Server, error) {
	if nc == nil || h == nil {
		return nil, fmt.Errorf("%w: nil NATS connection or request handler", ErrConfig)
	}
	if !natsbind.ValidToken(cfg.AgentID) {
		return nil, fmt.Errorf("%w: AgentID %q is not one NATS token of 1-128 bytes of [A-Za-z0-9_-]", ErrConfig, bound(cfg.AgentID, 64))
	}
	card := bytes.TrimSpace(cfg.Card)
	if len(card) == 0 || card[0] != '{' || !json.Valid(card) {
		return nil, fmt.Errorf("%w: Card is not a JSON object", ErrConfig)
	}
	if cfg.ReplicaID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		cfg.ReplicaID = hex.EncodeToString(b[:])
	} else if !natsbind.ValidToken(cfg.ReplicaID) {
		return nil, fmt.Errorf("%w: ReplicaID %q is not one NATS token", ErrConfig, bound(cfg.ReplicaID, 64))
	}
	if cfg.QueueGroup == "" {
		cfg.QueueGroup = cfg.AgentID
	}
	if cfg.MaxLiveTasks < 0 || cfg.RememberMessages < 0 || cfg.MaxRequestDepth < 0 {
		return nil, fmt.Errorf("%w: MaxLiveTasks, RememberMessages and MaxRequestDepth must not be negative", ErrConfig)
	}
	cfg.MaxLiveTasks = cmp.Or(cfg.MaxLiveTasks, 10_000)
	cfg.MaxRequestDepth = cmp.Or(cfg.MaxRequestDepth, DefaultMaxRequestDepth)
	cfg.RememberMessages = cmp.Or(cfg.RememberMessages, 100_000)
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("natsagent: jetstream: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	base, cancel := context.WithCancel(context.Background())
	return &Server{
		nc: nc, js: js, h: h, cfg: cfg, card: slices.Clone(card),
		log:     log.With("agent", cfg.AgentID, "replica", cfg.ReplicaID),
		replica: cfg.ReplicaID,
		base:    base, cancel: cancel,
		slots:    make(chan struct{}, maxInFlight),
		tasks:    newLRU[*task](cfg.RememberMessages),
		seen:     newLRU[*delivery](cfg.RememberMessages),
		done:     make(chan struct{}),
		kick:     make(chan struct{}, 1),
		answered: make(chan struct{}),
		regStop:  make(chan struct{}),
	}, nil
}

func (s *Server) start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.stopped {
		return errors.New("natsagent: server already started")
	}
	shared, err := s.nc.QueueSubscribe(natsbind.RPCSubject(s.cfg.AgentID), s.cfg.QueueGroup, s.receive)
	if err != nil {
		return fmt.Errorf("natsagent: subscribe: %w", err)
	}
	own, err := s.nc.Subscribe(natsbind.ReplicaSubject(s.cfg.AgentID, s.replica), s.receive)
	if err != nil {
		_ = shared.Unsubscribe()
		return fmt.Errorf("natsagent: subscribe: %w", err)
	}
	if s.nc.IsConnected() {
		if err := s.nc.FlushTimeout(5 * time.Second); err != nil {
			_ = shared.Unsubscribe()
			_ = own.Unsubscribe()
			return fmt.Errorf("natsagent: subscribe: %w", err)
		}
	}
	s.subs = []*nats.Subscription{shared, own}
	s.started = true
	// Re-register after every reconnection: a status listener of our own,
	// which leaves the user's ReconnectHandler alone.
	s.status = s.nc.StatusChanged(nats.CONNECTED)
	s.bg.Add(2)
	go func() {
		defer s.bg.Done()
		for {
			select {
			case <-s.regStop:
				return
			case _, ok := <-s.status:
				if !ok {
					return
				}
				s.kickRegister()
			}
		}
	}()
	s.kickRegister()
	go func() {
		defer s.bg.Done()
		s.registerLoop()
	}()
	s.log.Info("serving", "subject", natsbind.RPCSubject(s.cfg.AgentID), "replicaSubject", natsbind.ReplicaSubject(s.cfg.AgentID, s.replica))
	context.AfterFunc(ctx, func() {
		ended, cancel := context.WithCancel(context.Background())
		cancel()
		_ = s.Shutdown(ended)
	})
	return nil
}

func (s *Server) shutdown(ctx context.Context) error {
	s.shutOnce.Do(func() {
		s.mu.Lock()
		s.stopped = true
		subs := s.subs
		status := s.status
		s.mu.Unlock()
		close(s.regStop)
		for _, sub := range subs {
			_ = sub.Unsubscribe()
		}
		if len(subs) > 0 && s.nc.IsConnected() {
			_ = s.nc.FlushTimeout(time.Second) // the server stops routing requests here
		}
		if status != nil {
			s.nc.RemoveStatusListener(status)
		}
		s.reqs.Wait()
		execsDone := make(chan struct{})
		go func() { s.execs.Wait(); close(execsDone) }()
		select {
		case <-execsDone:
		case <-ctx.Done():
			s.shutErr = ctx.Err()
			s.cancel()
			<-execsDone
		}
		s.cancel()
		s.bg.Wait()
		close(s.done)
		s.log.Info("stopped", "cutShort", s.shutErr != nil)
	})
	<-s.done
	return s.shutErr
}

// receive is the subscriptions' callback: it answers each request in a
// goroutine of its own (at most maxInFlight at once).
func (s *Server) receive(msg *nats.Msg) {
	if msg.Reply == "" {
		s.log.Debug("request without reply subject ignored")
		return
	}
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		s.reply(msg, encodeResponse("", nil, rpcError(wire.CodeInternalError, "this replica is shutting down")), false)
		return
	}
	s.reqs.Add(1)
	s.mu.Unlock()
	s.slots <- struct{}{}
	go func() {
		defer s.reqs.Done()
		defer func() { <-s.slots }()
		body, replica, after := s.handle(msg.Header, msg.Data)
		s.reply(msg, body, replica)
		if after != nil {
			after()
		}
	}()
}

func (s *Server) reply(msg *nats.Msg, body []byte, replica bool) {
	out := nats.NewMsg(msg.Reply)
	out.Header.Set(natsbind.HeaderA2AVersion, wire.Version)
	if replica {
		out.Header.Set(natsbind.HeaderReplica, s.replica)
	}
	out.Data = body
	if err := s.nc.PublishMsg(out); err != nil {
		s.log.Warn("reply not sent", "err", err)
	}
}

// handle decodes and answers one request. It returns the encoded response,
// whether it is a SendMessage reply (marked with the replica id), and
// work to run once the response is sent (nil if none).
func (s *Server) handle(hdr nats.Header, data []byte) ([]byte, bool, func()) {
	req, rerr := decodeRequest(data, s.cfg.MaxRequestDepth)
	if rerr != nil {
		id := ""
		if req != nil {
			id = req.ID
		}
		return encodeResponse(id, nil, rerr), false, nil
	}
	if rerr := checkVersion(natsbind.HeaderValue(hdr, natsbind.HeaderA2AVersion)); rerr != nil {
		return encodeResponse(req.ID, nil, rerr), false, nil
	}
	var (
		result any
		after  func()
	)
	switch req.Method {
	case wire.MethodSendMessage:
		result, after, rerr = s.sendMessage(req.Params, natsbind.HeaderValue(hdr, natsbind.HeaderTraceparent))
		if rerr == nil {
			return encodeResponse(req.ID, result, nil), true, after
		}
	case wire.MethodGetTask:
		result, rerr = s.getTask(req.Params)
	case wire.MethodCancelTask:
		result, rerr = s.cancelTask(req.Params)
	default:
		rerr = rpcError(wire.CodeMethodNotFound, "method %q not found (this binding serves SendMessage, GetTask, CancelTask)", bound(req.Method, 64))
	}
	if rerr != nil {
		s.log.Debug("request refused", "method", bound(req.Method, 64), "code", rerr.Code, "msg", rerr.Message)
		return encodeResponse(req.ID, nil, rerr), false, nil
	}
	return encodeResponse(req.ID, result, nil), false, nil
}

// decodeRequest decodes a JSON-RPC 2.0 request: not JSON is -32700; JSON
// that is not a request with a string id and a method is -32600, as is a
// body over MaxRequestBytes.
func decodeRequest(data []byte, maxDepth int) (*wire.Request, *wire.RPCError) {
	if len(data) > MaxRequestBytes {
		return nil, rpcError(wire.CodeInvalidRequest, "request of %d bytes is over the %d bytes this agent accepts", len(data), MaxRequestBytes)
	}
	if !json.Valid(data) {
		return nil, rpcError(wire.CodeParseError, "request body is not JSON")
	}
	var req wire.Request
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, rpcError(wire.CodeInvalidRequest, "not a JSON-RPC 2.0 request with a string id: %s", bound(err.Error(), 200))
	}
	if req.JSONRPC != "2.0" || req.Method == "" || req.ID == "" {
		return &req, rpcError(wire.CodeInvalidRequest, "a JSON-RPC 2.0 request needs jsonrpc \"2.0\", a string id and a method")
	}
	if d := wire.Depth(data); d > maxDepth {
		return &req, rpcError(wire.CodeInvalidRequest, "request nests %d levels deep, more than the %d this agent accepts", d, maxDepth)
	}
	return &req, nil
}

// checkVersion accepts any 1.x in the A2A-Version header; an absent header
// means 0.3 (A2A 1.0 §3.2.6) and is refused like any other major.
func checkVersion(v string) *wire.RPCError {
	major, _, _ := strings.Cut(strings.TrimSpace(v), ".")
	if major == "1" {
		return nil
	}
	if v == "" {
		v = "absent (0.3)"
	}
	return rpcError(wire.CodeVersionNotSupported, "A2A-Version %s not supported; this binding speaks %s", bound(v, 16), wire.Version)
}

func encodeResponse(id string, result any, rerr *wire.RPCError) []byte {
	resp := wire.Response{JSONRPC: "2.0", ID: id, Error: rerr}
	if rerr == nil {
		b, err := json.Marshal(result)
		if err != nil {
			resp.Error = rpcError(wire.CodeInternalError, "encode result: %s", bound(err.Error(), 200))
		} else {
			resp.Result = b
		}
	}
	b, _ := json.Marshal(resp) // only strings and raw JSON: cannot fail
	return b
}

func decodeParams(raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		return errors.New("params are missing")
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return errors.New(bound(err.Error(), 200))
	}
	return nil
}

func (s *Server) getTask(params json.RawMessage) (any, *wire.RPCError) {
	var p a2a.GetTaskRequest
	if err := decodeParams(params, &p); err != nil || p.ID == "" {
		return nil, rpcError(wire.CodeInvalidParams, "GetTask params must be {\"id\": <task id>}")
	}
	if p.ID == natsbind.ProbeTaskID {
		return nil, rpcError(wire.CodeTaskNotFound, "task %q not found (liveness probe)", natsbind.ProbeTaskID)
	}
	ctx, cancel := context.WithTimeout(s.base, callTimeout)
	defer cancel()
	t, err := s.h.GetTask(ctx, &p)
	if err != nil {
		return nil, handlerError("GetTask", err)
	}
	return stripHistory(t), nil
}

func (s *Server) cancelTask(params json.RawMessage) (any, *wire.RPCError) {
	var p a2a.CancelTaskRequest
	if err := decodeParams(params, &p); err != nil || p.ID == "" {
		return nil, rpcError(wire.CodeInvalidParams, "CancelTask params must be {\"id\": <task id>}")
	}
	s.mu.Lock()
	if s.tasks.get(string(p.ID)) != nil {
		s.stats.Cancels++
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(s.base, callTimeout)
	defer cancel()
	// The binding refuses to cancel a finished task (§5.6), where a2a-go
	// answers with the task.
	before, err := s.h.GetTask(ctx, &a2a.GetTaskRequest{ID: p.ID})
	if err != nil {
		return nil, handlerError("CancelTask", err)
	}
	if before.Status.State.Terminal() {
		return nil, rpcError(wire.CodeTaskNotCancelable, "task %s is %s", bound(string(p.ID), 64), before.Status.State)
	}
	t, err := s.h.CancelTask(ctx, &p)
	if err != nil {
		return nil, handlerError("CancelTask", err)
	}
	s.log.Info("task canceled", "task", p.ID)
	return stripHistory(t), nil
}

// stripHistory returns a copy of t without its history: a2ad never reads
// it, and it would echo the brief back.
func stripHistory(t *a2a.Task) *a2a.Task {
	if t == nil {
		return nil
	}
	c := *t
	c.History = nil
	return &c
}
