// Package audit keeps a2ad's audit trail: an append-only JetStream stream
// of who did what, when, in which tenant — every delegation (with its brief
// digest) and refused delegation, every task transition applied or refused,
// every artifact verdict, and every registration, approval, quarantine and
// credential of an agent. It is separate from the debug logs, and a record
// never holds a secret, a brief, an answer or artifact content: only ids,
// digests, states, a2ad's reason codes and JSON pointers.
//
// Records are written off the acknowledgement path: [Log.Append] queues and
// returns, and one goroutine publishes the queue with asynchronous
// JetStream publishes, retrying each record (deduplicated by its id) until
// the stream has it. Should the queue overflow (JetStream unreachable for
// long under load), records are dropped, counted and logged, never waited
// for. The stream denies deletes and purges through the JetStream API;
// records leave only by age (Config.MaxAge) or, over Config.MaxBytes,
// oldest first.
package audit

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/a2ad/a2ad/internal/untrusted"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Stream is the JetStream stream of the audit trail; records are published
// on SubjectPrefix + "." + Kind + ".<tenant>.<agent>.<task>" (see subjectOf).
const (
	Stream        = "A2AD_AUDIT"
	SubjectPrefix = "a2ad.audit"
)

// Kinds of records. Their subject is "a2ad.audit.<kind>", so a consumer can
// filter on, say, "a2ad.audit.agent.>".
const (
	KindDelegationAccepted  = "delegation.accepted"     // a task was created and its brief sent
	KindDelegationReplayed  = "delegation.replayed"     // an idempotent retry got the existing task
	KindDelegationRefused   = "delegation.refused"      // no task: Code says why
	KindTransition          = "task.transition"         // an applied transition of a task
	KindTransitionRefused   = "task.transition_refused" // an event the lifecycle refused
	KindArtifactVerdict     = "artifact.verdict"        // an artifact checked against the host schema
	KindTaskCancelRequested = "task.cancel_requested"   // written before canceled_by_operator: an operator's cancel is now one task.transition (source operator, with their note)
	KindAgentRegistered     = "agent.registered"        // a card registered or fetched, with the resulting status
	KindAgentCardRefused    = "agent.card_refused"      // a card refused at registration or fetch
	KindAgentApproved       = "agent.approved"          // an operator approved a fingerprint
	KindAgentQuarantined    = "agent.quarantined"       // an operator quarantined an agent
	KindAgentCredential     = "agent.credential_issued" // a NATS credential was minted for an agent
	// KindAgentCredentialRevoked: an operator revoked one credential of
	// an agent (JTI) or every one issued before a time (RevokedBefore).
	KindAgentCredentialRevoked = "agent.credential_revoked"
)

// Actor types.
const (
	ActorHost     = "host"     // a host principal (verified token or stdio configuration)
	ActorAgent    = "agent"    // a remote agent, by its agent id
	ActorOperator = "operator" // an admin API caller (scope a2a:admin)
	ActorDaemon   = "daemon"   // a2ad itself (deadlines, validation)
)

// Actor is who caused a record.
type Actor struct {
	Type string `json:"type"`
	// Subject is the principal's token subject (host, operator) or the
	// agent id (agent); empty for the daemon.
	Subject string `json:"subject,omitempty"`
}

