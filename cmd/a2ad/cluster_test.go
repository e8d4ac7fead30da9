package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/natscluster"
	"github.com/a2ad/a2ad/internal/refagent"
	"github.com/a2ad/a2ad/task"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Two a2ad instances on a real three-node NATS JetStream cluster (nats-server
// built from its module), KV and stream replicas 3. Delegations run through
// both; the node leading the task bucket is killed mid-run; every task still
// completes, once, and the agent received exactly one brief per task.
func TestClusterSurvivesNodeLoss(t *testing.T) {
	c := natscluster.Start(t, 3)
	slow := map[string]string{}
	for i := range 6 {
		slow[fmt.Sprintf("C-5%02d", i)] = refagent.ModeSlow
	}
	agent := agentOn(t, c.URLs(), credentialFor(t, c.URLs(), "", "--replicas", "3"), slow)
	cfg := configFile(t, "replicas: 3\n")
	var ds []*daemonProc
	var hs []*host
	for range 2 {
		d := startDaemon(t, nil, "--config", cfg, "--nats-url", c.URLs(), "--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0")
		ds = append(ds, d)
		hs = append(hs, connectHost(t, d))
	}
	type job struct{ id, caseID string }
	var jobs []job
	delegate := func(i int) {
		t.Helper()
		caseID := fmt.Sprintf("C-5%02d", i)
		out, err := hs[i%2].delegateWhenAgentKnown(delegateArgs(caseID, 1999, "cluster-"+caseID, 0))
		if err != nil || out.ErrText != "" {
			t.Fatalf("delegate %s: %v %s", caseID, err, out.ErrText)
		}
		jobs = append(jobs, job{out.TaskID, caseID})
	}
	for i := range 10 {
		delegate(i)
	}

	// Kill the node that leads the task bucket's stream: a leader election
	// happens while six slow tasks are still working.
	nc, err := nats.Connect(c.URLs())
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	st, err := js.Stream(context.Background(), "KV_"+task.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("task bucket is not replicated 3 ways: %+v %v", info, err)
	}
	leader := c.Index(info.Cluster.Leader)
	nc.Close()
	c.Kill(leader)

	for i := 10; i < 20; i++ {
		delegate(i)
	}
	for i, j := range jobs {
		got := hs[(i+1)%2].waitFinal(j.id, 60*time.Second)
		checkCompleted(t, got, settledRecord(t, ds[i%2], j.id), j.caseID, smallCaseHistory)
	}
	if n := agent.Stats().BriefsReceived; n != len(jobs) {
		t.Errorf("agent received %d briefs, want %d", n, len(jobs))
	}
}
