package mcpedge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/a2ad/a2ad/internal/a2a"
)

// MaxMessageDepth is the deepest nesting of JSON arrays and objects a2ad
// reads in one JSON-RPC message (the go-sdk's decoder stops at 1000).
const MaxMessageDepth = 1000

// screenError is a message a2ad refuses before the go-sdk reads it: the
// JSON-RPC error it answers (JSON-RPC 2.0 §5.1: -32700 parse error, -32600
// invalid request, -32602 invalid params) and the id it answers with
// (JSON null when the message's id cannot be read).
type screenError struct {
	Code    int64
	Message string
	ID      json.RawMessage // nil: null
}

// response is the JSON-RPC error response to the refused message, one
// line without its newline.
func (e *screenError) response() []byte {
	id := e.ID
	if id == nil {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   struct {
			Code    int64  `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}{JSONRPC: "2.0", ID: id, Error: struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
	}{e.Code, e.Message}})
	return b
}

// screen checks one JSON-RPC message (a stdio line, an HTTP POST body)
// for what the go-sdk v1.8.0 would fail on with its own text, or, on
// stdio, by ending the session: not JSON, nested deeper than
// [MaxMessageDepth], not an object (batches included: MCP 2025-06-18
// removed JSON-RPC batching), "jsonrpc" other than "2.0", an id that is
// not a string or an integer, a method that is not a string, params that
// are not an object. nil: the message may go on.
func screen(msg []byte) *screenError {
	msg = bytes.TrimSpace(msg)
	if !json.Valid(msg) {
		return &screenError{Code: -32700, Message: "parse error: the message is not valid JSON (RFC 8259)"}
	}
	if a2a.Depth(msg) > MaxMessageDepth {
		return &screenError{Code: -32700, Message: fmt.Sprintf("parse error: the message nests arrays and objects deeper than %d levels", MaxMessageDepth)}
	}
	switch msg[0] {
	case '{':
	case '[':
		if isEmptyArray(msg) {
			return &screenError{Code: -32600, Message: "invalid request: an empty batch ([]) holds no message"}
		}
		return &screenError{Code: -32600, Message: "invalid request: JSON-RPC batches (arrays) are not accepted; send one JSON-RPC object per message (MCP 2025-06-18 and later)"}
	default:
		return &screenError{Code: -32600, Message: "invalid request: a JSON-RPC message must be a JSON object"}
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(msg, &m) != nil {
		return &screenError{Code: -32600, Message: "invalid request: a JSON-RPC message must be a JSON object"}
	}
	var id json.RawMessage
	if raw, ok := m["id"]; ok {
		if !validID(raw) {
			return &screenError{Code: -32600, Message: "invalid request: id must be a string or an integer (JSON-RPC 2.0 §4)"}
		}
		id = raw
	}
	var v string
	if json.Unmarshal(m["jsonrpc"], &v) != nil || v != "2.0" {
		return &screenError{Code: -32600, Message: `invalid request: "jsonrpc" must be "2.0"`, ID: id}
	}
	method, isRequest := m["method"]
	if isRequest {
		if json.Unmarshal(method, &v) != nil {
			return &screenError{Code: -32600, Message: "invalid request: method must be a string", ID: id}
		}
		if p, ok := m["params"]; ok && !bytes.Equal(p, []byte("null")) && p[0] != '{' {
			return &screenError{Code: -32602, Message: fmt.Sprintf("invalid params: params of %s must be a JSON object", v), ID: id}
		}
		if v == "tools/call" {
			var params map[string]json.RawMessage
			_ = json.Unmarshal(m["params"], &params)
			var name string
			if json.Unmarshal(params["name"], &name) != nil {
				return &screenError{Code: -32602, Message: "invalid params: /params/name of tools/call must be a string, the tool's name", ID: id}
			}
			for _, k := range []string{"arguments", "inputResponses", "_meta"} {
				if a, ok := params[k]; ok && !bytes.Equal(a, []byte("null")) && a[0] != '{' {
					return &screenError{Code: -32602, Message: fmt.Sprintf("invalid params: /params/%s of tools/call %s must be a JSON object", k, name), ID: id}
				}
			}
			if a, ok := params["requestState"]; ok && !bytes.Equal(a, []byte("null")) && a[0] != '"' {
				return &screenError{Code: -32602, Message: fmt.Sprintf("invalid params: /params/requestState of tools/call %s must be a string, as a2ad issued it", name), ID: id}
			}
		}
		if e := screenParams(v, m["params"]); e != nil {
			e.ID = id
			return e
		}
		return nil
	}
	if id == nil || bytes.Equal(id, []byte("null")) {
		return &screenError{Code: -32600, Message: "invalid request: a message without method is a response and needs the id of the request it answers"}
	}
	return nil
}

// validID reports whether raw is a JSON-RPC id a2ad reads: a string, an
// integer within ±2^53 (exact in a float64, as the go-sdk reads it), or
// null.
func validID(raw json.RawMessage) bool {
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if d.Decode(&v) != nil {
		return false
	}
	switch v := v.(type) {
	case nil, string:
		return true
	case json.Number:
		f, err := v.Float64()
		return err == nil && f == math.Trunc(f) && math.Abs(f) <= 1<<53
	}
	return false
}

// isEmptyArray reports whether valid JSON b is [] (spaces allowed).
func isEmptyArray(b []byte) bool {
	var a []json.RawMessage
	return json.Unmarshal(b, &a) == nil && len(a) == 0
}

// servedParams are the params types of the methods a2ad serves besides
// tools/call (screened above), as the go-sdk decodes them.
var servedParams = map[string]func() any{
	"initialize":                func() any { return new(mcp.InitializeParams) },
	"notifications/initialized": func() any { return new(mcp.InitializedParams) },
	"notifications/cancelled":   func() any { return new(mcp.CancelledParams) },
	"ping":                      func() any { return new(mcp.PingParams) },
	"tools/list":                func() any { return new(mcp.ListToolsParams) },
	"server/discover":           func() any { return new(mcp.DiscoverParams) },
	MethodTasksGet:              func() any { return new(taskParamsShape) },
	MethodTasksUpdate:           func() any { return new(taskParamsShape) },
	MethodTasksCancel:           func() any { return new(taskParamsShape) },
}

// screenParams refuses params of a served method that the go-sdk would
// refuse with its own text ("unmarshaling … into a *mcp.ListToolsParams"):
// a member of the wrong JSON type, named by its pointer.
func screenParams(method string, params json.RawMessage) *screenError {
	newParams, ok := servedParams[method]
	if !ok || len(params) == 0 || bytes.Equal(params, []byte("null")) {
		return nil
	}
	err := json.Unmarshal(params, newParams())
	if err == nil {
		return nil
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return &screenError{Code: -32602, Message: fmt.Sprintf("invalid params: /params/%s of %s must be %s", strings.ReplaceAll(te.Field, ".", "/"), method, jsonKind(te.Type))}
	}
	return &screenError{Code: -32602, Message: fmt.Sprintf("invalid params: the params of %s do not have the members and types MCP gives them", method)}
}

// jsonKind names the JSON type a Go type is decoded from.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "another JSON type"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another JSON type"
}
