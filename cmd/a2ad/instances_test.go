package main

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/natstest"
)

// Three a2ad instances (the real binary, three processes) on one NATS
// server with JetStream share one agent's work without an instance-wide
// lock or a single consumer between them (issue 20, point 4). Hosts
// delegate through one instance alone, then through all three at once:
//   - every delegation completes, and each instance accepted exactly its
//     own hosts' delegations;
//   - each task completed exactly once across the three (the sum of
//     a2ad_task_transitions_total to completed is the number of tasks);
//   - every instance applied agent events: the agent's event stream has
//     one durable consumer that all instances pull from, so events are
//     spread, not funnelled through one instance.
//
// The throughput of each phase, per instance and together, is logged
// (go test -v -run TestThreeInstances ./cmd/a2ad) and quoted in
// docs/scale.md; it is a report, not an assertion.
func TestThreeInstancesShareTheLoad(t *testing.T) {
	srv, _, _ := natstest.Start(t)
	cfg := configFile(t, "rate_limits:\n  per_principal:\n    writes: {per_second: 100000, burst: 100000}\n"+
		"  per_tenant:\n    writes: {per_second: 100000, burst: 100000}\n")
	const instances, hostsEach, delegationsEach = 3, 6, 15
	var ds []*daemonProc
	hosts := make([][]*host, instances)
	for i := range instances {
		d := startDaemon(t, nil, "--config", cfg, "--nats-url", srv.ClientURL(), "--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0")
		ds = append(ds, d)
		for range hostsEach {
			hosts[i] = append(hosts[i], connectHost(t, d))
		}
	}
	agentOn(t, srv.ClientURL(), credentialFor(t, srv.ClientURL(), ""), nil)
	for i, d := range ds {
		if out, err := hosts[i][0].delegateWhenAgentKnown(delegateArgs(fmt.Sprintf("C-0%d", i), 1999, "", 20)); err != nil || out.State != "completed" {
			t.Fatalf("first delegation through %s: %v %+v", d.HTTP, err, out)
		}
	}

	// run delegates through the instances in use, every host at once, and
	// returns how long the phase took.
	var caseN int
	var mu sync.Mutex
	run := func(phase string, use int) time.Duration {
		t.Helper()
		var wg sync.WaitGroup
		var failures []string
		start := time.Now()
		for i := range use {
			for _, h := range hosts[i] {
				wg.Go(func() {
					for range delegationsEach {
						mu.Lock()
						caseN++
						caseID := fmt.Sprintf("C-%05d", caseN)
						mu.Unlock()
						out, err := h.call("delegate", delegateArgs(caseID, 1999, "", 20))
						if err != nil || out.State != "completed" {
							mu.Lock()
							failures = append(failures, fmt.Sprintf("%s: instance %d: %v %q %q", caseID, i, err, out.State, out.ErrText))
							mu.Unlock()
						}
					}
				})
			}
		}
		wg.Wait()
		elapsed := time.Since(start)
		if len(failures) > 0 {
			t.Fatalf("%s: %d of %d delegations did not complete: %v", phase, len(failures), use*hostsEach*delegationsEach, failures)
		}
		return elapsed
	}

	alone := run("one instance", 1)
	before := make([]instanceCounts, instances)
	for i, d := range ds {
		before[i] = countsOf(t, d)
	}
	together := run("three instances", instances)
	perInstance := hostsEach * delegationsEach
	completed := 0
	for i, d := range ds {
		c := countsOf(t, d).minus(before[i])
		if c.accepted != perInstance {
			t.Errorf("instance %d accepted %d delegations, want its hosts' %d", i, c.accepted, perInstance)
		}
		if c.fromAgent == 0 {
			t.Errorf("instance %d applied no agent event while all three ran: the events went through the others", i)
		}
		completed += c.completed
		t.Logf("instance %d: %d delegations in %s (%.0f/s); applied %d completions, %d of them from agent events",
			i, perInstance, together.Round(time.Millisecond), float64(perInstance)/together.Seconds(), c.completed, c.fromAgent)
	}
	if want := instances * perInstance; completed != want {
		t.Errorf("the instances applied %d completions, want one per task: %d", completed, want)
	}
	t.Logf("one instance alone: %d delegations in %s (%.0f/s); three together: %d in %s (%.0f/s)",
		perInstance, alone.Round(time.Millisecond), float64(perInstance)/alone.Seconds(),
		instances*perInstance, together.Round(time.Millisecond), float64(instances*perInstance)/together.Seconds())
}

// instanceCounts are one instance's counters of fraud-review's work.
type instanceCounts struct {
	accepted  int // a2ad_delegations_total, outcome accepted
	completed int // a2ad_task_transitions_total to completed, any source
	fromAgent int // of those, applied from the agent's events
}

func (c instanceCounts) minus(b instanceCounts) instanceCounts {
	return instanceCounts{c.accepted - b.accepted, c.completed - b.completed, c.fromAgent - b.fromAgent}
}

// countsOf reads d's counters from its /metrics.
func countsOf(t *testing.T, d *daemonProc) instanceCounts {
	t.Helper()
	value := func(series string) int {
		l := metricLine(t, d, series)
		if l == "" {
			return 0
		}
		v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		return int(v)
	}
	c := instanceCounts{accepted: value(`a2ad_delegations_total{agent="fraud-review",outcome="accepted"}`)}
	for _, source := range []string{"agent", "host", "daemon"} {
		n := value(`a2ad_task_transitions_total{agent="fraud-review",source="` + source + `",to="completed"}`)
		c.completed += n
		if source == "agent" {
			c.fromAgent = n
		}
	}
	return c
}
