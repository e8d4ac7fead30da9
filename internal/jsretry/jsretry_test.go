package jsretry_test

import (
	"context"
	"errors"
	"testing"

	"github.com/a2ad/a2ad/internal/jsretry"
	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStream answers a write that does not fit with status 503, like a
// leader election; only the latter is worth retrying. Measured before: a
// full store made every delegate retry for 20 s.
func TestStorageFullIsNotTransient(t *testing.T) {
	_, _, js := natstest.Start(t)
	ctx := context.Background()
	for name, cfg := range map[string]jetstream.StreamConfig{
		"max_bytes": {Name: "BYTES", Subjects: []string{"bytes.>"}, MaxBytes: 4096, Discard: jetstream.DiscardNew},
		"max_msgs":  {Name: "MSGS", Subjects: []string{"msgs.>"}, MaxMsgs: 2, Discard: jetstream.DiscardNew},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := js.CreateStream(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			var err error
			for i := 0; i < 100 && err == nil; i++ {
				_, err = js.Publish(ctx, cfg.Subjects[0][:len(cfg.Subjects[0])-1]+"x", make([]byte, 1024))
			}
			var apiErr *jetstream.APIError
			if !errors.As(err, &apiErr) || apiErr.Code != 503 {
				t.Fatalf("publish to a full stream: %v, want a 503 API error", err)
			}
			if !jsretry.StorageFull(err) || jsretry.Transient(err) {
				t.Fatalf("%v: StorageFull %v, Transient %v; want true, false", err, jsretry.StorageFull(err), jsretry.Transient(err))
			}
		})
	}
	leader := &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}
	if jsretry.StorageFull(leader) || !jsretry.Transient(leader) {
		t.Fatal("a leader election is not transient any more")
	}
}
