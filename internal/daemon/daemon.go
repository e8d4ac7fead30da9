package daemon

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/a2ad/a2ad"
	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/artifact"
	"github.com/a2ad/a2ad/brief"
	"github.com/a2ad/a2ad/internal/admin"
	"github.com/a2ad/a2ad/internal/agentcred"
	"github.com/a2ad/a2ad/internal/audit"
	"github.com/a2ad/a2ad/internal/broker"
	"github.com/a2ad/a2ad/internal/embedded"
	"github.com/a2ad/a2ad/internal/httpbind"
	"github.com/a2ad/a2ad/internal/jsretry"
	"github.com/a2ad/a2ad/internal/metrics"
	"github.com/a2ad/a2ad/internal/natsauth"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/a2ad/a2ad/internal/tracing"
	"github.com/a2ad/a2ad/internal/version"
	"github.com/a2ad/a2ad/mcpedge"
	"github.com/a2ad/a2ad/task"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// Daemon is a running a2ad.
type Daemon struct {
	Config  Config
	Service *broker.Service
	MCP     *mcp.Server
	// NATSURL is where agents connect (the embedded server's client URL, or
	// the configured external one).
	NATSURL string
	// HTTPURL is the base URL of the HTTP listener ("" in stdio mode).
	HTTPURL string
	// Auth verifies hosts' tokens on HTTP (nil in stdio mode).
	Auth *mcpedge.Authenticator
	// AgentKeys mint and verify agent credentials (shared by every
	// instance through the a2ad_secrets bucket).
	AgentKeys *agentcred.Keys
	// Metrics are served at /metrics.
	Metrics *metrics.Metrics
	// Audit is the audit trail's writer.
	Audit *audit.Log

	log     *slog.Logger
	obs     *observer
	storage *storageMonitor
	bars    embedded.Bars // agents the publish guard disconnected
	// sessions are the embedded server's agent connections' credentials;
	// revocations the revoked ones (revoke.go).
	sessions      embedded.Sessions
	revocations   agentcred.Revocations
	revocationsKV jetstream.KeyValue
	// callout is the auth callout subscription on an external NATS
	// (nats_auth_callout); systemNC and kicker, with system_url, close
	// revoked credentials' connections there.
	callout  *nats.Subscription
	systemNC *nats.Conn
	kicker   *natsauth.Kicker
	// registrations rate-limit registrations per agent.
	registrations *registrationLimits
	// aggregate bounds the records and log lines about one agent's
	// registrations and card fetches.
	aggregate   *aggregator
	registering *nats.Subscription
	// unknownCredentials paces the verification of registration
	// credentials a2ad has not seen verify before.
	unknownCredentials *rate.Limiter
	tracer             *tracing.Provider
	ns                 *server.Server
	natsCert           *natsCertificate               // the embedded server's, nil without nats_tls
	keys               atomic.Pointer[agentcred.Keys] // for the embedded server's auth, set once KV is up
	lock               *os.File
	nc                 *nats.Conn
	http               *http.Server
	tls                *httpTLS // nil: plain text
	cancel             context.CancelFunc
	httpb              *httpBinding    // the HTTP binding's clients and follower
	runCtx             context.Context // ends with Stop: for work a request starts that outlives it
	wg                 sync.WaitGroup
	once               sync.Once
}

