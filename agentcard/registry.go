package agentcard

import (
	"bytes"
	"cmp"
	"context"
	"crypto"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a2ad/a2ad/internal/jsretry"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/nats-io/nats.go/jetstream"
)

// Bucket is the JetStream key-value bucket holding one [Record] per agent,
// keyed by agent id. Every a2ad instance on a NATS cluster shares it.
const Bucket = "a2ad_agents"

// Status is an agent's standing with the operator.
type Status string

const (
	// StatusApproved: the card's fingerprint is the approved one.
	StatusApproved Status = "approved"
	// StatusPending: no fingerprint approved yet. A pending agent is
	// invisible to every tenant.
	StatusPending Status = "pending"
	// StatusQuarantined: the card changed after approval, or an operator
	// quarantined the agent. It stays quarantined, whatever it registers
	// next, until [Registry.Approve].
	StatusQuarantined Status = "quarantined"
)

// AgentConfig is the operator's configuration of one agent. Tenants are the
// only source of an agent's visibility: nothing the agent or its card says
// changes them.
type AgentConfig struct {
	// ID is the agent id: the subject of the agent's credential and its NATS
	// subject token (natsbind.ValidToken).
	ID string `yaml:"id"`
	// Tenants may see and delegate to the agent once it is approved.
	Tenants []string `yaml:"tenants"`
	// TrustOnFirstUse approves the first card the agent registers when no
	// fingerprint is approved yet.
	TrustOnFirstUse bool `yaml:"trust_on_first_use"`
	// ApprovedFingerprint pins a card, as [Fingerprint] computes it.
	ApprovedFingerprint string `yaml:"approved_fingerprint"`
	// SigningKeys are PEM files (public keys or certificates) the operator
	// pins for the agent's card signatures; RequireSignature refuses a card
	// none of whose signatures verifies with one of them ([Verify]), and
	// its approval: a card approved before, or stored before the keys
	// changed, is not delegable until a signed one is registered.
	SigningKeys      []string `yaml:"signing_keys"`
	RequireSignature bool     `yaml:"require_signature"`
	// CardURL, when set, is where a2ad fetches the agent's card and
	// refetches it as its Cache-Control says: the agent's origin
	// (https://host, meaning https://host/.well-known/agent-card.json, see
	// [CardURL]) or the card's own URL. Each fetched card is registered like
	// a card the agent sent over NATS, so a changed one puts the agent in
	// quarantine.
	CardURL string `yaml:"card_url"`
	// ConfiguredSkills are the skill ids the rest of the agent's
	// configuration names, each with the keys naming it (for example
	// "evidence_schemas"), for [ConfiguredSkillNotes]; not a YAML key of
	// its own.
	ConfiguredSkills map[string][]string `yaml:"-"`
	// Bindings is the operator's order of the HTTP bindings a2ad may
	// delegate over to this agent, each "JSONRPC" or "HTTP+JSON" (A2A 1.0
	// §5.5); an HTTP interface of a binding not listed is not used. Empty:
	// both, in the card's order. a2ad's NATS binding, where the card
	// offers it, is preferred to any ([SelectInterface]).
	Bindings []string `yaml:"bindings"`
	// AllowedOrigins are origins (scheme://host[:port], RFC 6454: https,
	// or http on a loopback host) an HTTP interface's URL may have besides
	// the origin the card was fetched from (card_url). A card registered
	// over NATS vouches for no origin: its HTTP interfaces are used only
	// at these.
	AllowedOrigins []string `yaml:"allowed_origins"`
	// OutboundAuth is the kind of authentication a2ad presents to the
	// agent over HTTP ([AuthNone], [AuthBearer], [AuthOAuth2]), from the
	// agent's http.auth, for [AuthFindings]; not a YAML key of its own.
	OutboundAuth string `yaml:"-"`
}

