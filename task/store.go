package task

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Bucket is the JetStream KV bucket holding task records.
const Bucket = "a2ad_tasks"

// ErrNotFound means no task has that ID (or it belongs to another tenant:
// callers answer both alike).
var ErrNotFound = errors.New("task not found")

// ErrExists means a task with that ID already exists.
var ErrExists = errors.New("task already exists")

// ErrConflict means compare-and-swap kept losing to concurrent writers.
var ErrConflict = errors.New("task: too many concurrent updates")

// Store keeps records in a KV bucket and fans out changes to waiters through
// one KV watcher per process.
type Store struct {
	kv jetstream.KeyValue

	mu      sync.Mutex
	waiters map[string]map[chan struct{}]struct{}
}

// NewStore creates or binds the bucket (replicas ≥ 1) and starts its watcher,
// which runs until ctx ends.
func NewStore(ctx context.Context, js jetstream.JetStream, replicas int) (*Store, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      Bucket,
		Description: "a2ad delegated task records",
		History:     1,
		Replicas:    max(1, replicas),
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("task: KV bucket %s: %w", Bucket, err)
	}
	s := &Store{kv: kv, waiters: map[string]map[chan struct{}]struct{}{}}
	w, err := kv.WatchAll(ctx, jetstream.UpdatesOnly(), jetstream.MetaOnly())
	if err != nil {
		return nil, fmt.Errorf("task: watch %s: %w", Bucket, err)
	}
	go s.fanOut(w)
	return s, nil
}

func (s *Store) fanOut(w jetstream.KeyWatcher) {
	for e := range w.Updates() {
		if e == nil {
			continue
		}
		s.mu.Lock()
		for ch := range s.waiters[e.Key()] {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
		s.mu.Unlock()
	}
}

// Subscribe returns a channel that receives a signal after each change of
// task id, and a function to stop. Signals coalesce: re-read after each.
func (s *Store) Subscribe(id string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	if s.waiters[id] == nil {
		s.waiters[id] = map[chan struct{}]struct{}{}
	}
	s.waiters[id][ch] = struct{}{}
	s.mu.Unlock()
	return ch, func() {
		s.mu.Lock()
		delete(s.waiters[id], ch)
		if len(s.waiters[id]) == 0 {
			delete(s.waiters, id)
		}
		s.mu.Unlock()
	}
}

// Create stores a new record; ErrExists if the ID is taken.
func (s *Store) Create(ctx context.Context, r *Record) error {
	b, err := encode(r)
	if err != nil {
		return err
	}
	if _, err := s.kv.Create(ctx, r.ID, b); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return ErrExists
		}
		return fmt.Errorf("task: create %s: %w", r.ID, err)
	}
	return nil
}

// Get returns the record and its KV revision; ErrNotFound if absent.
func (s *Store) Get(ctx context.Context, id string) (*Record, uint64, error) {
	e, err := s.kv.Get(ctx, id)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
			return nil, 0, ErrNotFound
		}
		return nil, 0, fmt.Errorf("task: get %s: %w", id, err)
	}
	r, err := decode(e.Value())
	if err != nil {
		return nil, 0, fmt.Errorf("task: decode %s: %w", id, err)
	}
	return r, e.Revision(), nil
}

// Update reads the record, lets mutate change it, and writes it back with
// compare-and-swap on the revision read, retrying on a lost race with
// jittered backoff (up to 64 times, then ErrConflict). If mutate returns an error the record is not
// written and the error is returned, except that errors wrapping
// ErrIllegalTransition still write the record (the refusal is history) and
// are returned after the write.
func (s *Store) Update(ctx context.Context, id string, mutate func(*Record) error) (*Record, error) {
	for attempt := range 64 {
		if attempt > 0 {
			// Jittered backoff: writers that lost a race spread out.
			time.Sleep(time.Duration(rand.Int64N(int64(attempt)*int64(200*time.Microsecond) + 1)))
		}
		r, rev, err := s.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		merr := mutate(r)
		if merr != nil && !errors.Is(merr, ErrIllegalTransition) {
			return r, merr
		}
		b, err := encode(r)
		if err != nil {
			return nil, err
		}
		if _, err := s.kv.Update(ctx, id, b, rev); err != nil {
			if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
				continue
			}
			return nil, fmt.Errorf("task: update %s: %w", id, err)
		}
		return r, merr
	}
	return nil, ErrConflict
}

// Delete removes a record that never became a delegation (for example the
// agent was offline), so no half-created task remains.
func (s *Store) Delete(ctx context.Context, id string) error {
	return s.kv.Purge(ctx, id)
}

// List returns every record, newest first.
func (s *Store) List(ctx context.Context) ([]*Record, error) {
	lister, err := s.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("task: list: %w", err)
	}
	var out []*Record
	for k := range lister.Keys() {
		r, _, err := s.Get(ctx, k)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].ID > out[j].ID
		}
		return out[i].CreatedAt.After(out[j].CreatedAt)
	})
	return out, nil
}
