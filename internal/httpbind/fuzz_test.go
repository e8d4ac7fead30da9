package httpbind

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/a2a"
)

// FuzzSendResult feeds arbitrary agent answers (HTTP 200, JSON) through
// Send: no panic; a result is one internal/a2a's strict decoder accepts;
// an error is an agent error (*a2a.RPCError) or an undecodable answer
// (a2a.ErrDecode), since the answer arrived whole; and no error quotes
// the agent's answer.
func FuzzSendResult(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":"1","result":{"task":{"id":"t1","contextId":"a2ad-T1","status":{"state":"TASK_STATE_SUBMITTED"}}}}`,
		`{"jsonrpc":"2.0","id":"1","result":{"message":{"messageId":"m","role":"ROLE_AGENT","parts":[{"text":"hi"}]}}}`,
		`{"jsonrpc":"2.0","id":"1","error":{"code":-32004,"message":"agent text"}}`,
		`{"jsonrpc":"2.0","id":"1","error":{"code":-31401,"message":"agent text"}}`,
		`{"jsonrpc":"2.0","id":"1","result":{"task":{"id":"t1","status":{"state":"TASK_STATE_BOGUS"}}}}`,
		`{"jsonrpc":"2.0","id":"1","result":{"task":{"id":"","status":{}}}}`,
		`{"jsonrpc":"2.0","id":"1","result":{"task":{"id":"t","status":{"state":"TASK_STATE_WORKING"},"artifacts":[{"artifactId":"a","parts":[]}]}}}`,
		`{"jsonrpc":"2.0","id":"1","result":{"statusUpdate":{"taskId":"t","status":{"state":"TASK_STATE_WORKING"}}}}`,
		`{"jsonrpc":"2.0","id":"1","result":null}`,
		`{"jsonrpc":"2.0"`,
		`not json at all`,
		``,
	} {
		f.Add(s)
	}
	var mu sync.Mutex
	var body string
	a := startAgent(f, "JSONRPC", agentOpts{wrap: func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			b := body
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(b))
		})
	}})
	b := bindingFor(f, a, Config{})
	params := briefParams(f, "T1")
	f.Fuzz(func(t *testing.T, s string) {
		mu.Lock()
		body = s
		mu.Unlock()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		res, err := b.Send(ctx, "fraud", a2a.MethodSendMessage, params, "")
		if err == nil {
			if _, derr := a2a.DecodeSendMessageResponse(res); derr != nil {
				t.Fatalf("result %s does not decode: %v", res, derr)
			}
			return
		}
		var re *a2a.RPCError
		// An A2A internal or server error leaves the outcome unknown.
		if !errors.As(err, &re) && !errors.Is(err, a2a.ErrDecode) && !errors.Is(err, ErrAgentInternalError) {
			t.Fatalf("err = %v, want *a2a.RPCError, ErrDecode or ErrAgentInternalError", err)
		}
		if len(s) >= 12 && strings.Contains(err.Error(), s) {
			t.Fatalf("error %q quotes the agent's answer", err)
		}
		if strings.Contains(err.Error(), "agent text") {
			t.Fatalf("error %q quotes the agent's text", err)
		}
	})
}

// BenchmarkSendMessage is one brief's round trip (SendMessage,
// returnImmediately) to an in-process a2a-go JSON-RPC agent over
// loopback HTTP, through a2ad's hardened client and its strict decoder.
func BenchmarkSendMessage(b *testing.B) {
	a := startAgent(b, "JSONRPC", agentOpts{})
	bnd := bindingFor(b, a, Config{})
	params := briefParams(b, "T1")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := bnd.Send(b.Context(), "fraud", a2a.MethodSendMessage, params, traceparent); err != nil {
			b.Fatal(err)
		}
	}
}