// Record is what the registry knows of one agent, stored as JSON in [Bucket]
// under the agent id.
//
// Tenants, Delegable, NotDelegableReason, SignatureVerified, SignedForm,
// SignaturePayload, Warnings, Notes, LastRefusal and Liveness are as the
// [Registry] reading the record has them, from its own configuration,
// scanner, probes and memory: the stored values are the writer's, and are
// not read back (Liveness and LastRefusal are not stored at all).
type Record struct {
	AgentID string `json:"agent_id"`
	// Card is the last card the agent registered, in its A2A 1.0 form
	// ([Normalize]), compacted (insignificant whitespace removed). It is
	// null for a configured agent that has not registered one yet.
	Card json.RawMessage `json:"card"`
	// ReceivedCard is the card as the agent sent it, compacted, when
	// Normalize rewrote it (a 0.3 card) and it carries signatures: what its
	// signer signed.
	ReceivedCard json.RawMessage `json:"received_card,omitempty"`
	// Fingerprint is Card's [Fingerprint].
	Fingerprint string `json:"fingerprint"`
	// ApprovedFingerprint is the fingerprint last approved, by an operator,
	// by configuration or by trust on first use. It is kept through a
	// quarantine.
	ApprovedFingerprint string `json:"approved_fingerprint,omitempty"`
	Status              Status `json:"status"`
	StatusReason        string `json:"status_reason,omitempty"`
	// Tenants are those of the agent's configuration, as this registry has
	// it; empty for an agent that is not configured.
	Tenants []string `json:"tenants,omitempty"`
	// Delegable is true when Status is approved, the configuration requires
	// no signature or one verifies (SignatureVerified), and the card has an
	// interface a2ad delegates over ([SelectInterface]: a [NATSInterface],
	// else a JSONRPC or HTTP+JSON one at an origin the card's CardOrigin or
	// the configuration vouches for), and this instance does not find the
	// agent offline (Liveness); otherwise NotDelegableReason says why not.
	// Binding and Interface stay set for an agent that is only offline.
	Delegable          bool   `json:"delegable"`
	NotDelegableReason string `json:"not_delegable_reason,omitempty"`
	// Binding is the binding a2ad delegates over when Delegable
	// ([BindingNATS], [BindingJSONRPC], [BindingHTTPJSON]) and Interface
	// the card's entry it uses ([SelectInterface]).
	Binding   string     `json:"binding,omitempty"`
	Interface *Interface `json:"interface,omitempty"`
	// CardOrigin is the origin (scheme://host[:port]) of the URL the card
	// was fetched from ([Registry.RegisterFetched]); "" for a card the
	// agent registered over NATS, which vouches for no HTTP origin.
	CardOrigin string `json:"card_origin,omitempty"`
	// AuthWarnings say where a2ad cannot authenticate to an HTTP agent as
	// its card's securityRequirements ask, with the configured http.auth
	// ([AuthFindings]); the mismatches that still work are Notes.
	AuthWarnings []Note    `json:"auth_warnings,omitempty"`
	RegisteredAt time.Time `json:"registered_at"`
	UpdatedAt    time.Time `json:"updated_at"`
	// ApprovedCard is the card last approved, kept while a changed card holds
	// the agent in quarantine; Changes are the JSON pointers (RFC 6901) where
	// the current card differs from it (at most 50), for the operator's review.
	ApprovedCard json.RawMessage `json:"approved_card,omitempty"`
	Changes      []string        `json:"changes,omitempty"`
	// SignatureVerified is true when one of the card's signatures verifies
	// with a key the operator pins for the agent now.
	SignatureVerified bool `json:"signature_verified,omitempty"`
	// SignedForm says which card the verified signature signed: the card as
	// the agent sent it ("as-received"), or the 1.0 form of a 0.3 card
	// ("normalized"); SignaturePayload says how that card became the signed
	// bytes: the A2A 1.0 §8.4 payload ("defaults-removed") or the card as
	// published ("defaults-kept"); see [Verify].
	SignedForm       CardForm    `json:"signed_form,omitempty"`
	SignaturePayload PayloadForm `json:"signature_payload,omitempty"`
	// Warnings flag card text phrased as instructions to a model, each a
	// JSON pointer into Card and a kind ([InjectionWarnings]): for the
	// operator's review. They do not change the status; card text reaches
	// hosts as data either way.
	Warnings []Warning `json:"warnings,omitempty"`
	// LastRefusal is the last card of the agent this registry refused, or
	// failed to fetch ([Registry.NoteRefusal]); nil if none since it started.
	LastRefusal *Refusal `json:"last_refusal,omitempty"`
	// Notes are what a2ad noticed in Card without refusing it ([Check]):
	// members it does not know (kept in Card and its fingerprint, not acted
	// on), interfaces and links nobody could use. For the operator's review.
	Notes []Note `json:"notes,omitempty"`
	// Liveness is whether this a2ad instance reaches the agent now
	// ([Registry.Observe]): in memory, per instance, never stored. An
	// agent that is offline is not Delegable, with the NotDelegableReason
	// "offline: " and Liveness.Reason.
	Liveness Liveness `json:"liveness,omitzero"`
	// offline: Delegable is false only because the agent is offline.
	offline bool
}

// ErrAgentNotFound means the agent is not registered, or not visible to the
// tenant asking: the two are indistinguishable on purpose.
var ErrAgentNotFound = errors.New("agentcard: agent not found")

// ErrSkillNotFound means the agent's card has no skill with the requested id.
var ErrSkillNotFound = errors.New("agentcard: skill not found")

// SkillNotFoundError is [ErrSkillNotFound] for one agent: its text, which
// hosts read, names the skills the approved card has (the first 20, ids
// clipped to 64 bytes: the ids are the agent's text, shown as agents_list
// shows them).
type SkillNotFoundError struct {
	AgentID, Skill string
	Skills         []string // the card's skill ids
}

func (e *SkillNotFoundError) Error() string {
	names := make([]string, 0, min(len(e.Skills), 20))
	for _, s := range e.Skills[:min(len(e.Skills), 20)] {
		names = append(names, strconv.Quote(truncate(s, 64)))
	}
	more := ""
	if len(e.Skills) > 20 {
		more = fmt.Sprintf(" and %d more", len(e.Skills)-20)
	}
	return fmt.Sprintf("agent %s has no skill %q; its skills are %s%s (agents_list lists them)", e.AgentID, truncate(e.Skill, 64), strings.Join(names, ", "), more)
}

// Is makes a SkillNotFoundError [ErrSkillNotFound] for errors.Is.
func (e *SkillNotFoundError) Is(target error) bool { return target == ErrSkillNotFound }

// ErrFingerprintMismatch means an approval named a fingerprint that is not
// the one of the agent's current card.
var ErrFingerprintMismatch = errors.New("agentcard: fingerprint is not the current card's")

// NotDelegableError refuses a delegation to a visible agent that cannot take
// one; Reason is the record's NotDelegableReason.
type NotDelegableError struct {
	AgentID string
	Reason  string
	// Offline: the agent is refused only because this instance does not
	// reach it now (Reason "offline: …", [ReachabilityOffline]).
	Offline bool
}

func (e *NotDelegableError) Error() string {
	return "agent " + e.AgentID + " is not delegable: " + e.Reason
}

// casAttempts bounds the writes of one change: the first try and 5 retries
// after a concurrent write won the compare-and-swap.
const casAttempts = 6