// Start brings a2ad up. With serveHTTP false (stdio mode) no HTTP listener is
// opened. Stop releases everything.
func Start(ctx context.Context, cfg Config, log *slog.Logger, serveHTTP bool) (_ *Daemon, err error) {
	started := time.Now()
	cfg = cfg.withDefaults()
	if err := cfg.checkLimits(); err != nil {
		return nil, err
	}
	if err := cfg.checkPrincipal(); err != nil {
		return nil, err
	}
	if err := errors.Join(cfg.agentHTTPFaults()...); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if serveHTTP {
		if err := cfg.TLS.check(); err != nil {
			return nil, err
		}
		if err := checkOrigins(cfg.HTTPAllowedOrigins); err != nil {
			return nil, err
		}
		if err := checkPlainHTTP(ctx, cfg, log); err != nil {
			return nil, err
		}
	}
	plainNATS, err := checkNATSTLS(cfg)
	if err != nil {
		return nil, err
	}
	calloutIssuer, calloutXKey, err := cfg.calloutKeys()
	if err != nil {
		return nil, err
	}
	if plainNATS != "" {
		log.Warn("NATS in plain text outside loopback, as insecure: true allows: agents' credentials and a2ad's NATS password cross the network readable", "nats", plainNATS)
	}
	d := &Daemon{Config: cfg, log: log, Metrics: metrics.New()}
	d.obs = newObserver(nil, d.Metrics)
	d.aggregate = newAggregator(log)
	d.obs.aggregate = d.aggregate
	ok := false
	defer func() {
		if !ok && d.nc != nil && !d.nc.IsConnected() && cfg.NATSURL != "" {
			if last := d.nc.LastError(); last != nil {
				err = fmt.Errorf("NATS at %s: %w (%v)", RedactURLs(cfg.NATSURL), last, err)
			} else {
				err = fmt.Errorf("NATS at %s not reachable (waited since start): %w", RedactURLs(cfg.NATSURL), err)
			}
		}
		if !ok {
			d.Stop()
		}
	}()
	var auditAdmin *embedded.AuditAdmin
	if cfg.Storage.CapacityBytes > 0 {
		if err := checkSizing(cfg, cfg.Storage.CapacityBytes, "storage.capacity_bytes"); err != nil {
			return nil, err
		}
	} else if cfg.NATSURL == "" {
		if err := checkSizing(cfg, cmp.Or(cfg.JetStreamMaxStore, embedded.DefaultMaxStore), "jetstream_max_store"); err != nil {
			return nil, err
		}
	}
	// An address in use is refused at once, naming it, before anything
	// starts: the embedded NATS server would only time out after 10 s.
	var httpLn net.Listener
	if serveHTTP {
		if httpLn, err = listenTCP("HTTP", "--http-addr, config http_addr", cfg.HTTPAddr); err != nil {
			return nil, err
		}
		defer func() {
			if !ok && httpLn != nil {
				_ = httpLn.Close()
			}
		}()
	}
	if cfg.NATSURL == "" {
		if err := probeTCP("NATS", "--nats-listen, config nats_listen", cmp.Or(cfg.NATSListen, "127.0.0.1:4222")); err != nil {
			return nil, err
		}
	}
	if cfg.NATSURL == "" {
		storeDir := filepath.Join(cfg.DataDir, "jetstream")
		if err := os.MkdirAll(storeDir, 0o700); err != nil {
			return nil, fmt.Errorf("data dir: %w", err)
		}
		// Two embedded servers on one file store would corrupt it.
		if d.lock, err = lockDir(cfg.DataDir); err != nil {
			return nil, err
		}
		password, perr := daemonPassword(cfg.DataDir)
		if perr != nil {
			return nil, perr
		}
		auditAdmin = embedded.NewAuditAdmin()
		defer auditAdmin.Revoke() // used once below, at most; never after Start
		var serverTLS *tls.Config
		if cfg.NATSTLS.CertFile != "" {
			if d.natsCert, err = loadNATSCertificate(cfg.NATSTLS.CertFile, cfg.NATSTLS.KeyFile); err != nil {
				return nil, err
			}
			serverTLS = d.natsCert.serverConfig()
		}
		d.ns, err = embedded.Start(embedded.Options{StoreDir: storeDir, Listen: cfg.NATSListen,
			MaxMemory: cfg.JetStreamMaxMemory, MaxStore: cfg.JetStreamMaxStore, DaemonPassword: password,
			TLS: serverTLS, AllowNonTLS: cfg.NATSTLS.AllowNonTLS, Limits: cfg.NATSLimits.serverLimits(len(cfg.Agents)),
			AuditAdmin: auditAdmin, VerifyAgent: d.verifyAgent, Bars: &d.bars, Sessions: &d.sessions,
			AuthRefused: func(remote string, err error) {
				d.obs.natsRefused(err)
				// An agent retrying every second with a bad credential
				// must not flood the log. Aggregated by a2ad's own code:
				// a reason can quote the client's user name.
				d.aggregate.logAttrs("nats refused: "+natsRefusalCode(err), slog.LevelWarn, "NATS connection refused", "remote", remote, "reason", err)
			}})
		if err != nil {
			return nil, err
		}
		d.NATSURL = d.ns.ClientURL()
		d.nc, err = nats.Connect("", nats.InProcessServer(d.ns), nats.Name("a2ad"), nats.UserInfo(embedded.DaemonUser, password),
			nats.CustomInboxPrefix(embedded.DaemonInboxPrefix), natsErrors(d.aggregate))
	} else {
		d.NATSURL = cfg.NATSURL
		// RetryOnFailedConnect: a NATS cluster that is still starting
		// (systemd, Kubernetes) is waited for; the bucket set-up below
		// retries for a minute before a2ad gives up.
		d.nc, err = nats.Connect(cfg.NATSURL, append(cfg.NATSTLS.clientOptions(cfg.NATSURL), nats.Name("a2ad"), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond),
			nats.RetryOnFailedConnect(true), nats.CustomInboxPrefix(embedded.DaemonInboxPrefix), natsErrors(d.aggregate),
			nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { log.Warn("NATS disconnected", "err", err) }),
			nats.ReconnectHandler(func(c *nats.Conn) { log.Info("NATS reconnected", "url", c.ConnectedUrlRedacted()) }))...)
		if err == nil && !d.nc.IsConnected() {
			log.Warn("NATS not reachable yet; waiting for it (up to a minute)", "nats", RedactURLs(cfg.NATSURL))
			if err := awaitNATS(ctx, d.nc, cfg.NATSTLS); err != nil {
				d.nc.Close()
				d.nc = nil // the error says it all
				return nil, fmt.Errorf("NATS at %s: %w", RedactURLs(cfg.NATSURL), err)
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	js, err := jetstream.New(d.nc)
	if err != nil {
		return nil, err
	}
	if d.ns == nil && cfg.Storage.CapacityBytes == 0 {
		// The account's storage limit, when it has one: the same check.
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ai, aerr := js.AccountInfo(actx)
		cancel()
		if aerr == nil {
			if err := checkSizing(cfg, ai.Limits.MaxStore, "the NATS account's JetStream max_file"); err != nil {
				return nil, err
			}
		}
	}
	d.Metrics.WatchNATS(d.nc)
	if d.tracer, err = tracing.New(cfg.Tracing, mcpedge.Implementation.Version); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if d.ns != nil {
		if err := applyAuditStream(ctx, d.ns, auditAdmin, cfg, log); err != nil {
			return nil, err
		}
	}
	if d.Audit, err = audit.Open(ctx, js, cfg.Audit, cfg.Replicas, instanceName(), log); err != nil {
		return nil, err
	}
	d.obs.audit = d.Audit
	d.aggregate.audit = d.Audit.Append
	d.Metrics.WatchAudit(d.Audit)
	if d.AgentKeys, err = AgentKeys(ctx, js, cfg.Replicas); err != nil {
		return nil, err
	}
	d.AgentKeys.SetRevocations(&d.revocations)
	reg, err := loadSchemas(cfg.SchemasDir)
	if err != nil {
		return nil, err
	}
	var agentCfg []agentcard.AgentConfig
	evidence := map[string]string{}
	outputs := map[string][]string{}
	allow := map[string]*brief.Allowlist{}
	for i, a := range cfg.Agents {
		if a.CardURL != "" {
			u, err := agentcard.CardURL(a.CardURL)
			if err != nil {
				return nil, fmt.Errorf("config: agent %s card_url: %w", a.ID, err)
			}
			cfg.Agents[i].CardURL, a.CardURL = u, u
		}
		a.ConfiguredSkills = configuredSkills(a)
		a.OutboundAuth = outboundAuth(a.HTTP.Auth)
		agentCfg = append(agentCfg, a.AgentConfig)
		for skill, name := range a.EvidenceSchemas {
			evidence[a.ID+"/"+skill] = name
		}
		for skill, names := range a.OutputSchemas {
			outputs[a.ID+"/"+skill] = names
		}
		for skill, keys := range a.EvidenceKeys {
			al, err := brief.NewAllowlist(keys)
			if err != nil {
				return nil, fmt.Errorf("config: agent %s evidence_keys %s: %w", a.ID, skill, err)
			}
			allow[a.ID+"/"+skill] = al
		}
	}
	if err := checkEvidenceSchemas(cfg, reg); err != nil {
		return nil, err
	}
	archive, err := newSchemaArchive(ctx, js, cfg.Replicas)
	if err != nil {
		return nil, err
	}
	schemas, err := artifact.NewCatalog(reg, archive)
	if err != nil {
		return nil, err
	}
	agents, err := agentcard.NewRegistry(ctx, js, agentCfg, cfg.Replicas)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	d.cancel, d.runCtx = cancel, runCtx
	// Agents are let in once every revocation is known.
	if err := d.openRevocations(ctx, runCtx, js, cfg.Replicas); err != nil {
		return nil, err
	}
	d.keys.Store(d.AgentKeys)
	if calloutIssuer != nil {
		if err := d.startCallout(ctx, runCtx, calloutIssuer, calloutXKey); err != nil {
			return nil, err
		}
	}
	idemKey, idemSince, err := sharedSecret(ctx, js, cfg.Replicas, "idempotency-task-id-hmac")
	if err != nil {
		return nil, err
	}
	limitsOfBriefs := brief.Limits{MaxDeadlineSeconds: cfg.MaxDeadlineSeconds}.WithDefaults()
	natsClient := natsbind.NewClient(d.nc)
	d.Service = &broker.Service{Agents: agents, Schemas: schemas, Bindings: map[string]broker.Binding{"": natsClient}, Log: log,
		Limits: limitsOfBriefs, EvidenceSchemas: evidence, EvidenceAllow: allow, OutputSchemas: outputs,
		OnDelegate: d.obs.delegated, IdempotencySecret: idemKey, IdempotencySince: idemSince,
		// Tasks of earlier versions are found by their ids for as long as
		// one delegated before the key existed may still run.
		LegacyIdempotencyUntil: idemSince.Add(time.Duration(limitsOfBriefs.MaxDeadlineSeconds) * time.Second)}
	d.httpb, err = newHTTPBinding(ctx, cfg, agents, js, d.lock != nil, log)
	if err != nil {
		return nil, err
	}
	d.Service.Bindings[agentcard.BindingJSONRPC] = d.httpb.binding
	d.Service.Bindings[agentcard.BindingHTTPJSON] = d.httpb.binding
	d.Service.OnHTTPReply = d.httpb.follower.PublishReply
	d.startLiveness(runCtx, agents, natsClient)
	policies := map[string]artifact.Policy{}
	limits := map[string]task.EventLimits{}
	for _, a := range cfg.Agents {
		policies[a.ID] = a.Artifacts
		limits[a.ID] = a.Limits.Or(cfg.AgentLimits).Or(DefaultAgentLimits).events()
	}
	tracker := &task.Tracker{Schemas: schemas, Log: log, Policies: policies, Agents: limits, Replicas: cfg.Replicas,
		OnDrop: d.obs.eventDropped}
	retention := &task.Retention{Keep: time.Duration(cfg.Retention.EndedTasks), PerSecond: cfg.Retention.RemovalsPerSecond, Log: log}
	store, err := task.NewStore(runCtx, js, cfg.Replicas, func(sn task.Snapshot) {
		d.Service.Track(sn)
		tracker.Track(sn)
		d.obs.track(sn)
		retention.Track(sn)
		d.httpb.follower.Track(sn)
	})
	if err != nil {
		return nil, err
	}
	d.startRetention(runCtx, retention, store)
	tracker.Store = store
	d.httpb.follower.Store = store
	store.OnWrite = d.obs.taskWritten
	d.Service.Tasks = store
	d.wg.Add(2)
	go func() {
		defer d.wg.Done()
		d.Service.Run(runCtx)
	}()
	go func() {
		defer d.wg.Done()
		select {
		case <-store.Loaded():
			log.Info("tracking open tasks", "open", store.Open(), "scheduled", d.Service.Scheduled(), "ended", store.Ended(), "after", time.Since(started).Round(time.Millisecond))
		case <-runCtx.Done():
		}
	}()
	if err := tracker.EnsureStreams(ctx, js); err != nil {
		if jsretry.StorageFull(err) {
			return nil, fmt.Errorf("%w: the JetStream store cannot reserve every agent's agent_limits.max_pending_bytes; lower it or raise jetstream_max_store (or the account's limit)", err)
		}
		return nil, err
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		if err := tracker.Run(runCtx, js); err != nil {
			log.Error("tracker stopped", "err", err)
		}
	}()
	capacity := cfg.Storage.CapacityBytes // 0 on an external NATS: the account's limit
	if d.ns != nil && capacity == 0 {
		capacity = cmp.Or(cfg.JetStreamMaxStore, embedded.DefaultMaxStore)
	}
	d.storage = newStorageMonitor(js, capacity, cmp.Or(cfg.Storage.ReserveBytes, DefaultStorageReserve), log)
	d.storage.poll(ctx)
	d.Service.Admission = d.storage
	d.Metrics.WatchStorage(d.storage.report)
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.storage.run(runCtx)
	}()
	if d.ns != nil {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			embedded.KeepSessions(runCtx, d.ns, &d.sessions)
		}()
	}
	if d.ns != nil {
		limits := connectionLimits(cfg)
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			embedded.GuardAgents(runCtx, d.ns, &d.bars, limits, func(agent, reason string, measured float64, barred time.Duration) {
				d.obs.agentDisconnected(agent, reason)
				d.aggregate.logAttrs("guard: "+agent, slog.LevelWarn, "agent connection closed: over its limits (agents[].limits, else agent_limits)", "agent", agent,
					"reason", reason, "measured", int(measured), "refused_for", barred)
			})
		}()
	}
	d.registrations = newRegistrationLimits(cfg)
	d.unknownCredentials = rate.NewLimiter(unknownCredentialsPerSecond, unknownCredentialsPerSecond)
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.aggregate.run(runCtx)
	}()
	if d.registering, err = d.nc.QueueSubscribe(natsbind.RegisterSubject, "a2ad", d.register); err != nil {
		return nil, err
	}
	for _, a := range cfg.Agents {
		if rec, err := agents.Get(ctx, a.ID); err == nil {
			d.warnConfiguredSkills(rec) // of the card stored before this start
		}
		if a.CardURL != "" {
			d.wg.Add(1)
			go func() {
				defer d.wg.Done()
				d.watchCard(runCtx, a.ID, a.CardURL)
			}()
		}
	}
	var stdioPrincipal *broker.Principal
	if !serveHTTP {
		stdioPrincipal = &broker.Principal{Subject: cfg.Principal.Subject, Tenant: cfg.Principal.Tenant, Scopes: cfg.Principal.Scopes}
	}
	stateKey, _, err := sharedSecret(ctx, js, cfg.Replicas, "request-state-hmac")
	if err != nil {
		return nil, err
	}
	stopping := make(chan struct{})
	d.MCP = mcpedge.NewServer(d.Service, log, mcpedge.Options{Stdio: stdioPrincipal, RequestStateKey: stateKey, Tracer: d.tracer.Tracer(),
		Stopping: stopping, ConformanceTools: cfg.ConformanceTools, TaskRetention: time.Duration(cfg.Retention.EndedTasks),
		MaxSkillToolsPerAgent: cfg.MaxSkillToolsPerAgent})
	if serveHTTP {
		natsConns := 0 // the embedded server's clients hold files of this process too
		if d.ns != nil {
			natsConns = cfg.NATSLimits.serverLimits(len(cfg.Agents)).MaxConnections
		}
		limits, err := fitConnections(cfg.HTTPLimits.MaxConnections, cfg.HTTPLimits.Or(DefaultHTTPLimits), openFileLimit(), natsConns, log)
		if err != nil {
			return nil, err
		}
		httpMetrics := d.Metrics.NewHTTP()
		scheme := "http"
		if cfg.TLS.CertFile != "" {
			var leaf *x509.Certificate
			if d.tls, leaf, err = newHTTPTLS(cfg.TLS); err != nil {
				return nil, err
			}
			scheme = "https"
			log.Info("HTTP listener serves TLS", append(CertificateLogAttrs(leaf), "client_ca_file", cfg.TLS.ClientCAFile)...)
			d.Metrics.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "a2ad_http_tls_certificate_expiry_timestamp_seconds",
				Help: "NotAfter of the HTTP listener's TLS certificate (the one last loaded: at start or SIGHUP), Unix seconds."}, d.tls.expiry))
		}
		ln := limitConnections(httpLn, limits.MaxConnections, httpMetrics)
		httpLn = nil // the HTTP server's now: Stop closes it
		d.HTTPURL = scheme + "://" + ln.Addr().String()
		public := d.HTTPURL
		if ip := net.ParseIP(hostOf(ln.Addr().String())); cfg.PublicURL == "" && ip != nil && ip.IsUnspecified() {
			log.Warn("public_url is not set and http_addr is every interface: the default token audience and the protected resource metadata name "+
				public+", which no host can reach; set public_url to the URL hosts use", "http_addr", cfg.HTTPAddr)
		}
		if cfg.PublicURL != "" {
			u, perr := url.Parse(cfg.PublicURL)
			if perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
				ln.Close()
				return nil, fmt.Errorf("config: public_url %q: want an http(s) base URL such as https://a2ad.example.com", cfg.PublicURL)
			}
			public = strings.TrimSuffix(cfg.PublicURL, "/")
		}
		d.Auth, err = mcpedge.NewAuthenticator(cfg.Auth, cfg.DataDir, public)
		if err != nil {
			ln.Close()
			return nil, err
		}
		d.Auth.OnRefused = d.obs.httpRefused
		if d.Auth.Development() {
			// `a2ad token mint` signs for this audience by default.
			if err := os.WriteFile(filepath.Join(cfg.DataDir, "auth", "audience"), []byte(d.Auth.Audience()+"\n"), 0o600); err != nil {
				ln.Close()
				return nil, fmt.Errorf("data dir: %w", err)
			}
			log.Info("host tokens are verified with the development key; mint one with `a2ad token mint`", "key", mcpedge.DevKeyPath(cfg.DataDir), "audience", d.Auth.Audience())
		}
		rates := mcpedge.NewRateLimiter(cfg.RateLimits)
		rates.OnLimited = func(edge, class, scope string) { httpMetrics.RateLimited.WithLabelValues(edge, class, scope).Inc() }
		mux := http.NewServeMux()
		origins := allowedOrigins(d.HTTPURL, public, cfg.HTTPAllowedOrigins)
		mux.Handle("/mcp", originGuard(origins, d.obs.httpRefused, d.Auth.ProtectMCP(rates.MCP(mcpedge.HTTPHandler(d.MCP, log)))))
		dashboard := admin.NewDashboard(d.Metrics.Registry)
		d.wg.Add(1)
		go func() { defer d.wg.Done(); dashboard.Run(runCtx) }()
		var adminAPI http.Handler = d.Auth.RequireScope(mcpedge.ScopeAdmin, rates.Admin(admin.Handler(d.Service, d.AgentKeys, admin.Options{Audit: d.Audit, JS: js, Stopping: stopping,
			Revoke: d.Revoke, QuarantineOnRevokeAll: d.ns == nil && d.kicker == nil, Dashboard: dashboard})))
		if cfg.TLS.ClientCAFile != "" {
			adminAPI = requireClientCertificate(d.obs.httpRefused, adminAPI)
		}
		mux.Handle("/v1/", originGuard(origins, d.obs.httpRefused, loopbackHostOnly(ln.Addr(), adminAPI)))
		mux.Handle("/console/", d.consoleHandler(ln.Addr(), origins, adminAPI))
		mux.Handle(mcpedge.MetadataPath, d.Auth.MetadataHandler())
		mux.Handle(mcpedge.MetadataPath+"/mcp", d.Auth.MetadataHandler())
		mux.HandleFunc("/healthz", healthz)
		mux.HandleFunc("/readyz", d.ready)
		mux.Handle("/metrics", d.Metrics.Handler())
		// HTTP agents' push notifications: outside host authentication, each
		// carries its task's token (docs/http-binding.md §6).
		mux.Handle(httpbind.PushPath, d.httpb.follower.PushHandler())
		if cfg.PublicURL != "" {
			d.httpb.follower.PushBaseURL = public
		}
		d.http = newHTTPServer(mux, limits)
		d.http.ErrorLog = stdlog.New(httpErrorLog{d.aggregate}, "", 0)
		if d.tls != nil {
			d.http.TLSConfig = d.tls.serverConfig()
		}
		// Shutdown ends MCP waits (they return the task as it is; the
		// task goes on) and admin watches at once.
		d.http.RegisterOnShutdown(func() { close(stopping) })
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			serve := d.http.Serve
			if d.tls != nil {
				serve = func(ln net.Listener) error { return d.http.ServeTLS(ln, "", "") } // the files are in TLSConfig
			}
			if err := serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("http server stopped", "err", err)
			}
		}()
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		if err := d.httpb.follower.Run(runCtx); err != nil {
			log.Error("HTTP agents' tasks are not followed", "err", err)
		}
	}()
	ok = true
	return d, nil
}

