package natsagent

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"github.com/a2aproject/a2a-go/v2/a2asrv/taskstore"

	wire "github.com/a2ad/a2ad/internal/a2a"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/a2ad/a2ad/internal/natstest"
)

func storeTask(id string, state a2a.TaskState) *a2a.Task {
	return &a2a.Task{ID: a2a.TaskID(id), ContextID: "ctx-1", Status: a2a.TaskStatus{State: state},
		Artifacts: []*a2a.Artifact{{ID: "a1", Parts: a2a.ContentParts{a2a.NewDataPart(map[string]any{"k": "v"})}}}}
}

// The store keeps tasks as a2a-go's InMemory does (copies, versions,
// conflicts), and keeps only the newest maxEnded ended ones.
func TestTaskStore(t *testing.T) {
	ctx := context.Background()
	s := NewTaskStore(2)
	tk := storeTask("t1", a2a.TaskStateWorking)
	if v, err := s.Create(ctx, tk); err != nil || v != 1 {
		t.Fatalf("Create = %d, %v", v, err)
	}
	if _, err := s.Create(ctx, tk); !errors.Is(err, taskstore.ErrTaskAlreadyExists) {
		t.Fatalf("second Create: %v, want ErrTaskAlreadyExists", err)
	}
	tk.Status.State = a2a.TaskStateFailed // the caller's task is not the stored one
	got, err := s.Get(ctx, "t1")
	if err != nil || got.Version != 1 || got.Task.Status.State != a2a.TaskStateWorking || got.Task.Artifacts[0].Parts[0].Data().(map[string]any)["k"] != "v" {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	got.Task.Status.State = a2a.TaskStateFailed // nor is a returned one
	if again, _ := s.Get(ctx, "t1"); again.Task.Status.State != a2a.TaskStateWorking {
		t.Fatal("a returned task shares the stored one")
	}
	if _, err := s.Update(ctx, &taskstore.UpdateRequest{Task: storeTask("t1", a2a.TaskStateWorking), PrevVersion: 7}); !errors.Is(err, taskstore.ErrConcurrentModification) {
		t.Fatalf("Update at a stale version: %v", err)
	}
	if v, err := s.Update(ctx, &taskstore.UpdateRequest{Task: storeTask("t1", a2a.TaskStateInputRequired), PrevVersion: 1}); err != nil || v != 2 {
		t.Fatalf("Update = %d, %v", v, err)
	}
	if _, err := s.Update(ctx, &taskstore.UpdateRequest{Task: storeTask("nope", a2a.TaskStateWorking)}); !errors.Is(err, a2a.ErrTaskNotFound) {
		t.Fatalf("Update of an unknown task: %v", err)
	}
	if _, err := s.Create(ctx, &a2a.Task{}); !errors.Is(err, a2a.ErrInvalidParams) {
		t.Fatalf("Create without id: %v", err)
	}
	if _, err := s.List(ctx, &a2a.ListTasksRequest{}); !errors.Is(err, a2a.ErrUnsupportedOperation) {
		t.Fatalf("List: %v", err)
	}

	// Four more tasks end, in order e1..e4; t1 stays open.
	for i := 1; i <= 4; i++ {
		id := fmt.Sprintf("e%d", i)
		if _, err := s.Create(ctx, storeTask(id, a2a.TaskStateWorking)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Update(ctx, &taskstore.UpdateRequest{Task: storeTask(id, a2a.TaskStateCompleted)}); err != nil {
			t.Fatal(err)
		}
		// An ended task updated again is not counted twice.
		if _, err := s.Update(ctx, &taskstore.UpdateRequest{Task: storeTask(id, a2a.TaskStateCompleted)}); err != nil {
			t.Fatal(err)
		}
	}
	for id, held := range map[string]bool{"t1": true, "e1": false, "e2": false, "e3": true, "e4": true} {
		if _, err := s.Get(ctx, a2a.TaskID(id)); (err == nil) != held {
			t.Errorf("Get %s: %v, want held %v", id, err, held)
		}
	}
	if open, ended := s.Len(); open != 1 || ended != 2 {
		t.Errorf("Len = %d open, %d ended; want 1, 2", open, ended)
	}
}

// Served through natsagent, a handler on a TaskStore answers GetTask for
// the newest ended tasks and -32001 for the dropped ones.
func TestTaskStoreBehindTheServer(t *testing.T) {
	e := newEnv(t, true)
	store := NewTaskStore(2)
	srv, err := NewServer(natstest.Connect(t, e.ns), a2asrv.NewHandler(e.exec, a2asrv.WithTaskStore(store)), Config{AgentID: testAgent, Card: []byte(`{"name": "t"}`), ReplicaID: "r2"})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	var ids []a2a.TaskID
	for i := range 4 {
		id := fmt.Sprintf("tsk-s%d", i)
		_, resp := e.request(natsbind.ReplicaSubject(testAgent, "r2"), "SendMessage", sendParams(id, id+"-m1", "", "hello"))
		ids = append(ids, taskOf(t, resp).ID)
		waitFor(t, func() bool { _, ended := store.Len(); return ended == min(i+1, 2) && storeHolds(store, ids[i]) })
	}
	waitFor(t, func() bool { open, _ := store.Len(); return open == 0 })
	for i, id := range ids {
		_, resp := e.request(natsbind.ReplicaSubject(testAgent, "r2"), "GetTask", map[string]string{"id": string(id)})
		if i < 2 && (resp.Error == nil || resp.Error.Code != wire.CodeTaskNotFound) {
			t.Errorf("GetTask of dropped task %d: %+v, want -32001", i, resp.Error)
		}
		if i >= 2 && taskOf(t, resp).Status.State != a2a.TaskStateCompleted {
			t.Errorf("GetTask of task %d: not completed", i)
		}
	}
}

func storeHolds(s *TaskStore, id a2a.TaskID) bool {
	_, err := s.Get(context.Background(), id)
	return err == nil
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	until := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(until) {
			t.Fatal("condition not met within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