// Registry decides which agents a2ad may delegate to. Its records live in
// JetStream KV and every read goes there, so several instances sharing the
// bucket agree; writes are compare-and-swap on the key's revision. What
// follows from the configuration is derived when a record is read, so that
// a changed configuration (keys pinned, rotated, a signature required)
// applies to records stored before it. A Registry is safe for concurrent
// use.
type Registry struct {
	kv     jetstream.KeyValue
	agents map[string]AgentConfig
	keys   map[string][]crypto.PublicKey // pinned card-signing keys per agent
	// writers serializes this instance's changes to one agent (striped by
	// id), so that compare-and-swap retries are spent only on races with
	// other instances.
	writers [32]sync.Mutex

	mu       sync.Mutex
	checks   map[string]cardCheck // per agent, of its last card read
	refusals map[string]Refusal   // per configured agent

	// views are the stored records, decoded, with their parsed cards, by
	// agent id: kept current by one watcher of the bucket (started by the
	// first ForDelegation) and by this registry's own writes. See
	// [Registry.ForDelegation].
	viewMu    sync.Mutex
	views     map[string]*agentView
	watchOnce sync.Once
	live      atomic.Bool // the watcher has delivered every stored record and runs

	subMu sync.Mutex
	subs  map[int]func(agentID string) // of Subscribe, by handle
	subN  int

	liveMu   sync.Mutex
	liveness map[string]*liveness // of Observe, by agent id
}

// Subscribe calls fn with an agent's id after each change this registry
// sees to what it says of that agent: a write to the agent's record by any
// instance (seen by the bucket's watcher, which Subscribe starts), the
// record's removal, and changes this instance derives on its own (see
// [Registry.Changed]). Calls come from one goroutine per source and may
// repeat for one change; fn must not block (hand the id to a goroutine of
// your own). The returned function ends the subscription.
func (r *Registry) Subscribe(fn func(agentID string)) (cancel func()) {
	r.subMu.Lock()
	if r.subs == nil {
		r.subs = map[int]func(string){}
	}
	r.subN++
	n := r.subN
	r.subs[n] = fn
	r.subMu.Unlock()
	r.watchOnce.Do(r.startWatch)
	return func() {
		r.subMu.Lock()
		delete(r.subs, n)
		r.subMu.Unlock()
	}
}

// Changed tells the subscribers ([Registry.Subscribe]) that what this
// registry says of agentID changed without a write to its record: its
// liveness, say.
func (r *Registry) Changed(agentID string) {
	r.subMu.Lock()
	fns := make([]func(string), 0, len(r.subs))
	for _, fn := range r.subs {
		fns = append(fns, fn)
	}
	r.subMu.Unlock()
	for _, fn := range fns {
		fn(agentID)
	}
}

// agentView is one stored record as decoded (before [Registry.view]) with
// its stored card parsed once.
type agentView struct {
	rev     uint64
	rec     Record
	card    *Card // nil when the record has no card or cardErr
	cardErr error
}

// cardCheck is what a registry concluded of one stored card: whether its
// NATS interfaces serve the agent, whether its signatures verify with the
// pinned keys, and what its text is flagged for. All depend only on the
// card's bytes, the configuration and the scanner, so a check is cached per
// agent until its card changes.
type cardCheck struct {
	sum      [sha256.Size]byte // of the card, a NUL, the received card, a NUL, the card's origin
	binding  string            // SelectInterface's fault
	iface    Interface         // and its choice, of binding name
	bindName string
	authWarn []Note // AuthFindings, for an HTTP binding; shared
	signed   CardForm
	payload  PayloadForm
	sigErr   error     // nil when a signature verified
	warnings []Warning // InjectionWarnings; shared, clone before handing out
	notes    []Note    // of Check; shared likewise
}

