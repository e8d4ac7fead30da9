package agentcard

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/a2ad/a2ad"
)

func TestFetchRevalidatesAndHonoursCacheControl(t *testing.T) {
	card := a2ad.FraudReviewCard()
	var gotVersion, gotINM []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotVersion = append(gotVersion, r.Header.Get("A2A-Version"))
		gotINM = append(gotINM, r.Header.Get("If-None-Match"))
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Cache-Control", "public, max-age=120")
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		_, _ = w.Write(card)
	}))
	defer srv.Close()
	f := &Fetcher{}
	before := time.Now()
	res, err := f.Fetch(context.Background(), srv.URL+WellKnownPath, "")
	if err != nil || string(res.Card) != string(card) || res.ETag != `"v1"` || res.NotModified {
		t.Fatalf("first fetch: %+v %v", res, err)
	}
	if d := res.Next.Sub(before); d < 119*time.Second || d > 121*time.Second {
		t.Errorf("next fetch in %s, want 120 s (max-age)", d)
	}
	res, err = f.Fetch(context.Background(), srv.URL+WellKnownPath, res.ETag)
	if err != nil || !res.NotModified || res.Card != nil {
		t.Fatalf("revalidation: %+v %v", res, err)
	}
	if strings.Join(gotVersion, ",") != "1.0,1.0" || strings.Join(gotINM, ",") != `,"v1"` {
		t.Errorf("A2A-Version %v, If-None-Match %v", gotVersion, gotINM)
	}
}

func TestFetchRefusals(t *testing.T) {
	big := strings.Repeat(" ", MaxCardBytes+1)
	mux := http.NewServeMux()
	mux.HandleFunc("/html", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("{}"))
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(big))
	})
	mux.HandleFunc("/missing", http.NotFound)
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/loop", http.StatusFound) })
	mux.HandleFunc("/away", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://example.com/card.json", http.StatusFound)
	})
	mux.HandleFunc("/only304", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNotModified) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for path, want := range map[string]string{
		// a 304 to a request without If-None-Match: no card came
		"/only304": "answered 304 Not Modified to a request without If-None-Match: no card came",
		"/html":    `content type is not JSON: Content-Type "text/html"`,
		"/big":     "card larger than 65536 bytes",
		"/missing": "answered 404 Not Found",
		"/loop":    "more than 3 redirects",
		"/away":    "redirected off https (http only on loopback)",
	} {
		_, err := (&Fetcher{}).Fetch(context.Background(), srv.URL+path, "")
		if !errors.Is(err, ErrFetch) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want ErrFetch with %q", path, err, want)
		}
	}
	if _, err := (&Fetcher{}).Fetch(context.Background(), "http://agents.example.com/.well-known/agent-card.json", ""); !errors.Is(err, ErrFetch) {
		t.Errorf("plain http off loopback: %v", err)
	}
}

func TestCardURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"https://agent.example.com", "https://agent.example.com/.well-known/agent-card.json"},
		{"https://agent.example.com/", "https://agent.example.com/.well-known/agent-card.json"},
		{"https://agent.example.com:8443", "https://agent.example.com:8443/.well-known/agent-card.json"},
		{"HTTPS://Agent.Example.com/", "https://Agent.Example.com/.well-known/agent-card.json"},
		{"http://localhost:8080", "http://localhost:8080/.well-known/agent-card.json"},
		{"http://127.0.0.1:9000/", "http://127.0.0.1:9000/.well-known/agent-card.json"},
		{"http://[::1]:9000", "http://[::1]:9000/.well-known/agent-card.json"},
		// Any other path is the card's own URL, kept byte for byte.
		{"https://agent.example.com/.well-known/agent-card.json", "https://agent.example.com/.well-known/agent-card.json"},
		{"https://agent.example.com/.well-known/agent.json", "https://agent.example.com/.well-known/agent.json"},
		{"https://cards.example.com/agents/fraud%20review.json?v=2", "https://cards.example.com/agents/fraud%20review.json?v=2"},
		{"http://localhost:8080/card", "http://localhost:8080/card"},
	} {
		got, err := CardURL(c.in)
		if err != nil || got != c.want {
			t.Errorf("CardURL(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
		if err == nil && fetchable(got) != nil {
			t.Errorf("CardURL(%q) = %q, which Fetch refuses: %v", c.in, got, fetchable(got))
		}
	}
}

func TestCardURLRefusals(t *testing.T) {
	for in, want := range map[string]string{
		"agent.example.com":                        `agentcard: card URL "agent.example.com": not an absolute URL (want https://host[:port][/path])`,
		"/.well-known/agent-card.json":             `agentcard: card URL "/.well-known/agent-card.json": not an absolute URL (want https://host[:port][/path])`,
		"//agent.example.com/card.json":            `agentcard: card URL "//agent.example.com/card.json": not an absolute URL (want https://host[:port][/path])`,
		"https:///card.json":                       `agentcard: card URL "https:///card.json": not an absolute URL (want https://host[:port][/path])`,
		"":                                         `agentcard: card URL "": not an absolute URL (want https://host[:port][/path])`,
		"http://agent.example.com":                 `agentcard: card URL "http://agent.example.com": scheme must be https (http only on a loopback host)`,
		"http://10.0.0.7/card.json":                `agentcard: card URL "http://10.0.0.7/card.json": scheme must be https (http only on a loopback host)`,
		"nats://127.0.0.1:4222":                    `agentcard: card URL "nats://127.0.0.1:4222": scheme must be https (http only on a loopback host)`,
		"https://ops:s3cret@agent.example.com":     `agentcard: card URL "https://ops:xxxxx@agent.example.com": must not carry user info`,
		"https://agent.example.com/card.json#v1":   `agentcard: card URL "https://agent.example.com/card.json#v1": must not have a fragment`,
		"https://agent.example.com#":               `agentcard: card URL "https://agent.example.com": must not have a fragment`,
		"https://agent.example.com/?tenant=a":      `agentcard: card URL "https://agent.example.com/?tenant=a": an origin takes no query (give the card's full URL instead)`,
		"https://agent.example.com?":               `agentcard: card URL "https://agent.example.com?": an origin takes no query (give the card's full URL instead)`,
		"https://ops:s3cret@agent.example.com/%zz": `agentcard: card URL "": not a URL: invalid URL escape "%zz"`,
	} {
		got, err := CardURL(in)
		var ce *CardURLError
		if !errors.As(err, &ce) || err.Error() != want {
			t.Errorf("CardURL(%q) = %q, %v; want %s", in, got, err, want)
		}
	}
}

// A card host may redirect a2ad to another https URL, never down to http,
// and to a loopback host only when the card's own URL is on one: otherwise
// a remote card host could point a2ad at services listening on loopback.
func TestFetchRedirectsStayOffLoopbackAndHTTPS(t *testing.T) {
	card := a2ad.FraudReviewCard()
	serve := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(card)
	}
	plain := httptest.NewServer(http.HandlerFunc(serve)) // http, on loopback
	defer plain.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("/card", serve)
	secure := httptest.NewTLSServer(mux) // its certificate names example.com and 127.0.0.1
	defer secure.Close()
	to := func(target string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, target, http.StatusFound) }
	}
	mux.Handle("/to-loopback-http", to(plain.URL+"/card"))
	mux.Handle("/to-loopback-https", to(secure.URL+"/card"))
	mux.Handle("/to-localhost-http", to(strings.Replace(plain.URL, "127.0.0.1", "localhost", 1)+"/card"))
	mux.Handle("/to-remote-https", to("https://example.com/card"))
	// example.com:443 is the TLS server; every other address is dialled.
	transport := secure.Client().Transport.(*http.Transport).Clone()
	transport.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr == "example.com:443" {
			addr = secure.Listener.Addr().String()
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	plainRedirects := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, strings.Replace(plain.URL, "127.0.0.1", "localhost", 1)+"/card", http.StatusFound)
	}))
	defer plainRedirects.Close()
	for _, c := range []struct {
		url, refusal string // refusal "" when the card is fetched
	}{
		{"https://example.com/to-remote-https", ""},
		{"https://example.com/to-loopback-http", "redirected from https to http"},
		{"https://example.com/to-localhost-http", "redirected from https to http"},
		{"https://example.com/to-loopback-https", "redirected to a loopback host"},
		{secure.URL + "/to-loopback-http", "redirected from https to http"},
		{secure.URL + "/to-loopback-https", ""},
		{plainRedirects.URL + "/", ""},
	} {
		res, err := (&Fetcher{Transport: transport}).Fetch(t.Context(), c.url, "")
		switch {
		case c.refusal == "" && (err != nil || string(res.Card) != string(card)):
			t.Errorf("%s: %v, want the card", c.url, err)
		case c.refusal != "" && (!errors.Is(err, ErrFetch) || !strings.Contains(err.Error(), c.refusal)):
			t.Errorf("%s: %v, want ErrFetch: %s", c.url, err, c.refusal)
		}
	}
}

// Every spelling of this machine counts as loopback for a redirect.
func TestRedirectToThisHostIsRefused(t *testing.T) {
	from, _ := http.NewRequest(http.MethodGet, "https://cards.example.com/card.json", nil)
	for _, target := range []string{
		"https://localhost/card", "https://LOCALHOST./card", "https://agent.localhost/card", "https://127.0.0.2/card",
		"https://[::1]/card", "https://0.0.0.0/card", "https://[::]/card", "https://[::ffff:127.0.0.1]/card",
	} {
		to, _ := http.NewRequest(http.MethodGet, target, nil)
		if err := checkRedirect(to, []*http.Request{from}); err == nil || !strings.Contains(err.Error(), "redirected to a loopback host") {
			t.Errorf("redirect to %s: %v", target, err)
		}
	}
	to, _ := http.NewRequest(http.MethodGet, "https://cdn.example.net/card", nil)
	if err := checkRedirect(to, []*http.Request{from}); err != nil {
		t.Errorf("redirect to another https host: %v", err)
	}
}
