package task

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// apiTrace records every JetStream API request on the server (a plain
// subscription on $JS.API.> gets a copy of each) until stop is called.
func apiTrace(t *testing.T, nc *nats.Conn) (stop func() []*nats.Msg) {
	t.Helper()
	ch := make(chan *nats.Msg, 1024)
	sub, err := nc.ChanSubscribe("$JS.API.>", ch)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() []*nats.Msg {
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		// A request the server answers in the publisher's read loop can
		// reach this connection after the PONG of the flush: what comes
		// within a quiet 250 ms is the request's too.
		var out []*nats.Msg
		for {
			select {
			case m := <-ch:
				out = append(out, m)
			case <-time.After(250 * time.Millisecond):
				_ = sub.Unsubscribe()
				return out
			}
		}
	}
}

// "Not found" is what the stream leader answers, not a replica: a Get
// that finds nothing with its direct get asks again with the JetStream
// API's stream message get (the request only the leader answers), and
// nothing else. Before, the second request was a direct get as well.
func TestNotFoundIsAskedOfTheLeader(t *testing.T) {
	srv, _, js := natstest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := NewStore(ctx, js, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	trace := apiTrace(t, natstest.Connect(t, srv))
	_, _, err = s.Get(ctx, "never-created")
	msgs := trace()
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of a task never created: %v, want ErrNotFound", err)
	}
	var got []string // the reads, not the watcher's own requests
	for _, m := range msgs {
		if strings.HasPrefix(m.Subject, "$JS.API.DIRECT.GET.") || strings.HasPrefix(m.Subject, "$JS.API.STREAM.MSG.GET.") {
			got = append(got, m.Subject+" "+string(m.Data))
		}
	}
	want := []string{
		"$JS.API.DIRECT.GET.KV_a2ad_tasks.$KV.a2ad_tasks.never-created ",
		`$JS.API.STREAM.MSG.GET.KV_a2ad_tasks {"last_by_subj":"$KV.a2ad_tasks.never-created"}`,
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("JetStream API requests of a Get that finds nothing:\n%q\nwant\n%q", got, want)
	}
}

// The leader's read gives what a KV get gives: the stored value and its
// revision; a deleted (purged) record and one never written are
// ErrNotFound.
func TestLeaderGetReadsTheStoredRecord(t *testing.T) {
	_, _, js := natstest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := NewStore(ctx, js, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	if err := s.Create(ctx, &Record{ID: "l1", Tenant: "default", AgentID: "fraud-review", State: Submitted, CreatedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, "l1", func(r *Record) error { r.Turns = 3; return nil }); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, Bucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, "l1")
	if err != nil {
		t.Fatal(err)
	}
	data, rev, err := s.leaderGet(ctx, "l1")
	if err != nil || string(data) != string(e.Value()) || rev != e.Revision() {
		t.Fatalf("leaderGet(l1) = %d bytes at revision %d, %v; want the KV's %d bytes at revision %d", len(data), rev, err, len(e.Value()), e.Revision())
	}
	if err := s.Delete(ctx, "l1"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"l1", "l2", "not a key"} {
		if _, _, err := s.leaderGet(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("leaderGet(%q) = %v, want ErrNotFound", id, err)
		}
		if _, _, err := s.Get(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(%q) = %v, want ErrNotFound", id, err)
		}
	}
}

// Without a stream leader (two of three nodes gone: no quorum) whether a
// task exists is unknown: a read that finds nothing on the replica left is
// ErrNoLeader once RetryFor has passed, never ErrNotFound, which would
// make a host give up on a task that may exist.
func TestNoLeaderIsNotNotFound(t *testing.T) {
	c, stores := clusterStores(t)
	ctx := context.Background()
	// Kill the bucket stream's leader and one other node: the survivor, a
	// follower, cannot become leader alone. (Killing two followers instead
	// leaves a leader that answers, truthfully, until it notices that it
	// lost its quorum and steps down some seconds later: that made this
	// test fail 2 runs in 4 on a loaded machine.)
	info, err := stores[0].kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader := c.Index(info.(*jetstream.KeyValueBucketStatus).StreamInfo().Cluster.Leader)
	if leader < 0 {
		t.Fatalf("no stream leader among the nodes: %+v", info.(*jetstream.KeyValueBucketStatus).StreamInfo().Cluster)
	}
	survivor := (leader + 1) % c.N()
	c.Kill(leader)
	c.Kill((leader + 2) % c.N())
	s := stores[survivor]
	s.RetryFor = 2 * time.Second
	_, _, err = s.Get(ctx, "unknown-while-leaderless")
	if errors.Is(err, ErrNotFound) || !errors.Is(err, ErrNoLeader) {
		t.Fatalf("Get without a stream leader: %v, want ErrNoLeader and not ErrNotFound", err)
	}
}
