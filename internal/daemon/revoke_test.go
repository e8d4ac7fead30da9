package daemon_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/a2ad/a2ad"
	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/internal/agentcred"
	"github.com/a2ad/a2ad/internal/audit"
	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/a2ad/a2ad/mcpedge"
	"github.com/nats-io/nats.go"
)

// adminPost POSTs body to path with an a2a:admin token; it returns status
// and body.
func (s *stack) adminPost(t *testing.T, path, body string) (int, []byte) {
	t.Helper()
	return s.adminPostAs(t, "ops-alice", path, body)
}

// adminPostAs is adminPost as operator sub.
func (s *stack) adminPostAs(t *testing.T, sub, path, body string) (int, []byte) {
	t.Helper()
	tok, err := mcpedge.MintDevToken(s.dataDir, s.d.Auth.Audience(), sub, "default", mcpedge.ScopeAdmin, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := mcpedge.BearerClient(tok).Post(s.d.HTTPURL+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func randomJTI(t *testing.T) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// On an external NATS a revoked credential is refused at registration
// (code revoked, recorded as agent.card_refused with that code); bad
// input is refused by name; one agent's jtis revoked one by one are
// bounded, and a revocation of all its credentials frees the bound; an
// instance started afterwards refuses them all from the start.
func TestRevokeOnExternalNATSRefusesRegistrationAndIsBounded(t *testing.T) {
	s := startWithAuth(t, nil, mcpedge.AuthConfig{})
	for path, want := range map[string]string{
		`/v1/agents/fraud-review/revoke {"jti":"not-a-jti"}`: `400 {"error":{"code":"invalid_argument","message":"jti: want the 32 hex digits of a credential's jti (printed when it was minted; in its agent.credential_issued audit record)"}}`,
		`/v1/agents/fraud%20review/revoke {}`:                `400 {"error":{"code":"invalid_argument","message":"agent id: want 1 to 128 of [A-Za-z0-9_-]"}}`,
	} {
		p, body, _ := strings.Cut(path, " ")
		code, b := s.adminPost(t, p, body)
		var compact bytes.Buffer
		_ = json.Compact(&compact, b)
		if got := fmt.Sprintf("%d %s", code, compact.Bytes()); got != want {
			t.Errorf("POST %s %s:\n got %s\nwant %s", p, body, got, want)
		}
	}

	tok, c, err := s.d.AgentKeys.MintClaims("fraud-review", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	other, _, _ := s.d.AgentKeys.MintClaims("fraud-review", time.Hour, time.Now())
	if code, b := s.adminPost(t, "/v1/agents/fraud-review/revoke", `{"jti":"`+c.ID+`"}`); code != 200 || !strings.Contains(string(b), `"jti": "`+c.ID+`"`) {
		t.Fatalf("revoke: %d %s", code, b)
	}
	m := nats.NewMsg(natsbind.RegisterSubject)
	m.Header.Set("Authorization", "Bearer "+tok)
	m.Data, _ = json.Marshal(map[string]any{"agentId": "fraud-review", "card": json.RawMessage(a2ad.FraudReviewCard())})
	reply, err := s.nc.RequestMsg(m, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var res natsbind.RegisterResponse
	_ = json.Unmarshal(reply.Data, &res)
	if want := (natsbind.RegisterResponse{AgentID: "fraud-review", Code: natsbind.RegisterRevoked,
		Error: "agent credential invalid: agent credential revoked (credential " + c.ID + ")"}); res != want {
		t.Fatalf("registration with the revoked credential: %+v, want %+v", res, want)
	}
	refused := s.auditOf(t, url.Values{"kind": {audit.KindAgentCardRefused}}, 1)
	if r := refused[len(refused)-1]; r.Code != "revoked" || r.AgentID != "fraud-review" || r.Actor != (audit.Actor{Type: audit.ActorAgent}) {
		t.Errorf("agent.card_refused record: %+v, want code revoked, agent fraud-review, actor agent without subject", r)
	}
	// Another credential of the agent still verifies.
	if _, err := s.d.AgentKeys.Verify(other); err != nil {
		t.Errorf("the agent's other credential: %v", err)
	}

	for i := 1; i < agentcred.MaxRevokedPerAgent; i++ {
		// Several operators: one alone would meet its write rate limit.
		if code, b := s.adminPostAs(t, fmt.Sprintf("ops-%d", i%4), "/v1/agents/fraud-review/revoke", `{"jti":"`+randomJTI(t)+`"}`); code != 200 {
			t.Fatalf("revoke %d: %d %s", i, code, b)
		}
	}
	code, b := s.adminPost(t, "/v1/agents/fraud-review/revoke", `{"jti":"`+randomJTI(t)+`"}`)
	if want := "agent has 100 credentials revoked one by one: revoke all of its credentials instead (a2ad agents revoke ID)"; code != http.StatusConflict ||
		!strings.Contains(string(b), `"too_many_revocations"`) || !strings.Contains(string(b), want) {
		t.Fatalf("revocation %d: %d %s, want 409 too_many_revocations", agentcred.MaxRevokedPerAgent+1, code, b)
	}
	// Measured before: on an external NATS the agent stayed connected and
	// approved, and the next delegation went to it. Revoking all of its
	// credentials there quarantines it, asked or not.
	if code, b := s.adminPost(t, "/v1/agents/fraud-review/revoke", `{}`); code != 200 || !strings.Contains(string(b), `"revoked_before"`) ||
		!strings.Contains(string(b), `"quarantined": true`) {
		t.Fatalf("revoke all on an external NATS: %d %s, want revoked_before and quarantined", code, b)
	}
	if a, err := s.d.Service.Agents.Get(context.Background(), "fraud-review"); err != nil || a.Status != agentcard.StatusQuarantined {
		t.Fatalf("fraud-review after revoking all on an external NATS: %+v %v, want quarantined", a, err)
	}
	late, lateC, _ := s.d.AgentKeys.MintClaims("fraud-review", time.Hour, time.Now())
	if _, err := s.d.AgentKeys.Verify(late); err != nil {
		t.Fatalf("a credential minted after revoking all: %v", err)
	}
	if code, b := s.adminPost(t, "/v1/agents/fraud-review/revoke", `{"jti":"`+lateC.ID+`"}`); code != 200 {
		t.Fatalf("revoking one credential after revoking all: %d %s, want 200", code, b)
	}
	if _, err := s.d.AgentKeys.Verify(other); !errors.Is(err, agentcred.ErrRevoked) || !strings.Contains(err.Error(), "every credential of agent fraud-review issued before") {
		t.Errorf("the agent's other credential after revoking all: %v", err)
	}

	// An instance started afterwards knows every revocation once Start
	// returns, before it lets any agent in.
	d2, err := daemon.Start(context.Background(), daemon.Config{NATSURL: s.d.NATSURL, DataDir: t.TempDir()},
		slog.New(slog.NewTextHandler(io.Discard, nil)), false)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Stop()
	if _, err := d2.AgentKeys.Verify(other); !errors.Is(err, agentcred.ErrRevoked) {
		t.Errorf("a revoked credential on an instance started after the revocation: %v, want ErrRevoked", err)
	}
	if _, err := d2.AgentKeys.Verify(late); !errors.Is(err, agentcred.ErrRevoked) || !strings.Contains(err.Error(), "(credential "+lateC.ID+")") {
		t.Errorf("the credential revoked by jti, on an instance started after: %v, want it revoked by its jti", err)
	}
}
