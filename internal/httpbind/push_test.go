package httpbind

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/a2ad/a2ad/task"
	"github.com/a2aproject/a2a-go/v2/a2a"
)

// An agent that pushes (a2a-go's push sender) to a2ad's webhook: the
// follower registers it with a per-task token, and with polls 10 minutes
// apart only the pushes can bring the task to completed — which it
// reaches, exactly once.
func TestPushNotificationsCompleteTheTask(t *testing.T) {
	g := newFollowRig(t, false, true)
	var hook *httptest.Server
	in := g.start("a", followOpts{binding: "JSONRPC", follow: true, track: true, push: func(f *Follower) {
		mux := http.NewServeMux()
		mux.Handle(PushPath, f.PushHandler())
		hook = httptest.NewServer(mux)
		t.Cleanup(hook.Close)
		f.PushBaseURL = hook.URL
		f.PollMin, f.PollMax, f.PushPoll = 10*time.Minute, 10*time.Minute, 10*time.Minute
	}})
	r := g.delegate(in.store, "p1", "JSONRPC")
	waitFollow(t, "the push config to be registered", func() bool {
		return g.agent.count("a", "CreateTaskPushNotificationConfig") == 1 && g.agent.count("a", "GetTask") == 1
	})
	if l := getRecord(t, in.store, r.ID).Follow; l == nil || l.Mode != "poll+push" {
		t.Fatalf("lease = %+v, want mode poll+push", l)
	}
	close(g.agent.agent.release)
	got, lag := g.waitEnd(in.store, r.ID)
	assertCompletedOnce(t, got)
	if n := g.agent.count("a", "GetTask"); n < 2 {
		t.Fatalf("%d GetTask calls: the pushes did not make the follower read the task", n)
	}
	t.Logf("agent completed → store completed by push: %d ms", lag.Milliseconds())
}

// The webhook's answers, in a2ad's words: 202 for a valid notification
// (applied), 401 for a missing or wrong token, 404 for a task it does not
// follow, 413 over 1 MiB, 400 for a body that is not one A2A 1.0 item of
// that task, 405 for another method.
func TestPushHandlerAnswers(t *testing.T) {
	g := newFollowRig(t, true)
	in := g.start("a", followOpts{binding: "JSONRPC", track: true})
	r := g.delegate(in.store, "p2", "JSONRPC")
	h := in.follower.PushHandler()
	good := `{"statusUpdate":{"taskId":"` + r.AgentTaskID + `","contextId":"a2ad-p2","status":{"state":"TASK_STATE_WORKING"}}}`
	token := PushToken(in.follower.PushSecret, r.ID)
	for _, tc := range []struct {
		name, method, task, header, token, body string
		code                                    int
		say                                     string
	}{
		{"wrong token", "POST", r.ID, TokenHeader, token[:42] + "x", good, 401, "a2ad: push notification token missing or wrong\n"},
		{"no token", "POST", r.ID, "", "", good, 401, "a2ad: push notification token missing or wrong\n"},
		{"another task's token", "POST", r.ID, TokenHeader, PushToken(in.follower.PushSecret, "p3"), good, 401, "a2ad: push notification token missing or wrong\n"},
		{"unknown task", "POST", "p3", TokenHeader, PushToken(in.follower.PushSecret, "p3"), good, 404, "a2ad: no open task p3\n"},
		{"oversized", "POST", r.ID, TokenHeader, token, `{"statusUpdate":{"x":"` + strings.Repeat("a", MaxPushBytes) + `"}}`, 413, "a2ad: push notification over 1 MiB\n"},
		{"not A2A 1.0", "POST", r.ID, TokenHeader, token, `{"kind":"status-update","taskId":"` + r.AgentTaskID + `"}`, 400, "a2ad: push notification is not one A2A 1.0 stream item\n"},
		{"another task", "POST", r.ID, TokenHeader, token, strings.Replace(good, r.AgentTaskID, "other", 1), 400, "a2ad: push notification is about another task\n"},
		{"GET", "GET", r.ID, TokenHeader, token, "", 405, "a2ad: push notifications are POSTed\n"},
		{"valid (a2a-go's header)", "POST", r.ID, TokenHeaderA2AGo, token, good, 202, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, PushPath+tc.task, strings.NewReader(tc.body))
			if tc.header != "" {
				req.Header.Set(tc.header, tc.token)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != tc.code || w.Body.String() != tc.say {
				t.Fatalf("answer %d %q, want %d %q", w.Code, w.Body.String(), tc.code, tc.say)
			}
		})
	}
	waitFollow(t, "the pushed status to apply", func() bool { return getRecord(t, in.store, r.ID).State == task.Working })
	// Once the task ended, its webhook is gone.
	if _, err := in.store.Update(context.Background(), r.ID, func(rec *task.Record) error {
		return rec.Move(time.Now(), task.EventCancel, task.SourceHost, "test", "")
	}); err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("POST", PushPath+r.ID, strings.NewReader(good))
	req.Header.Set(TokenHeader, token)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != 404 {
		t.Fatalf("push to an ended task: %d %q, want 404", w.Code, w.Body.String())
	}
}

