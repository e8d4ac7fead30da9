// Package daemon assembles a running a2ad from its parts: the NATS
// connection (embedded server or external), the stores, the tracker, the
// registration responder, the MCP edge and the HTTP listener. `a2ad serve`,
// `a2ad demo` and the end-to-end tests all start it through [Start].
package daemon

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/artifact"
	"github.com/a2ad/a2ad/internal/audit"
	"github.com/a2ad/a2ad/internal/embedded"
	"github.com/a2ad/a2ad/internal/httpbind"
	"github.com/a2ad/a2ad/internal/tracing"
	"github.com/a2ad/a2ad/mcpedge"
	"github.com/a2ad/a2ad/task"
	"go.yaml.in/yaml/v3"
)

// Config is a2ad's configuration. The YAML file (--config) fills it; flags
// override it. Zero values take the defaults in [Config.withDefaults].
type Config struct {
	// DataDir holds the embedded NATS JetStream state (default ./a2ad-data).
	DataDir string `yaml:"data_dir"`
	// HTTPAddr serves MCP at /mcp, the admin API at /v1/ and /healthz
	// (default 127.0.0.1:8080; port 0 picks a free one).
	HTTPAddr string `yaml:"http_addr"`
	// PublicURL is the base URL hosts reach a2ad at when it differs from
	// the listener's (behind a proxy or a Kubernetes Service), e.g.
	// https://a2ad.example.com: the default token audience is PublicURL +
	// "/mcp" and the protected resource metadata (RFC 9728) names it.
	// Default: http://<http_addr>, or https://<http_addr> with tls.
	PublicURL string `yaml:"public_url"`
	// NATSListen is the embedded server's client address (default
	// 127.0.0.1:4222; port 0 or -1 picks a free one).
	NATSListen string `yaml:"nats_listen"`
	// CertificateCheckSeconds is how often a2ad looks at the certificate,
	// key and CA files of tls and nats_tls and, when any changed, reloads
	// them as SIGHUP does: certificates that cert-manager, an ACME client
	// or an operator's script renew in place are served without a signal.
	// Default 60; -1: only on SIGHUP.
	CertificateCheckSeconds int `yaml:"certificate_check_seconds"`
	// Insecure lets a2ad listen in plain text on an address other than
	// loopback (HTTP without tls, the embedded NATS server without
	// nats_tls), where bearer tokens and agent credentials would cross
	// the network readable. Only for a network an operator has secured
	// otherwise (a service mesh that terminates TLS, say). Default false:
	// a2ad refuses to start so.
	Insecure bool `yaml:"insecure"`
	// TLS serves the HTTP listener (MCP, admin API, metrics, health, the
	// protected resource metadata) over TLS; empty: plain text, which
	// a2ad accepts only on loopback unless Insecure.
	TLS TLSConfig `yaml:"tls"`
	// HTTPAllowedOrigins are the web origins (scheme://host[:port], RFC
	// 6454), besides a2ad's own (public_url, the listener's URL), whose
	// pages may call /mcp and /v1/: a request with any other Origin header
	// is refused with 403 origin_not_allowed, whatever its token (MCP
	// transport, Streamable HTTP, "Security Warning"). Requests without
	// Origin (programs, not browsers) are not affected. Default: none.
	HTTPAllowedOrigins []string `yaml:"http_allowed_origins"`
	// NATSURL connects to an existing NATS server instead; nothing is embedded.
	NATSURL string `yaml:"nats_url"`
	// NATSTLS is TLS on NATS: the embedded server's certificate, or how
	// a2ad verifies nats_url's server and proves itself to it. Empty:
	// plain text, loopback only unless insecure.
	NATSTLS NATSTLSConfig `yaml:"nats_tls"`
	// NATSLimits bound each connection to the embedded server.
	NATSLimits NATSLimits `yaml:"nats_limits"`
	// NATSAuthCallout makes a2ad the auth callout service of the external
	// NATS server (nats_url): agents then connect with their a2ad
	// credential alone, as to the embedded server, and a revoked one is
	// refused at connect and cut off (docs/operations.md, Agent
	// credentials on an external NATS). Empty: agents connect with NATS
	// users of their own.
	NATSAuthCallout NATSAuthCalloutConfig `yaml:"nats_auth_callout"`
	// JetStreamMaxMemory and JetStreamMaxStore limit the embedded server, in
	// bytes (default 256 MiB and 4 GiB).
	JetStreamMaxMemory int64 `yaml:"jetstream_max_memory"`
	JetStreamMaxStore  int64 `yaml:"jetstream_max_store"`
	// Replicas of the KV buckets and the events stream (default 1).
	Replicas int `yaml:"replicas"`
	// SchemasDir holds the host schemas (*.json, draft-07); empty means the
	// built-in ones (testdata/schemas: risk_assessment, refund_evidence).
	SchemasDir string `yaml:"schemas_dir"`
	// Agents names the agents hosts may delegate to, their tenants and trust.
	Agents []AgentConfig `yaml:"agents"`
	// Principal is the caller of stdio sessions (HTTP callers are the
	// principals of their verified tokens).
	Principal PrincipalConfig `yaml:"principal"`
	// Principals are named principals for `a2ad mcp --principal NAME`,
	// which mints each host window a short-lived token for one with the
	// data directory's development key (docs/operations.md, "MCP hosts
	// over stdio"); the daemon itself authorizes HTTP calls by the
	// tokens, not by this list. Tenant defaults to "default", Scopes to
	// [a2a:read, a2a:delegate], Subject to the name.
	Principals map[string]PrincipalConfig `yaml:"principals"`
	// MaxDeadlineSeconds is the longest budget a host may ask for (default 86400).
	MaxDeadlineSeconds int `yaml:"max_deadline_seconds"`
	// MaxSkillToolsPerAgent bounds the per-skill MCP tools of one agent:
	// a card's skills beyond, in card order, get no tool (a warning in the
	// log, a tool_note in agents_list) and stay delegable with delegate.
	// 0: mcpedge.DefaultMaxSkillToolsPerAgent (16).
	MaxSkillToolsPerAgent int `yaml:"max_skill_tools_per_agent"`
	// Auth configures the verification of hosts' bearer tokens on HTTP
	// (every HTTP caller needs one). Empty: the development key in DataDir.
	Auth mcpedge.AuthConfig `yaml:"auth"`
	// Log configures a2ad's own log on stderr (not the audit trail).
	Log LogConfig `yaml:"log"`
	// Audit configures the audit trail's JetStream stream (A2AD_AUDIT).
	Audit audit.Config `yaml:"audit"`
	// Retention configures how long ended tasks stay in the task bucket
	// (the audit trail's own age is Audit.MaxAge).
	Retention RetentionConfig `yaml:"retention"`
	// Tracing configures OpenTelemetry tracing.
	Tracing tracing.Config `yaml:"tracing"`
	// Liveness configures the probes of agents' liveness
	// (docs/operations.md, "Agent liveness").
	Liveness LivenessConfig `yaml:"liveness"`
	// AgentLimits bound, per agent, what one agent can make a2ad store and
	// do (docs/isolation.md); an agent's own Limits override them field by
	// field. Zero fields take [DefaultAgentLimits].
	AgentLimits AgentLimits `yaml:"agent_limits"`
	// Storage configures the JetStream storage a2ad keeps free.
	Storage StorageConfig `yaml:"storage"`
	// HTTPLimits bound the HTTP listener: connections, timeouts, header
	// and body sizes. Zero fields take [DefaultHTTPLimits].
	HTTPLimits HTTPLimits `yaml:"http_limits"`
	// RateLimits bound each principal's and each tenant's HTTP requests
	// (MCP and admin API), reads and writes apart; not applied on stdio,
	// whose one principal is the operator's own. Zero fields take
	// [mcpedge.DefaultRateLimits].
	RateLimits mcpedge.RateLimits `yaml:"rate_limits"`
	// ConformanceTools adds the MCP conformance suite's input-request test
	// tools and prompt (test_input_required_result_*) to a2ad's MCP server, for
	// .ci/conformance only (flag --conformance-tools; no configuration
	// key: never for a deployment).
	ConformanceTools bool `yaml:"-"`
	// file is the configuration file's top mapping when the Config came
	// from LoadConfig (nil otherwise): the lines of later faults.
	file *yaml.Node
}