// Record is one entry of the audit trail. Fields that do not apply to a
// kind are omitted.
type Record struct {
	// ID is unique per record (also its Nats-Msg-Id: a retried publish
	// is stored once).
	ID string `json:"id"`
	// At is when it happened (UTC, RFC 3339 with nanoseconds).
	At   time.Time `json:"at"`
	Kind string    `json:"kind"`
	// Instance is the a2ad instance that wrote it (host name and pid).
	Instance string `json:"instance"`
	Actor    Actor  `json:"actor"`
	// Tenant is the tenant of the task or of the principal.
	Tenant string `json:"tenant,omitempty"`
	TaskID string `json:"task_id,omitempty"`
	// AgentID and Skill are the delegation's target.
	AgentID string `json:"agent_id,omitempty"`
	Skill   string `json:"skill,omitempty"`
	// BriefDigest is the sha256 of the brief's RFC 8785 form.
	BriefDigest string `json:"brief_digest,omitempty"`
	// OutputSchema and SchemaDigest name the host schema version.
	OutputSchema string `json:"output_schema,omitempty"`
	SchemaDigest string `json:"schema_digest,omitempty"`
	// DroppedEvidence counts the evidence members the allowlist kept out.
	DroppedEvidence int `json:"dropped_evidence,omitempty"`
	// From, To and Event describe a transition (task states: A2A 1.0 names).
	From  string `json:"from,omitempty"`
	To    string `json:"to,omitempty"`
	Event string `json:"event,omitempty"`
	// Reason is a2ad's reason code (task.Reason…, a quarantine or cancel
	// reason an operator gave).
	Reason string `json:"reason,omitempty"`
	// Note is the text an operator gave with a transition they made (a2ad
	// tasks cancel --reason), as the task's history keeps it.
	Note string `json:"note,omitempty"`
	// Code is the refusal's error code (the codes hosts see: agent_offline,
	// invalid_argument, …).
	Code string `json:"code,omitempty"`
	// Field is the JSON pointer of a refused brief field.
	Field string `json:"field,omitempty"`
	// SecretKind names the credential detector that refused a brief.
	SecretKind string `json:"secret_kind,omitempty"`
	// MsgID is the agent event's Nats-Msg-Id.
	MsgID string `json:"msg_id,omitempty"`
	// Verdict is an artifact verdict.
	Verdict *Verdict `json:"verdict,omitempty"`
	// Status and Fingerprint describe an agent after the action.
	Status      string `json:"status,omitempty"`
	Fingerprint string `json:"fingerprint,omitempty"`
	// ExpiresAt is when an issued credential expires.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// JTI is the jti of an issued or revoked agent credential (never the
	// credential itself).
	JTI string `json:"jti,omitempty"`
	// RevokedBefore: every credential of the agent issued (iat) before
	// this time is revoked.
	RevokedBefore *time.Time `json:"revoked_before,omitempty"`
	// TraceID is the OpenTelemetry trace id of the call, when traced.
	TraceID string `json:"trace_id,omitempty"`
	// Suppressed is the number of records like this one not written since
	// the last one: a2ad writes only a few a minute about one agent's
	// registrations and card fetches, and counts the others.
	Suppressed int `json:"suppressed,omitempty"`
}

// Verdict is an artifact verdict without content: the artifact id and the
// pointers and keywords of its violations and warnings.
type Verdict struct {
	ArtifactID string   `json:"artifact_id"`
	Valid      bool     `json:"valid"`
	Violations []string `json:"violations,omitempty"` // "<pointer> (<keyword>)"
	Warnings   int      `json:"warnings,omitempty"`
}

// Config configures the audit stream (the YAML `audit` section).
type Config struct {
	// MaxAge is how long records are kept (a Go duration; default 2160h,
	// 90 days).
	MaxAge Duration `yaml:"max_age"`
	// MaxBytes caps the stream's size in bytes; over it the oldest records
	// go first (discard old). 0 means DefaultMaxBytes (1 GiB); -1 means no
	// cap beyond the NATS account's limits. A cap is reserved in the
	// JetStream store when the stream is created.
	MaxBytes int64 `yaml:"max_bytes"`
	// QueueSize is how many records may wait for JetStream before new ones
	// are dropped (default 65536).
	QueueSize int `yaml:"queue_size"`
}

// Duration is a time.Duration written as a Go duration string in YAML.
type Duration time.Duration

// String is the duration as Go writes it ("2160h0m0s").
func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalText parses "2160h", "90m", …
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// DefaultMaxAge and DefaultMaxBytes are the retention and the size cap of
// the audit stream when none is configured: 90 days, 1 GiB.
const (
	DefaultMaxAge   = 90 * 24 * time.Hour
	DefaultMaxBytes = 1 << 30
)

// Log appends records to the audit stream. Append is safe for concurrent
// use; Close flushes.
type Log struct {
	js       jetstream.JetStream
	cfg      Config
	replicas int
	log      *slog.Logger
	instance string
	queue    chan *Record // pointers: a buffer of 65,536 records (about 30 MiB) the GC would scan every cycle
	done     chan struct{}
	abandon  chan struct{} // closed when Close gave up waiting
	closed   atomic.Bool
	stop     sync.Once
	giveUp   sync.Once

	written  atomic.Uint64
	dropped  atomic.Uint64
	retries  atomic.Uint64 // publish attempts that failed and were retried
	inFlight atomic.Int64  // records of the batch being published

	maxAge      time.Duration // the stream's, as Open found it
	lastDropLog atomic.Int64
	lastFailLog time.Time // the writer's own
	failing     atomic.Pointer[string]
}

