package natsagent

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/a2aproject/a2a-go/v2/a2a"

	wire "github.com/a2ad/a2ad/internal/a2a"
)

// ErrConfig is wrapped by every error [NewServer] returns for a Config it
// refuses.
var ErrConfig = errors.New("natsagent: invalid config")

// maxAgentText bounds the handler's own error text carried in a JSON-RPC
// error message, in bytes (cut on a rune boundary, ending "…").
const maxAgentText = 512

// errorCodes maps a2a-go's errors to the JSON-RPC codes of
// docs/nats-binding.md §8 (A2A 1.0 §9.5), first match wins.
var errorCodes = []struct {
	err  error
	code int
	what string
}{
	{a2a.ErrTaskNotFound, wire.CodeTaskNotFound, "task not found"},
	{a2a.ErrTaskNotCancelable, wire.CodeTaskNotCancelable, "task not cancelable"},
	{a2a.ErrPushNotificationNotSupported, wire.CodePushNotificationNotSupported, "push notifications not supported"},
	{a2a.ErrUnsupportedOperation, wire.CodeUnsupportedOperation, "operation not supported"},
	{a2a.ErrUnsupportedContentType, wire.CodeContentTypeNotSupported, "content type not supported"},
	{a2a.ErrInvalidAgentResponse, wire.CodeInvalidAgentResponse, "invalid agent response"},
	{a2a.ErrVersionNotSupported, wire.CodeVersionNotSupported, "version not supported"},
	{a2a.ErrInvalidParams, wire.CodeInvalidParams, "invalid params"},
	{a2a.ErrInvalidRequest, wire.CodeInvalidRequest, "invalid request"},
	{a2a.ErrMethodNotFound, wire.CodeMethodNotFound, "method not found"},
	{a2a.ErrParseError, wire.CodeParseError, "parse error"},
}

// handlerError turns an error of the request handler into a JSON-RPC
// error: the code from errorCodes (-32603 for any other error), the
// message "<method>: <what>: <handler's text, at most 512 bytes>".
func handlerError(method string, err error) *wire.RPCError {
	code, what := wire.CodeInternalError, "the agent failed"
	for _, e := range errorCodes {
		if errors.Is(err, e.err) {
			code, what = e.code, e.what
			break
		}
	}
	return &wire.RPCError{Code: code, Message: fmt.Sprintf("%s: %s: %s", method, what, bound(err.Error(), maxAgentText))}
}

func rpcError(code int, format string, args ...any) *wire.RPCError {
	return &wire.RPCError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// bound cuts s to at most n bytes on a rune boundary, marking the cut "…".
func bound(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