// NewRegistry creates or updates [Bucket] (file storage, history 5,
// max(1, replicas) replicas) and returns a registry applying cfg. cfg is
// checked: ids must be valid NATS tokens and unique, tenant names non-empty,
// approved fingerprints shaped as [Fingerprint] returns them.
func NewRegistry(ctx context.Context, js jetstream.JetStream, cfg []AgentConfig, replicas int) (*Registry, error) {
	agents := make(map[string]AgentConfig, len(cfg))
	keys := map[string][]crypto.PublicKey{}
	for i, a := range cfg {
		switch {
		case !natsbind.ValidToken(a.ID):
			return nil, fmt.Errorf("agentcard: agents[%d]: id %q is not 1..128 of [A-Za-z0-9_-]", i, truncate(a.ID, 64))
		case a.ApprovedFingerprint != "" && !validFingerprint(a.ApprovedFingerprint):
			return nil, fmt.Errorf("agentcard: agent %s: approved_fingerprint %q is not sha256:<64 lowercase hex>", a.ID, truncate(a.ApprovedFingerprint, 80))
		case slices.Contains(a.Tenants, ""):
			return nil, fmt.Errorf("agentcard: agent %s: empty tenant name", a.ID)
		case a.RequireSignature && len(a.SigningKeys) == 0:
			return nil, fmt.Errorf("agentcard: agent %s: require_signature needs signing_keys to verify with", a.ID)
		}
		if err := checkHTTPConfig(a); err != nil {
			return nil, fmt.Errorf("agentcard: agent %s: %w", a.ID, err)
		}
		if len(a.SigningKeys) > 0 {
			k, err := ReadPublicKeys(a.SigningKeys)
			if err != nil {
				return nil, fmt.Errorf("agentcard: agent %s: %w", a.ID, err)
			}
			keys[a.ID] = k
		}
		if _, dup := agents[a.ID]; dup {
			return nil, fmt.Errorf("agentcard: agent %s configured twice", a.ID)
		}
		a.Tenants = slices.Clone(a.Tenants)
		a.Bindings, a.AllowedOrigins = slices.Clone(a.Bindings), slices.Clone(a.AllowedOrigins)
		agents[a.ID] = a
	}
	var kv jetstream.KeyValue
	// Instances starting together on a fresh cluster race to create the
	// bucket; the losers' requests time out while it is created.
	err := jsretry.Do(ctx, time.Minute, func() (err error) {
		kv, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      Bucket,
			Description: "a2ad agent registry: agent cards, fingerprints, approvals",
			History:     5,
			Replicas:    max(1, replicas),
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("agentcard: bucket %s: %w", Bucket, err)
	}
	return &Registry{kv: kv, agents: agents, keys: keys, checks: map[string]cardCheck{}, refusals: map[string]Refusal{}}, nil
}

// Register records the card an agent presents, raw being the exact bytes it
// sent, and returns the resulting record. agentID must satisfy
// natsbind.ValidToken (else an error wrapping natsbind.ErrBadSubject); raw
// must [Normalize] and [Parse] (else its *[ValidationError] or
// *[CardError], naming every fault); with
// require_signature, one of its signatures must verify with the pinned keys
// (else an error wrapping [ErrSignature]), over the card as received, or,
// for a 0.3 card, over its 1.0 form. A refused card of a configured agent
// becomes its LastRefusal ([RefusalRegistration]). The status follows from
// the configuration and from what is stored:
//
//   - a quarantined agent stays quarantined;
//   - a card whose fingerprint is approved (in the record or in the
//     configuration) is approved;
//   - with no fingerprint approved at all, a configured agent with
//     trust_on_first_use is approved at this card, any other is pending;
//   - otherwise the card changed since approval: quarantined, keeping the
//     approved fingerprint.
//
// Registering the current card again changes only UpdatedAt (and the
// stored card when its signatures changed). Concurrent changes to one
// agent are serialized: within a Registry by a lock, across instances by
// compare-and-swap, retried up to 5 times (with jittered backoff) after
// losing a race.
func (r *Registry) Register(ctx context.Context, agentID string, raw []byte) (*Record, error) {
	rec, _, err := r.RegisterChanged(ctx, agentID, raw)
	return rec, err
}

// RegisterChanged is [Registry.Register], and reports whether the
// registration changed the agent's status or fingerprint (a first card
// does): what an operator must see, where the current card again changes
// nothing they look at.
func (r *Registry) RegisterChanged(ctx context.Context, agentID string, raw []byte) (*Record, bool, error) {
	return r.registerFrom(ctx, agentID, raw, "")
}

// RegisterFetched is [Registry.RegisterChanged] for a card a2ad fetched
// from cardURL: the record's CardOrigin becomes cardURL's origin
// ([OriginOf]), which the card's HTTP interfaces may use
// ([SelectInterface]). A card registered over NATS has none.
func (r *Registry) RegisterFetched(ctx context.Context, agentID string, raw []byte, cardURL string) (*Record, bool, error) {
	return r.registerFrom(ctx, agentID, raw, OriginOf(cardURL))
}

func (r *Registry) registerFrom(ctx context.Context, agentID string, raw []byte, origin string) (*Record, bool, error) {
	if !natsbind.ValidToken(agentID) {
		return nil, false, fmt.Errorf("%w: agent id %q", natsbind.ErrBadSubject, truncate(agentID, 64))
	}
	rec, prev, err := r.register(ctx, agentID, raw, origin)
	if err != nil {
		r.NoteRefusal(agentID, RefusalRegistration, err)
		return nil, false, err
	}
	return rec, prev == nil || prev.Status != rec.Status || prev.Fingerprint != rec.Fingerprint || prev.CardOrigin != rec.CardOrigin, nil
}

// register returns the stored record and the one it replaced (nil: none).
func (r *Registry) register(ctx context.Context, agentID string, raw []byte, origin string) (*Record, *Record, error) {
	if len(raw) > MaxCardBytes {
		return nil, nil, invalid("", "card is %d bytes, more than %d", len(raw), MaxCardBytes)
	}
	normal, card, _, fp, err := read(raw) // a 0.3 card is kept in its 1.0 form
	if err != nil {
		return nil, nil, err
	}
	// Stored compact, as the record's JSON encoding would anyway; returned
	// records then equal stored ones.
	stored, err := compact(normal)
	if err != nil {
		return nil, nil, err
	}
	var received []byte
	if len(card.Signatures) > 0 && !bytes.Equal(normal, raw) {
		if received, err = compact(raw); err != nil {
			return nil, nil, err
		}
	}
	if r.agents[agentID].RequireSignature {
		if c := r.check(agentID, stored, received, origin); c.sigErr != nil {
			return nil, nil, c.sigErr
		}
	}
	var prev *Record // the record the last attempt of change read
	rec, err := r.change(ctx, agentID, func(old *Record, now time.Time) (*Record, error) {
		prev = old
		rec := r.registration(old, agentID, stored, received, fp, now)
		rec.CardOrigin = origin
		return rec, nil
	})
	return rec, prev, err
}

func compact(raw []byte) ([]byte, error) {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// changedPrefix begins every StatusReason of a quarantine a changed card
// caused, and only those.
const changedPrefix = "card changed since approval (approved "

func (r *Registry) registration(old *Record, agentID string, raw, received []byte, fp string, now time.Time) *Record {
	ac, configured := r.agents[agentID]
	rec := &Record{AgentID: agentID, Card: raw, ReceivedCard: received, Fingerprint: fp, RegisteredAt: now, UpdatedAt: now}
	if old != nil {
		rec.RegisteredAt = old.RegisteredAt
		rec.ApprovedFingerprint = old.ApprovedFingerprint
		// Same content in other bytes: keep the stored ones, unless the
		// signatures changed, which the fingerprint does not cover.
		if old.Fingerprint == fp && received == nil && old.ReceivedCard == nil && sameSignatures(old.Card, raw) {
			rec.Card = old.Card
		}
	}
	changed := func(approved string) string {
		return changedPrefix + approved + ", presented " + fp + ")"
	}
	switch {
	case old != nil && old.Status == StatusQuarantined:
		// Only an operator lifts a quarantine: otherwise an agent could
		// leave one by presenting its approved card again. A quarantine a
		// changed card caused says what the current card is; an operator's
		// reason stays until another card than the last one comes.
		rec.Status, rec.StatusReason = StatusQuarantined, old.StatusReason
		switch {
		case rec.ApprovedFingerprint == "":
		case fp == rec.ApprovedFingerprint && strings.HasPrefix(old.StatusReason, changedPrefix):
			rec.StatusReason = changedPrefix + fp + "), then presented the approved card again: an operator must approve it"
		case fp != rec.ApprovedFingerprint && (fp != old.Fingerprint || strings.HasPrefix(old.StatusReason, changedPrefix)):
			rec.StatusReason = changed(rec.ApprovedFingerprint)
		}
	case fp == rec.ApprovedFingerprint || fp == ac.ApprovedFingerprint:
		rec.Status, rec.ApprovedFingerprint = StatusApproved, fp
	case rec.ApprovedFingerprint == "" && ac.ApprovedFingerprint == "":
		switch {
		case configured && ac.TrustOnFirstUse:
			rec.Status, rec.ApprovedFingerprint = StatusApproved, fp
		case configured:
			rec.Status, rec.StatusReason = StatusPending, "awaiting operator approval"
		default:
			rec.Status, rec.StatusReason = StatusPending, "not configured; awaiting operator approval"
		}
	default:
		if rec.ApprovedFingerprint == "" {
			rec.ApprovedFingerprint = ac.ApprovedFingerprint
		}
		rec.Status, rec.StatusReason = StatusQuarantined, changed(rec.ApprovedFingerprint)
	}
	// Keep the approved card beside a changed one, and say what changed.
	if rec.Status == StatusQuarantined && old != nil && fp != rec.ApprovedFingerprint {
		switch {
		case len(old.ApprovedCard) > 0:
			rec.ApprovedCard = old.ApprovedCard
		case old.Fingerprint == rec.ApprovedFingerprint:
			rec.ApprovedCard = old.Card
		}
		if len(rec.ApprovedCard) > 0 {
			rec.Changes = Changes(rec.ApprovedCard, rec.Card)
		}
	}
	return rec
}

// sameSignatures reports whether two compact cards carry the same
// signatures member, byte for byte.
func sameSignatures(a, b []byte) bool {
	var x, y struct {
		Signatures json.RawMessage `json:"signatures"`
	}
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && bytes.Equal(x.Signatures, y.Signatures)
}

// signatureRequired is the NotDelegableReason of an approved card that
// require_signature refuses.
const signatureRequired = "a signature is required and the card's signatures do not verify with the pinned keys"

// noCard is the StatusReason and NotDelegableReason of a configured agent
// without a registered card.
const noCard = "no card registered yet"

// view sets what rec says as this registry reads it (see [Record]): the
// tenants, the signature check and the refusal from this registry's
// configuration and memory, and from them whether the agent is delegable;
// the warnings from this registry's scanner, so that a record stored by an
// older one (or before a kind was added) is flagged as a new one would be.
func (r *Registry) view(rec *Record) {
	ac := r.agents[rec.AgentID]
	rec.Tenants = slices.Clone(ac.Tenants)
	rec.LastRefusal = r.lastRefusal(rec.AgentID)
	rec.SignatureVerified, rec.SignedForm, rec.SignaturePayload = false, "", ""
	rec.Delegable, rec.NotDelegableReason = false, ""
	rec.Binding, rec.Interface, rec.AuthWarnings = "", nil, nil
	rec.Warnings, rec.Notes = nil, nil
	rec.Liveness, rec.offline = r.Liveness(rec.AgentID), false
	if len(rec.Card) == 0 {
		rec.NotDelegableReason = noCard
		return
	}
	c := r.check(rec.AgentID, rec.Card, rec.ReceivedCard, rec.CardOrigin)
	rec.Warnings = slices.Clone(c.warnings)
	rec.Notes = slices.Clone(c.notes)
	rec.AuthWarnings = slices.Clone(c.authWarn)
	if c.sigErr == nil {
		rec.SignatureVerified, rec.SignedForm, rec.SignaturePayload = true, c.signed, c.payload
	}
	switch {
	case rec.Status != StatusApproved:
		rec.NotDelegableReason = string(rec.Status)
		if rec.StatusReason != "" {
			rec.NotDelegableReason += ": " + rec.StatusReason
		}
	case ac.RequireSignature && !rec.SignatureVerified:
		rec.NotDelegableReason = signatureRequired
	case c.binding != "":
		rec.NotDelegableReason = c.binding
	default:
		in := c.iface
		rec.Delegable, rec.Binding, rec.Interface = true, c.bindName, &in
		if rec.Liveness.Reachability == ReachabilityOffline {
			rec.Delegable, rec.offline = false, true
			rec.NotDelegableReason = "offline: " + rec.Liveness.Reason
		}
	}
}

// check returns the [cardCheck] of the agent's card, from the cache when
// the card is the one last checked.
func (r *Registry) check(agentID string, card, received []byte, origin string) cardCheck {
	h := sha256.New()
	h.Write(card)
	h.Write([]byte{0}) // never in JSON text
	h.Write(received)
	h.Write([]byte{0})
	h.Write([]byte(origin))
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	r.mu.Lock()
	c, ok := r.checks[agentID]
	r.mu.Unlock()
	if ok && c.sum == sum {
		return c
	}
	c = cardCheck{sum: sum}
	var ifaces struct {
		SupportedInterfaces  []Interface                `json:"supportedInterfaces"`
		SecuritySchemes      map[string]json.RawMessage `json:"securitySchemes"`
		SecurityRequirements []json.RawMessage          `json:"securityRequirements"`
	}
	ac := r.agents[agentID]
	var authNotes []Note
	if err := json.Unmarshal(card, &ifaces); err != nil {
		c.binding = "stored card does not decode"
	} else {
		c.iface, c.bindName, c.binding = selectInterface(ifaces.SupportedInterfaces,
			SelectOptions{Prefer: ac.Bindings, CardOrigin: origin, AllowedOrigins: ac.AllowedOrigins})
		if c.binding == "" && c.bindName != BindingNATS {
			c.authWarn, authNotes = authFindings(ifaces.SecuritySchemes, ifaces.SecurityRequirements, ac.OutboundAuth)
		}
	}
	if parsed, notes, err := inspect(card); err == nil {
		c.warnings = InjectionWarnings(parsed)
		c.notes = append(notes, agentNotes(agentID, ifaces.SupportedInterfaces)...)
		c.notes = append(c.notes, ConfiguredSkillNotes(ac, parsed)...)
		c.notes = append(c.notes, authNotes...)
	}
	c.signed, c.payload, c.sigErr = r.verify(agentID, card, received)
	r.mu.Lock()
	r.checks[agentID] = c
	r.mu.Unlock()
	return c
}

// verify checks the card's signatures with the keys pinned for the agent:
// over the card as the agent sent it (received, when Normalize rewrote
// it), then over the card's 1.0 form. The error wraps ErrSignature, also
// when no key is pinned.
func (r *Registry) verify(agentID string, card, received []byte) (CardForm, PayloadForm, error) {
	keys := r.keys[agentID]
	if len(keys) == 0 {
		return "", "", fmt.Errorf("%w: no key is pinned for agent %s", ErrSignature, agentID)
	}
	if received != nil {
		if v, err := Verify(received, keys); err == nil {
			return SignedAsReceived, v.Payload, nil
		}
	}
	v, err := Verify(card, keys)
	switch {
	case err != nil:
		return "", "", err
	case received != nil:
		return SignedNormalized, v.Payload, nil
	}
	return SignedAsReceived, v.Payload, nil
}

// Approve approves the agent's current card: fingerprint must be the
// record's Fingerprint (else an error wrapping [ErrFingerprintMismatch]),
// and, when the configuration requires a signature, one of the card's must
// verify with the pinned keys (else an error wrapping [ErrSignature]).
// The agent becomes approved, also out of pending or quarantined. Approving
// an agent that is not configured pins its card but shows it to no tenant
// until the configuration names it.
func (r *Registry) Approve(ctx context.Context, agentID, fingerprint string) (*Record, error) {
	return r.change(ctx, agentID, func(old *Record, now time.Time) (*Record, error) {
		if old == nil {
			return nil, ErrAgentNotFound
		}
		if fingerprint != old.Fingerprint {
			return nil, fmt.Errorf("%w: agent %s presents %s, not %s", ErrFingerprintMismatch, agentID, old.Fingerprint, truncate(fingerprint, 80))
		}
		if r.agents[agentID].RequireSignature && !old.SignatureVerified {
			return nil, fmt.Errorf("%w: agent %s: %s", ErrSignature, agentID, signatureRequired)
		}
		rec := *old
		rec.Status, rec.StatusReason, rec.ApprovedFingerprint, rec.UpdatedAt = StatusApproved, "", fingerprint, now
		rec.ApprovedCard, rec.Changes = nil, nil
		return &rec, nil
	})
}

// Quarantine stops delegations to the agent until [Registry.Approve]; reason
// (default "quarantined by operator") becomes the StatusReason. The approved
// fingerprint is kept.
func (r *Registry) Quarantine(ctx context.Context, agentID, reason string) (*Record, error) {
	if reason == "" {
		reason = "quarantined by operator"
	}
	return r.change(ctx, agentID, func(old *Record, now time.Time) (*Record, error) {
		if old == nil {
			return nil, ErrAgentNotFound
		}
		rec := *old
		rec.Status, rec.StatusReason, rec.UpdatedAt = StatusQuarantined, reason, now
		return &rec, nil
	})
}

// storedCard decodes a card that passed Parse when it was registered; it
// skips the canonicalization, which is Parse's most expensive step.
func storedCard(rec *Record) (*Card, error) {
	c, _, err := inspect(rec.Card)
	if err != nil {
		return nil, fmt.Errorf("agentcard: stored card of %s: %w", rec.AgentID, err)
	}
	return c, nil
}

// change applies next to the agent's stored record (nil when there is none)
// and writes the result with compare-and-swap, retrying on a lost race.
func (r *Registry) change(ctx context.Context, agentID string, next func(old *Record, now time.Time) (*Record, error)) (*Record, error) {
	if !natsbind.ValidToken(agentID) {
		return nil, ErrAgentNotFound
	}
	h := fnv.New32a()
	h.Write([]byte(agentID))
	mu := &r.writers[h.Sum32()%uint32(len(r.writers))]
	mu.Lock()
	defer mu.Unlock()
	var lost error
	for attempt := range casAttempts {
		if attempt > 0 {
			// Exponential backoff with full jitter spreads contenders apart.
			t := time.NewTimer(rand.N(2 * time.Millisecond << attempt))
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			case <-t.C:
			}
		}
		old, rev, err := r.load(ctx, agentID)
		if err != nil && !errors.Is(err, ErrAgentNotFound) {
			return nil, err
		}
		rec, err := next(old, time.Now().UTC())
		if err != nil {
			return nil, err
		}
		r.view(rec)
		stored := *rec
		// This instance's memory, not the agent's record.
		stored.LastRefusal, stored.Liveness = nil, Liveness{}
		body, err := encodeRecord(&stored)
		if err != nil {
			return nil, err
		}
		var wrote uint64
		if old == nil {
			wrote, err = r.kv.Create(ctx, agentID, body)
		} else {
			wrote, err = r.kv.Update(ctx, agentID, body, rev)
		}
		if err == nil {
			// This registry's delegations see its own change at once.
			if _, err := r.keep(agentID, wrote, body); err != nil {
				r.forget(agentID, wrote+1)
			}
			return rec, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return nil, fmt.Errorf("agentcard: write %s: %w", agentID, err)
		}
		lost = err
	}
	return nil, fmt.Errorf("agentcard: write %s: lost %d compare-and-swap races: %w", agentID, casAttempts, lost)
}

// encodeRecord keeps the card's characters as sent: json.Marshal would
// escape <, > and & inside it.
func encodeRecord(rec *Record) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(rec); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// load reads the agent's record and its revision; ErrAgentNotFound if none.
func (r *Registry) load(ctx context.Context, agentID string) (*Record, uint64, error) {
	var e jetstream.KeyValueEntry
	err := jsretry.Do(ctx, 20*time.Second, func() (err error) { e, err = r.kv.Get(ctx, agentID); return err })
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, 0, ErrAgentNotFound
	}
	if err != nil {
		return nil, 0, fmt.Errorf("agentcard: read %s: %w", agentID, err)
	}
	rec, err := r.decode(e)
	return rec, e.Revision(), err
}

