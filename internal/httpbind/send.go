package httpbind

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/a2ad/a2ad/internal/a2a"
)

// ErrMethod: Send was asked for a method the HTTP binding does not send
// (it sends SendMessage, GetTask and CancelTask). Nothing was sent.
var ErrMethod = errors.New("httpbind: method not sent over the HTTP binding")

// Send sends one A2A 1.0 request to agentID (broker.Binding): method
// a2a.MethodSendMessage, MethodGetTask or MethodCancelTask, params its
// A2A 1.0 JSON params (A2A 1.0 §9.4: SendMessageRequest, GetTaskRequest,
// CancelTaskRequest). traceparent, if not "", goes as the traceparent
// header (W3C Trace Context). The result is A2A 1.0 JSON: for SendMessage
// a SendMessageResponse ({"task":…} or {"message":…}), else a Task; it
// has passed a2a.DecodeSendMessageResponse or a2a.DecodeTask.
//
// Errors, in a2ad's words (never the agent's text):
//   - wrapping a2a.ErrAgentUnreachable: nothing was sent — the request
//     was never written (connection refused, DNS failure, TLS handshake
//     failure, a dial timeout), its URL or origin is refused (*URLError,
//     *OriginError), or a2ad had no credential to send (*AuthError with
//     Status 0);
//   - *a2a.RPCError: the agent answered with an A2A error and took
//     nothing — its A2A 1.0 code (a JSON-RPC error object, or the REST
//     binding's error body, as a2a-go maps them), or for an HTTP answer
//     without one: 401 → CodeUnauthenticated and 403 → CodeUnauthorized
//     (as *AuthError), 3xx → CodeInvalidAgentResponse (*RedirectError),
//     404/405/501 → CodeMethodNotFound, another 4xx but 408 and 429 →
//     CodeInvalidRequest;
//   - wrapping a2a.ErrDecode: the agent answered 200 but not with valid
//     A2A 1.0 (or more than [Limits] allows, *LimitError): it may have
//     taken the request;
//   - anything else: the outcome is unknown (a timeout or a reset after
//     the request was written, HTTP 408, 429 or 5xx without an A2A error).
func (b *Binding) Send(ctx context.Context, agentID, method string, params json.RawMessage, traceparent string) (json.RawMessage, error) {
	var req any
	switch method {
	case a2a.MethodSendMessage:
		req = &sdk.SendMessageRequest{}
	case a2a.MethodGetTask:
		req = &sdk.GetTaskRequest{}
	case a2a.MethodCancelTask:
		req = &sdk.CancelTaskRequest{}
	default:
		return nil, fmt.Errorf("%w: %q: %w", ErrMethod, method, a2a.ErrAgentUnreachable)
	}
	if err := json.Unmarshal(params, req); err != nil {
		return nil, fmt.Errorf("agent %s: %s params are not A2A 1.0 JSON a2ad can send: %w", agentID, method, a2a.ErrAgentUnreachable)
	}
	c, _, err := b.Client(ctx, agentID)
	if err != nil {
		return nil, notSent(agentID, err)
	}
	cctx, ci := withCall(ctx, traceparent)
	var res any
	switch r := req.(type) {
	case *sdk.SendMessageRequest:
		if r.Message == nil {
			return nil, fmt.Errorf("agent %s: SendMessage params carry no message: %w", agentID, a2a.ErrAgentUnreachable)
		}
		var out sdk.SendMessageResult
		if out, err = c.SendMessage(cctx, r); err == nil {
			res = sdk.StreamResponse{Event: out}
		}
	case *sdk.GetTaskRequest:
		var out *sdk.Task
		if out, err = c.GetTask(cctx, r); err == nil {
			res = out
		}
	case *sdk.CancelTaskRequest:
		var out *sdk.Task
		if out, err = c.CancelTask(cctx, r); err == nil {
			res = out
		}
	}
	if err != nil {
		return nil, classify(agentID, method, ci, err)
	}
	return encodeResult(agentID, method, res)
}

// encodeResult re-encodes what a2a-go decoded as A2A 1.0 JSON and puts it
// through a2ad's own strict decoders.
func encodeResult(agentID, method string, res any) (json.RawMessage, error) {
	out, err := json.Marshal(res)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %s result cannot be encoded as A2A 1.0: %w", agentID, method, a2a.ErrDecode)
	}
	if method == a2a.MethodSendMessage {
		_, err = a2a.DecodeSendMessageResponse(out)
	} else {
		_, err = a2a.DecodeTask(out)
	}
	if err != nil {
		return nil, fmt.Errorf("agent %s: %s result: %w", agentID, method, err)
	}
	return out, nil
}

// notSent gives an error of Client the class "nothing was sent" (a
// missing target stays ErrNotHTTP's, and is not sent either).
func notSent(agentID string, err error) error {
	if errors.Is(err, a2a.ErrAgentUnreachable) {
		return err
	}
	return fmt.Errorf("agent %s: not sent: %w: %w", agentID, err, a2a.ErrAgentUnreachable)
}