// Open ensures the stream ([EnsureStream]) and starts the writer. A stream
// that differs from cfg is used as it is, with one warning in log naming
// the settings and the `nats stream edit` command that applies them.
// instance names this a2ad in every record.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config, replicas int, instance string, log *slog.Logger) (*Log, error) {
	st, drift, err := EnsureStream(ctx, js, cfg, replicas)
	if err != nil {
		return nil, err
	}
	if len(drift) > 0 {
		log.Warn("the audit stream's settings differ from the configuration: a2ad runs with the stream as it is, since its NATS user may not update it; an account administrator applies the configured settings with the command given",
			"stream", Stream, "settings", drift.String(), "command", drift.EditCommand())
	}
	size := cfg.QueueSize
	if size <= 0 {
		size = 65536
	}
	l := &Log{js: js, cfg: cfg, replicas: replicas, log: log, instance: instance, queue: make(chan *Record, size),
		done: make(chan struct{}), abandon: make(chan struct{}), maxAge: st.CachedInfo().Config.MaxAge}
	go l.run()
	return l, nil
}

// Limits on what one record holds, so that no record can outgrow a NATS
// message or wedge the writer, whatever a host or agent sent: strings are
// cut at MaxFieldBytes, violations at MaxViolations.
const (
	MaxFieldBytes = 256
	MaxViolations = 16
)

// bound applies the limits to r.
func (r *Record) bound() {
	for _, f := range []*string{&r.Kind, &r.Actor.Type, &r.Actor.Subject, &r.Tenant, &r.TaskID, &r.AgentID, &r.Skill,
		&r.BriefDigest, &r.OutputSchema, &r.SchemaDigest, &r.From, &r.To, &r.Event, &r.Reason, &r.Code, &r.Field,
		&r.SecretKind, &r.MsgID, &r.Status, &r.Fingerprint, &r.TraceID} {
		*f = untrusted.Clip(*f, MaxFieldBytes)
	}
	if v := r.Verdict; v != nil {
		v.ArtifactID = untrusted.Clip(v.ArtifactID, MaxFieldBytes)
		if len(v.Violations) > MaxViolations {
			v.Violations = append(v.Violations[:MaxViolations:MaxViolations], fmt.Sprintf("… %d more", len(v.Violations)-MaxViolations))
		}
		for i := range v.Violations {
			v.Violations[i] = untrusted.Clip(v.Violations[i], MaxFieldBytes)
		}
	}
}

// Append queues r for the stream, stamping its ID, At (if zero) and
// Instance, and cutting its fields to the limits; it never blocks. A nil
// Log discards.
func (l *Log) Append(r Record) {
	if l == nil || l.closed.Load() {
		return
	}
	r.ID = newID()
	if r.At.IsZero() {
		r.At = time.Now().UTC()
	}
	r.Instance = l.instance
	r.bound()
	select {
	case l.queue <- &r:
	default:
		n := l.dropped.Add(1)
		now := time.Now().UnixNano()
		if last := l.lastDropLog.Load(); now-last > int64(10*time.Second) && l.lastDropLog.CompareAndSwap(last, now) {
			l.log.Error("audit records dropped: the queue to JetStream is full", "dropped_total", n, "queue", cap(l.queue))
		}
	}
}

// Write stores r in the audit stream at once and waits for JetStream's
// acknowledgement: for a process without a Log, such as the operator's
// CLI minting a credential straight from NATS. It fills r's id and time
// as Append does; instance names the writer.
func Write(ctx context.Context, js jetstream.JetStream, r Record, instance string) error {
	r.ID = newID()
	if r.At.IsZero() {
		r.At = time.Now().UTC()
	}
	r.Instance = instance
	r.bound()
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if _, err := js.Publish(ctx, subjectOf(r), b, jetstream.WithMsgID(r.ID)); err != nil {
		return fmt.Errorf("audit record %s not stored: %w", r.Kind, err)
	}
	return nil
}

// MaxAge is the audit stream's max_age as Open found it: the configured
// one, or the stream's own where it differs (Open warns then); 0 means
// records are kept for ever.
func (l *Log) MaxAge() time.Duration {
	if l == nil {
		return 0
	}
	return l.maxAge
}

// Written, Dropped and Retries count records stored, records dropped (a
// full queue, or unstorable), and publish attempts retried since Open.
func (l *Log) Written() uint64 { return l.written.Load() }
func (l *Log) Dropped() uint64 { return l.dropped.Load() }
func (l *Log) Retries() uint64 { return l.retries.Load() }

