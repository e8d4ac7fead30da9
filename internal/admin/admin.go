// Package admin serves the operators' HTTP API under /v1/: tasks and agents
// as JSON, read from the shared stores (any tenant), task changes as
// Server-Sent Events, and the operators' actions (cancel a task, approve or
// quarantine an agent, mint its credential). The `a2ad tasks` and `a2ad
// agents` commands are its clients. The daemon serves it behind a token
// check for scope a2a:admin and, on a loopback listener, a Host check
// against DNS rebinding.
package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/internal/agentcred"
	"github.com/a2ad/a2ad/internal/audit"
	"github.com/a2ad/a2ad/internal/broker"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/a2ad/a2ad/task"
)

// Handler returns the /v1/ API:
//
//	GET /v1/tasks          TaskPage: {"tasks":[Record…],"next_page_token":"…"} newest first
//	GET /v1/tasks/watch    Server-Sent Events, one TaskChange per transition
//	GET /v1/tasks/{id}     Record with its full history
//	POST /v1/tasks/{id}/cancel       {"reason":"…"} (optional) → Record (409 task_terminal)
//	GET /v1/agents         {"agents":[agentcard.Record…]}
//	GET /v1/agents/{id}    agentcard.Record
//	POST /v1/agents/{id}/approve     {"fingerprint":"sha256:…"} → Record (409 fingerprint_mismatch)
//	POST /v1/agents/{id}/quarantine  {"reason":"…"} → Record
//	POST /v1/agents/{id}/credential  {"ttl_seconds":N} → {"agent_id","credential","expires_at","jti"}
//	POST /v1/agents/{id}/revoke      {"jti":"…","quarantine":bool} (both optional) → Revocation
//	GET /v1/audit          audit.Page: {"records":[audit.Record…],"more":bool}
//	GET /v1/dashboard      DashboardFigures (with Options.Dashboard; see Dashboard)
//
// GET /v1/audit returns the newest records that match, oldest first; more
// says older ones match too. It takes kind (one of audit.Kinds, or a
// family such as agent.>), task, agent, tenant, since (an RFC 3339 time or
// a Go duration back from now) and limit (1 to 1000, default 100).
//
// GET /v1/tasks takes state=s1,s2 (task states), agent, tenant,
// older_than and newer_than (Go durations of the task's age),
// limit (1 to MaxLimit, default DefaultLimit) and page_token (a
// next_page_token: the page after it, unaffected by tasks created since).
// Cancel is broker.Service.CancelByOperator: the agent gets CancelTask as
// from a host; the task's history records it once, with source operator,
// by the subject of the request's verified token, reason
// canceled_by_operator and note the body's reason, and so does its audit
// record (task.transition, actor operator:<subject>, note).
//
// GET /v1/tasks/watch takes state, agent and tenant; it reports changes
// from the moment it answers, with a comment line every 15 s, until the
// client goes or a2ad stops (a final "event: shutdown"). Any other parameter, or a bad value, is 400
// invalid_argument naming the parameter.
//
// A credential may be minted for an agent id not registered yet: an agent
// needs one to register (docs/nats-binding.md §10). ttl_seconds 0 means
// agentcred.DefaultTTL (90 days); at most agentcred.MaxTTL.
//
// Records never carry unvalidated artifact content, nor the brief or
// answer bytes waiting in a task's outbox; they do carry the questions
// answered and their answers, bounded (task.Record.Exchanges). Errors are
// {"error":{"code","message"}} with 404 for an unknown id.
//
// Revoke refuses, on every instance within a moment, the agent's
// credential with that jti or, without one, every credential of the agent
// issued until now: at connect to the embedded server (whose live
// connections with them are closed) and at registration. A credential
// minted after it works. With quarantine, the agent, if registered, is
// quarantined too (no new delegation goes to it); so it is, asked or not,
// when all its credentials are revoked and opts.QuarantineOnRevokeAll (an
// external NATS, whose connections a2ad cannot close). More than
// agentcred.MaxRevokedPerAgent jtis of one agent is 409
// too_many_revocations: revoke all of them.
//
// Every operator action (cancel, approve, quarantine, credential, revoke)
// is recorded in opts.Audit with the operator's token subject.
func Handler(svc *broker.Service, keys *agentcred.Keys, opts Options) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/audit", auditQuery(opts.JS))
	mux.HandleFunc("GET /v1/tasks", listTasks(svc))
	mux.HandleFunc("GET /v1/tasks/watch", watchTasks(svc, opts.Stopping))
	mux.HandleFunc("POST /v1/tasks/{id}/cancel", cancelTask(svc))
	mux.HandleFunc("GET /v1/tasks/{id}", func(w http.ResponseWriter, r *http.Request) {
		rec, _, err := svc.Tasks.Get(r.Context(), r.PathValue("id"))
		if errors.Is(err, task.ErrNotFound) {
			writeErr(w, http.StatusNotFound, "task_not_found", "no task "+r.PathValue("id"))
			return
		}
		if err != nil {
			writeErr(w, http.StatusServiceUnavailable, "store_unavailable", err.Error())
			return
		}
		writeJSON(w, http.StatusOK, rec.Redacted())
	})
	mux.HandleFunc("GET /v1/agents", func(w http.ResponseWriter, r *http.Request) {
		recs, err := svc.Agents.List(r.Context(), "")
		if err != nil {
			writeErr(w, http.StatusServiceUnavailable, "store_unavailable", err.Error())
			return
		}
		if recs == nil {
			recs = []agentcard.Record{}
		}
		writeJSON(w, http.StatusOK, map[string]any{"agents": recs})
	})
	mux.HandleFunc("GET /v1/agents/{id}", func(w http.ResponseWriter, r *http.Request) {
		rec, err := svc.Agents.Get(r.Context(), r.PathValue("id"))
		agentAnswer(w, rec, err)
	})
	mux.HandleFunc("POST /v1/agents/{id}/approve", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Fingerprint string `json:"fingerprint"`
		}
		if !decodeBody(w, r, &body) {
			return
		}
		if body.Fingerprint == "" {
			writeErr(w, http.StatusBadRequest, "invalid_argument", "fingerprint is required: approve the card you have seen (a2ad agents show)")
			return
		}
		rec, err := svc.Agents.Approve(r.Context(), r.PathValue("id"), body.Fingerprint)
		if err == nil {
			opts.Audit.Append(agentRecord(r, audit.KindAgentApproved, rec, ""))
		}
		agentAnswer(w, rec, err)
	})
	mux.HandleFunc("POST /v1/agents/{id}/quarantine", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Reason string `json:"reason"`
		}
		if !decodeBody(w, r, &body) {
			return
		}
		if len(body.Reason) > 1024 {
			writeErr(w, http.StatusBadRequest, "invalid_argument", "reason: longer than 1024 bytes")
			return
		}
		rec, err := svc.Agents.Quarantine(r.Context(), r.PathValue("id"), body.Reason)
		if err == nil {
			opts.Audit.Append(agentRecord(r, audit.KindAgentQuarantined, rec, body.Reason))
		}
		agentAnswer(w, rec, err)
	})
	mux.HandleFunc("POST /v1/agents/{id}/credential", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			TTLSeconds int64 `json:"ttl_seconds"`
		}
		if !decodeBody(w, r, &body) {
			return
		}
		id := r.PathValue("id")
		if !natsbind.ValidToken(id) {
			writeErr(w, http.StatusBadRequest, "invalid_argument", "agent id: want 1 to 128 of [A-Za-z0-9_-]")
			return
		}
		if body.TTLSeconds < 0 || body.TTLSeconds > int64(agentcred.MaxTTL/time.Second) {
			writeErr(w, http.StatusBadRequest, "invalid_argument", fmt.Sprintf("ttl_seconds: want 0 (default %d) to %d",
				int64(agentcred.DefaultTTL/time.Second), int64(agentcred.MaxTTL/time.Second)))
			return
		}
		tok, c, err := keys.MintClaims(id, time.Duration(body.TTLSeconds)*time.Second, time.Now())
		if err != nil {
			writeErr(w, http.StatusInternalServerError, "internal", err.Error())
			return
		}
		exp := c.Expires
		rec := agentRecord(r, audit.KindAgentCredential, nil, "")
		rec.AgentID, rec.ExpiresAt, rec.JTI = id, &exp, c.ID
		opts.Audit.Append(rec)
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, http.StatusOK, Credential{AgentID: id, Credential: tok, ExpiresAt: exp.UTC(), JTI: c.ID})
	})
	mux.HandleFunc("POST /v1/agents/{id}/revoke", revokeCredentials(svc, opts))
	if opts.Dashboard != nil {
		mux.HandleFunc("GET /v1/dashboard", opts.Dashboard.Handler)
	}
	return mux
}

