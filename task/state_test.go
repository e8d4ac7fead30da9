package task

import (
	"errors"
	"testing"
)

func TestFireFollowsTheLifecycleTable(t *testing.T) {
	cases := []struct {
		from  State
		event string
		want  State
		ok    bool
	}{
		{Submitted, EventStart, Working, true},
		{Submitted, EventAsk, InputRequired, true},
		{Working, EventAsk, InputRequired, true},
		{Working, EventNeedAuth, AuthRequired, true},
		{InputRequired, EventResume, Working, true},
		{AuthRequired, EventResume, Working, true},
		{Submitted, EventComplete, Completed, true},
		{Working, EventComplete, Completed, true},
		{InputRequired, EventFail, Failed, true},
		{InputRequired, EventCancel, Canceled, true},
		{Working, EventReject, Rejected, true},
		{InputRequired, EventComplete, InputRequired, false},
		{Working, EventResume, Working, false},
		{InputRequired, EventReject, InputRequired, false},
		{Completed, EventStart, Completed, false},
		{Completed, EventFail, Completed, false},
		{Failed, EventCancel, Failed, false},
		{Canceled, EventComplete, Canceled, false},
		{Rejected, EventResume, Rejected, false},
		{Working, "explode", Working, false},
	}
	for _, c := range cases {
		t.Run(string(c.from)+"/"+c.event, func(t *testing.T) {
			got, err := Fire(c.from, c.event)
			if got != c.want || (err == nil) != c.ok {
				t.Fatalf("Fire(%s, %s) = %s, %v; want %s, ok=%v", c.from, c.event, got, err, c.want, c.ok)
			}
			if err != nil && !errors.Is(err, ErrIllegalTransition) {
				t.Fatalf("error %v does not wrap ErrIllegalTransition", err)
			}
		})
	}
}

func TestEventForNamesTheTransition(t *testing.T) {
	for _, c := range []struct {
		from, to State
		want     string
	}{
		{Submitted, Working, EventStart},
		{InputRequired, Working, EventResume},
		{AuthRequired, Working, EventResume},
		{Working, InputRequired, EventAsk},
		{Working, Completed, EventComplete},
		{Completed, Working, EventStart},
	} {
		if got := EventFor(c.from, c.to); got != c.want {
			t.Errorf("EventFor(%s, %s) = %s, want %s", c.from, c.to, got, c.want)
		}
	}
}

func BenchmarkFire(b *testing.B) {
	for b.Loop() {
		_, _ = Fire(Working, EventComplete)
	}
}
