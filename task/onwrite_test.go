package task

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/natstest"
)

// Each write is reported once, by its writer, with exactly what it added:
// the audit trail and the metrics count on it.
func TestOnWriteReportsEachWriteOnce(t *testing.T) {
	_, _, js := natstest.Start(t)
	s, err := NewStore(context.Background(), js, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []string
	s.OnWrite = func(r *Record, w Write) {
		mu.Lock()
		defer mu.Unlock()
		line := fmt.Sprintf("%s created=%v", r.ID, w.Created)
		for _, tr := range w.Transitions {
			line += fmt.Sprintf(" %s:%s->%s refused=%v", tr.Event, tr.From, tr.To, tr.Refused)
		}
		got = append(got, line)
	}
	ctx := context.Background()
	now := time.Now().UTC()
	r := &Record{ID: "tsk-w", State: Submitted, CreatedAt: now, UpdatedAt: now,
		History: []Transition{{At: now, To: Submitted, Event: "submit", Source: SourceHost}}}
	if err := s.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	move := func(event string) error {
		_, err := s.Update(ctx, "tsk-w", func(r *Record) error { return r.Move(time.Now(), event, SourceAgent, "", "") })
		return err
	}
	if err := move(EventStart); err != nil {
		t.Fatal(err)
	}
	if err := move(EventResume); !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("resume from working: %v", err)
	}
	if _, err := s.Update(ctx, "tsk-w", func(*Record) error { return errors.New("no") }); err == nil {
		t.Fatal("a refused mutation wrote")
	}
	// Racing writers: every transition is reported once, by the writer
	// whose compare-and-swap stored it.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			_, _ = s.Update(ctx, "tsk-w", func(r *Record) error {
				r.StatusMessage += "x" // a write with no transition
				return nil
			})
		})
	}
	wg.Wait()
	if err := move(EventComplete); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"tsk-w created=true submit:->submitted refused=false",
		"tsk-w created=false start:submitted->working refused=false",
		"tsk-w created=false resume:working->working refused=true",
	}
	for range 8 {
		want = append(want, "tsk-w created=false")
	}
	want = append(want, "tsk-w created=false complete:working->completed refused=false")
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("writes reported:\n%q\nwant:\n%q", got, want)
	}
}
