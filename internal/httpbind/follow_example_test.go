package httpbind_test

import (
	"context"
	"crypto/rand"
	"net/http"

	"github.com/a2ad/a2ad/internal/httpbind"
	"github.com/a2ad/a2ad/task"
	"github.com/nats-io/nats.go/jetstream"
)

// How a daemon wires the follower: its Track beside the store's other
// change callbacks, Run for the daemon's life, the webhook on the HTTP
// listener (outside MCP authentication: the per-task token is the check).
func ExampleFollower() {
	ctx := context.Background()
	var js jetstream.JetStream // a2ad's own connection
	var binding *httpbind.Binding
	f := &httpbind.Follower{
		Binding:     binding,
		JS:          js,
		Owner:       rand.Text(), // random per process
		PushBaseURL: "https://a2ad.example.com",
		PushSecret:  []byte("the same secret on every instance"),
	}
	store, err := task.NewStore(ctx, js, 1, func(sn task.Snapshot) {
		f.Track(sn) // never blocks
	})
	if err != nil {
		return
	}
	f.Store = store
	go func() { _ = f.Run(ctx) }()
	http.Handle(httpbind.PushPath, f.PushHandler())
}
