package natsagent

import (
	"bytes"
	"context"
	"encoding/gob"
	"fmt"
	"sync"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv/taskstore"
)

// DefaultMaxEndedTasks is [NewTaskStore]'s default bound.
const DefaultMaxEndedTasks = 10_000

// TaskStore is an a2a-go/v2 task store ([taskstore.Store]) in memory that
// forgets ended tasks: it holds every task that has not reached a
// terminal state, and the newest maxEnded of those that have (by when they
// ended); an older one is dropped, and GetTask of it is then
// a2a.ErrTaskNotFound (-32001). a2a-go's own taskstore.InMemory, the
// default of a2asrv.NewHandler, keeps every task for the life of the
// process. Give it to a2asrv with a2asrv.WithTaskStore.
//
// Like taskstore.InMemory it deep-copies each task it stores and returns
// (with encoding/gob, as a2a-go does), and detects concurrent updates by
// version; unlike it, it does not separate users (a2ad is an agent's only
// caller on this binding) and does not serve List, which returns
// a2a.ErrUnsupportedOperation (ListTasks is not on the NATS binding,
// docs/nats-binding.md §5.1). It is safe for concurrent use.
type TaskStore struct {
	maxEnded int

	mu    sync.RWMutex
	tasks map[a2a.TaskID]*storedTask
	ended []a2a.TaskID // in the order the tasks ended; may hold ids already dropped
}

type storedTask struct {
	task    *a2a.Task
	version taskstore.TaskVersion
	ended   bool
}

var _ taskstore.Store = (*TaskStore)(nil)

// NewTaskStore returns an empty TaskStore that keeps at most maxEnded
// ended tasks (0: [DefaultMaxEndedTasks]; negative is taken as 0).
func NewTaskStore(maxEnded int) *TaskStore {
	if maxEnded == 0 {
		maxEnded = DefaultMaxEndedTasks
	}
	return &TaskStore{maxEnded: max(maxEnded, 0), tasks: map[a2a.TaskID]*storedTask{}}
}

// Len returns how many tasks the store holds: open, and ended.
func (s *TaskStore) Len() (open, ended int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, t := range s.tasks {
		if t.ended {
			ended++
		} else {
			open++
		}
	}
	return open, ended
}

// Create stores a new task: taskstore.ErrTaskAlreadyExists if one with its
// id is held.
func (s *TaskStore) Create(ctx context.Context, task *a2a.Task) (taskstore.TaskVersion, error) {
	c, err := copyTask(task)
	if err != nil {
		return taskstore.TaskVersionMissing, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tasks[task.ID] != nil {
		return taskstore.TaskVersionMissing, taskstore.ErrTaskAlreadyExists
	}
	s.put(c, 1)
	return 1, nil
}

// Update stores the task's new state: a2a.ErrTaskNotFound if it is not
// held (never created, or dropped), taskstore.ErrConcurrentModification if
// req.PrevVersion is set and is not the stored version.
func (s *TaskStore) Update(ctx context.Context, req *taskstore.UpdateRequest) (taskstore.TaskVersion, error) {
	if req == nil {
		return taskstore.TaskVersionMissing, fmt.Errorf("%w: no update", a2a.ErrInvalidParams)
	}
	c, err := copyTask(req.Task)
	if err != nil {
		return taskstore.TaskVersionMissing, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.tasks[c.ID]
	if old == nil {
		return taskstore.TaskVersionMissing, a2a.ErrTaskNotFound
	}
	if req.PrevVersion != taskstore.TaskVersionMissing && req.PrevVersion != old.version {
		return taskstore.TaskVersionMissing, taskstore.ErrConcurrentModification
	}
	v := old.version + 1
	s.put(c, v)
	return v, nil
}

// put stores c at version v and, when c has just ended, drops the oldest
// ended tasks beyond maxEnded. s.mu is held.
func (s *TaskStore) put(c *a2a.Task, v taskstore.TaskVersion) {
	wasEnded := false
	if old := s.tasks[c.ID]; old != nil {
		wasEnded = old.ended
	}
	st := &storedTask{task: c, version: v, ended: c.Status.State.Terminal()}
	s.tasks[c.ID] = st
	if !st.ended || wasEnded {
		return
	}
	s.ended = append(s.ended, c.ID)
	for len(s.ended) > s.maxEnded {
		id := s.ended[0]
		s.ended[0] = ""
		s.ended = s.ended[1:]
		if t := s.tasks[id]; t != nil && t.ended {
			delete(s.tasks, id)
		}
	}
}

// Get returns a copy of the task: a2a.ErrTaskNotFound if it is not held.
func (s *TaskStore) Get(ctx context.Context, id a2a.TaskID) (*taskstore.StoredTask, error) {
	s.mu.RLock()
	st := s.tasks[id]
	s.mu.RUnlock()
	if st == nil {
		return nil, a2a.ErrTaskNotFound
	}
	c, err := copyTask(st.task)
	if err != nil {
		return nil, err
	}
	return &taskstore.StoredTask{Task: c, Version: st.version}, nil
}

// List is not served: a2a.ErrUnsupportedOperation.
func (s *TaskStore) List(ctx context.Context, req *a2a.ListTasksRequest) (*a2a.ListTasksResponse, error) {
	return nil, fmt.Errorf("%w: this task store does not list tasks", a2a.ErrUnsupportedOperation)
}

// copyTask deep-copies t as a2a-go's taskstore.InMemory does (the types of
// its parts are registered with encoding/gob by a2a-go).
func copyTask(t *a2a.Task) (*a2a.Task, error) {
	if t == nil || t.ID == "" {
		return nil, fmt.Errorf("%w: a task needs an id", a2a.ErrInvalidParams)
	}
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(t); err != nil {
		return nil, fmt.Errorf("natsagent: task %s not copyable: %w", t.ID, err)
	}
	var c a2a.Task
	if err := gob.NewDecoder(&b).Decode(&c); err != nil {
		return nil, fmt.Errorf("natsagent: task %s not copyable: %w", t.ID, err)
	}
	return &c, nil
}