// Pending is the number of records not yet stored: queued, or being
// published.
func (l *Log) Pending() int { return len(l.queue) + int(l.inFlight.Load()) }

// errAbandoned ends a publish when Close gave up waiting.
var errAbandoned = errors.New("audit: abandoned at shutdown")

// Health is "ok" while records are being stored, else why not (since the
// last failed publish, until one succeeds).
func (l *Log) Health() string {
	if l == nil {
		return "off"
	}
	if f := l.failing.Load(); f != nil {
		return *f
	}
	return "ok"
}

// Close stops accepting records and waits up to timeout for the queued ones
// to be stored; those still queued then are logged as lost.
func (l *Log) Close(timeout time.Duration) {
	if l == nil {
		return
	}
	l.stop.Do(func() {
		l.closed.Store(true)
		close(l.queue)
	})
	select {
	case <-l.done:
	case <-time.After(timeout):
		l.giveUp.Do(func() { close(l.abandon) }) // the writer gives up, and logs what it lost
		select {
		case <-l.done:
		case <-time.After(time.Second):
		}
	}
}

const batch = 256

// run publishes the queue in batches of asynchronous publishes, each batch
// acknowledged before the next; a record whose publish fails is retried
// (same Nats-Msg-Id) with backoff until stored. A stream that has gone (an
// operator deleted it) is created again.
func (l *Log) run() {
	defer close(l.done)
	buf := make([]Record, 0, batch)
	for r := range l.queue {
		buf = append(buf[:0], *r)
	fill:
		for len(buf) < batch {
			select {
			case r, ok := <-l.queue:
				if !ok {
					break fill
				}
				buf = append(buf, *r)
			default:
				break fill
			}
		}
		for attempt := 0; len(buf) > 0; attempt++ {
			l.inFlight.Store(int64(len(buf)))
			if attempt > 0 {
				l.retries.Add(uint64(len(buf)))
				select {
				case <-time.After(min(time.Duration(attempt)*100*time.Millisecond, 2*time.Second)):
				case <-l.abandon:
					l.log.Error("audit records not stored at shutdown", "records", len(buf)+len(l.queue))
					return
				}
			}
			var err error
			if buf, err = l.publish(buf); errors.Is(err, errAbandoned) {
				l.log.Error("audit records not stored at shutdown", "records", len(buf)+len(l.queue))
				return
			} else if err != nil {
				l.failed(err, len(buf))
			}
		}
		l.inFlight.Store(0)
		l.failing.Store(nil)
	}
}

// failed notes a failed publish round: Health says so, and the log, at
// most every 10 s.
func (l *Log) failed(err error, waiting int) {
	msg := fmt.Sprintf("failing since %s: %v", time.Now().UTC().Format(time.RFC3339), err)
	if l.failing.Load() == nil {
		l.failing.Store(&msg)
	}
	if time.Since(l.lastFailLog) >= 10*time.Second {
		l.lastFailLog = time.Now()
		l.log.Warn("audit records not stored yet; retrying", "err", err, "records", waiting+len(l.queue))
	}
	if (errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrStreamNotFound)) &&
		l.js.Conn().IsConnected() {
		// No stream answers the subject: it may have been deleted.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, serr := l.js.Stream(ctx, Stream); errors.Is(serr, jetstream.ErrStreamNotFound) {
			if _, _, cerr := EnsureStream(ctx, l.js, l.cfg, l.replicas); cerr == nil {
				l.log.Error("the audit stream was gone (deleted?); created it again: records before this are lost unless a backup has them", "stream", Stream)
			}
		}
	}
}

// publish sends recs and returns those not acknowledged, with the last
// error. A record that can never be stored (larger than the server takes)
// is dropped and counted.
func (l *Log) publish(recs []Record) ([]Record, error) {
	type sent struct {
		r Record
		f jetstream.PubAckFuture
	}
	var out []sent
	var failed []Record
	var last error
	for _, r := range recs {
		b, err := json.Marshal(r)
		if err != nil {
			l.log.Error("audit record not encodable", "kind", r.Kind, "err", err)
			l.dropped.Add(1)
			continue
		}
		f, err := l.js.PublishAsync(subjectOf(r), b, jetstream.WithMsgID(r.ID))
		if errors.Is(err, nats.ErrMaxPayload) {
			l.log.Error("audit record larger than the server takes: dropped", "kind", r.Kind, "bytes", len(b))
			l.dropped.Add(1)
			continue
		}
		if err != nil {
			failed, last = append(failed, r), err
			continue
		}
		out = append(out, sent{r, f})
	}
	timeout := time.After(10 * time.Second)
	for i, s := range out {
		select {
		case <-s.f.Ok():
			l.written.Add(1)
		case err := <-s.f.Err():
			failed, last = append(failed, s.r), err
		case <-timeout:
			failed, last = append(failed, s.r), nats.ErrTimeout
		case <-l.abandon:
			for _, rest := range out[i:] {
				failed = append(failed, rest.r)
			}
			return failed, errAbandoned
		}
	}
	return failed, last
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "aud-" + hex.EncodeToString(b[:])
}