// RedactURLs returns a comma-separated list of URLs (a nats_url) with each
// password, or user part without one (which NATS takes for a token), as
// "xxxxx" (url.URL.Redacted), for logs and messages.
func RedactURLs(list string) string {
	var out []string
	for _, u := range strings.Split(list, ",") {
		u = strings.TrimSpace(u)
		// nats.go takes "user:password@host:port" without a scheme too;
		// url.Parse would read the user as a scheme.
		schemeless := !strings.Contains(u, "://")
		if schemeless {
			u = "nats://" + u
		}
		p, err := url.Parse(u)
		if err != nil {
			out = append(out, "(unparsable URL)")
			continue
		}
		if p.User != nil {
			if _, has := p.User.Password(); !has {
				p.User = url.User("xxxxx")
			}
		}
		r := p.Redacted()
		if schemeless {
			r = strings.TrimPrefix(r, "nats://")
		}
		out = append(out, r)
	}
	return strings.Join(out, ",")
}

// natsErrors sends the NATS client's asynchronous errors (a slow consumer,
// a permission error) to the log instead of its default, which prints to
// stderr past the log's format; aggregated by subscription, since a flood
// an agent sends to a subject a2ad subscribes to (registrations) makes
// one per message dropped.
func natsErrors(a *aggregator) nats.Option {
	return nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
		subject := ""
		if sub != nil {
			subject = sub.Subject
		}
		a.logAttrs("nats error: "+subject, slog.LevelWarn, "NATS error", "subject", subject, "err", err)
	})
}

