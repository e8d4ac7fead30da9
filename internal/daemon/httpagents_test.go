package daemon_test

import (
	"context"
	"encoding/json"
	"github.com/a2ad/a2ad/internal/corpus"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/a2ad/a2ad"
	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/internal/httpbind"
	"github.com/a2ad/a2ad/mcpedge"
	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// An approved agent whose fetched card offers JSON-RPC at its own origin is
// delegable over JSONRPC, and agents_list tells the host so, with the
// endpoint; a NATS agent beside it shows "nats" and no URL. The card is
// the @a2a-js/sdk 1.3 card issue 16 quotes, served from a loopback origin.
func TestAgentsListShowsTheBinding(t *testing.T) {
	cardOrigin := corpus.ServeJSSDKCard(t, "../..")

	dataDir := t.TempDir()
	d, err := daemon.Start(context.Background(), daemon.Config{DataDir: dataDir, NATSListen: "127.0.0.1:-1", HTTPAddr: "127.0.0.1:0",
		Agents: []daemon.AgentConfig{
			{AgentConfig: agentcard.AgentConfig{ID: "fraud-review", Tenants: []string{"default"}, TrustOnFirstUse: true}},
			{AgentConfig: agentcard.AgentConfig{ID: "movie-agent", Tenants: []string{"default"}, TrustOnFirstUse: true, CardURL: cardOrigin}},
		}}, slog.New(slog.NewTextHandler(io.Discard, nil)), true)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	ctx := t.Context()
	if _, err := d.Service.Agents.Register(ctx, "fraud-review", a2ad.FraudReviewCard()); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		rec, err := d.Service.Agents.Get(ctx, "movie-agent")
		if err == nil && len(rec.Card) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fetched card was not registered: %+v, %v", rec, err)
		}
	}

	token, err := mcpedge.MintDevToken(dataDir, d.Auth.Audience(), "test-host", "default", "a2a:read", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	session, err := mcp.NewClient(&mcp.Implementation{Name: "test-host", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: d.HTTPURL + "/mcp", HTTPClient: mcpedge.BearerClient(token)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "agents_list", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("agents_list: %v %+v", err, res)
	}
	var out struct {
		Agents []struct {
			ID                 string  `json:"id"`
			Delegable          bool    `json:"delegable"`
			NotDelegableReason string  `json:"not_delegable_reason"`
			Binding            *string `json:"binding"`
			BindingURL         *string `json:"binding_url"`
		} `json:"agents"`
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil || len(out.Agents) != 2 {
		t.Fatalf("agents_list = %s (%v)", b, err)
	}
	nats, movie := out.Agents[0], out.Agents[1]
	if nats.ID != "fraud-review" || !nats.Delegable || nats.Binding == nil || *nats.Binding != "nats" || nats.BindingURL != nil {
		t.Errorf("the NATS agent: %s; want binding nats and no binding_url", b)
	}
	if movie.ID != "movie-agent" || !movie.Delegable || movie.Binding == nil || *movie.Binding != "JSONRPC" ||
		movie.BindingURL == nil || *movie.BindingURL != cardOrigin+"/a2a/jsonrpc" {
		t.Errorf("the HTTP agent: %s; want binding JSONRPC at %s/a2a/jsonrpc", b, cardOrigin)
	}
}

// A card as the official Go SDK serves it (a2asrv's card handler, a2a-go
// types), with an OAuth 2.0 client-credentials requirement: fetched, it
// is delegable over the binding the operator prefers; without http.auth
// the agent carries the auth warning, with http.auth.oauth2 it does not.
func TestSDKServedCardIsDelegableOverThePreferredBinding(t *testing.T) {
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	defer srv.Close()
	card := &a2a.AgentCard{
		Name: "Fraud review", Description: "Scores refund requests.", Version: "1.0.0",
		SupportedInterfaces: []*a2a.AgentInterface{
			a2a.NewAgentInterface(srv.URL+"/a2a/jsonrpc", a2a.TransportProtocolJSONRPC),
			a2a.NewAgentInterface(srv.URL+"/a2a/grpc", a2a.TransportProtocolGRPC),
			a2a.NewAgentInterface(srv.URL+"/a2a/rest", a2a.TransportProtocolHTTPJSON),
		},
		Capabilities:       a2a.AgentCapabilities{Streaming: true},
		DefaultInputModes:  []string{"application/json"},
		DefaultOutputModes: []string{"application/json"},
		Skills:             []a2a.AgentSkill{{ID: "assess_refund_risk", Name: "Assess refund risk", Description: "Scores one refund.", Tags: []string{"fraud"}}},
		SecuritySchemes: a2a.NamedSecuritySchemes{"vendor": a2a.OAuth2SecurityScheme{
			Flows: a2a.ClientCredentialsOAuthFlow{TokenURL: "https://auth.vendor.example/token", Scopes: map[string]string{"a2a.invoke": "delegate"}}}},
		SecurityRequirements: a2a.SecurityRequirementsOptions{{"vendor": {"a2a.invoke"}}},
	}
	mux.Handle(agentcard.WellKnownPath, a2asrv.NewStaticAgentCardHandler(card))
	secret := filepath.Join(t.TempDir(), "client-secret")
	_ = os.WriteFile(secret, []byte("s3cret\n"), 0o600)

	for _, tt := range []struct {
		name     string
		auth     httpbind.Auth
		warnings int
	}{
		{"no http.auth", httpbind.Auth{}, 1},
		{"http.auth.oauth2", httpbind.Auth{OAuth2: &httpbind.OAuth2{TokenURL: "https://auth.vendor.example/token", ClientID: "a2ad", ClientSecretFile: secret}}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, err := daemon.Start(context.Background(), daemon.Config{DataDir: t.TempDir(), NATSListen: "127.0.0.1:-1",
				Agents: []daemon.AgentConfig{{AgentConfig: agentcard.AgentConfig{ID: "fraud-review", Tenants: []string{"default"},
					TrustOnFirstUse: true, CardURL: srv.URL, Bindings: []string{agentcard.BindingHTTPJSON, agentcard.BindingJSONRPC}},
					HTTP: httpbind.AgentConfig{Auth: tt.auth}}}}, slog.New(slog.DiscardHandler), false)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Stop()
			var rec *agentcard.Record
			for deadline := time.Now().Add(10 * time.Second); rec == nil || len(rec.Card) == 0; time.Sleep(20 * time.Millisecond) {
				if rec, err = d.Service.Agents.Get(t.Context(), "fraud-review"); time.Now().After(deadline) {
					t.Fatalf("the fetched card was not registered: %v, last refusal %+v", err, rec.LastRefusal)
				}
			}
			if !rec.Delegable || rec.Binding != agentcard.BindingHTTPJSON || rec.Interface.URL != srv.URL+"/a2a/rest" || len(rec.AuthWarnings) != tt.warnings {
				t.Errorf("record: delegable %v %q binding %q %+v auth warnings %q", rec.Delegable, rec.NotDelegableReason, rec.Binding, rec.Interface, rec.AuthWarnings)
			}
			if tt.warnings > 0 && rec.AuthWarnings[0].Reason != "a2ad cannot authenticate as the card requires: no http.auth is configured, and no alternative of securityRequirements is met (/securitySchemes/vendor needs OAuth 2.0 client credentials (http.auth.oauth2))" {
				t.Errorf("auth warning %q", rec.AuthWarnings[0].Reason)
			}
			target, err := d.Service.Agents.HTTPTarget(t.Context(), "fraud-review")
			if err != nil || target.Binding != agentcard.BindingHTTPJSON || target.CardOrigin != srv.URL ||
				target.Capabilities.Streaming == nil || !*target.Capabilities.Streaming {
				t.Errorf("HTTPTarget = %+v, %v", target, err)
			}
		})
	}
}