func (r *Registry) decode(e jetstream.KeyValueEntry) (*Record, error) {
	var rec Record
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return nil, fmt.Errorf("agentcard: stored record %s: %w", e.Key(), err)
	}
	r.view(&rec)
	return &rec, nil
}

// Get returns the agent's record whatever its status: the operator's view.
// A configured agent that never registered a card has a record without
// one, pending ([Registry.List]). ErrAgentNotFound if the agent is neither
// configured nor registered.
func (r *Registry) Get(ctx context.Context, agentID string) (*Record, error) {
	if !natsbind.ValidToken(agentID) {
		return nil, ErrAgentNotFound
	}
	rec, _, err := r.load(ctx, agentID)
	if errors.Is(err, ErrAgentNotFound) {
		if rec := r.unregistered(agentID); rec != nil {
			return rec, nil
		}
	}
	return rec, err
}

// unregistered is the record of a configured agent without a stored one;
// nil for an agent that is not configured.
func (r *Registry) unregistered(agentID string) *Record {
	if _, ok := r.agents[agentID]; !ok {
		return nil
	}
	rec := &Record{AgentID: agentID, Status: StatusPending, StatusReason: noCard}
	r.view(rec)
	return rec
}

// Visible returns the agent's record if tenant may see it: the agent's
// configuration names tenant and the agent is not pending. Otherwise, and
// for an unknown agent, ErrAgentNotFound.
func (r *Registry) Visible(ctx context.Context, tenant, agentID string) (*Record, error) {
	if !slices.Contains(r.agents[agentID].Tenants, tenant) {
		return nil, ErrAgentNotFound
	}
	rec, err := r.Get(ctx, agentID)
	if err != nil {
		return nil, err
	}
	if !r.visible(rec, tenant) {
		return nil, ErrAgentNotFound
	}
	return rec, nil
}