// sdkCodes maps a2a-go's sentinel errors (its JSON-RPC and REST error
// mapping) to A2A 1.0 codes (§9.5; a2a-go's codes for auth).
var sdkCodes = []struct {
	err  error
	code int
}{
	{sdk.ErrTaskNotFound, a2a.CodeTaskNotFound},
	{sdk.ErrTaskNotCancelable, a2a.CodeTaskNotCancelable},
	{sdk.ErrPushNotificationNotSupported, a2a.CodePushNotificationNotSupported},
	{sdk.ErrUnsupportedOperation, a2a.CodeUnsupportedOperation},
	{sdk.ErrUnsupportedContentType, a2a.CodeContentTypeNotSupported},
	{sdk.ErrInvalidAgentResponse, a2a.CodeInvalidAgentResponse},
	{sdk.ErrVersionNotSupported, a2a.CodeVersionNotSupported},
	{sdk.ErrExtendedCardNotConfigured, -32007},
	{sdk.ErrExtensionSupportRequired, -32008},
	{sdk.ErrUnauthenticated, CodeUnauthenticated},
	{sdk.ErrUnauthorized, CodeUnauthorized},
	{sdk.ErrMethodNotFound, a2a.CodeMethodNotFound},
	{sdk.ErrInvalidParams, a2a.CodeInvalidParams},
	{sdk.ErrInvalidRequest, a2a.CodeInvalidRequest},
	{sdk.ErrInternalError, a2a.CodeInternalError},
	{sdk.ErrServerError, -32000},
}

// ErrAgentInternalError is wrapped by the error of a request the agent
// answered with an A2A internal or server error (-32603, -32000): the
// outcome is unknown, so the broker retries it (and reconciles a
// SendMessage first) rather than taking it as refused.
var ErrAgentInternalError = errors.New("the agent reported an internal error")

// classify turns an a2a-go call's error into the broker's classes
// (broker.Binding), never keeping the SDK's text (it quotes the agent).
func classify(agentID, method string, ci *callInfo, err error) error {
	wrote, status, bodyErr := ci.snapshot()
	var (
		le *LimitError
		de *DuplicateError
		ae *AuthError
		re *RedirectError
		oe *OriginError
	)
	switch {
	case errors.As(err, &de):
		return de
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &oe):
		return oe
	case errors.As(err, &re):
		return re
	case errors.As(err, &le):
		return le
	case !wrote:
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return fmt.Errorf("agent %s: %s not sent before the call's deadline: %w: %w", agentID, method, context.DeadlineExceeded, a2a.ErrAgentUnreachable)
		}
		return fmt.Errorf("agent %s: %s not sent: the agent's address cannot be reached (connection, DNS or TLS handshake failed): %w", agentID, method, a2a.ErrAgentUnreachable)
	}
	var se *sdk.Error
	if errors.As(err, &se) {
		// A JSON-RPC error object, or the REST binding's error body.
		code := a2a.CodeInternalError
		for _, m := range sdkCodes {
			if errors.Is(se, m.err) {
				code = m.code
				break
			}
		}
		if code == a2a.CodeInternalError || code == -32000 {
			// The agent failed while handling the request: it may have
			// taken it (a task created, then an error). a2a-go agents also
			// answer so to a message or cancellation that comes while the
			// execution that asked is winding down. Retried, reconciled first.
			return fmt.Errorf("agent %s: %s answered %s: outcome unknown: %w", agentID, method, a2a.CodeName(code), ErrAgentInternalError)
		}
		return &a2a.RPCError{Code: code, Message: a2a.CodeName(code)}
	}
	switch {
	case status == 0:
		return fmt.Errorf("agent %s: %s sent, but no answer came (timeout or connection lost): outcome unknown", agentID, method)
	case status == http.StatusNotFound, status == http.StatusMethodNotAllowed, status == http.StatusNotImplemented:
		return &a2a.RPCError{Code: a2a.CodeMethodNotFound, Message: fmt.Sprintf("HTTP %d", status)}
	case status >= 400 && status < 500 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests:
		return &a2a.RPCError{Code: a2a.CodeInvalidRequest, Message: fmt.Sprintf("HTTP %d", status)}
	case status != http.StatusOK:
		return fmt.Errorf("agent %s: %s answered HTTP %d: outcome unknown", agentID, method, status)
	case bodyErr != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return fmt.Errorf("agent %s: %s sent, but its answer did not arrive whole: outcome unknown", agentID, method)
	}
	return fmt.Errorf("agent %s: %s answer is not valid A2A 1.0: %w", agentID, method, a2a.ErrDecode)
}

// faultWords says, in a2ad's words, why a call to an agent failed, for
// logs: a2a-go's errors quote what the agent answered (its error message),
// which is agent text and stays out of a2ad's logs. a2ad's own errors
// (limits, origins, redirects, URLs, credentials) say themselves.
func faultWords(err error) string {
	var (
		le *LimitError
		de *DuplicateError
		oe *OriginError
		re *RedirectError
		ae *AuthError
		ue *URLError
	)
	switch {
	case err == nil:
		return ""
	case errors.As(err, &le):
		return le.Error()
	case errors.As(err, &de):
		return de.Error()
	case errors.As(err, &oe):
		return oe.Error()
	case errors.As(err, &re):
		return re.Error()
	case errors.As(err, &ae):
		return ae.Error()
	case errors.As(err, &ue):
		return ue.Error()
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer within the call's timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, errOwnWords):
		return err.Error()
	}
	for _, m := range sdkCodes {
		if errors.Is(err, m.err) {
			return "the agent answered " + a2a.CodeName(m.code)
		}
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return "the connection to the agent failed"
	}
	return "the request failed"
}

// errOwnWords marks an error whose text is a2ad's own (no agent text).
var errOwnWords = errors.New("")

// ownWords is an error of a2ad's text, logged as it is.
func ownWords(text string) error { return fmt.Errorf("%s%w", text, errOwnWords) }