// Subjects: a2ad.audit.<kind, two tokens>.<tenant>.<agent>.<task>, so
// that JetStream itself selects a task's, an agent's or a tenant's records.
// The tenant token is "t" and 16 hex digits of the sha256 of the tenant
// name (tenant names are not subject tokens); "~", which no id holds,
// stands for none.
func subjectOf(r Record) string {
	return SubjectPrefix + "." + r.Kind + "." + tenantToken(r.Tenant) + "." + idToken(r.AgentID) + "." + idToken(r.TaskID)
}

func tenantToken(t string) string {
	if t == "" {
		return "~"
	}
	h := sha256.Sum256([]byte(t))
	return "t" + hex.EncodeToString(h[:8])
}

func idToken(id string) string {
	if natsbind.ValidToken(id) {
		return id
	}
	return "~"
}

// Filter selects records for [Query].
type Filter struct {
	// Kind is a kind or a family ending in ".>" ("agent.>"); empty: all.
	Kind   string
	TaskID string
	Tenant string
	Agent  string
	// Since is the earliest At (zero: the stream's start).
	Since time.Time
	// Limit caps the records returned: the newest that match; ≤ 0 means 100.
	Limit int
}

// filterSubject is the stream subject filter selecting f's records.
func (f Filter) filterSubject() string {
	kind := "*.*"
	if f.Kind != "" {
		kind = strings.TrimSuffix(f.Kind, ".>")
		if !strings.Contains(kind, ".") {
			kind += ".*"
		}
	}
	tok := func(v string, t func(string) string) string {
		if v == "" {
			return "*"
		}
		return t(v)
	}
	return SubjectPrefix + "." + kind + "." + tok(f.Tenant, tenantToken) + "." + tok(f.Agent, idToken) + "." + tok(f.TaskID, idToken)
}

// Page is the answer of [Query].
type Page struct {
	// Records are the newest records matching, oldest first.
	Records []Record `json:"records"`
	// More is true when older records match too (a later Since, a larger
	// Limit or a narrower filter shows them).
	More bool `json:"more"`
}

