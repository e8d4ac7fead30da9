package httpbind

import (
	"context"
	"errors"
	"fmt"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/a2ad/a2ad/internal/a2a"
	"github.com/a2ad/a2ad/internal/natsbind"
)

// ErrNoAnswer means a probe's request was written but no HTTP answer came
// before its deadline, or the connection was lost first.
var ErrNoAnswer = fmt.Errorf("%w: no HTTP answer before the probe's deadline", a2a.ErrAgentUnreachable)

// Probe asks whether agentID answers at its interface URL: one GetTask of
// natsbind.ProbeTaskID (a task no agent holds: a standard agent answers
// TaskNotFound, doing no work), through the agent's hardened client
// ([Binding.Client]: its origin, its Authorization, its [Limits]),
// bounded by ctx. nil for any HTTP answer, whatever its status or body
// (401 and 5xx included: a server is there); otherwise an error wrapping
// a2a.ErrAgentUnreachable, in a2ad's words: the connection, DNS or TLS
// handshake failed, the URL or origin is refused, a2ad has no credential
// to send, the connection was lost before an answer, or [ErrNoAnswer].
func (b *Binding) Probe(ctx context.Context, agentID string) error {
	c, t, err := b.Client(ctx, agentID)
	if err != nil {
		return notSent(agentID, err)
	}
	cctx, ci := withCall(ctx, "")
	_, err = c.GetTask(cctx, &sdk.GetTaskRequest{ID: natsbind.ProbeTaskID, Tenant: t.Tenant})
	if err == nil {
		return nil
	}
	wrote, status, _ := ci.snapshot()
	var ae *AuthError
	switch {
	case status != 0:
		return nil
	case errors.As(err, &ae) && ae.Status == 0:
		return ae
	case wrote && ctx.Err() != nil:
		return fmt.Errorf("agent %s: %w", agentID, ErrNoAnswer)
	case wrote:
		return fmt.Errorf("agent %s: the connection was lost before an HTTP answer to the probe: %w", agentID, a2a.ErrAgentUnreachable)
	}
	return classify(agentID, "probe", ci, err)
}