// AgentLimits bound what one agent can make a2ad store and do, so that no
// agent can slow, block or crowd out another's tasks (docs/isolation.md).
// Each agent's events go to a JetStream stream of its own whose limits are
// these; over them the agent's own publishes are refused by JetStream, and
// it retries.
type AgentLimits struct {
	// EventsPerSecond and EventsBurst are the rate (token bucket,
	// golang.org/x/time/rate) at which a2ad applies one agent's events;
	// faster ones wait in the agent's stream. Default 1000 and 2000.
	EventsPerSecond float64 `yaml:"events_per_second"`
	EventsBurst     int     `yaml:"events_burst"`
	// MaxEventBytes is the largest event, body and headers, in bytes
	// (the stream's max_msg_size). Default 1048576 (1 MiB).
	MaxEventBytes int32 `yaml:"max_event_bytes"`
	// MaxPendingEvents and MaxPendingBytes bound the agent's events that
	// wait to be applied (the stream's max_msgs and max_bytes; the bytes
	// are reserved in the JetStream store). Default 10000 and 67108864
	// (64 MiB).
	MaxPendingEvents int64 `yaml:"max_pending_events"`
	MaxPendingBytes  int64 `yaml:"max_pending_bytes"`
	// RegistrationsPerMinute is how many registrations of the agent (the
	// one its credential proves) a2ad handles per minute, with a burst of
	// as many, in each instance; beyond, it answers rate_limited without
	// reading the card (docs/nats-binding.md §9). Config.AgentLimits'
	// value is also the one budget that registrations without a verified
	// credential share. Negative is a configuration error. Default 12.
	RegistrationsPerMinute int `yaml:"registrations_per_minute"`
	// MaxPublishesPerSecond bounds the messages the agent's connections
	// together publish per second on the embedded server — events,
	// replies and registrations, stored or refused alike, since each
	// costs the server CPU: an agent over it for a second has its
	// connections closed and is refused for 30 s, doubling for repeated
	// floods up to 10 minutes (embedded.Bars). Default 10000. An external
	// NATS server has its own means (accounts, network limits).
	MaxPublishesPerSecond float64 `yaml:"max_publishes_per_second"`
	// MaxConnections bounds the agent's connections to the embedded
	// server at once (replicas of one agent each hold one); beyond, the
	// newest are closed and more refused. Default 16.
	MaxConnections int `yaml:"max_connections"`
	// RecordBytesPerSecond bounds the bytes of task records a2ad writes a
	// second applying the agent's events (a small event can rewrite a
	// large record); beyond, its next events wait. Default 16777216 (16
	// MiB).
	RecordBytesPerSecond int64 `yaml:"record_bytes_per_second"`
	// MaxOpenRecordBytes bounds what the agent's open tasks' records take,
	// as far as its events grew each past 8 KiB; beyond, an event that
	// would grow one further is not applied, only counted (record_full).
	// Default 134217728 (128 MiB).
	MaxOpenRecordBytes int64 `yaml:"max_open_record_bytes"`
	// MaxSubscriptions bounds the agent's subscriptions on the embedded
	// server, over all its connections (an agent needs a few on each: its
	// RPC subject and its inbox); each one matching a subject a2ad
	// publishes to is one more copy of every such message. Over it, the
	// agent's connections are closed and it is refused for a while.
	// Default 256.
	MaxSubscriptions int `yaml:"max_subscriptions"`
}

