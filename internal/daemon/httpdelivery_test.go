package daemon_test

// Found by trying the HTTP binding as a new operator would (issue 16): each
// failed before the reconciliation grace, the HTTP send timeout and the
// unanswered-send rule of internal/broker/outbox.go.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a2ad/a2ad/internal/daemon"
)

// An a2a-go agent whose executor spends seconds before its first event (a
// model call before it yields the Task) answers SendMessage only then: it
// had not stored the task when a 5 s timeout and 6 s lease ran out, a2ad
// reconciled, found nothing and sent the brief again — the work ran twice.
// Now the HTTP send waits 30 s, and finding nothing is proof only after
// the grace. The hold is in front of the reference agent's handler, as a
// slow executor or a slow proxy would hold it.
func TestHTTPAgentSlowToAnswerGetsOneBrief(t *testing.T) {
	hold := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body := peekBody(r)
			if strings.Contains(string(body), `"SendMessage"`) {
				time.Sleep(7 * time.Second)
			}
			next.ServeHTTP(w, r)
		})
	}
	s := startHTTP(t, httpStackOpts{streaming: true, wrap: hold})
	got := s.mustDelegate(t, httpDelegateArgs(evidence("C-7", 1999), 60))
	done := s.waitEnded(t, got.TaskID, 40*time.Second)
	time.Sleep(8 * time.Second) // let a held second brief land
	n := s.agent.Stats().ByA2ADTask[got.TaskID]
	t.Logf("task %s (%s); the agent got %d briefs", done.State, done.Reason, n)
	if n != 1 {
		t.Fatalf("the agent got %d briefs of %s, want exactly 1 (it ran the work %d times)", n, got.TaskID, n)
	}
}

// An agent that never answers SendMessage is canceled at its deadline
// and gets the brief once: it was sent again after every lease before.
func TestHTTPAgentUnresponsiveGetsOneBrief(t *testing.T) {
	s := startHTTP(t, httpStackOpts{streaming: true, misbehave: map[string]string{"C-902": "unresponsive"}})
	args := httpDelegateArgs(evidence("C-902", 100), 20)
	args["wait_seconds"] = 1
	start := time.Now()
	got := s.mustDelegate(t, args)
	// The host waits for the agent's reply 5 s at most, not the send's 30.
	if took := time.Since(start); took > 10*time.Second || got.State != "submitted" {
		t.Errorf("delegate to a silent agent answered %s after %s, want submitted within 5 s and the wait", got.State, took)
	}
	done := s.waitEnded(t, got.TaskID, 40*time.Second)
	n := s.agent.Stats().ByA2ADTask[got.TaskID]
	t.Logf("task %s (%s); the agent got %d briefs", done.State, done.Reason, n)
	if n != 1 {
		t.Fatalf("the unresponsive agent got %d briefs of %s in 20 s, want 1", n, got.TaskID)
	}
}

// An answer over the 4 MiB limit (garbled: the agent may have taken the
// brief) is not a refusal: the task is not failed delivery_refused.
func TestHTTPAgentOversizeAnswerIsNotARefusal(t *testing.T) {
	huge := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost {
				next.ServeHTTP(w, r)
				return
			}
			body, _ := io.ReadAll(r.Body)
			w.Header().Set("Content-Type", "application/json")
			pad := strings.Repeat("x", 5<<20)
			_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":` + jsonID(body) + `,"result":{"task":{"id":"t1","contextId":"c","status":{"state":"TASK_STATE_SUBMITTED"},"metadata":{"pad":"` + pad + `"}}}}`))
		})
	}
	s := startHTTP(t, httpStackOpts{streaming: true, wrap: huge})
	args := httpDelegateArgs(evidence("C-7", 1999), 60)
	args["wait_seconds"] = 1
	got := s.mustDelegate(t, args)
	time.Sleep(3 * time.Second)
	r := s.record(t, got.TaskID)
	t.Logf("task %s (%s)", r.State, r.Reason)
	if strings.HasPrefix(r.Reason, "delivery_refused") {
		t.Fatalf("an oversize answer ended the task %q: a refusal, though the agent may have taken the brief", r.Reason)
	}
}

