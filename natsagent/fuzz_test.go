package natsagent

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go"

	wire "github.com/a2ad/a2ad/internal/a2a"
	"github.com/a2ad/a2ad/internal/natsbind"
)

// FuzzHandle sends the Server any request a2ad — or anyone allowed to
// publish on the agent's subject — could: whatever the body, method,
// params and A2A-Version, the answer is one JSON-RPC 2.0 response with the
// request's id when it had one, exactly one of result and error, an error
// code of the binding's table (docs/nats-binding.md §8), and an error
// message of bounded size; nothing panics.
func FuzzHandle(f *testing.F) {
	e := newEnv(f, true)
	close(e.exec.release) // "slow" tasks do not wait
	f.Add("SendMessage", []byte(`{"message":{"messageId":"tsk-1-m1","role":"ROLE_USER","parts":[{"text":"ask"}],"metadata":{"a2ad/taskId":"tsk-1","a2ad/eventsSubject":"a2a.events.agent1.tsk-1"}}}`), "1.0", false)
	f.Add("SendMessage", []byte(`{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"x"}],"metadata":{"a2ad/taskId":"t","a2ad/eventsSubject":"a2a.events.other.t"}}}`), "1.0", false)
	f.Add("GetTask", []byte(`{"id":"nope"}`), "1.0", false)
	f.Add("CancelTask", []byte(`{"id":""}`), "1", false)
	f.Add("SendMessage", []byte(`{"message":{"taskId":"x","messageId":"m2","role":"ROLE_USER","parts":[]}}`), "0.3", false)
	f.Add("", []byte(`{"jsonrpc":"2.0","id":7}`), "1.0", true)
	f.Add("", []byte(`{"jsonrpc":"2.0","id":"1","method":"GetTask","params":{},"extra":1}`), "1.0", true)
	f.Add("", []byte("\xff not json"), "", true)
	f.Fuzz(func(t *testing.T, method string, params []byte, version string, raw bool) {
		body := params
		id := ""
		if !raw {
			var p json.RawMessage
			if json.Valid(params) {
				p = params
			}
			id = "req-1"
			body, _ = json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": p})
		}
		hdr := nats.Header{}
		hdr.Set(natsbind.HeaderA2AVersion, version)
		out, _, after := e.srv.handle(hdr, body)
		if after != nil {
			after()
		}
		var resp struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      *string         `json:"id"`
			Result  json.RawMessage `json:"result"`
			Error   *wire.RPCError  `json:"error"`
		}
		dec := json.NewDecoder(bytes.NewReader(out))
		if err := dec.Decode(&resp); err != nil || resp.JSONRPC != "2.0" || resp.ID == nil {
			t.Fatalf("answer %q is not a JSON-RPC 2.0 response: %v", out, err)
		}
		if !raw && *resp.ID != id {
			t.Fatalf("answer id %q, want %q", *resp.ID, id)
		}
		if (resp.Error == nil) == (len(resp.Result) == 0) {
			t.Fatalf("answer %q: want exactly one of result and error", out)
		}
		if resp.Error != nil {
			switch resp.Error.Code {
			case wire.CodeParseError, wire.CodeInvalidRequest, wire.CodeMethodNotFound, wire.CodeInvalidParams, wire.CodeInternalError,
				wire.CodeTaskNotFound, wire.CodeTaskNotCancelable, wire.CodePushNotificationNotSupported, wire.CodeUnsupportedOperation,
				wire.CodeContentTypeNotSupported, wire.CodeInvalidAgentResponse, wire.CodeVersionNotSupported:
			default:
				t.Fatalf("error code %d is not in the binding's table: %q", resp.Error.Code, out)
			}
			if len(resp.Error.Message) > 1024 {
				t.Fatalf("error message of %d bytes", len(resp.Error.Message))
			}
		}
	})
}
