// Package natstest starts a real embedded NATS server with JetStream for
// tests: random loopback port, temp store dir, shut down at test end.
package natstest

import (
	"context"
	"testing"

	"github.com/a2ad/a2ad/internal/embedded"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Start returns a running server, a connection to it and its JetStream.
// Its store limit, 4 GiB as the embedded server's default, is a limit and
// not an allocation: it leaves room for the byte caps streams reserve (the
// audit stream's 1 GiB).
func Start(t testing.TB) (*server.Server, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	s, err := embedded.Start(embedded.Options{StoreDir: t.TempDir(), Listen: "127.0.0.1:-1", MaxMemory: 64 << 20, MaxStore: embedded.DefaultMaxStore})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	nc := Connect(t, s)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return s, nc, js
}

// Connect opens another client connection, closed at test end.
func Connect(t testing.TB, s *server.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Consumers is the number of consumers stream has now.
func Consumers(t testing.TB, js jetstream.JetStream, stream string) int {
	t.Helper()
	return State(t, js, stream).Consumers
}

// Messages is the number of messages stream holds now.
func Messages(t testing.TB, js jetstream.JetStream, stream string) uint64 {
	t.Helper()
	return State(t, js, stream).Msgs
}

// State is stream's state now.
func State(t testing.TB, js jetstream.JetStream, stream string) jetstream.StreamState {
	t.Helper()
	st, err := js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State
}