// Revocation is the answer of POST /v1/agents/{id}/revoke.
type Revocation struct {
	AgentID string `json:"agent_id"`
	// JTI is the one credential revoked; else RevokedBefore is the time
	// before which every credential of the agent issued is revoked.
	JTI           string     `json:"jti,omitempty"`
	RevokedBefore *time.Time `json:"revoked_before,omitempty"`
	// Quarantined: the agent was quarantined too (asked, and registered).
	Quarantined bool `json:"quarantined"`
}

func revokeCredentials(svc *broker.Service, opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			JTI        string `json:"jti"`
			Quarantine bool   `json:"quarantine"`
		}
		if !decodeBody(w, r, &body) {
			return
		}
		if opts.Revoke == nil {
			writeErr(w, http.StatusServiceUnavailable, "unavailable", "this a2ad cannot revoke credentials")
			return
		}
		id := r.PathValue("id")
		if !natsbind.ValidToken(id) {
			writeErr(w, http.StatusBadRequest, "invalid_argument", "agent id: want 1 to 128 of [A-Za-z0-9_-]")
			return
		}
		if body.JTI != "" && !agentcred.ValidJTI(body.JTI) {
			writeErr(w, http.StatusBadRequest, "invalid_argument", "jti: want the 32 hex digits of a credential's jti (printed when it was minted; in its agent.credential_issued audit record)")
			return
		}
		before, err := opts.Revoke(r.Context(), id, body.JTI)
		switch {
		case errors.Is(err, agentcred.ErrTooManyRevoked):
			writeErr(w, http.StatusConflict, "too_many_revocations", err.Error())
			return
		case err != nil:
			writeErr(w, http.StatusServiceUnavailable, "store_unavailable", err.Error())
			return
		}
		rec := agentRecord(r, audit.KindAgentCredentialRevoked, nil, "")
		rec.AgentID = id
		res := Revocation{AgentID: id, JTI: body.JTI}
		if body.JTI != "" {
			rec.JTI = body.JTI
		} else {
			rec.RevokedBefore, res.RevokedBefore = &before, &before
		}
		opts.Audit.Append(rec)
		if body.Quarantine || (body.JTI == "" && opts.QuarantineOnRevokeAll) {
			a, err := svc.Agents.Quarantine(r.Context(), id, "credentials revoked")
			switch {
			case errors.Is(err, agentcard.ErrAgentNotFound):
			case err != nil:
				writeErr(w, http.StatusServiceUnavailable, "store_unavailable", "revoked, but not quarantined: "+err.Error())
				return
			default:
				opts.Audit.Append(agentRecord(r, audit.KindAgentQuarantined, a, "credentials revoked"))
				res.Quarantined = true
			}
		}
		writeJSON(w, http.StatusOK, res)
	}
}