// DefaultAgentLimits are the limits of an agent that neither agent_limits
// nor its own limits set.
var DefaultAgentLimits = AgentLimits{
	EventsPerSecond: task.DefaultEventLimits.PerSecond, EventsBurst: task.DefaultEventLimits.Burst,
	MaxEventBytes: task.DefaultEventLimits.MaxEventBytes, MaxPendingEvents: task.DefaultEventLimits.MaxPending,
	MaxPendingBytes: task.DefaultEventLimits.MaxPendingBytes, RegistrationsPerMinute: 12, MaxPublishesPerSecond: 10_000,
	MaxConnections: 16, MaxSubscriptions: 256,
	RecordBytesPerSecond: task.DefaultEventLimits.RecordBytesPerSecond, MaxOpenRecordBytes: task.DefaultEventLimits.MaxOpenRecordBytes,
}

// events are the limits of l that bound the agent's events.
func (l AgentLimits) events() task.EventLimits {
	return task.EventLimits{PerSecond: l.EventsPerSecond, Burst: l.EventsBurst, MaxEventBytes: l.MaxEventBytes,
		MaxPending: l.MaxPendingEvents, MaxPendingBytes: l.MaxPendingBytes,
		RecordBytesPerSecond: l.RecordBytesPerSecond, MaxOpenRecordBytes: l.MaxOpenRecordBytes}
}