// Query returns the newest f.Limit records matching f, oldest first.
// JetStream selects by kind, tenant, agent and task (the subject); the
// stream is read backwards from its end in windows of growing size that do
// not overlap, so a2ad receives only the records on the subject from the
// newest back to the last one returned. Every consumer it uses is deleted
// before it returns.
func Query(ctx context.Context, js jetstream.JetStream, f Filter) (Page, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	st, err := js.Stream(ctx, Stream)
	if err != nil {
		return Page{}, fmt.Errorf("audit: stream %s: %w", Stream, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return Page{}, fmt.Errorf("audit: stream %s: %w", Stream, err)
	}
	page := Page{Records: []Record{}}
	if info.State.Msgs == 0 {
		return page, nil
	}
	floor, end := info.State.FirstSeq, info.State.LastSeq+1
	if !f.Since.IsZero() {
		// The first record at or after Since, of any kind.
		seq, ok, err := seqAt(ctx, st, f.Since)
		if err != nil || !ok {
			return page, err
		}
		floor = max(floor, seq)
	}
	subject := f.filterSubject()
	keep := func(r *Record) bool { return (f.Tenant == "" || r.Tenant == f.Tenant) && !r.At.Before(f.Since) }
	var found []Record // oldest first
	var seen uint64    // records on the subject read, in [to, end)
	to := end
	for size := uint64(max(4*limit, 256)); to > floor && len(found) < limit; size *= 2 {
		from := floor
		if to-floor > size {
			from = to - size
		}
		recs, n, err := scan(ctx, st, subject, from, to, keep)
		if err != nil {
			return Page{}, err
		}
		found, seen, to = append(recs, found...), seen+n, from
	}
	if found != nil {
		page.Records = found
	}
	if len(found) > limit {
		page.Records, page.More = found[len(found)-limit:], true
	} else if to > floor {
		// Enough found before reaching the floor: do older ones match?
		total, err := pending(ctx, st, subject, floor)
		if err != nil {
			return Page{}, err
		}
		page.More = total > seen
	}
	return page, nil
}

// consumer runs f with an ephemeral pull consumer of cfg on st (no acks,
// in memory, gone after 30 s unused), and deletes it afterwards: queries
// leave nothing behind to count against the stream's consumer limit.
func consumer(ctx context.Context, st jetstream.Stream, cfg jetstream.ConsumerConfig, f func(jetstream.Consumer) error) error {
	cfg.AckPolicy, cfg.MemoryStorage, cfg.Replicas, cfg.InactiveThreshold = jetstream.AckNonePolicy, true, 1, 30*time.Second
	c, err := st.CreateConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("audit: read %s: %w", Stream, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = st.DeleteConsumer(dctx, c.CachedInfo().Name)
	}()
	return f(c)
}

// seqAt is the stream sequence of the first record at or after t.
func seqAt(ctx context.Context, st jetstream.Stream, t time.Time) (seq uint64, ok bool, err error) {
	err = consumer(ctx, st, jetstream.ConsumerConfig{DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &t},
		func(c jetstream.Consumer) error {
			if c.CachedInfo().NumPending == 0 {
				return nil
			}
			msgs, err := c.Fetch(1, jetstream.FetchMaxWait(2*time.Second))
			if err != nil {
				return fmt.Errorf("audit: read %s: %w", Stream, err)
			}
			m, got := <-msgs.Messages()
			if !got {
				return nil
			}
			md, err := m.Metadata()
			if err != nil {
				return fmt.Errorf("audit: read %s: %w", Stream, err)
			}
			seq, ok = md.Sequence.Stream, true
			return nil
		})
	return seq, ok, err
}

// pending is the number of records on subject from stream sequence from on.
func pending(ctx context.Context, st jetstream.Stream, subject string, from uint64) (n uint64, err error) {
	err = consumer(ctx, st, jetstream.ConsumerConfig{FilterSubjects: []string{subject},
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from},
		func(c jetstream.Consumer) error {
			n = c.CachedInfo().NumPending
			return nil
		})
	return n, err
}

// scan reads the records on subject with stream sequences in [from, to),
// oldest first, keeping those keep accepts; seen counts every record read.
func scan(ctx context.Context, st jetstream.Stream, subject string, from, to uint64, keep func(*Record) bool) (out []Record, seen uint64, err error) {
	err = consumer(ctx, st, jetstream.ConsumerConfig{FilterSubjects: []string{subject},
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from},
		func(c jetstream.Consumer) error {
			left := c.CachedInfo().NumPending // on the subject from `from` to the end, when created
			for left > 0 {
				msgs, err := c.Fetch(int(min(left, batch)), jetstream.FetchMaxWait(2*time.Second))
				if err != nil {
					return fmt.Errorf("audit: read %s: %w", Stream, err)
				}
				n := 0
				for m := range msgs.Messages() {
					n++
					left--
					md, err := m.Metadata()
					if err != nil || md.Sequence.Stream >= to {
						left = 0 // past the window
						continue
					}
					seen++
					var r Record
					if json.Unmarshal(m.Data(), &r) == nil && keep(&r) {
						out = append(out, r)
					}
				}
				if err := msgs.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
					return fmt.Errorf("audit: read %s: %w", Stream, err)
				}
				if n == 0 {
					return fmt.Errorf("audit: read %s: no records delivered while %d wait", Stream, left)
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
			}
			return nil
		})
	return out, seen, err
}

// Kinds lists every kind a record may have.
var Kinds = []string{KindDelegationAccepted, KindDelegationReplayed, KindDelegationRefused, KindTransition, KindTransitionRefused,
	KindArtifactVerdict, KindTaskCancelRequested, KindAgentRegistered, KindAgentCardRefused, KindAgentApproved,
	KindAgentQuarantined, KindAgentCredential, KindAgentCredentialRevoked}

// ValidKind reports whether k is one of [Kinds], or a family of them
// ("agent.>", "task.>").
func ValidKind(k string) bool {
	if fam, ok := strings.CutSuffix(k, ".>"); ok {
		for _, kind := range Kinds {
			if strings.HasPrefix(kind, fam+".") {
				return true
			}
		}
		return false
	}
	return slices.Contains(Kinds, k)
}
