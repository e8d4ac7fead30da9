package daemon_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/a2ad/a2ad"
	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/mcpedge"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// An approved agent whose fetched card offers JSON-RPC at its own origin is
// delegable over JSONRPC, and agents_list tells the host so, with the
// endpoint; a NATS agent beside it shows "nats" and no URL. The card is
// the @a2a-js/sdk 1.3 card issue 16 quotes, served from a loopback origin.
func TestAgentsListShowsTheBinding(t *testing.T) {
	raw, err := os.ReadFile("../../testdata/cards/a2a-js-1.3-mixed.json")
	if err != nil {
		t.Fatal(err)
	}
	var card []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(card)
	}))
	defer srv.Close()
	card = []byte(strings.ReplaceAll(string(raw), "http://localhost:41241", srv.URL))

	dataDir := t.TempDir()
	d, err := daemon.Start(context.Background(), daemon.Config{DataDir: dataDir, NATSListen: "127.0.0.1:-1", HTTPAddr: "127.0.0.1:0",
		Agents: []daemon.AgentConfig{
			{AgentConfig: agentcard.AgentConfig{ID: "fraud-review", Tenants: []string{"default"}, TrustOnFirstUse: true}},
			{AgentConfig: agentcard.AgentConfig{ID: "movie-agent", Tenants: []string{"default"}, TrustOnFirstUse: true, CardURL: srv.URL}},
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
		movie.BindingURL == nil || *movie.BindingURL != srv.URL+"/a2a/jsonrpc" {
		t.Errorf("the HTTP agent: %s; want binding JSONRPC at %s/a2a/jsonrpc", b, srv.URL)
	}
}