// A restarted a2ad on the same data directory (locked: the embedded NATS
// server's) follows its own HTTP tasks again under the same instance id,
// so it resumes them at once instead of waiting for their leases to lapse.
func TestRestartedInstanceKeepsItsFollowerID(t *testing.T) {
	dataDir := t.TempDir()
	ids := map[string]bool{}
	for range 2 {
		d, err := daemon.Start(context.Background(), daemon.Config{DataDir: dataDir, NATSListen: "127.0.0.1:-1", HTTPAddr: "127.0.0.1:0"},
			slog.New(slog.DiscardHandler), true)
		if err != nil {
			t.Fatal(err)
		}
		d.Stop()
		b, err := os.ReadFile(filepath.Join(dataDir, "instance-id"))
		if err != nil {
			t.Fatal(err)
		}
		ids[strings.TrimSpace(string(b))] = true
	}
	if len(ids) != 1 {
		t.Fatalf("instance ids %v across a restart, want one", ids)
	}
}

// An agent that has finished when it answers SendMessage returns the
// outcome in its reply — COMPLETED with the artifact — and may not know
// the task afterwards (GetTask: task not found). The reply's outcome is
// an observed change like any other: the host gets the validated artifact.
func TestHTTPAgentOutcomeInTheReplyIsApplied(t *testing.T) {
	done := `{"id":"sync-1","contextId":"CTX","status":{"state":"TASK_STATE_COMPLETED","timestamp":"2026-12-02T07:00:00Z"},` +
		`"artifacts":[{"artifactId":"risk-assessment","name":"risk_assessment","parts":[{"data":{"case_id":"C-7","policy_version":"fraud-policy-2026.11","reasons":["no risk signals in the evidence"],"risk_level":"low","score":0.1},"mediaType":"application/json"}]}]}`
	sync := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost {
				next.ServeHTTP(w, r)
				return
			}
			body := peekBody(r)
			w.Header().Set("Content-Type", "application/json")
			if strings.Contains(string(body), `"SendMessage"`) {
				var req struct {
					Params struct {
						Message struct {
							ContextID string `json:"contextId"`
						} `json:"message"`
					} `json:"params"`
				}
				_ = json.Unmarshal(body, &req)
				_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":` + jsonID(body) + `,"result":{"task":` + strings.Replace(done, "CTX", req.Params.Message.ContextID, 1) + `}}`))
				return
			}
			_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":` + jsonID(body) + `,"error":{"code":-32001,"message":"task not found"}}`))
		})
	}
	s := startHTTP(t, httpStackOpts{streaming: true, wrap: sync})
	got := s.mustDelegate(t, httpDelegateArgs(evidence("C-7", 1999), 60))
	final := s.waitEnded(t, got.TaskID, 10*time.Second)
	if final.State != "completed" || len(final.Artifacts) != 1 {
		t.Fatalf("task %s (%s) with %d artifacts, want completed with the reply's artifact", final.State, final.Reason, len(final.Artifacts))
	}
	if r := s.record(t, got.TaskID); r.AgentTaskID != "sync-1" || completions(r) != 1 {
		t.Errorf("record: agent task %q, %d completions", r.AgentTaskID, completions(r))
	}
}

// An artifact with two members of one name ("risk_level":"high", …,
// "risk_level":"low") reaches a2ad's checks over NATS as it was sent and
// is refused (duplicate_member). Over HTTP a2a-go decodes the agent's
// answer first and would keep one of them silently: a2ad refuses such an
// answer whole, so the task never completes with a value other readers
// of the same bytes do not see.
func TestHTTPAgentDuplicateMemberIsNeverAccepted(t *testing.T) {
	dup := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, r)
			b := rec.Body.Bytes()
			// The reference agent's artifact, with a second risk_level.
			b = bytes.ReplaceAll(b, []byte(`"risk_level":"low"`), []byte(`"risk_level":"high","risk_level":"low"`))
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.Header().Del("Content-Length")
			w.WriteHeader(rec.Code)
			_, _ = w.Write(b)
		})
	}
	for _, streaming := range []bool{false, true} {
		t.Run(map[bool]string{false: "polled", true: "streamed"}[streaming], func(t *testing.T) {
			s := startHTTP(t, httpStackOpts{streaming: streaming, wrap: dup})
			args := httpDelegateArgs(evidence("C-7", 1999), 4)
			args["wait_seconds"] = 0
			got := s.mustDelegate(t, args)
			final := s.waitEnded(t, got.TaskID, 15*time.Second)
			if final.State == "completed" || len(final.Artifacts) != 0 {
				t.Fatalf("task %s with artifacts %+v: an answer with a duplicate member was taken", final.State, final.Artifacts)
			}
		})
	}
}
