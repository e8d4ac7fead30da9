package broker

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/a2a"
	"github.com/a2ad/a2ad/task"
)

// The settle's wait decides from a few members whether the agent's first
// event already recorded what the brief's delivery would: it must agree
// with applyReply, which writes it, on every combination.
func TestReplyChangesAgreesWithApplyReply(t *testing.T) {
	brief := task.Outbound{Method: a2a.MethodSendMessage, MessageID: "tsk-1-m1"}
	other := task.Outbound{Method: a2a.MethodCancelTask}
	replies := []*a2a.Task{nil,
		{ID: "a1", ContextID: "c1", Status: a2a.TaskStatus{State: a2a.TaskStateWorking}},
		{ID: "a1", ContextID: "c1", Status: a2a.TaskStatus{State: a2a.TaskStateSubmitted}},
		{ID: "", ContextID: "", Status: a2a.TaskStatus{State: a2a.TaskStateWorking}},
	}
	n := 0
	for _, state := range []task.State{task.Submitted, task.Working, task.Completed, task.Canceled} {
		for _, ids := range [][2]string{{"", ""}, {"a1", ""}, {"a1", "c1"}} {
			for _, outbox := range []*task.Outbound{nil, &brief, &other} {
				for _, at := range replies {
					for _, reps := range [][2]string{{"", ""}, {"", "r1"}, {"r1", ""}, {"r1", "r2"}} {
						r := &task.Record{ID: "tsk-1", State: state, AgentTaskID: ids[0], AgentReplica: reps[0], ContextID: ids[1], Outbox: outbox}
						// Through the record's JSON, as the store's watcher has it.
						raw, err := json.Marshal(r)
						if err != nil {
							t.Fatal(err)
						}
						var cur task.Record
						if err := json.Unmarshal(raw, &cur); err != nil {
							t.Fatal(err)
						}
						want, _, _ := applyReply(&cur, brief, at, reps[1], time.Now().UTC())
						got := replyChanges(state, ids[0], reps[0], ids[1], outbox, brief, at, reps[1])
						if got != want {
							t.Errorf("%s ids %v replicas %v outbox %v reply %v: replyChanges %v, applyReply changed %v", state, ids, reps, outbox, at, got, want)
						}
						if want && at != nil && reps[0] == "" && cur.AgentReplica != reps[1] {
							t.Errorf("replica recorded %q, want %q", cur.AgentReplica, reps[1])
						}
						if reps[0] != "" && cur.AgentReplica != reps[0] {
							t.Errorf("recorded replica %q changed to %q: it is set once", reps[0], cur.AgentReplica)
						}
						n++
					}
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no case ran")
	}
}
