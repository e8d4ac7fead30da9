package task

import (
	"fmt"
	"strconv"

	"github.com/a2ad/a2ad/internal/a2a"
)

// Bounds on what a2ad keeps of an agent's event (docs/nats-binding.md §6.6).
// An event over one is refused before anything of it is stored: a2ad
// records the refusal in its own words and terminates the event.
const (
	// MaxEventIDBytes bounds an event's Nats-Msg-Id, which must also be
	// printable ASCII without spaces: the binding's own form,
	// "<taskId>.<seq>", is under 50 bytes.
	MaxEventIDBytes = 256
	// MaxAgentIDBytes bounds the ids an agent chooses that a record keeps
	// or compares: its task id, context id, message ids and artifact ids.
	MaxAgentIDBytes = 256
	// MaxArtifactNameBytes bounds an artifact's name.
	MaxArtifactNameBytes = 256
)

// Reasons an event is terminated for good (the label of
// a2ad_events_terminated_total): it can never be applied.
const (
	DropBadSubject    = "bad_subject"   // not a2a.events.<agentId>.<taskId> with valid tokens
	DropOutOfBounds   = "out_of_bounds" // a Nats-Msg-Id or an id over the bounds above
	DropMalformed     = "malformed"     // not one A2A 1.0 stream item
	DropUnknownTask   = "unknown_task"  // no such task, confirmed after a second delivery
	DropForeignTask   = "foreign_task"  // the task is another agent's
	DropRecordFull    = "record_full"   // applying it would outgrow the record's byte budget
	DropUndeliverable = "undeliverable" // still not applied at its last delivery
	DropTaskEnded     = "task_ended"    // its task ended over FinalAfter before: the record is final
)

// dropped is an event that can never be applied, with its reason (one of
// the Drop… codes); it wraps errRefused.
type dropped struct{ reason, detail string }

func (d *dropped) Error() string {
	if d.detail == "" {
		return "event refused: " + d.reason
	}
	return "event refused: " + d.reason + ": " + d.detail
}

func (d *dropped) Unwrap() error { return errRefused }

// DropReason returns the Drop… code of an error [Tracker.Apply] returned
// for an event that can never be applied, or "".
func DropReason(err error) string {
	if d, ok := err.(*dropped); ok {
		return d.reason
	}
	return ""
}

// validEventID reports whether msgID is within MaxEventIDBytes and
// printable ASCII without spaces (an empty id is allowed: the event is
// then ordered by the stream).
func validEventID(msgID string) bool {
	if len(msgID) > MaxEventIDBytes {
		return false
	}
	for i := 0; i < len(msgID); i++ {
		if c := msgID[i]; c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

// An overBound is what of an event is over a2ad's bounds (what, in a2ad's
// words) and where (ptr, its JSON pointer in the event); zero for nothing.
type overBound struct{ what, ptr string }

// checkItem returns what of item exceeds what a record may keep of it.
func checkItem(item *a2a.StreamResponse) overBound {
	var bad overBound
	id := func(what, ptr, v string) {
		if bad.what == "" && len(v) > MaxAgentIDBytes {
			bad = overBound{fmt.Sprintf("%s longer than %d bytes", what, MaxAgentIDBytes), ptr}
		}
	}
	status := func(st a2a.TaskStatus, ptr string) {
		if m := st.Message; m != nil {
			id("status message messageId", ptr+"/message/messageId", m.MessageID)
			id("status message taskId", ptr+"/message/taskId", m.TaskID)
			id("status message contextId", ptr+"/message/contextId", m.ContextID)
		}
	}
	art := func(a a2a.Artifact, ptr string) {
		id("artifactId", ptr+"/artifactId", a.ArtifactID)
		if bad.what == "" && len(a.Name) > MaxArtifactNameBytes {
			bad = overBound{fmt.Sprintf("artifact name longer than %d bytes", MaxArtifactNameBytes), ptr + "/name"}
		}
	}
	switch {
	case item.StatusUpdate != nil:
		id("taskId", "/statusUpdate/taskId", item.StatusUpdate.TaskID)
		id("contextId", "/statusUpdate/contextId", item.StatusUpdate.ContextID)
		status(item.StatusUpdate.Status, "/statusUpdate/status")
	case item.ArtifactUpdate != nil:
		id("taskId", "/artifactUpdate/taskId", item.ArtifactUpdate.TaskID)
		id("contextId", "/artifactUpdate/contextId", item.ArtifactUpdate.ContextID)
		art(item.ArtifactUpdate.Artifact, "/artifactUpdate/artifact")
	case item.Task != nil:
		id("taskId", "/task/id", item.Task.ID)
		id("contextId", "/task/contextId", item.Task.ContextID)
		status(item.Task.Status, "/task/status")
		for i, a := range item.Task.Artifacts {
			art(a, "/task/artifacts/"+strconv.Itoa(i))
		}
	}
	return bad
}