// instanceName names this a2ad in audit records: host name and process id.
func instanceName() string {
	h, _ := os.Hostname()
	return fmt.Sprintf("%s/%d", cmp.Or(h, "localhost"), os.Getpid())
}

// applyAuditStream gives the audit stream its configured settings on the
// embedded server, where a2ad's own user may not update it
// (embedded.AuditDenied) and no account administrator exists who could:
// through one in-process connection as embedded.AuditAdminUser, closed,
// and its credential revoked, before it returns.
func applyAuditStream(ctx context.Context, ns *server.Server, admin *embedded.AuditAdmin, cfg Config, log *slog.Logger) error {
	defer admin.Revoke()
	nc, err := admin.Connect(ns)
	if err != nil {
		return fmt.Errorf("audit: stream %s: %w", audit.Stream, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	applied, err := audit.ApplyStream(ctx, js, cfg.Audit, cfg.Replicas)
	if err != nil {
		return err
	}
	if len(applied) > 0 {
		log.Info("applied the configured settings to the audit stream", "stream", audit.Stream, "changed", applied.Changes())
	}
	return nil
}

// DaemonPasswordPath is where the password of the embedded NATS server's
// "a2ad" user lives (mode 0600): operators' tools on the same host connect
// with it; agents connect without credentials and get agent permissions.
func DaemonPasswordPath(dataDir string) string {
	return filepath.Join(dataDir, "nats", "daemon-password")
}

func daemonPassword(dataDir string) (string, error) {
	p := DaemonPasswordPath(dataDir)
	if b, err := os.ReadFile(p); err == nil && len(bytes.TrimSpace(b)) >= 32 {
		return string(bytes.TrimSpace(b)), nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return "", fmt.Errorf("data dir: %w", err)
	}
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	pw := hex.EncodeToString(b[:])
	if err := os.WriteFile(p, []byte(pw+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("data dir: %w", err)
	}
	return pw, nil
}

// SecretsBucket holds secrets every instance shares (the HMAC key of MCP
// request states); agents never get access to JetStream.
const SecretsBucket = "a2ad_secrets"

// sharedSecret returns the 32-byte secret name of the NATS account a2ad
// uses, creating it on first use: the first instance's create wins, the
// others read it. created is when it was first stored.
func sharedSecret(ctx context.Context, js jetstream.JetStream, replicas int, name string) (secret []byte, created time.Time, err error) {
	var kv jetstream.KeyValue
	err = jsretry.Do(ctx, time.Minute, func() (err error) {
		kv, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: SecretsBucket,
			Description: "a2ad secrets shared by its instances", History: 1, Replicas: max(1, replicas), Storage: jetstream.FileStorage})
		return err
	})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("KV bucket %s: %w", SecretsBucket, err)
	}
	secret = make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, time.Time{}, err
	}
	created = time.Now()
	err = jsretry.Do(ctx, 20*time.Second, func() error {
		_, err := kv.Create(ctx, name, secret)
		if errors.Is(err, jetstream.ErrKeyExists) {
			e, gerr := kv.Get(ctx, name)
			if gerr == nil {
				secret, created = e.Value(), e.Created()
			}
			return gerr
		}
		return err
	})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("secret %s: %w", name, err)
	}
	if len(secret) < 32 {
		return nil, time.Time{}, fmt.Errorf("secret %s in %s is %d bytes, want 32", name, SecretsBucket, len(secret))
	}
	return secret, created, nil
}

