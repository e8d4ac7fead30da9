package daemon_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2ad/a2ad"
	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/internal/audit"
	"github.com/a2ad/a2ad/internal/daemon"
	"github.com/a2ad/a2ad/internal/testlog"
	"github.com/nats-io/nats.go/jetstream"
)

// A card a2ad refuses at its card_url is revalidated by its ETag
// (If-None-Match), with a growing wait, and logged and audited once, not
// at every retry; the refusal names every fault. Once the agent serves a
// valid card, it is registered.
func TestRefusedFetchedCardIsRevalidatedWithBackoff(t *testing.T) {
	var fixed map[string]any
	if err := json.Unmarshal(a2ad.FraudReviewCard(), &fixed); err != nil {
		t.Fatal(err)
	}
	broken := map[string]any{}
	for k, v := range fixed {
		broken[k] = v
	}
	delete(broken, "version")
	delete(broken, "defaultOutputModes")
	brokenRaw, _ := json.Marshal(broken)

	type request struct {
		at          time.Time
		ifNoneMatch string
	}
	var mu sync.Mutex
	var requests []request
	card, etag := brokenRaw, `"broken-1"`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		requests = append(requests, request{time.Now(), r.Header.Get("If-None-Match")})
		w.Header().Set("ETag", etag)
		w.Header().Set("Cache-Control", "max-age=1")
		if r.Header.Get("If-None-Match") == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(card)
	}))
	defer srv.Close()

	var logs testlog.Buffer
	d, err := daemon.Start(context.Background(), daemon.Config{DataDir: t.TempDir(), NATSListen: "127.0.0.1:-1",
		Agents: []daemon.AgentConfig{{AgentConfig: agentcard.AgentConfig{ID: "fraud-review", Tenants: []string{"default"},
			TrustOnFirstUse: true, CardURL: srv.URL + agentcard.WellKnownPath}}}}, slog.New(slog.NewTextHandler(&logs, nil)), false)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	ctx := context.Background()

	waitFor(t, "three fetches of the refused card", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(requests) >= 3
	})
	mu.Lock()
	seen := append([]request(nil), requests[:3]...)
	mu.Unlock()
	if seen[0].ifNoneMatch != "" || seen[1].ifNoneMatch != `"broken-1"` || seen[2].ifNoneMatch != `"broken-1"` {
		t.Errorf("If-None-Match of the fetches: %q, %q, %q; want none, then the refused card's ETag", seen[0].ifNoneMatch, seen[1].ifNoneMatch, seen[2].ifNoneMatch)
	}
	// max-age=1, then twice as long: lower bounds only, a timer never
	// fires early.
	if gap1, gap2 := seen[1].at.Sub(seen[0].at), seen[2].at.Sub(seen[1].at); gap1 < time.Second || gap2 < 2*time.Second {
		t.Errorf("waits between fetches %v, %v; want at least 1s, then 2s", gap1, gap2)
	}
	rec, err := d.Service.Agents.Get(ctx, "fraud-review")
	if err != nil {
		t.Fatal(err)
	}
	if want := "the card is invalid at /version: required; at /defaultOutputModes: required"; rec.LastRefusal == nil ||
		rec.LastRefusal.Source != agentcard.RefusalFetch || rec.LastRefusal.Reason != want {
		t.Errorf("LastRefusal %+v, want fetch %q", rec.LastRefusal, want)
	}
	if n := strings.Count(logs.String(), "fetched agent card refused"); n != 1 {
		t.Errorf("the refusal was logged %d times, want once:\n%s", n, logs.String())
	}
	js, _ := jetstream.New(operatorConn(t, d))
	refusals := func() []audit.Record {
		page, err := audit.Query(ctx, js, audit.Filter{Kind: audit.KindAgentCardRefused, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		return page.Records
	}
	waitFor(t, "the refusal's audit record", func() bool { return len(refusals()) > 0 })
	if got := refusals(); len(got) != 1 || got[0].AgentID != "fraud-review" || got[0].Code != "card_invalid" || got[0].Suppressed != 0 {
		t.Errorf("card_refused audit records %+v, want one, card_invalid", got)
	}

	// The agent fixes its card: the next revalidation gets it.
	fixedRaw, _ := json.Marshal(fixed)
	mu.Lock()
	card, etag = fixedRaw, `"fixed-1"`
	mu.Unlock()
	waitFor(t, "the fixed card to be approved", func() bool {
		rec, err = d.Service.Agents.Get(ctx, "fraud-review")
		return err == nil && rec.Status == agentcard.StatusApproved && rec.Delegable
	})
}

// A card_url server that answers 304 Not Modified to a request without
// If-None-Match (a2ad has no card to revalidate) sent no card: that is a
// failed fetch, retried with backoff (30 s first, not its max-age=1), and
// logged and audited once, with the agent's LastRefusal naming it.
func TestCardURL304WithoutCardIsAFailedFetch(t *testing.T) {
	var mu sync.Mutex
	var inm []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		inm = append(inm, r.Header.Get("If-None-Match"))
		mu.Unlock()
		w.Header().Set("Cache-Control", "max-age=1")
		w.WriteHeader(http.StatusNotModified)
	}))
	defer srv.Close()
	var logs testlog.Buffer
	d, err := daemon.Start(context.Background(), daemon.Config{DataDir: t.TempDir(), NATSListen: "127.0.0.1:-1",
		Agents: []daemon.AgentConfig{{AgentConfig: agentcard.AgentConfig{ID: "only304", Tenants: []string{"default"},
			CardURL: srv.URL + agentcard.WellKnownPath}}}}, slog.New(slog.NewTextHandler(&logs, nil)), false)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	ctx := context.Background()
	const reason = "answered 304 Not Modified to a request without If-None-Match: no card came"
	waitFor(t, "the failed fetch to be the agent's last refusal", func() bool {
		rec, err := d.Service.Agents.Get(ctx, "only304")
		return err == nil && rec.LastRefusal != nil
	})
	rec, _ := d.Service.Agents.Get(ctx, "only304")
	if rec.LastRefusal.Source != agentcard.RefusalFetch || rec.LastRefusal.Reason != reason {
		t.Errorf("LastRefusal %+v, want fetch %q", rec.LastRefusal, reason)
	}
	js, _ := jetstream.New(operatorConn(t, d))
	refusals := func() []audit.Record {
		page, err := audit.Query(ctx, js, audit.Filter{Kind: audit.KindAgentCardRefused, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		return page.Records
	}
	waitFor(t, "the failed fetch's audit record", func() bool { return len(refusals()) > 0 })
	// max-age=1 would have fetched three times more by now; the backoff of
	// a failed fetch waits 30 s (a timer never fires early).
	time.Sleep(3 * time.Second)
	mu.Lock()
	got := slices.Clone(inm)
	mu.Unlock()
	if len(got) != 1 || got[0] != "" {
		t.Errorf("fetches (If-None-Match of each) %q, want one, without", got)
	}
	if got := refusals(); len(got) != 1 || got[0].AgentID != "only304" || got[0].Code != "fetch_failed" {
		t.Errorf("card_refused audit records %+v, want one, fetch_failed", got)
	}
	if n := strings.Count(logs.String(), `msg="agent card not fetched"`); n != 1 || !strings.Contains(logs.String(), reason) {
		t.Errorf("logged %d times, want once with %q:\n%s", n, reason, logs.String())
	}
}