func (r *Registry) visible(rec *Record, tenant string) bool {
	return rec.Status != StatusPending && slices.Contains(rec.Tenants, tenant)
}

// List returns the records tenant may see (as [Registry.Visible]), sorted by
// agent id; tenant "" lists every record, the operator's view, which also
// has every configured agent without a card, pending with the
// NotDelegableReason "no card registered yet" (and its LastRefusal, which
// says why, if a2ad refused or could not fetch its card). The result is
// empty, not nil, when there is none.
func (r *Registry) List(ctx context.Context, tenant string) ([]Record, error) {
	w, err := r.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("agentcard: list: %w", err)
	}
	defer w.Stop()
	out := []Record{}
	seen := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("agentcard: list: watch closed")
			}
			if e == nil { // every current value has been delivered
				if tenant == "" {
					for id := range r.agents {
						if !seen[id] {
							out = append(out, *r.unregistered(id))
						}
					}
				}
				slices.SortFunc(out, func(a, b Record) int { return cmp.Compare(a.AgentID, b.AgentID) })
				return out, nil
			}
			rec, err := r.decode(e)
			if err != nil {
				return nil, err
			}
			seen[rec.AgentID] = true
			if tenant == "" || r.visible(rec, tenant) {
				out = append(out, *rec)
			}
		}
	}
}

