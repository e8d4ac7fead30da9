package daemon_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsCost is what a wiretap (a subscription to ">" on the server a2ad
// and the agent use) and the server's counters saw over some delegations.
type natsCost struct {
	mu sync.Mutex
	// kvWrites counts each task record's stored writes (deliveries to
	// a2ad's store watcher), kvRefused the writes JetStream refused
	// (a compare-and-swap lost: "wrong last sequence").
	kvWrites           map[string]int
	pending            map[string]string // a write's reply inbox → its task id
	kvRefused, kvReads int
	agentRequests      int
	events, eventAcks  int
	audit              int
	auditKinds         map[string]int
	other              map[string]int
}

func (c *natsCost) see(m *nats.Msg) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := m.Subject
	if id, ok := c.pending[s]; ok { // JetStream's answer to a write of the task record
		delete(c.pending, s)
		switch {
		case strings.Contains(string(m.Data), `"wrong last sequence`):
			c.kvRefused++
		case !strings.Contains(string(m.Data), `"error"`):
			c.kvWrites[id]++
		}
		return
	}
	switch {
	case strings.HasPrefix(s, "$KV.a2ad_tasks.") && strings.HasPrefix(m.Reply, "$JS.ACK."):
		// a2ad's store watcher gets the write
	case strings.HasPrefix(s, "$KV.a2ad_tasks.") && m.Reply != "":
		c.pending[m.Reply] = strings.TrimPrefix(s, "$KV.a2ad_tasks.")
	case strings.HasPrefix(s, "$JS.API.DIRECT.GET.KV_a2ad_tasks"):
		c.kvReads++
	case strings.HasPrefix(s, "a2a.agent.") && strings.Contains(s, ".rpc") && strings.Contains(string(m.Data), `"method":"SendMessage"`):
		c.agentRequests++ // liveness probes aside
	case strings.HasPrefix(s, "a2a.events."):
		if strings.HasPrefix(m.Reply, "$JS.ACK.") {
			c.eventAcks++ // the delivery to a2ad's consumer
		} else {
			c.events++
		}
	case strings.HasPrefix(s, "a2ad.audit."):
		c.audit++
		c.auditKinds[strings.Join(strings.Split(s, ".")[2:4], ".")]++
	default:
		k := s
		if i := strings.IndexByte(s, '.'); i > 0 {
			k = s[:i]
		}
		c.other[k]++
	}
}

// TestDelegationCost measures what one delegation costs NATS — the agent
// answering in one event, one delegation at a time, after a warm-up: task
// record reads and writes, agent requests, event and audit writes,
// messages and bytes published. docs/scale.md quotes its log. It asserts
// what is exact: each delegation is one request to the agent, one event,
// four audit records, and at most three writes of its task record — two
// when the agent's event comes before a2ad has recorded its SendMessage
// reply, since the event's A2ad-Replica then leaves the reply nothing to
// write (docs/nats-binding.md §6.3).
func TestDelegationCost(t *testing.T) {
	s := start(t, nil)
	s.agent.SetReportAtOnce(true)
	delegate := func(i int) {
		got, errText := s.call(t, "delegate", delegateArgs(evidence(fmt.Sprintf("C-%d", i), 2500)), nil)
		if errText != "" || got.State != "completed" {
			t.Fatalf("delegation %d: %v %s", i, got, errText)
		}
	}
	for i := range 5 {
		delegate(i)
	}
	time.Sleep(300 * time.Millisecond) // the warm-up's late settles and audit flushes

	c := &natsCost{kvWrites: map[string]int{}, pending: map[string]string{}, auditKinds: map[string]int{}, other: map[string]int{}}
	nc, err := nats.Connect(s.ns.ClientURL(), nats.Name("cost-wiretap"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	sub, err := nc.Subscribe(">", c.see)
	if err != nil {
		t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(s.nc)
	if err != nil {
		t.Fatal(err)
	}
	lastSeq := func(stream string) uint64 {
		st, err := js.Stream(context.Background(), stream)
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().State.LastSeq
	}
	tasks0, audit0 := lastSeq("KV_a2ad_tasks"), lastSeq("A2AD_AUDIT")
	v0, _ := s.ns.Varz(nil)

	const n = 50
	for i := range n {
		delegate(100 + i)
	}
	time.Sleep(500 * time.Millisecond) // late settles (briefSettleGrace) and the audit's flush
	v1, _ := s.ns.Varz(nil)
	tasksWrites, auditWrites := lastSeq("KV_a2ad_tasks")-tasks0, lastSeq("A2AD_AUDIT")-audit0
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()

	byCount := map[int]int{}
	writes := 0
	for _, w := range c.kvWrites {
		byCount[w]++
		writes += w
	}
	if len(c.kvWrites) != n || uint64(writes) != tasksWrites || byCount[2]+byCount[3] != n {
		t.Errorf("task records written: %d tasks, %d writes seen, %d stored; writes per task %v, want %d tasks each written 2 or 3 times",
			len(c.kvWrites), writes, tasksWrites, byCount, n)
	}
	if c.agentRequests != n || c.events != n || c.eventAcks != n || c.audit != 4*n || auditWrites != 4*uint64(n) {
		t.Errorf("agent requests %d, events %d (delivered %d), audit records %d (stored %d); want %d, %d, %d, %d, %d",
			c.agentRequests, c.events, c.eventAcks, c.audit, auditWrites, n, n, n, 4*n, 4*n)
	}
	per := func(x int) float64 { return float64(x) / n }
	t.Logf("per delegation, over %d (agent answering in one event, one at a time):\n"+
		"  task record: %.2f writes stored (%d of %d tasks written twice, %d three times), %.2f writes refused (a lost compare-and-swap), %.2f reads\n"+
		"  agent: %.2f requests (SendMessage), %.2f events published, %.2f delivered to a2ad\n"+
		"  audit: %.2f records %v\n"+
		"  NATS: %.1f messages and %.0f bytes published by clients (server in_msgs, in_bytes); other subjects seen %v",
		n, per(writes), byCount[2], n, byCount[3], per(c.kvRefused), per(c.kvReads),
		per(c.agentRequests), per(c.events), per(c.eventAcks), per(c.audit), c.auditKinds,
		float64(v1.InMsgs-v0.InMsgs)/n, float64(v1.InBytes-v0.InBytes)/n, c.other)
}