// Credential is the answer of POST /v1/agents/{id}/credential.
type Credential struct {
	AgentID    string    `json:"agent_id"`
	Credential string    `json:"credential"` // compact JWS (internal/agentcred)
	ExpiresAt  time.Time `json:"expires_at"`
	// JTI is the credential's jti: `a2ad agents revoke ID --credential JTI`
	// revokes this one only.
	JTI string `json:"jti"`
}

// decodeBody reads a small JSON body strictly; on failure it has answered 400.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		bodyErr(w, err)
		return false
	}
	return true
}

// maxBodyBytes bounds an admin request's body.
const maxBodyBytes = 64 << 10

// bodyErr answers a body that did not decode, in a2ad's words: 413
// request_too_large over maxBodyBytes, else 400 invalid_argument naming
// what is wrong (never encoding/json's or net/http's own text).
func bodyErr(w http.ResponseWriter, err error) {
	var (
		tooLarge *http.MaxBytesError
		syntax   *json.SyntaxError
		typ      *json.UnmarshalTypeError
	)
	msg := "body: want a JSON object of this endpoint's fields"
	switch {
	case errors.As(err, &tooLarge):
		writeErr(w, http.StatusRequestEntityTooLarge, "request_too_large", fmt.Sprintf("the request body is larger than %d bytes", tooLarge.Limit))
		return
	case errors.Is(err, io.EOF):
		msg = "body: empty; want a JSON object"
	case errors.Is(err, io.ErrUnexpectedEOF):
		msg = "body: the JSON ends before it is complete"
	case errors.As(err, &syntax):
		msg = fmt.Sprintf("body: not JSON (at byte %d)", syntax.Offset)
	case errors.As(err, &typ) && typ.Field != "":
		msg = fmt.Sprintf("body: field %s wants a JSON %s", typ.Field, jsonKind(typ.Type.Kind()))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		msg = "body: unknown field " + strings.TrimPrefix(err.Error(), "json: unknown field ")
	}
	writeErr(w, http.StatusBadRequest, "invalid_argument", msg)
}

// jsonKind names a Go kind as JSON calls it.
func jsonKind(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Map, reflect.Struct:
		return "object"
	default:
		return "number"
	}
}

func agentAnswer(w http.ResponseWriter, rec *agentcard.Record, err error) {
	switch {
	case errors.Is(err, agentcard.ErrAgentNotFound):
		writeErr(w, http.StatusNotFound, "agent_not_found", "no agent registered under that id")
	case errors.Is(err, agentcard.ErrFingerprintMismatch):
		writeErr(w, http.StatusConflict, "fingerprint_mismatch", err.Error())
	case errors.Is(err, agentcard.ErrSignature):
		writeErr(w, http.StatusConflict, "signature_required", err.Error())
	case err != nil:
		writeErr(w, http.StatusServiceUnavailable, "store_unavailable", err.Error())
	default:
		writeJSON(w, http.StatusOK, rec)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeErr(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
}