// AgentKeys returns the keys of agent credentials that every a2ad instance
// on js's account shares: an Ed25519 key from the 32-byte seed under
// "agent-credential-ed25519-seed" in [SecretsBucket], created on first use
// (replicas as the other buckets). Whoever can read that bucket can mint
// credentials: a2ad's own NATS user only, never an agent's.
func AgentKeys(ctx context.Context, js jetstream.JetStream, replicas int) (*agentcred.Keys, error) {
	seed, _, err := sharedSecret(ctx, js, replicas, "agent-credential-ed25519-seed")
	if err != nil {
		return nil, err
	}
	return agentcred.NewKeys(seed)
}

// Readiness is the /readyz body.
type Readiness struct {
	// Ready is true once NATS is connected and every stored task is tracked.
	Ready bool `json:"ready"`
	// NATS is the connection status ("CONNECTED", "RECONNECTING", …).
	NATS string `json:"nats"`
	// OpenTasks is the number of non-terminal tasks in the store.
	OpenTasks int `json:"open_tasks"`
	// Scheduled is the number of tasks whose deadline or redelivery this
	// instance watches.
	Scheduled int `json:"scheduled"`
	// KV is "ok" when the task bucket's stream answered within 2 s, else
	// why not.
	KV string `json:"kv"`
	// Loaded is true once every stored task is tracked.
	Loaded bool `json:"loaded"`
	// Audit is "ok" while audit records are being stored, else why not.
	// It does not make a2ad unready (delegations go on; the records wait
	// in memory): alert on it, or on a2ad_audit_queue_records.
	Audit string `json:"audit"`
	// Storage is "ok" while the JetStream store has room for new tasks
	// beyond storage.reserve_bytes, else why not.
	Storage string `json:"storage"`
	// AcceptingDelegations is false while new delegations are refused
	// with `unavailable` for lack of room; tasks already delegated go on.
	AcceptingDelegations bool `json:"accepting_delegations"`
}

