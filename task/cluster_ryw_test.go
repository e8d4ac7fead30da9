package task

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/natscluster"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// clusterStores starts a three-node cluster and one Store per node, each
// on its own connection to that node first (the others only to reconnect
// to), the task bucket replicated three ways: the way three a2ad instances
// share a cluster.
func clusterStores(t *testing.T) (*natscluster.Cluster, []*Store) {
	t.Helper()
	c := natscluster.Start(t, 3)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var stores []*Store
	for i := range c.N() {
		urls := []string{c.URL(i)}
		for j := range c.N() {
			if j != i {
				urls = append(urls, c.URL(j))
			}
		}
		nc, err := nats.Connect(strings.Join(urls, ","), nats.DontRandomize(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		s, err := NewStore(ctx, js, 3, nil)
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, s)
	}
	return c, stores
}

// bucketLeader returns the index of the node leading the task bucket's
// stream, waiting for one to be elected.
func bucketLeader(t *testing.T, c *natscluster.Cluster) int {
	t.Helper()
	nc, err := nats.Connect(c.URLs(), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := js.Stream(ctx, "KV_"+Bucket)
		cancel()
		if err == nil {
			if cl := st.CachedInfo().Cluster; cl != nil && cl.Leader != "" {
				if i := c.Index(cl.Leader); i >= 0 {
					return i
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no leader for the task bucket: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The pattern of issue 14 point 7, at the store: a task created through one
// instance and read at once through another (and read and changed at once
// through the instance that created it, as delegate does) is never "not
// found", also while a follower node is killed and restarted, and then the
// leader. A KV get is a direct get that any replica answers, one a few
// milliseconds behind the leader included; only a read the stream leader
// answers may decide that a task does not exist.
//
// Measured with the read that went through GetLastMsgForSubject (which
// nats.go turns into a direct get on a KV bucket; docs/durability.md):
// without the race detector 190 reads through another instance and 45
// updates through the same of 32,878 tasks in 20 s were ErrNotFound; with
// it (as CI runs), 3 to 12 of 9,000–18,000 per run with a follower
// restarted, in the steady state as much as after the restart, and 27 + 5
// of 15,028 in this test's 30 s with the leader restarted too.
// A2AD_RYW_SECONDS sets how long the writers run (default 30).
func TestClusterReadYourWrites(t *testing.T) {
	c, stores := clusterStores(t)
	run := 30 * time.Second
	if v, err := strconv.Atoi(os.Getenv("A2AD_RYW_SECONDS")); err == nil && v > 0 {
		run = time.Duration(v) * time.Second
	}
	var (
		created, readOther, updatedSame atomic.Int64
		missOther, missSame             atomic.Int64
		errsMu                          sync.Mutex
		errs                            []string
	)
	fail := func(format string, args ...any) {
		errsMu.Lock()
		defer errsMu.Unlock()
		if len(errs) < 10 {
			errs = append(errs, fmt.Sprintf(format, args...))
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	const workers = 6
	for w := range workers {
		wg.Go(func() {
			ctx := context.Background()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				a := (w + i) % len(stores)       // the instance a host delegates through
				b := (a + 1 + i%2) % len(stores) // another, where the host reads at once
				id := fmt.Sprintf("ryw-%d-%d", w, i)
				now := time.Now().UTC()
				r := &Record{ID: id, Tenant: "default", AgentID: "fraud-review", State: Submitted,
					OutputSchema: "risk_assessment", CreatedAt: now, UpdatedAt: now}
				if err := stores[a].Create(ctx, r); err != nil {
					fail("create %s through node %d: %v", id, a, err)
					continue
				}
				created.Add(1)
				got, _, err := stores[b].Get(ctx, id)
				switch {
				case errors.Is(err, ErrNotFound):
					missOther.Add(1)
				case err != nil:
					fail("get %s through node %d: %v", id, b, err)
				case got.ID != id || !got.CreatedAt.Equal(now):
					fail("get %s through node %d: got %s created %v", id, b, got.ID, got.CreatedAt)
				default:
					readOther.Add(1)
				}
				_, err = stores[a].Update(ctx, id, func(r *Record) error { r.Turns = 1; return nil })
				switch {
				case errors.Is(err, ErrNotFound):
					missSame.Add(1)
				case err != nil:
					fail("update %s through node %d: %v", id, a, err)
				default:
					updatedSame.Add(1)
				}
			}
		})
	}

	// A follower of the task bucket killed and restarted: the clients on
	// it reconnect to the others, and once back it catches up while it
	// answers direct gets. Then the leader: a new one is elected, which
	// must not answer "not found" for a write the old one acknowledged.
	step := run / 6
	time.Sleep(step)
	leader := bucketLeader(t, c)
	follower := (leader + 1) % c.N()
	c.Kill(follower)
	time.Sleep(step)
	c.Restart(follower)
	time.Sleep(step)
	leader = bucketLeader(t, c)
	c.Kill(leader)
	time.Sleep(step)
	c.Restart(leader)
	time.Sleep(2 * step)
	close(stop)
	wg.Wait()

	t.Logf("%d tasks created; read through another instance %d (not found %d), updated through the same %d (not found %d); follower n%d, then leader n%d restarted",
		created.Load(), readOther.Load(), missOther.Load(), updatedSame.Load(), missSame.Load(), follower+1, leader+1)
	for _, e := range errs {
		t.Error(e)
	}
	if created.Load() < 1000 {
		t.Errorf("only %d tasks created: too few to show anything", created.Load())
	}
	if n := missOther.Load(); n != 0 {
		t.Errorf("%d of %d tasks read through another instance right after their creation were not found", n, created.Load())
	}
	if n := missSame.Load(); n != 0 {
		t.Errorf("%d of %d tasks updated through their instance right after their creation were not found", n, created.Load())
	}
}
