package agentcard

import (
	"context"
	"errors"
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
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for path, want := range map[string]string{
		"/html":    `content type "text/html" is not JSON`,
		"/big":     "card larger than 65536 bytes",
		"/missing": "answered 404 Not Found",
		"/loop":    "more than 3 redirects",
		"/away":    "cards are fetched over https (http only on loopback)",
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
