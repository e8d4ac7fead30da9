package httpbind

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/a2ad/a2ad/internal/a2a"
)

// sseEvent is one JSON-RPC SSE event carrying a working status update
// whose metadata pads it to about n bytes.
func sseEvent(n int) string {
	return fmt.Sprintf(`data: {"jsonrpc":"2.0","id":"1","result":{"statusUpdate":{"taskId":"t1","contextId":"c","status":{"state":"TASK_STATE_WORKING"},"metadata":{"pad":"%s"}}}}`+"\n\n",
		strings.Repeat("p", n))
}

// Each event of a stream is bounded by DefaultMaxEventBytes, not the
// stream: two events of 600 KiB (more than 1 MiB together) pass; one
// event over 1 MiB is a *LimitError after the events before it.
func TestStreamEventLimit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events []int
		want   int // events delivered
		limit  bool
	}{
		{"two events of 600 KiB", []int{600 << 10, 600 << 10}, 2, false},
		{"an event over 1 MiB", []int{100, DefaultMaxEventBytes + 1}, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := startAgent(t, "JSONRPC", agentOpts{wrap: func(http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "text/event-stream")
					for _, n := range tc.events {
						_, _ = w.Write([]byte(sseEvent(n)))
						w.(http.Flusher).Flush()
					}
				})
			}})
			c, _, err := bindingFor(t, a, Config{}).Client(t.Context(), "fraud")
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			var serr error
			for ev, err := range c.SubscribeToTask(t.Context(), &sdk.SubscribeToTaskRequest{ID: "t1"}) {
				if err != nil {
					serr = err
					break
				}
				if _, ok := ev.(*sdk.TaskStatusUpdateEvent); ok {
					n++
				}
			}
			var le *LimitError
			if tc.limit != errors.As(serr, &le) || (tc.limit && (le.Limit != DefaultMaxEventBytes || le.What != "stream event")) {
				t.Fatalf("stream error = %v, want a stream event *LimitError: %v", serr, tc.limit)
			}
			if tc.limit && !errors.Is(serr, a2a.ErrDecode) {
				t.Errorf("limit error %v is not of class ErrDecode", serr)
			}
			if n != tc.want {
				t.Errorf("events delivered = %d, want %d", n, tc.want)
			}
		})
	}
}

// An RPC's answer labelled text/event-stream is bounded as a whole, not
// per event: blank lines between JSON members do not reset the count.
func TestRPCAnswerLabelledAsStreamBoundedWhole(t *testing.T) {
	a := startAgent(t, "JSONRPC", agentOpts{wrap: func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":"1",`))
			member := []byte(strings.Repeat(" ", 1000) + "\n\n")
			for i := 0; i < (DefaultMaxResponseBytes/len(member))+10; i++ {
				if _, err := w.Write(member); err != nil {
					return
				}
			}
		})
	}})
	_, err := bindingFor(t, a, Config{}).Send(t.Context(), "fraud", a2a.MethodGetTask, []byte(`{"id":"t1"}`), "")
	var le *LimitError
	if !errors.As(err, &le) || le.What != "response body" || le.Limit != DefaultMaxResponseBytes {
		t.Fatalf("err = %v, want a response body *LimitError", err)
	}
}
