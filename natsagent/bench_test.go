package natsagent

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	wire "github.com/a2ad/a2ad/internal/a2a"
	"github.com/a2ad/a2ad/internal/natsbind"
)

// BenchmarkTask is one task of the test executor as a2ad sees it: the
// SendMessage request answered, then the task's three events (WORKING, the
// artifact, COMPLETED) published to the stream and acknowledged; an
// iteration ends when the COMPLETED event reaches a subscriber. One NATS
// server, a2ad's side and the agent in this process.
func BenchmarkTask(b *testing.B) {
	e := newEnv(b, true)
	done := make(chan struct{}, 1)
	sub, err := e.nc.Subscribe("a2a.events."+testAgent+".>", func(m *nats.Msg) {
		if json.Valid(m.Data) && len(m.Data) > 0 && containsCompleted(m.Data) {
			done <- struct{}{}
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		id := fmt.Sprintf("tsk-b%d", i)
		req, _ := wire.NewRequest("1", "SendMessage", sendParams(id, id+"-m1", "", "hello"))
		body, _ := json.Marshal(req)
		m := nats.NewMsg(natsbind.RPCSubject(testAgent))
		m.Data = body
		m.Header.Set(natsbind.HeaderA2AVersion, "1.0")
		if _, err := e.nc.RequestMsg(m, 5*time.Second); err != nil {
			b.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			b.Fatalf("task %s: no COMPLETED event", id)
		}
	}
}

func containsCompleted(b []byte) bool {
	var sr struct {
		StatusUpdate *struct {
			Status struct {
				State string `json:"state"`
			} `json:"status"`
		} `json:"statusUpdate"`
	}
	return json.Unmarshal(b, &sr) == nil && sr.StatusUpdate != nil && sr.StatusUpdate.Status.State == "TASK_STATE_COMPLETED"
}
