package tracing

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
)

var traceparentForm = regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$`)

func TestSpansContinueTheHostsTrace(t *testing.T) {
	p, err := New(Config{}, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown()
	const host = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := FromMeta(context.Background(), map[string]any{"traceparent": host, "tracestate": "vendor=1"})
	if got := Traceparent(ctx); got != host {
		t.Fatalf("extracted %q, want %q", got, host)
	}
	ctx, span := p.Tracer().Start(ctx, "tools/call delegate")
	defer span.End()
	got := Traceparent(ctx)
	if !traceparentForm.MatchString(got) || got[3:35] != host[3:35] || got[36:52] == host[36:52] || got[53:] != "01" {
		t.Errorf("a2ad's span %q: want trace %s, its own span id, sampled", got, host[3:35])
	}
	// A host that did not sample: neither does a2ad.
	ctx = FromMeta(context.Background(), map[string]any{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"})
	ctx, span2 := p.Tracer().Start(ctx, "x")
	defer span2.End()
	if got := Traceparent(ctx); got[53:] != "00" {
		t.Errorf("unsampled host trace became %q", got)
	}
}

func TestMalformedTraceContextIsIgnored(t *testing.T) {
	for _, tp := range []any{"", "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", 42, nil} {
		if got := Traceparent(FromMeta(context.Background(), map[string]any{"traceparent": tp})); got != "" {
			t.Errorf("traceparent %v gave %q, want none", tp, got)
		}
	}
}

func TestConfigIsChecked(t *testing.T) {
	bad := -0.5
	if _, err := New(Config{SampleRatio: &bad}, "t"); err == nil || err.Error() != "tracing: sample_ratio -0.5 is not between 0 and 1" {
		t.Errorf("sample_ratio -0.5: %v", err)
	}
	if _, err := New(Config{OTLPEndpoint: "collector:4318"}, "t"); err == nil || err.Error() != `tracing: otlp_endpoint "collector:4318" is not an http(s) URL` {
		t.Errorf("otlp_endpoint without scheme: %v", err)
	}
	p, err := New(Config{OTLPEndpoint: "http://127.0.0.1:1"}, "t")
	if err != nil {
		t.Fatal(err)
	}
	p.Shutdown() // an unreachable collector does not hold the shutdown beyond its bound
}

// FuzzTraceContext: whatever a host puts in _meta, a2ad either ignores it
// or continues a well-formed trace; it never panics.
func FuzzTraceContext(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "vendor=1")
	f.Add("garbage", "")
	f.Add("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-extra", "a=1,b=2,=,,")
	f.Fuzz(func(t *testing.T, tp, ts string) {
		got := Traceparent(FromMeta(context.Background(), map[string]any{"traceparent": tp, "tracestate": ts}))
		if got != "" && !traceparentForm.MatchString(got) {
			t.Fatalf("traceparent %q, tracestate %q gave %q", tp, ts, got)
		}
	})
}

func TestSpansAreExportedWithOTLP(t *testing.T) {
	got := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- r.Method + " " + r.URL.Path + " " + r.Header.Get("Content-Type") + " " + strconv.FormatBool(bytes.Contains(b, []byte("tools/call delegate")))
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	p, err := New(Config{OTLPEndpoint: srv.URL, ServiceName: "a2ad-test"}, "t")
	if err != nil {
		t.Fatal(err)
	}
	_, span := p.Tracer().Start(context.Background(), "tools/call delegate")
	span.End()
	p.Shutdown() // flushes the batch
	select {
	case req := <-got:
		if req != "POST /v1/traces application/x-protobuf true" {
			t.Errorf("collector got %q", req)
		}
	default:
		t.Fatal("no span reached the collector")
	}
}