// Or returns l with each zero field taken from d.
func (l AgentLimits) Or(d AgentLimits) AgentLimits {
	l.EventsPerSecond = cmp.Or(l.EventsPerSecond, d.EventsPerSecond)
	l.EventsBurst = cmp.Or(l.EventsBurst, d.EventsBurst)
	l.MaxEventBytes = cmp.Or(l.MaxEventBytes, d.MaxEventBytes)
	l.MaxPendingEvents = cmp.Or(l.MaxPendingEvents, d.MaxPendingEvents)
	l.MaxPendingBytes = cmp.Or(l.MaxPendingBytes, d.MaxPendingBytes)
	l.RegistrationsPerMinute = cmp.Or(l.RegistrationsPerMinute, d.RegistrationsPerMinute)
	l.MaxPublishesPerSecond = cmp.Or(l.MaxPublishesPerSecond, d.MaxPublishesPerSecond)
	l.MaxConnections = cmp.Or(l.MaxConnections, d.MaxConnections)
	l.MaxSubscriptions = cmp.Or(l.MaxSubscriptions, d.MaxSubscriptions)
	l.RecordBytesPerSecond = cmp.Or(l.RecordBytesPerSecond, d.RecordBytesPerSecond)
	l.MaxOpenRecordBytes = cmp.Or(l.MaxOpenRecordBytes, d.MaxOpenRecordBytes)
	return l
}

// Check refuses limits no agent could work under, every one (joined with
// errors.Join), naming each field as
// the configuration spells it under prefix ("agent_limits",
// "agents[fraud-review].limits").
func (l AgentLimits) Check(prefix string) error {
	var errs []error
	if l.EventsPerSecond <= 0 {
		errs = append(errs, fmt.Errorf("config: %s.events_per_second %v: want more than 0", prefix, l.EventsPerSecond))
	}
	if l.EventsBurst < 1 {
		errs = append(errs, fmt.Errorf("config: %s.events_burst %d: want at least 1", prefix, l.EventsBurst))
	}
	if l.MaxEventBytes < 1024 || l.MaxEventBytes > 1<<20 {
		errs = append(errs, fmt.Errorf("config: %s.max_event_bytes %d: want 1024 to 1048576 (the NATS server's max_payload)", prefix, l.MaxEventBytes))
	}
	if l.MaxPendingEvents < 1 {
		errs = append(errs, fmt.Errorf("config: %s.max_pending_events %d: want at least 1", prefix, l.MaxPendingEvents))
	}
	if l.MaxPendingBytes < int64(l.MaxEventBytes) {
		errs = append(errs, fmt.Errorf("config: %s.max_pending_bytes %d: want at least max_event_bytes (%d)", prefix, l.MaxPendingBytes, l.MaxEventBytes))
	}
	if l.RegistrationsPerMinute < 1 {
		errs = append(errs, fmt.Errorf("config: %s.registrations_per_minute %d: want at least 1", prefix, l.RegistrationsPerMinute))
	}
	if l.MaxPublishesPerSecond < l.EventsPerSecond {
		errs = append(errs, fmt.Errorf("config: %s.max_publishes_per_second %v: want at least events_per_second (%v)", prefix, l.MaxPublishesPerSecond, l.EventsPerSecond))
	}
	if l.RecordBytesPerSecond < 1<<20 {
		errs = append(errs, fmt.Errorf("config: %s.record_bytes_per_second %d: want at least 1048576 (1 MiB)", prefix, l.RecordBytesPerSecond))
	}
	if l.MaxOpenRecordBytes < 1<<20 {
		errs = append(errs, fmt.Errorf("config: %s.max_open_record_bytes %d: want at least 1048576 (1 MiB)", prefix, l.MaxOpenRecordBytes))
	}
	if l.MaxConnections < 1 {
		errs = append(errs, fmt.Errorf("config: %s.max_connections %d: want at least 1", prefix, l.MaxConnections))
	}
	if l.MaxSubscriptions < 16 {
		errs = append(errs, fmt.Errorf("config: %s.max_subscriptions %d: want at least 16", prefix, l.MaxSubscriptions))
	}
	return errors.Join(errs...)
}

