package a2a

import (
	"encoding/json"
	"errors"
	"fmt"
)

// JSON-RPC 2.0 standard error codes and the A2A error codes (§9.5).
const (
	CodeParseError                   = -32700
	CodeInvalidRequest               = -32600
	CodeMethodNotFound               = -32601
	CodeInvalidParams                = -32602
	CodeInternalError                = -32603
	CodeTaskNotFound                 = -32001
	CodeTaskNotCancelable            = -32002
	CodePushNotificationNotSupported = -32003
	CodeUnsupportedOperation         = -32004
	CodeContentTypeNotSupported      = -32005
	CodeInvalidAgentResponse         = -32006
	CodeVersionNotSupported          = -32009
)

// Request is a JSON-RPC 2.0 request.
type Request struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      string          `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params,omitempty"`
}

// Response is a JSON-RPC 2.0 response: exactly one of Result and Error.
type Response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      string          `json:"id"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *RPCError       `json:"error,omitempty"`
}

// RPCError is a JSON-RPC error object. It is also a Go error so callers can
// errors.As for it and inspect Code.
type RPCError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// CodeName is the A2A 1.0 / JSON-RPC 2.0 name of an error code, "" if it
// has none (A2A 1.0 §9.5).
func CodeName(code int) string {
	switch code {
	case CodeParseError:
		return "parse error"
	case CodeInvalidRequest:
		return "invalid request"
	case CodeMethodNotFound:
		return "method not found"
	case CodeInvalidParams:
		return "invalid params"
	case CodeInternalError:
		return "internal error"
	case CodeTaskNotFound:
		return "task not found"
	case CodeTaskNotCancelable:
		return "task not cancelable"
	case CodePushNotificationNotSupported:
		return "push notification not supported"
	case CodeUnsupportedOperation:
		return "unsupported operation"
	case CodeContentTypeNotSupported:
		return "content type not supported"
	case CodeInvalidAgentResponse:
		return "invalid agent response"
	case CodeVersionNotSupported:
		return "version not supported"
	}
	return ""
}

// Error names the code only: Message and Data are the agent's text, which
// must not reach logs, task reasons or hosts through an error string.
func (e *RPCError) Error() string {
	if name := CodeName(e.Code); name != "" {
		return fmt.Sprintf("a2a: JSON-RPC error %d (%s)", e.Code, name)
	}
	return fmt.Sprintf("a2a: JSON-RPC error %d", e.Code)
}

// NewRequest builds a request envelope with params marshalled to JSON.
func NewRequest(id, method string, params any) (*Request, error) {
	b, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	return &Request{JSONRPC: "2.0", ID: id, Method: method, Params: b}, nil
}

// DecodeRequest strictly decodes a JSON-RPC request.
func DecodeRequest(b []byte) (*Request, error) {
	var r Request
	if err := strictUnmarshal(b, &r); err != nil {
		return nil, err
	}
	if r.JSONRPC != "2.0" || r.Method == "" {
		return nil, fmt.Errorf("%w: not a JSON-RPC 2.0 request", ErrDecode)
	}
	return &r, nil
}

// DecodeResponse strictly decodes a JSON-RPC response. A response carrying an
// error is returned together with that *RPCError as the error.
func DecodeResponse(b []byte) (*Response, error) {
	var r Response
	if err := strictUnmarshal(b, &r); err != nil {
		return nil, err
	}
	if r.JSONRPC != "2.0" {
		return nil, fmt.Errorf("%w: not a JSON-RPC 2.0 response", ErrDecode)
	}
	if (r.Error == nil) == (r.Result == nil) {
		return nil, fmt.Errorf("%w: a response carries exactly one of result, error", ErrDecode)
	}
	if r.Error != nil {
		return &r, r.Error
	}
	return &r, nil
}

// IsCode reports whether err is an *RPCError with the given code.
func IsCode(err error, code int) bool {
	var e *RPCError
	return errors.As(err, &e) && e.Code == code
}

// Depth is the deepest nesting of arrays and objects in the valid JSON b
// (a scalar is 0), counted in one pass over the bytes without decoding:
// a bound checked before a decoder or a deep copy pays for the nesting.
func Depth(b []byte) int {
	d, deepest, inString, escaped := 0, 0, false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			d++
			deepest = max(deepest, d)
		case c == '}' || c == ']':
			d--
		}
	}
	return deepest
}