// Ready reports readiness (the /readyz body): NATS connected, the task
// bucket reachable (a stream info request, at most 2 s), every stored task
// tracked, and room in the store for new tasks.
func (d *Daemon) Ready(ctx context.Context) Readiness {
	rd := Readiness{OpenTasks: d.Service.Tasks.Open(), Scheduled: d.Service.Scheduled(), KV: "ok", Audit: d.Audit.Health()}
	select {
	case <-d.Service.Tasks.Loaded():
		rd.Loaded = true
	default:
	}
	if !d.nc.IsConnected() {
		rd.KV = "not checked: NATS is not connected"
	} else {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if err := d.Service.Tasks.Ping(cctx); err != nil {
			rd.KV = err.Error()
		}
	}
	rd.Storage, rd.AcceptingDelegations = d.storage.status()
	// After the ping: a connection whose server just went is noticed by
	// the time the ping has failed.
	rd.NATS = d.nc.Status().String()
	rd.Ready = rd.Loaded && d.nc.IsConnected() && rd.KV == "ok" && rd.AcceptingDelegations
	return rd
}

// ready serves /readyz: 200 with [Readiness] when ready, else 503 with it.
func (d *Daemon) ready(w http.ResponseWriter, r *http.Request) {
	rd := d.Ready(r.Context())
	w.Header().Set("Content-Type", "application/json")
	if !rd.Ready {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(rd)
}

// ReloadSchemas loads the host schemas again (SIGHUP): new delegations use
// the new versions, tasks already delegated keep the version they were
// delegated with. If a schema is refused, or an agent's evidence schema is
// gone, nothing changes and the error says why.
func (d *Daemon) ReloadSchemas() (artifact.Changes, error) {
	reg, err := loadSchemas(d.Config.SchemasDir)
	if err != nil {
		return artifact.Changes{}, err
	}
	if err := checkEvidenceSchemas(d.Config, reg); err != nil {
		return artifact.Changes{}, err
	}
	return d.Service.Schemas.Reload(reg)
}

// checkEvidenceSchemas refuses a configuration naming evidence schemas
// that reg does not hold: every such name, each with its line when the
// configuration came from a file and the name most likely meant.
func checkEvidenceSchemas(cfg Config, reg *artifact.Registry) error {
	faults := evidenceSchemaFaults(cfg, reg)
	if len(faults) == 0 {
		return nil
	}
	msgs := make([]string, len(faults))
	for i, f := range faults {
		msgs[i] = f.Error()
	}
	return &evidenceSchemaError{"config: " + strings.Join(msgs, "; ")}
}

// evidenceSchemaError is [checkEvidenceSchemas]' error: it says every
// fault in a2ad's words and wraps [artifact.ErrSchemaNotFound].
type evidenceSchemaError struct{ msg string }

func (e *evidenceSchemaError) Error() string { return e.msg }
func (e *evidenceSchemaError) Unwrap() error { return artifact.ErrSchemaNotFound }

func loadSchemas(dir string) (*artifact.Registry, error) {
	if dir == "" {
		return artifact.LoadFS(a2ad.HostSchemas(), ".")
	}
	return artifact.LoadDir(dir)
}

// verifyAgent checks an agent credential for the embedded server.
func (d *Daemon) verifyAgent(token string) (string, time.Time, error) {
	k := d.keys.Load()
	if k == nil {
		return "", time.Time{}, errors.New("a2ad is starting: agent credentials are not accepted yet")
	}
	c, err := k.Verify(token)
	return c.AgentID, c.Expires, err
}

// Stop stops taking calls, lets in-flight writes finish, and shuts down
// NATS (the embedded server's state stays in the data dir). Open tasks are
// left for the next start or another instance.
func (d *Daemon) Stop() {
	d.once.Do(func() {
		if d.http != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = d.http.Shutdown(ctx)
			cancel()
		}
		if d.registering != nil {
			// Registrations end before the last sweep of what they held
			// back (at most 2 s for those already received).
			closed := d.registering.StatusChanged(nats.SubscriptionClosed)
			if d.registering.Drain() == nil {
				select {
				case <-closed:
				case <-time.After(2 * time.Second):
				}
			}
		}
		if d.cancel != nil {
			d.cancel()
		}
		d.wg.Wait()
		if d.aggregate != nil {
			d.aggregate.sweep(true) // what is held back is still accounted for
		}
		d.Audit.Close(5 * time.Second)
		d.tracer.Shutdown()
		if d.systemNC != nil {
			d.systemNC.Close()
		}
		if d.nc != nil {
			_ = d.nc.Drain()
			d.nc.Close()
		}
		if d.ns != nil {
			d.ns.Shutdown()
			d.ns.WaitForShutdown()
		}
		if d.lock != nil {
			_ = d.lock.Close() // releases the flock
		}
	})
}

