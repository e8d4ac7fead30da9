// Package tracing carries OpenTelemetry trace context through a2ad: a host's
// W3C traceparent arrives in an MCP request's _meta (the MCP convention for
// trace context), a2ad's own span becomes its child, and the agent receives
// that span's traceparent in the `traceparent` header of every NATS request
// of the task (docs/nats-binding.md §4). Spans are exported with OTLP/HTTP
// when an endpoint is configured, else only created, so that trace ids and
// parent span ids still flow to agents.
package tracing

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Config configures tracing (the YAML `tracing` section).
type Config struct {
	// OTLPEndpoint is the base URL of an OTLP/HTTP collector, e.g.
	// http://otel-collector:4318 (spans go to <endpoint>/v1/traces). Empty:
	// spans are created and propagated but not exported.
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	// SampleRatio is the fraction of traces a2ad starts itself that are
	// sampled, 0 to 1 (default 1). A host's sampled flag is always obeyed
	// (parent-based sampling).
	SampleRatio *float64 `yaml:"sample_ratio"`
	// ServiceName is the service.name resource attribute (default "a2ad").
	ServiceName string `yaml:"service_name"`
}

// Provider is a2ad's tracer provider; Shutdown flushes it.
type Provider struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
}

// New builds the provider cfg describes. An OTLPEndpoint that is not an
// http(s) URL is an error.
func New(cfg Config, version string) (*Provider, error) {
	ratio := 1.0
	if cfg.SampleRatio != nil {
		ratio = *cfg.SampleRatio
		if ratio < 0 || ratio > 1 {
			return nil, fmt.Errorf("tracing: sample_ratio %v is not between 0 and 1", ratio)
		}
	}
	name := cfg.ServiceName
	if name == "" {
		name = "a2ad"
	}
	opts := []sdktrace.TracerProviderOption{
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName(name), semconv.ServiceVersion(version))),
	}
	if cfg.OTLPEndpoint != "" {
		u, err := url.Parse(cfg.OTLPEndpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("tracing: otlp_endpoint %q is not an http(s) URL", cfg.OTLPEndpoint)
		}
		eo := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(u.JoinPath("v1", "traces").String())}
		exp, err := otlptracehttp.New(context.Background(), eo...)
		if err != nil {
			return nil, fmt.Errorf("tracing: %w", err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	return &Provider{tp: tp, tracer: tp.Tracer("github.com/a2ad/a2ad")}, nil
}

// Shutdown exports what is buffered and stops the provider (at most 5 s).
func (p *Provider) Shutdown() {
	if p == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.tp.Shutdown(ctx)
}

// Tracer is a2ad's tracer (a no-op one for a nil Provider).
func (p *Provider) Tracer() trace.Tracer {
	if p == nil {
		return noop.NewTracerProvider().Tracer("")
	}
	return p.tracer
}

// propagator is W3C Trace Context (traceparent, tracestate).
var propagator = propagation.TraceContext{}

// metaCarrier reads and writes trace context in an MCP _meta object.
type metaCarrier map[string]any

func (m metaCarrier) Get(key string) string {
	s, _ := m[key].(string)
	return s
}
func (m metaCarrier) Set(key, value string) { m[key] = value }
func (m metaCarrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// FromMeta returns ctx carrying the remote span context named by an MCP
// _meta object's "traceparent" (and "tracestate"); ctx unchanged when there
// is none or it is malformed (W3C Trace Context §3.2: an invalid
// traceparent is ignored).
func FromMeta(ctx context.Context, meta map[string]any) context.Context {
	if len(meta) == 0 {
		return ctx
	}
	return propagator.Extract(ctx, metaCarrier(meta))
}

// Traceparent is the W3C traceparent of ctx's span ("" without a valid
// span context): what a2ad sends agents.
func Traceparent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c["traceparent"]
}
