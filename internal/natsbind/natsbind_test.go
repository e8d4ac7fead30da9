package natsbind

import (
	"context"
	"errors"
	"testing"

	"github.com/a2ad/a2ad/internal/natstest"
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