// checkLimits refuses agent limits, a storage reserve and retention
// settings a2ad cannot run with: every fault, joined with errors.Join.
func (c Config) checkLimits() error {
	var errs []error
	if c.MaxSkillToolsPerAgent < 0 {
		errs = append(errs, fmt.Errorf("config: max_skill_tools_per_agent %d: want 0 (the default, %d) or more", c.MaxSkillToolsPerAgent, mcpedge.DefaultMaxSkillToolsPerAgent))
	}
	if c.Storage.ReserveBytes < 0 {
		errs = append(errs, fmt.Errorf("config: storage.reserve_bytes %d: want 0 (the default) or more", c.Storage.ReserveBytes))
	}
	if c.Storage.CapacityBytes < 0 {
		errs = append(errs, fmt.Errorf("config: storage.capacity_bytes %d: want 0 (the default) or more", c.Storage.CapacityBytes))
	}
	if c.CertificateCheckSeconds < -1 {
		errs = append(errs, fmt.Errorf("config: certificate_check_seconds %d: want seconds (default %d), or -1 to reload certificates only on SIGHUP", c.CertificateCheckSeconds, DefaultCertificateCheckSeconds))
	}
	if c.Retention.RemovalsPerSecond < 0 {
		errs = append(errs, fmt.Errorf("config: retention.removals_per_second %v: want 0 (the default, %d) or more", c.Retention.RemovalsPerSecond, task.DefaultRemovalsPerSecond))
	}
	if c.Liveness.Period < 0 || c.Liveness.Timeout < 0 || (c.Liveness.Period > 0 && c.Liveness.Timeout > c.Liveness.Period) {
		errs = append(errs, fmt.Errorf("config: liveness.period %s, liveness.timeout %s: want durations such as 5s and 2s (the defaults), the timeout no longer than the period", c.Liveness.Period, c.Liveness.Timeout))
	}
	if c.Audit.MaxAge < 0 {
		errs = append(errs, fmt.Errorf("config: audit.max_age %s: want a duration such as 2160h (90 days, the default)", c.Audit.MaxAge))
	}
	if err := c.NATSLimits.check(len(c.Agents)); err != nil {
		errs = append(errs, err)
	}
	if err := c.AgentLimits.Or(DefaultAgentLimits).Check("agent_limits"); err != nil {
		errs = append(errs, err)
	}
	if err := c.HTTPLimits.Or(DefaultHTTPLimits).Check(); err != nil {
		errs = append(errs, err)
	}
	if err := c.RateLimits.Or(mcpedge.DefaultRateLimits).Check(); err != nil {
		errs = append(errs, err)
	}
	for _, a := range c.Agents {
		if err := a.Limits.Or(c.AgentLimits).Or(DefaultAgentLimits).Check("agents[" + a.ID + "].limits"); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// connectionLimits are, for each configured agent and for any other
// (agent_limits), what the embedded server holds its connections to.
func connectionLimits(c Config) func(agentID string) embedded.AgentLimits {
	def := c.AgentLimits.Or(DefaultAgentLimits)
	of := func(l AgentLimits) embedded.AgentLimits {
		return embedded.AgentLimits{PublishesPerSecond: l.MaxPublishesPerSecond, Connections: l.MaxConnections, Subscriptions: l.MaxSubscriptions}
	}
	per := map[string]embedded.AgentLimits{}
	for _, a := range c.Agents {
		per[a.ID] = of(a.Limits.Or(def))
	}
	return func(agentID string) embedded.AgentLimits {
		if l, ok := per[agentID]; ok {
			return l
		}
		return of(def)
	}
}

// StorageConfig is what a2ad keeps of the JetStream store.
type StorageConfig struct {
	// ReserveBytes is the free store a2ad keeps for the tasks it has
	// already delegated (answers, cancels, deadlines, completions): below
	// it, delegate is refused with `unavailable` and /readyz reports not
	// ready. Default 67108864 (64 MiB).
	ReserveBytes int64 `yaml:"reserve_bytes"`
	// CapacityBytes is the size of the JetStream store as a2ad counts it
	// (every replica of every stream): on an external NATS whose account
	// has no JetStream max_file limit, a2ad cannot read it, so give it
	// here — the sum of the nodes' max_file_store. Default: the embedded
	// server's jetstream_max_store, or the account's max_file.
	CapacityBytes int64 `yaml:"capacity_bytes"`
}

// DefaultCertificateCheckSeconds is Config.CertificateCheckSeconds when zero.
const DefaultCertificateCheckSeconds = 60

// CertificateFiles are the certificate, key and CA files of tls and
// nats_tls that are set, in a fixed order: what a2ad reloads.
func (c Config) CertificateFiles() []string {
	var files []string
	for _, f := range []string{c.TLS.CertFile, c.TLS.KeyFile, c.TLS.ClientCAFile, c.NATSTLS.CertFile, c.NATSTLS.KeyFile} {
		if f != "" {
			files = append(files, f)
		}
	}
	return files
}

// DefaultStorageReserve is StorageConfig.ReserveBytes when zero.
const DefaultStorageReserve = 64 << 20

// TLSConfig is the HTTP listener's TLS: TLS 1.2 or later, the certificate
// read again on SIGHUP ([Daemon.ReloadTLS]) without closing connections.
type TLSConfig struct {
	// CertFile is the server's certificate, PEM, leaf first and then the
	// intermediates (flag --tls-cert). With it, every URL a2ad names
	// (public_url's default, the default token audience, the protected
	// resource metadata) is https://.
	CertFile string `yaml:"cert_file"`
	// KeyFile is CertFile's private key, PEM (PKCS #1, PKCS #8 or SEC 1;
	// flag --tls-key).
	KeyFile string `yaml:"key_file"`
	// ClientCAFile holds the PEM certificates of the CAs whose client
	// certificates (mTLS) the admin API (/v1/) requires in addition to a
	// token with scope a2a:admin (flag --tls-client-ca); /mcp and the
	// other paths do not ask for one. A client certificate that does not
	// verify fails the handshake. Default: none, the token alone.
	ClientCAFile string `yaml:"client_ca_file"`
}

// LogConfig configures the log.
type LogConfig struct {
	// Level is debug, info (default), warn or error.
	Level string `yaml:"level"`
	// Format is text (default: logfmt-style key=value lines) or json (one
	// JSON object per line).
	Format string `yaml:"format"`
}

// NewLogger returns the slog.Logger c describes, writing to w; an unknown
// level or format is an error naming the accepted values.
func (c LogConfig) NewLogger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	switch strings.ToLower(c.Level) {
	case "", "info":
		level = slog.LevelInfo
	case "debug":
		level = slog.LevelDebug
	case "warn", "warning":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	default:
		return nil, fmt.Errorf("config: log.level %q: want debug, info, warn or error", c.Level)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(c.Format) {
	case "", "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("config: log.format %q: want text or json", c.Format)
}

// AgentConfig configures one agent.
type AgentConfig struct {
	agentcard.AgentConfig `yaml:",inline"`
	// EvidenceSchemas maps a skill id to the host schema its evidence must
	// satisfy before anything is sent.
	EvidenceSchemas map[string]string `yaml:"evidence_schemas"`
	// OutputSchemas maps a skill id ("*": every skill without its own
	// entry) to the host schemas a delegation to it may name as its
	// output_schema; a skill with no entry (and no "*") may name any.
	// Unknown names are load errors (EvidenceSchemaFaults).
	OutputSchemas map[string][]string `yaml:"output_schemas"`
	// EvidenceKeys maps a skill id ("*": every skill without its own
	// entry) to the evidence the agent may receive, as JSON pointers or
	// top-level names (brief.Allowlist); other evidence is dropped before
	// the brief is built and the host is told what was dropped. A skill
	// with no entry (and no "*") receives all evidence.
	EvidenceKeys map[string][]string `yaml:"evidence_keys"`
	// Artifacts is what the agent's artifacts may carry besides data parts
	// checked against the host schema (text, raw and url parts), and their
	// limits; zero values are the strict defaults (artifact.Policy).
	Artifacts artifact.Policy `yaml:"artifacts"`
	// Limits override Config.AgentLimits for this agent, field by field.
	Limits AgentLimits `yaml:"limits"`
	// HTTP configures a2ad's HTTP binding for an agent it reaches over
	// JSON-RPC or HTTP+JSON (docs/http-binding.md §3): how a2ad
	// authenticates to it (http.auth: bearer_token_file, or oauth2 client
	// credentials). Checked at load: see agentHTTPFaults.
	HTTP httpbind.AgentConfig `yaml:"http"`
}

// PrincipalConfig is a configured principal.
type PrincipalConfig struct {
	Subject string   `yaml:"subject"`
	Tenant  string   `yaml:"tenant"`
	Scopes  []string `yaml:"scopes"`
}

func (c Config) withDefaults() Config {
	c.Agents = slices.Clone(c.Agents) // Start normalises entries: never the caller's
	if c.DataDir == "" {
		c.DataDir = "./a2ad-data"
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = "127.0.0.1:8080"
	}
	if c.NATSListen == "" {
		c.NATSListen = "127.0.0.1:4222"
	}
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	if c.Principal.Tenant == "" {
		c.Principal.Tenant = "default"
	}
	if c.Principal.Subject == "" {
		c.Principal.Subject = "local"
	}
	if len(c.Principal.Scopes) == 0 {
		c.Principal.Scopes = []string{"a2a:read", "a2a:delegate"}
	}
	return c
}

// LoadConfig reads a YAML configuration file strictly and names every
// fault at once, in one [*FileError] of [*KeyError]s in the file's order,
// each with its key path and line and what is wanted: unknown keys (with
// the known key most likely meant, "did you mean http_addr?"), values of
// the wrong type (`line 176: max_deadline_seconds: want a whole number of
// seconds, got "ten"`), values a2ad refuses (log.level, log.format,
// tracing.sample_ratio, auth.algorithms, http_allowed_origins, the
// limits, an empty auth.audience, unknown scopes in principal.scopes),
// and a second YAML document (`---`), which a2ad would otherwise ignore.
// The Config it returns beside a *FileError holds what did decode, for
// [EvidenceSchemaFaults]. An empty file, or one of comments only, is an
// empty configuration: every default.
func LoadConfig(path string) (Config, error) {
	var c Config
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	root, errs, err := readDocument(b)
	if err != nil {
		return c, fmt.Errorf("config %s: %w", path, err)
	}
	errs = append(errs, checkKeys(root)...)
	if root != nil {
		// Type faults are named above, with their keys; the decoder
		// skips those values and decodes the rest.
		if err := root.Decode(&c); err != nil && len(errs) == 0 {
			errs = append(errs, fmt.Errorf("cannot read the configuration: %s", strings.TrimPrefix(err.Error(), "yaml: ")))
		}
		c.file = root
	}
	for _, f := range c.valueFaults() {
		if k, ok := f.(*KeyError); ok && k.Line == 0 {
			k.Line = lineOf(root, k.Key)
		}
		errs = append(errs, f)
	}
	if len(errs) > 0 {
		fe := &FileError{Path: path}
		fe.Add(errs...)
		return c, fe
	}
	return c, nil
}

// FileError is every fault found in one configuration file.
type FileError struct {
	Path string
	Errs []error // each a [*KeyError], in the file's order
}

func (e *FileError) Error() string {
	msgs := make([]string, len(e.Errs))
	for i, err := range e.Errs {
		msgs[i] = err.Error()
	}
	return "config " + e.Path + ": " + strings.Join(msgs, "; ")
}

func (e *FileError) Unwrap() []error { return e.Errs }