// ForDelegation returns the record and parsed card of an agent tenant may
// delegate to, with the requested skill present. Errors: ErrAgentNotFound if
// tenant cannot see the agent; *[NotDelegableError] if it is visible but not
// delegable (quarantined, no interface a2ad delegates over: [SelectInterface],
// or offline: [ReachabilityOffline], with Offline set); an error wrapping
// [ErrSkillNotFound] if the card lacks skillID. The card is shared with
// later calls: do not modify it.
//
// It reads the agent's record from memory, not from the bucket: one watcher
// of the bucket (started by the first call) keeps each stored record there,
// decoded, with its card parsed, so a delegation neither reads nor decodes
// it. A change made through this registry (a registration, an approval, a
// quarantine) applies to the next call at once; one made through another
// instance as soon as this instance's watcher delivers it, normally within
// milliseconds. An agent not in memory, or a watcher not (or no longer)
// running, means a read of the bucket, as [Registry.Get] makes.
func (r *Registry) ForDelegation(ctx context.Context, tenant, agentID, skillID string) (*Record, *Card, error) {
	if !slices.Contains(r.agents[agentID].Tenants, tenant) {
		return nil, nil, ErrAgentNotFound
	}
	v, rec, err := r.viewedAgent(ctx, agentID)
	if err != nil {
		return nil, nil, err
	}
	if rec == nil || !r.visible(rec, tenant) {
		return nil, nil, ErrAgentNotFound
	}
	if !rec.Delegable {
		return nil, nil, &NotDelegableError{AgentID: agentID, Reason: rec.NotDelegableReason, Offline: rec.offline}
	}
	if v.cardErr != nil {
		return nil, nil, v.cardErr
	}
	if _, ok := v.card.Skill(skillID); !ok {
		e := &SkillNotFoundError{AgentID: agentID, Skill: skillID}
		for _, sk := range v.card.Skills {
			e.Skills = append(e.Skills, sk.ID)
		}
		return nil, nil, e
	}
	return rec, v.card, nil
}