// ErrDataDirInUse means another a2ad holds the data directory.
var ErrDataDirInUse = errors.New("data dir in use by another a2ad (its LOCK file is held)")

// lockDir takes an exclusive flock on dir/LOCK, held until the file closes.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: %s", ErrDataDirInUse, dir)
	}
	return f, nil
}

// loopbackHostOnly refuses, on a loopback listener, requests whose Host is
// not a loopback name: a browser page on another origin cannot reach the
// admin API through DNS rebinding. (The MCP handler has the SDK's own check.)
func loopbackHostOnly(addr net.Addr, h http.Handler) http.Handler {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || !tcp.IP.IsLoopback() {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if hh, _, err := net.SplitHostPort(host); err == nil {
			host = hh
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			http.Error(w, "forbidden: Host must be a loopback name on a loopback listener", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// healthz is GET /healthz, the liveness probe: 200 with
// {"status":"ok","version":"…"} (application/json; the version is
// version.Get's) while the process serves HTTP.
func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(map[string]string{"status": "ok", "version": version.Get().Version})
}

// ErrAddressInUse is what a listen address another process holds is
// refused with (wrapped: the message names the address and its flag).
var ErrAddressInUse = errors.New("address in use")

// addrInUseError is a listen address in use; it Is ErrAddressInUse.
type addrInUseError struct{ what, addr, flags string }

func (e *addrInUseError) Error() string {
	return fmt.Sprintf("%s address %s is in use (%s): another process (another a2ad, a NATS server) listens there; stop it or give a free address",
		e.what, e.addr, e.flags)
}

func (e *addrInUseError) Is(target error) bool { return target == ErrAddressInUse }

// listenTCP listens on addr (host:port) for the listener named what,
// whose settings are given by flags. An address in use is
// ErrAddressInUse; any other failure names the address too.
func listenTCP(what, flags, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	switch {
	case err == nil:
		return ln, nil
	case errors.Is(err, syscall.EADDRINUSE):
		return nil, &addrInUseError{what: what, addr: addr, flags: flags}
	case errors.Is(err, syscall.EACCES):
		return nil, fmt.Errorf("%s address %s: not allowed to listen there (%s; ports below 1024 need privileges)", what, addr, flags)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return nil, fmt.Errorf("%s address %s: no interface of this machine has that IP address (%s)", what, addr, flags)
	}
	return nil, fmt.Errorf("%s address %s: cannot listen (%s): %w", what, addr, flags, err)
}

// probeTCP is listenTCP for a server that opens its own listener (the
// embedded NATS server): it listens and closes at once. A port 0 or -1
// (any free port) is not probed.
func probeTCP(what, flags, addr string) error {
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "0" || port == "-1" {
		return nil // a malformed address is embedded.Start's to refuse
	}
	ln, err := listenTCP(what, flags, addr)
	if err != nil {
		return err
	}
	return ln.Close()
}
