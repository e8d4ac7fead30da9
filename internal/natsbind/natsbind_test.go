package natsbind

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/nats-io/nats.go"
)

func TestSubjects(t *testing.T) {
	if got := RPCSubject("fraud-review"); got != "a2a.agent.fraud-review.rpc" {
		t.Errorf("RPCSubject = %s", got)
	}
	if got := EventsSubject("fraud-review", "tsk-1"); got != "a2a.events.fraud-review.tsk-1" {
		t.Errorf("EventsSubject = %s", got)
	}
	a, id, err := ParseEventsSubject("a2a.events.fraud-review.tsk-1")
	if err != nil || a != "fraud-review" || id != "tsk-1" {
		t.Errorf("ParseEventsSubject = %s %s %v", a, id, err)
	}
	for _, bad := range []string{"a2a.events.x", "a2a.events.x.y.z", "a2a.agent.x.y", "a2a.events..y"} {
		if _, _, err := ParseEventsSubject(bad); !errors.Is(err, ErrBadSubject) {
			t.Errorf("ParseEventsSubject(%q) = %v", bad, err)
		}
	}
	for s, ok := range map[string]bool{"fraud-review": true, "a_b-1": true, "": false, "a.b": false, "a*": false, "a>": false, "a b": false} {
		if ValidToken(s) != ok {
			t.Errorf("ValidToken(%q) = %v", s, !ok)
		}
	}
}

func TestCallToAbsentAgentIsOffline(t *testing.T) {
	_, nc, _ := natstest.Start(t)
	_, err := NewClient(nc).Call(context.Background(), "nobody", "GetTask", map[string]string{"id": "x"}, nil)
	if !errors.Is(err, ErrAgentOffline) {
		t.Fatalf("err = %v, want ErrAgentOffline", err)
	}
}

// SendTo reaches the named replica alone; with that replica gone it asks
// the shared subject at once; a reply's A2ad-Replica is returned when it
// is one token and dropped (badReplica) otherwise.
func TestSendToRoutesToTheReplicaAndFallsBack(t *testing.T) {
	_, nc, _ := natstest.Start(t)
	serve := func(subject, queue, name, header string) *nats.Subscription {
		t.Helper()
		h := func(m *nats.Msg) {
			var req struct {
				ID string `json:"id"`
			}
			_ = json.Unmarshal(m.Data, &req)
			out := nats.NewMsg(m.Reply)
			out.Data = []byte(`{"jsonrpc":"2.0","id":"` + req.ID + `","result":{"served_by":"` + name + `"}}`)
			out.Header.Set(HeaderReplica, header)
			_ = m.RespondMsg(out)
		}
		var s *nats.Subscription
		var err error
		if queue != "" {
			s, err = nc.QueueSubscribe(subject, queue, h)
		} else {
			s, err = nc.Subscribe(subject, h)
		}
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	shared := serve(RPCSubject("fr"), "fr", "shared", "r2")
	own := serve(ReplicaSubject("fr", "r1"), "", "r1", "r1")
	bad := serve(ReplicaSubject("fr", "r3"), "", "r3", "a.b")
	_ = nc.Flush()
	defer shared.Unsubscribe()
	defer bad.Unsubscribe()
	c := NewClient(nc)
	ctx := context.Background()
	res, rep, isBad, err := c.SendTo(ctx, "fr", "r1", "CancelTask", json.RawMessage(`{"id":"x"}`), "")
	if err != nil || string(res) != `{"served_by":"r1"}` || rep != "r1" || isBad || c.Fallbacks() != 0 {
		t.Fatalf("to r1: %s %q %v %v fallbacks %d", res, rep, isBad, err, c.Fallbacks())
	}
	if err := own.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	res, rep, _, err = c.SendTo(ctx, "fr", "r1", "CancelTask", json.RawMessage(`{"id":"x"}`), "")
	if err != nil || string(res) != `{"served_by":"shared"}` || rep != "r2" || c.Fallbacks() != 1 {
		t.Fatalf("r1 gone: %s %q %v fallbacks %d, want the shared subject's answer and 1 fallback", res, rep, err, c.Fallbacks())
	}
	res, rep, isBad, err = c.SendTo(ctx, "fr", "r3", "CancelTask", json.RawMessage(`{"id":"x"}`), "")
	if err != nil || string(res) != `{"served_by":"r3"}` || rep != "" || !isBad {
		t.Fatalf("invalid header: %s %q bad=%v %v, want it dropped and reported", res, rep, isBad, err)
	}
	res, _, _, err = c.SendTo(ctx, "fr", "no.t-a-token", "CancelTask", json.RawMessage(`{"id":"x"}`), "")
	if err != nil || string(res) != `{"served_by":"shared"}` {
		t.Fatalf("invalid replica asked: %s %v, want the shared subject", res, err)
	}
	if err := shared.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	if _, _, _, err := c.SendTo(ctx, "fr", "r1", "CancelTask", json.RawMessage(`{"id":"x"}`), ""); !errors.Is(err, ErrAgentOffline) {
		t.Fatalf("nobody anywhere: %v, want ErrAgentOffline", err)
	}
}

// An agent that writes the replica header in lower case (names are
// case-insensitive, §4) is routed like one that writes A2ad-Replica.
func TestReplicaHeaderNameIsCaseInsensitive(t *testing.T) {
	_, nc, _ := natstest.Start(t)
	sub, err := nc.QueueSubscribe(RPCSubject("fr"), "fr", func(m *nats.Msg) {
		var req struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(m.Data, &req)
		out := nats.NewMsg(m.Reply)
		out.Data = []byte(`{"jsonrpc":"2.0","id":"` + req.ID + `","result":{}}`)
		out.Header["a2ad-replica"] = []string{"r4"}
		_ = m.RespondMsg(out)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	_ = nc.Flush()
	_, rep, isBad, err := NewClient(nc).SendTo(context.Background(), "fr", "", "SendMessage", json.RawMessage(`{}`), "")
	if err != nil || rep != "r4" || isBad {
		t.Fatalf("lower-case header: replica %q bad=%v %v, want r4", rep, isBad, err)
	}
	if got := HeaderValue(nats.Header{"A2A-VERSION": {"1.0"}}, HeaderA2AVersion); got != "1.0" {
		t.Fatalf("HeaderValue = %q", got)
	}
}