// agentView is the agent's stored record from memory, or else read from the
// bucket; nil (and no error) when none is stored.
// viewedAgent returns agentID's view (nil: none stored) and its record as
// this registry reads it ([Registry.view]; an unregistered configured
// agent's, or nil for an agent neither stored nor configured).
func (r *Registry) viewedAgent(ctx context.Context, agentID string) (*agentView, *Record, error) {
	v, err := r.agentView(ctx, agentID)
	if err != nil {
		return nil, nil, err
	}
	var rec *Record
	if v == nil {
		rec = r.unregistered(agentID)
	} else {
		c := v.rec
		rec = &c
		r.view(rec)
	}
	return v, rec, nil
}

func (r *Registry) agentView(ctx context.Context, agentID string) (*agentView, error) {
	r.watchOnce.Do(r.startWatch)
	if r.live.Load() {
		r.viewMu.Lock()
		v := r.views[agentID]
		r.viewMu.Unlock()
		if v != nil {
			return v, nil
		}
	}
	if !natsbind.ValidToken(agentID) {
		return nil, nil
	}
	var e jetstream.KeyValueEntry
	err := jsretry.Do(ctx, 20*time.Second, func() (err error) { e, err = r.kv.Get(ctx, agentID); return err })
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("agentcard: read %s: %w", agentID, err)
	}
	return r.keep(e.Key(), e.Revision(), e.Value())
}

// keep decodes agentID's stored record (value, at revision rev) into an
// agentView and keeps it unless a newer revision is kept already (then that
// one is returned).
func (r *Registry) keep(agentID string, rev uint64, value []byte) (*agentView, error) {
	r.viewMu.Lock()
	if v := r.views[agentID]; v != nil && v.rev >= rev {
		r.viewMu.Unlock()
		return v, nil
	}
	r.viewMu.Unlock()
	v := &agentView{rev: rev}
	if err := json.Unmarshal(value, &v.rec); err != nil {
		return nil, fmt.Errorf("agentcard: stored record %s: %w", agentID, err)
	}
	if len(v.rec.Card) > 0 {
		v.card, v.cardErr = storedCard(&v.rec)
	}
	r.viewMu.Lock()
	defer r.viewMu.Unlock()
	if old := r.views[agentID]; old != nil && old.rev >= v.rev {
		return old, nil
	}
	if r.views == nil {
		r.views = map[string]*agentView{}
	}
	r.views[agentID] = v
	return v, nil
}

// forget drops the agent's view older than revision rev: the next
// ForDelegation reads the bucket.
func (r *Registry) forget(agentID string, rev uint64) {
	r.viewMu.Lock()
	if v := r.views[agentID]; v != nil && v.rev < rev {
		delete(r.views, agentID)
	}
	r.viewMu.Unlock()
}

// startWatch starts the watcher that keeps views current. It runs as long
// as the NATS connection; if it cannot start or stops, ForDelegation reads
// the bucket.
func (r *Registry) startWatch() {
	w, err := r.kv.WatchAll(context.Background())
	if err != nil {
		return
	}
	go func() {
		defer r.live.Store(false)
		for e := range w.Updates() {
			if e == nil {
				r.live.Store(true)
				continue
			}
			if e.Operation() != jetstream.KeyValuePut {
				r.viewMu.Lock()
				if v := r.views[e.Key()]; v == nil || v.rev < e.Revision() {
					delete(r.views, e.Key())
				}
				r.viewMu.Unlock()
				r.Changed(e.Key())
				continue
			}
			if _, err := r.keep(e.Key(), e.Revision(), e.Value()); err != nil {
				r.forget(e.Key(), e.Revision()+1) // undecodable: ForDelegation reads it and says so
			}
			r.Changed(e.Key())
		}
	}()
}

// HostCard is the card of rec that hosts may see, with its fingerprint and
// the warnings of its text: while the agent is quarantined, the card last
// approved, never the one it presents now, which no operator has approved
// (nil, with the approved fingerprint, when a2ad does not know the approved
// card: it was approved by configuration and never registered); otherwise
// rec.Card. A card that no longer parses is nil too.
func HostCard(rec *Record) (*Card, string, []Warning) {
	raw, fp := rec.Card, rec.Fingerprint
	approved := rec.Status == StatusQuarantined && rec.Fingerprint != rec.ApprovedFingerprint
	if approved {
		raw, fp = rec.ApprovedCard, rec.ApprovedFingerprint
	}
	if len(raw) == 0 {
		return nil, fp, nil
	}
	c, _, err := inspect(raw)
	if err != nil {
		return nil, fp, nil
	}
	if approved {
		return c, fp, InjectionWarnings(c)
	}
	return c, fp, slices.Clone(rec.Warnings)
}
