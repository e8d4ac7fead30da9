package httpbind

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/a2ad/a2ad/internal/a2a"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/a2ad/a2ad/task"
	sdk "github.com/a2aproject/a2a-go/v2/a2a"
)

// PushPath is where [Follower.PushHandler] is mounted; an agent posts a
// task's notifications to PushPath + <a2ad task id>.
const PushPath = "/a2a/push/"

// MaxPushBytes bounds a push notification's body (413 beyond).
const MaxPushBytes = 1 << 20

// Push notification token headers: A2A 1.0 §4.3.3 names
// X-A2A-Notification-Token; a2a-go's push sender (a2asrv/push) sends
// A2A-Notification-Token. Either is accepted.
const (
	TokenHeader       = "X-A2A-Notification-Token"
	TokenHeaderA2AGo  = "A2A-Notification-Token"
	pushTokenInfo     = "a2ad push notification token v1\x00"
	pushConfigIDValue = "a2ad"
)

// PushToken is task taskID's push notification token: base64url (no
// padding) of HMAC-SHA256(secret, "a2ad push notification token v1\0" +
// taskID), 43 characters; unguessable without the secret, different for
// every task.
func PushToken(secret []byte, taskID string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(pushTokenInfo + taskID))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// registerPush registers a2ad's webhook for the task with the agent
// (CreateTaskPushConfig, A2A 1.0 §3.1.7), best effort: the polls go on
// whatever the outcome.
func (fl *following) registerPush(ctx context.Context, target Target) {
	client, _, err := fl.f.Binding.Client(ctx, fl.agentID)
	if err != nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, followCallTimeout)
	defer cancel()
	_, err = client.CreateTaskPushConfig(cctx, &sdk.PushConfig{
		TaskID: sdk.TaskID(fl.agentTask),
		Tenant: target.Tenant,
		ID:     pushConfigIDValue,
		URL:    fl.f.PushBaseURL + PushPath + fl.id,
		Token:  PushToken(fl.f.PushSecret, fl.id),
	})
	if err != nil && ctx.Err() == nil {
		fl.logAgent("push", "push notifications not registered; following by polls", err)
	}
}

// PushHandler serves the agents' push notifications at PushPath + <a2ad
// task id> (POST, an A2A 1.0 stream item as JSON; A2A 1.0 §4.3). Answers,
// in a2ad's words only: 401 for a missing or wrong token (compared in
// constant time), 404 for a task a2ad does not follow over HTTP (unknown,
// ended, or not an HTTP agent's), 413 for a body over MaxPushBytes, 400
// for a body that is not one A2A 1.0 stream item of that task, 503 when it
// cannot be published now (the agent retries), 202 when published.
//
// A non-terminal status update is published as an observation. A task
// snapshot, an artifact update or a terminal status update instead makes
// the following instance, when it is this one and it polls, read the task
// at once (GetTask): a chunk's place among its artifact's chunks is not
// known from a push alone, a whole artifact published beside a live
// stream's chunks would be appended to twice, and a completion must not
// overtake the artifacts it completes. A streaming follower sees them on
// its stream; a polling one on another instance at its next (slow) poll.
func (f *Follower) PushHandler() http.Handler {
	f.init()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.servePush(w, r)
	})
}

func pushError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, "a2ad: "+msg+"\n")
}

func (f *Follower) servePush(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		pushError(w, http.StatusMethodNotAllowed, "push notifications are POSTed")
		return
	}
	taskID, ok := strings.CutPrefix(r.URL.Path, PushPath)
	if !ok || !natsbind.ValidToken(taskID) || len(f.PushSecret) == 0 {
		pushError(w, http.StatusNotFound, "no such push endpoint")
		return
	}
	token := r.Header.Get(TokenHeader)
	if token == "" {
		token = r.Header.Get(TokenHeaderA2AGo)
	}
	if !hmac.Equal([]byte(token), []byte(PushToken(f.PushSecret, taskID))) {
		pushError(w, http.StatusUnauthorized, "push notification token missing or wrong")
		return
	}
	rec, _, err := f.Store.Get(r.Context(), taskID)
	switch {
	case errors.Is(err, task.ErrNotFound):
		pushError(w, http.StatusNotFound, "no open task "+taskID)
		return
	case err != nil:
		pushError(w, http.StatusServiceUnavailable, "task store unavailable; retry")
		return
	case !rec.HTTP() || rec.State.Terminal() || rec.AgentTaskID == "":
		pushError(w, http.StatusNotFound, "no open task "+taskID)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxPushBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			pushError(w, http.StatusRequestEntityTooLarge, "push notification over 1 MiB")
			return
		}
		pushError(w, http.StatusBadRequest, "push notification body unreadable")
		return
	}
	ev, status, msg := decodePush(body, rec.AgentTaskID)
	if status != 0 {
		pushError(w, status, msg)
		return
	}
	fl := &following{f: f, id: rec.ID, agentID: rec.AgentID, agentTask: rec.AgentTaskID}
	if cur, ok := f.following.Load(rec.ID); ok {
		fl = cur.(*following)
	}
	if ev == nil {
		// A snapshot is needed: the follower reads the task now.
		if fl.poke != nil {
			select {
			case fl.poke <- struct{}{}:
			default:
			}
		}
		w.WriteHeader(http.StatusAccepted)
		return
	}
	o, ok, err := itemOf(ev, map[sdk.ArtifactID]int{})
	if err != nil || !ok {
		pushError(w, http.StatusBadRequest, "push notification carries no task change")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), followCallTimeout)
	defer cancel()
	if !fl.publish(ctx, o) {
		pushError(w, http.StatusServiceUnavailable, "push notification not recorded now; retry")
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// decodePush checks body, one A2A 1.0 stream item, with a2ad's strict
// decoder and for agent task agentTask. It returns the item in a2a-go's
// types to publish (nil: read a snapshot instead), or an HTTP status and
// a2ad's words.
func decodePush(body []byte, agentTask string) (sdk.Event, int, string) {
	item, err := a2a.DecodeStreamResponse(body)
	if err != nil {
		return nil, http.StatusBadRequest, "push notification is not one A2A 1.0 stream item"
	}
	var sr sdk.StreamResponse
	if err := json.Unmarshal(body, &sr); err != nil || sr.Event == nil {
		return nil, http.StatusBadRequest, "push notification is not one A2A 1.0 stream item"
	}
	if id := taskIDOf(sr.Event); id != sdk.TaskID(agentTask) {
		return nil, http.StatusBadRequest, "push notification is about another task"
	}
	if item.StatusUpdate != nil && !terminalOf(sr.Event) {
		return sr.Event, 0, ""
	}
	if item.StatusUpdate != nil || item.ArtifactUpdate != nil || item.Task != nil {
		return nil, 0, ""
	}
	return nil, http.StatusBadRequest, "push notification carries no task change"
}