// Push tokens are per task and per secret, 43 base64url characters.
func TestPushToken(t *testing.T) {
	a, b, c := PushToken([]byte("s1"), "t1"), PushToken([]byte("s1"), "t2"), PushToken([]byte("s2"), "t1")
	if a == b || a == c || len(a) != 43 || a != PushToken([]byte("s1"), "t1") {
		t.Fatalf("tokens %q %q %q", a, b, c)
	}
}

// Event ids are deterministic, of the allowed alphabet, never the
// binding's sequenced form, the same for one change however it was
// observed (a stream's update, a GetTask snapshot), apart for two tasks,
// and keep two identical chunks apart.
func TestContentID(t *testing.T) {
	id := ContentID("x", "chunk@1", []byte(`{"artifactId":"ra","parts":[{"text":"a"}]}`))
	if id != ContentID("x", "chunk@1", []byte(`{"artifactId":"ra","parts":[{"text":"a"}]}`)) ||
		id == ContentID("x", "chunk@2", []byte(`{"artifactId":"ra","parts":[{"text":"a"}]}`)) ||
		id == ContentID("y", "chunk@1", []byte(`{"artifactId":"ra","parts":[{"text":"a"}]}`)) {
		t.Fatal("ids not deterministic, or not apart by position or task")
	}
	if !strings.HasPrefix(id, EventIDPrefix) || len(id) > task.MaxEventIDBytes || strings.ContainsAny(id, ".") {
		t.Fatalf("id %q", id)
	}
	parts := map[a2a.ArtifactID]int{}
	chunk := &a2a.TaskArtifactUpdateEvent{TaskID: "x", ContextID: "c", Append: true, Artifact: &a2a.Artifact{ID: "ra", Parts: a2a.ContentParts{a2a.NewTextPart("a")}}}
	first, _, _ := itemOf(&a2a.TaskArtifactUpdateEvent{TaskID: "x", ContextID: "c", Artifact: &a2a.Artifact{ID: "ra", Parts: a2a.ContentParts{a2a.NewTextPart("a")}}}, parts)
	one, _, _ := itemOf(chunk, parts)
	two, _, _ := itemOf(chunk, parts)
	if one.msgID == two.msgID || first.msgID == one.msgID {
		t.Fatalf("identical chunks share an id: %s %s %s", first.msgID, one.msgID, two.msgID)
	}
	// The input-required status a stream reported, read again by GetTask
	// (after the host answered, before the agent took the answer): one id.
	ts := time.Date(2026, 12, 2, 7, 11, 57, 0, time.UTC)
	st := a2a.TaskStatus{State: a2a.TaskStateInputRequired, Timestamp: &ts, Message: a2a.NewMessage(a2a.MessageRoleAgent, a2a.NewTextPart("verified?"))}
	streamed, _, _ := itemOf(&a2a.TaskStatusUpdateEvent{TaskID: "x", ContextID: "c", Status: st}, nil)
	snap, err := snapshotOf(&a2a.Task{ID: "x", ContextID: "c", Status: st,
		Artifacts: []*a2a.Artifact{{ID: "ra", Parts: a2a.ContentParts{a2a.NewTextPart("a")}}}})
	if err != nil || len(snap) != 2 {
		t.Fatalf("snapshot: %v, %d observations, want the artifact and the status", err, len(snap))
	}
	if snap[1].msgID != streamed.msgID || snap[0].msgID != first.msgID {
		t.Fatalf("one change, two ids: status %s / %s, artifact %s / %s", snap[1].msgID, streamed.msgID, snap[0].msgID, first.msgID)
	}
}

// FuzzPushBody: whatever an agent posts, the body's decoding neither
// panics nor answers anything but 400 or acceptance, and what it accepts
// is one item a2ad's strict decoder reads.
func FuzzPushBody(f *testing.F) {
	for _, s := range []string{
		`{"statusUpdate":{"taskId":"a1","contextId":"c","status":{"state":"TASK_STATE_WORKING"}}}`,
		`{"statusUpdate":{"taskId":"a1","contextId":"c","status":{"state":"TASK_STATE_COMPLETED"}}}`,
		`{"artifactUpdate":{"taskId":"a1","contextId":"c","artifact":{"artifactId":"ra","parts":[{"data":{"x":1}}]},"lastChunk":true}}`,
		`{"task":{"id":"a1","contextId":"c","status":{"state":"TASK_STATE_WORKING"}}}`,
		`{"message":{"messageId":"m","role":"ROLE_AGENT","parts":[{"text":"hi"}]}}`,
		`{"statusUpdate":null}`, `[]`, `null`, ``, `{"task":{"id":"a2"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, code, msg := decodePush(body, "a1")
		switch {
		case code == http.StatusBadRequest && ev == nil && strings.HasPrefix(msg, "push notification "):
		case code == 0 && ev == nil:
		case code == 0:
			o, ok, err := itemOf(ev, map[a2a.ArtifactID]int{})
			if err != nil || !ok || !strings.HasPrefix(o.msgID, EventIDPrefix) || len(o.msgID) > task.MaxEventIDBytes {
				t.Fatalf("accepted %q: %v %v %+v", body, ok, err, o)
			}
		default:
			t.Fatalf("answer %d %q for %q", code, msg, body)
		}
	})
}
