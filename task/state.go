package task

import (
	"context"
	"errors"
	"fmt"

	"github.com/a2ad/a2ad/internal/a2a"
	"github.com/looplab/fsm"
)

// State is a task's lifecycle state as a2ad stores it and shows it to hosts
// and operators: A2A's state names in their 0.3/human spelling.
type State string

// The lifecycle states (DESIGN.md "Task lifecycle").
const (
	Submitted     State = "submitted"
	Working       State = "working"
	InputRequired State = "input-required"
	AuthRequired  State = "auth-required"
	Completed     State = "completed"
	Failed        State = "failed"
	Canceled      State = "canceled"
	Rejected      State = "rejected"
)

// Terminal reports whether no transition may leave s.
func (s State) Terminal() bool {
	return s == Completed || s == Failed || s == Canceled || s == Rejected
}

// Interrupted reports whether the task waits on its requester.
func (s State) Interrupted() bool { return s == InputRequired || s == AuthRequired }

// FromWire maps an A2A 1.0 wire state (TASK_STATE_*) to a State; ok is false
// for TASK_STATE_UNSPECIFIED or anything unknown.
func FromWire(w a2a.TaskState) (s State, ok bool) {
	switch w {
	case a2a.TaskStateSubmitted:
		return Submitted, true
	case a2a.TaskStateWorking:
		return Working, true
	case a2a.TaskStateInputRequired:
		return InputRequired, true
	case a2a.TaskStateAuthRequired:
		return AuthRequired, true
	case a2a.TaskStateCompleted:
		return Completed, true
	case a2a.TaskStateFailed:
		return Failed, true
	case a2a.TaskStateCanceled:
		return Canceled, true
	case a2a.TaskStateRejected:
		return Rejected, true
	}
	return "", false
}

// Lifecycle events (transition names).
const (
	EventStart    = "start"
	EventAsk      = "ask"
	EventNeedAuth = "need-auth"
	EventResume   = "resume"
	EventComplete = "complete"
	EventFail     = "fail"
	EventCancel   = "cancel"
	EventReject   = "reject"
)

var open = []string{string(Submitted), string(Working), string(InputRequired), string(AuthRequired)}

// lifecycle is the transition table; A2A defines states but no table, so
// this one is ours (DESIGN.md). Terminal states have no way out.
var lifecycle = fsm.Events{
	{Name: EventStart, Src: []string{string(Submitted)}, Dst: string(Working)},
	{Name: EventAsk, Src: []string{string(Submitted), string(Working)}, Dst: string(InputRequired)},
	{Name: EventNeedAuth, Src: []string{string(Submitted), string(Working)}, Dst: string(AuthRequired)},
	{Name: EventResume, Src: []string{string(InputRequired), string(AuthRequired)}, Dst: string(Working)},
	{Name: EventComplete, Src: []string{string(Submitted), string(Working)}, Dst: string(Completed)},
	{Name: EventFail, Src: open, Dst: string(Failed)},
	{Name: EventCancel, Src: open, Dst: string(Canceled)},
	{Name: EventReject, Src: []string{string(Submitted), string(Working)}, Dst: string(Rejected)},
}

// ErrIllegalTransition is wrapped by every refused transition.
var ErrIllegalTransition = errors.New("illegal transition")

// EventFor names the lifecycle event that moves from to to.
func EventFor(from, to State) string {
	switch to {
	case Working:
		if from.Interrupted() {
			return EventResume
		}
		return EventStart
	case InputRequired:
		return EventAsk
	case AuthRequired:
		return EventNeedAuth
	case Completed:
		return EventComplete
	case Failed:
		return EventFail
	case Canceled:
		return EventCancel
	case Rejected:
		return EventReject
	}
	return "report-" + string(to)
}

// Fire runs event on a machine built from the stored state and returns the
// new state. A same-state outcome is not an error. Errors wrap
// ErrIllegalTransition. The machine is built per call (about 3 µs) and run
// with a context that is never cancelled: a cancelled context wedges a
// looplab FSM for good.
func Fire(from State, event string) (State, error) {
	m := fsm.NewFSM(string(from), lifecycle, nil)
	err := m.Event(context.Background(), event)
	var nt fsm.NoTransitionError
	if err != nil && !errors.As(err, &nt) {
		return from, fmt.Errorf("%w: %s from %s", ErrIllegalTransition, event, from)
	}
	return State(m.Current()), nil
}
