package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/a2ad/a2ad"
	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/internal/natsbind"
)

// A registration refused for many faults is answered invalid with an error
// of at most agentcard.MaxErrorBytes that still says how many faults there
// are: 60 security schemes that are not objects, under 150-byte names.
func TestRegistrationRefusalIsBounded(t *testing.T) {
	d, err := daemon.Start(context.Background(), daemon.Config{DataDir: t.TempDir(), NATSListen: "127.0.0.1:-1",
		Agents: []daemon.AgentConfig{{AgentConfig: agentcard.AgentConfig{ID: "fraud-review", Tenants: []string{"default"}, TrustOnFirstUse: true}}}},
		slog.New(slog.NewTextHandler(io.Discard, nil)), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	var c map[string]any
	if err := json.Unmarshal(a2ad.FraudReviewCard(), &c); err != nil {
		t.Fatal(err)
	}
	schemes := map[string]any{}
	for i := range 60 {
		schemes[fmt.Sprintf("s%02d-%s", i, strings.Repeat("x", 146))] = 1
	}
	c["securitySchemes"] = schemes
	card, _ := json.Marshal(c)
	body, _ := json.Marshal(natsbind.RegisterRequest{AgentID: "fraud-review", Card: card})
	resp := newRegistrar(t, d, "fraud-review").register("fraud-review", mint(t, d, "fraud-review", time.Hour), body)
	if resp.Code != natsbind.RegisterInvalid || resp.Status != "" || len(resp.Error) > agentcard.MaxErrorBytes ||
		!strings.HasPrefix(resp.Error, "agentcard: 60 faults: /securitySchemes/s00-") || !strings.HasSuffix(resp.Error, "; and 39 more") {
		t.Errorf("answered code %q status %q, error of %d bytes:\n%s\nwant invalid, at most %d bytes, 60 faults, and 39 more",
			resp.Code, resp.Status, len(resp.Error), resp.Error, agentcard.MaxErrorBytes)
	}
}
