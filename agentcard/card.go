// Package agentcard holds A2A 1.0 Agent Cards as a2ad receives them: the card
// type, its strict parser and validator, the canonical fingerprint an operator
// approves, and the [Registry] that decides, per agent, whether a2ad may
// delegate to it and which tenants may see it.
//
// Source: A2A specification 1.0 (a2aproject/A2A, docs/specification.md §4.4
// "Agent discovery objects" and specification/a2a.proto AgentCard). Cards are
// read in their ProtoJSON (camelCase) shape; [Normalize] rewrites the 0.3
// shape (top-level url, preferredTransport, additionalInterfaces) to 1.0,
// unless the card has supportedInterfaces, which makes it 1.0 whatever else
// it carries. A card is refused only for what makes it unsafe or unusable,
// with every fault at once ([CardError]); what a2ad does not know or cannot
// use is a [Note], and stays in the stored, fingerprinted card ([Check]).
package agentcard

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/a2ad/a2ad/internal/a2a"
	"github.com/a2ad/a2ad/internal/natsbind"
	"github.com/a2ad/a2ad/internal/suggest"
)

// Size caps applied to every card, in bytes or counts.
const (
	// MaxCardBytes bounds the raw card given to [Parse] and [Fingerprint].
	MaxCardBytes = 64 << 10
	// MaxSkills bounds len(Card.Skills).
	MaxSkills = 64
	// MaxStringBytes bounds every string field of the card, list items included.
	MaxStringBytes = 4 << 10
)

// Card is an A2A 1.0 Agent Card (A2A 1.0 §4.4.1, a2a.proto AgentCard) in its
// ProtoJSON shape. Opaque members (security schemes, security requirements,
// extensions, signatures) are kept as raw JSON objects: a2ad does not act on
// them yet, and the fingerprint is computed over the raw card anyway.
type Card struct {
	Name                 string                     `json:"name"`
	Description          string                     `json:"description"`
	SupportedInterfaces  []Interface                `json:"supportedInterfaces"`
	Provider             *Provider                  `json:"provider,omitempty"`
	Version              string                     `json:"version"`
	DocumentationURL     string                     `json:"documentationUrl,omitempty"`
	Capabilities         Capabilities               `json:"capabilities"`
	SecuritySchemes      map[string]json.RawMessage `json:"securitySchemes,omitempty"`
	SecurityRequirements []json.RawMessage          `json:"securityRequirements,omitempty"`
	DefaultInputModes    []string                   `json:"defaultInputModes"`
	DefaultOutputModes   []string                   `json:"defaultOutputModes"`
	Skills               []Skill                    `json:"skills"`
	Signatures           []json.RawMessage          `json:"signatures,omitempty"`
	IconURL              string                     `json:"iconUrl,omitempty"`
}

// Interface is one entry of supportedInterfaces (a2a.proto AgentInterface):
// where the agent listens, over which protocol binding, speaking which A2A
// version. The first entry is the agent's preferred one.
type Interface struct {
	URL             string `json:"url"`
	ProtocolBinding string `json:"protocolBinding"`
	ProtocolVersion string `json:"protocolVersion"`
	Tenant          string `json:"tenant,omitempty"`
}

// Capabilities is a2a.proto AgentCapabilities. A nil pointer means the card
// does not say.
type Capabilities struct {
	Streaming         *bool             `json:"streaming,omitempty"`
	PushNotifications *bool             `json:"pushNotifications,omitempty"`
	ExtendedAgentCard *bool             `json:"extendedAgentCard,omitempty"`
	Extensions        []json.RawMessage `json:"extensions,omitempty"`
}

// Skill is a2a.proto AgentSkill. Tags is required but may be empty; a nil
// Tags means the card omitted it.
type Skill struct {
	ID                   string            `json:"id"`
	Name                 string            `json:"name"`
	Description          string            `json:"description"`
	Tags                 []string          `json:"tags"`
	Examples             []string          `json:"examples,omitempty"`
	InputModes           []string          `json:"inputModes,omitempty"`
	OutputModes          []string          `json:"outputModes,omitempty"`
	SecurityRequirements []json.RawMessage `json:"securityRequirements,omitempty"`
}

// Provider is a2a.proto AgentProvider; when present, both fields are
// required.
type Provider struct {
	URL          string `json:"url"`
	Organization string `json:"organization"`
}

// ValidationError reports why a card was refused. Pointer is an RFC 6901
// JSON pointer to the member at fault ("" for the whole card); Reason says
// what is wrong with it, for example "required" or "must be a string".
type ValidationError struct {
	Pointer string `json:"pointer"`
	Reason  string `json:"reason"`
}

// Error returns "agentcard: <pointer>: <reason>", or "agentcard: <reason>"
// when the fault is the whole card. A pointer built from untrusted member
// names is quoted and shortened so that it cannot forge log lines.
func (e *ValidationError) Error() string {
	if e.Pointer == "" {
		return "agentcard: " + e.Reason
	}
	return "agentcard: " + displayPointer(e.Pointer) + ": " + e.Reason
}

func displayPointer(p string) string {
	const max = 200
	if len(p) > max {
		return strconv.Quote(p[:max]) + "…"
	}
	if q := strconv.Quote(p); q[1:len(q)-1] != p {
		return q
	}
	return p
}

func invalid(ptr, format string, args ...any) *ValidationError {
	return &ValidationError{Pointer: ptr, Reason: fmt.Sprintf(format, args...)}
}

// Parse decodes and validates one A2A 1.0 agent card. It refuses, as a
// *[ValidationError]: cards over [MaxCardBytes]; input that is not a JSON
// object or that RFC 8785 cannot canonicalize (duplicate member names, lone
// surrogates, invalid UTF-8, out-of-range numbers), so that a parsed card
// always has a [Fingerprint]. Then, as a *[CardError] naming every fault at
// once with its JSON pointer: members of the wrong JSON type, at any depth,
// and everything [Card.Validate] refuses. Members the 1.0 card does not
// define are no fault: they stay in the card's bytes (and so in its
// fingerprint) and [Check] reports them as notes. JSON null counts as an
// absent member.
func Parse(raw []byte) (*Card, error) {
	c, _, _, err := parse(raw)
	return c, err
}

// Check reads a card as [Registry.Register] does: [Normalize] (a 0.3 card
// becomes its 1.0 form), then [Parse]. It returns the card, its notes (see
// [Note]: members a2ad does not know, interfaces and links it cannot use),
// and the refusal, a *[ValidationError] or *[CardError], when the card is
// unsafe or unusable. Notes are returned with a refusal too.
func Check(raw []byte) (*Card, []Note, error) {
	if len(raw) > MaxCardBytes {
		return nil, nil, invalid("", "card is %d bytes, more than %d", len(raw), MaxCardBytes)
	}
	_, c, notes, _, err := read(raw)
	return c, notes, err
}

// read is [Check] that also returns the card's 1.0 form and its
// fingerprint. A 0.3 card has every fault named at once, of its rewriting
// and of its 1.0 form, and every fault and note at the pointer of the card
// as presented (/url, not /supportedInterfaces/0/url).
func read(raw []byte) ([]byte, *Card, []Note, string, error) {
	var faults []*ValidationError
	normal, lay := normalize(raw, func(err error) {
		if ve, ok := err.(*ValidationError); ok {
			faults = append(faults, ve)
		} else {
			faults = append(faults, invalid("", "%v", err))
		}
	})
	if lay == nil && len(faults) > 0 {
		return nil, nil, nil, "", faults[0]
	}
	if lay == nil {
		c, notes, fp, err := parse(normal)
		return normal, c, notes, fp, err
	}
	c, notes, fp, err := parse(normal)
	k := &checker{}
	for _, f := range faults {
		k.fault(f.Pointer, "%s", f.Reason)
	}
	var ce *CardError
	switch {
	case errors.As(err, &ce):
		for _, f := range ce.Faults {
			if f.Pointer == "" && strings.HasPrefix(f.Reason, "and ") {
				continue // the count of more faults: recounted below
			}
			if p := lay.presented(f.Pointer); p != "" || f.Pointer == "" {
				k.fault(p, "%s", f.Reason)
			}
		}
		k.moreFaults += ce.Total - min(ce.Total, MaxFaults)
	case err != nil:
		k.faultErr(err)
	}
	var mapped []Note
	for _, n := range notes {
		if n.Pointer == "" {
			mapped = append(mapped, n)
		} else if p := lay.presented(n.Pointer); p != "" {
			mapped = append(mapped, Note{Pointer: p, Reason: n.Reason})
		}
	}
	if err := k.err(); err != nil {
		return nil, nil, mapped, "", err
	}
	if err != nil || c == nil { // every fault mapped away: never accept for that
		return nil, nil, mapped, "", cmp.Or(err, error(invalid("", "cannot be read")))
	}
	return normal, c, mapped, fp, nil
}

// parse is Parse that also returns the card's notes and its fingerprint,
// which it has to compute anyway to prove the card canonicalizes.
func parse(raw []byte) (*Card, []Note, string, error) {
	if len(raw) > MaxCardBytes {
		return nil, nil, "", invalid("", "card is %d bytes, more than %d", len(raw), MaxCardBytes)
	}
	var syntax json.RawMessage
	if err := json.Unmarshal(raw, &syntax); err != nil {
		return nil, nil, "", invalid("", "invalid JSON: %v", err)
	}
	fp, err := fingerprint(raw)
	if err != nil {
		return nil, nil, "", err
	}
	c, notes, err := inspect(raw)
	if err != nil {
		return nil, notes, "", err
	}
	return c, notes, fp, nil
}

// Validate checks the rules of A2A 1.0 §4.4.1 and a2ad's caps, and returns
// every fault at once, in a2a.proto field order, as a *[CardError]:
//
//   - required and non-empty: name, description, version,
//     supportedInterfaces (each with url, protocolBinding, protocolVersion),
//     defaultInputModes, defaultOutputModes, skills (each with id, name,
//     description); tags must be present (non-nil) but may be empty;
//     provider, when present, needs url and organization;
//   - skill ids are unique; at most [MaxSkills] skills;
//   - the URL of an interface a2ad would use (protocolBinding
//     [natsbind.BindingURI]) is absolute, with a host and no user info, and
//     uses nats, tls, ws, wss (the schemes nats.go dials), https, http or grpc. Other interfaces, and provider.url,
//     documentationUrl and iconUrl, are never refused for their URL: one
//     nobody could use is a [Note] ([Check]); a gRPC interface's URL may be
//     a host:port target (a2a.proto AgentInterface.url);
//   - every string is at most [MaxStringBytes];
//   - opaque members (extensions, signatures) are JSON objects;
//   - the security block does not contradict itself: each securitySchemes
//     value is an object with at most one member of the a2a.proto
//     SecurityScheme oneof, and each securityRequirements entry, of the
//     card or a skill, names only schemes securitySchemes declares.
//
// Validate cannot tell an absent capabilities member from an empty one;
// [Parse] does.
func (c *Card) Validate() error {
	k := &checker{capsPresent: true}
	c.check(k)
	return k.err()
}

// interfaceSchemes are the URL schemes of an interface of the NATS
// binding: nats, and the tls, ws and wss that nats.go also dials
// (docs/nats-binding.md §3.3), and https, http and grpc, which a card may
// give for a gateway in front of the binding.
var interfaceSchemes = []string{"nats", "tls", "ws", "wss", "https", "http", "grpc"}

func checkLen(ptr, s string) error {
	if len(s) > MaxStringBytes {
		return invalid(ptr, "%d bytes, more than %d", len(s), MaxStringBytes)
	}
	return nil
}

func requiredString(ptr, s string) error {
	if s == "" {
		return invalid(ptr, "required")
	}
	return checkLen(ptr, s)
}

func requiredURL(ptr, s string, schemes []string) error {
	if err := requiredString(ptr, s); err != nil {
		return err
	}
	u, err := url.Parse(s)
	if err != nil {
		return invalid(ptr, "not a valid URL")
	}
	ok := false
	for _, scheme := range schemes {
		ok = ok || u.Scheme == scheme
	}
	switch {
	case !ok:
		return invalid(ptr, "scheme %q is not allowed (want %s)", truncate(u.Scheme, 32), strings.Join(schemes, ", "))
	case u.Host == "":
		return invalid(ptr, "must be an absolute URL with a host")
	case u.User != nil:
		return invalid(ptr, "must not carry user info")
	}
	return nil
}

func isObject(v json.RawMessage) bool {
	t := bytes.TrimLeft(v, " \t\r\n")
	return len(t) > 0 && t[0] == '{' && json.Valid(v)
}

// Skill returns the card's skill with the given id.
func (c *Card) Skill(id string) (*Skill, bool) {
	for i := range c.Skills {
		if c.Skills[i].ID == id {
			return &c.Skills[i], true
		}
	}
	return nil, false
}

// Bindings a2ad delegates over, as [Record].Binding names them: a2ad's
// NATS binding, and the A2A 1.0 HTTP bindings by their protocolBinding
// (A2A 1.0 §5.5: "JSONRPC", "HTTP+JSON").
const (
	BindingNATS     = "nats"
	BindingJSONRPC  = "JSONRPC"
	BindingHTTPJSON = "HTTP+JSON"
)

// NATSInterface returns the first of the card's supportedInterfaces that
// speaks a2ad's NATS binding: protocolBinding [natsbind.BindingURI] and
// protocolVersion "1.0". Only such an agent can receive delegations.
func NATSInterface(c *Card) (Interface, bool) {
	for _, in := range c.SupportedInterfaces {
		if in.ProtocolBinding == natsbind.BindingURI && in.ProtocolVersion == a2a.Version {
			return in, true
		}
	}
	return Interface{}, false
}

// natsFault says why the card's interfaces do not let a2ad delegate to
// agentID, or "" when they do: the card needs a [NATSInterface].
//
// docs/nats-binding.md §3.3 gives the URL as nats://<host:port>/a2a.agent.<agentId>
// and has a2ad address the agent by the id it configured, not by the URL,
// whose id SHOULD be the same: a URL naming another id is a note
// ([AgentNotes]), never a reason not to delegate.
func natsFault(_ string, ifaces []Interface) string {
	if !slices.ContainsFunc(ifaces, func(in Interface) bool {
		return in.ProtocolBinding == natsbind.BindingURI && in.ProtocolVersion == a2a.Version
	}) {
		return "card has no supportedInterfaces entry with protocolBinding " + natsbind.BindingURI + " and protocolVersion " + a2a.Version
	}
	return ""
}

// AgentNotes are the notes of a card registered as agentID that depend on
// that id: each interface of the NATS binding whose URL subject names
// another agent (docs/nats-binding.md §3.3: the URL's agent id SHOULD be
// the configured one; a2ad addresses the agent by its configured id and
// delegates all the same). A trailing "/" after the subject is no
// difference. The id is quoted only when it is a valid agent id
// (natsbind.ValidToken): no other card text gets into a note.
func AgentNotes(agentID string, c *Card) []Note {
	return agentNotes(agentID, c.SupportedInterfaces)
}

func agentNotes(agentID string, ifaces []Interface) []Note {
	var notes []Note
	for i, in := range ifaces {
		if in.ProtocolBinding != natsbind.BindingURI {
			continue
		}
		id, named := subjectAgent(in.URL)
		if !named || id == agentID {
			continue
		}
		why := "names another agent"
		if natsbind.ValidToken(id) {
			why = "names agent " + id
		}
		notes = append(notes, Note{Pointer: "/supportedInterfaces/" + strconv.Itoa(i) + "/url",
			Reason: why + ", not " + agentID + ": a2ad addresses the agent by its configured id " + agentID + " (docs/nats-binding.md §3.3: the URL's agent id SHOULD be the same)"})
	}
	return notes
}

// subjectAgent returns the agent id a NATS interface URL names in its
// subject, nats://host:port/a2a.agent.<agentId>[.…], and whether it names one.
func subjectAgent(rawURL string) (string, bool) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", false
	}
	rest, ok := strings.CutPrefix(strings.Trim(u.Path, "/"), "a2a.agent.")
	if !ok {
		return "", false
	}
	id, _, _ := strings.Cut(rest, ".")
	return id, true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// DelegationFault says why a2ad could not delegate to the card's agent,
// registered as agentID, over its NATS binding, or "" when it could: the
// card needs a [NATSInterface] (docs/nats-binding.md §3.3). An interface
// naming another agent is one of [AgentNotes], not a fault. A registry
// decides with [SelectInterface], which also weighs HTTP interfaces against
// the card's origin and the agent's configuration, neither of which the
// card alone tells (`a2ad agents check-card` reads a file).
func DelegationFault(agentID string, c *Card) string {
	return natsFault(agentID, c.SupportedInterfaces)
}

// ConfiguredSkillNotes are the notes, at /skills, of each skill id the
// agent's configuration names (ac.ConfiguredSkills; "*" is every skill)
// that card c does not declare: a typo there (asses_refund_risk) makes the
// configured check apply to no skill, so the note says so and names the
// skill the operator most likely meant. Sorted by skill id.
func ConfiguredSkillNotes(ac AgentConfig, c *Card) []Note {
	var ids []string
	for _, s := range c.Skills {
		ids = append(ids, s.ID)
	}
	var notes []Note
	for _, id := range slices.Sorted(maps.Keys(ac.ConfiguredSkills)) {
		if id == "*" || slices.Contains(ids, id) {
			continue
		}
		keys := ac.ConfiguredSkills[id]
		verb := " configures skill "
		if len(keys) > 1 {
			verb = " configure skill "
		}
		reason := strings.Join(keys, " and ") + verb + id +
			", which the card does not declare: that configuration applies to no skill"
		if meant := suggest.Closest(id, ids); meant != "" && natsbind.ValidToken(meant) {
			reason += " (did you mean " + meant + "?)"
		}
		notes = append(notes, Note{Pointer: "/skills", Reason: reason})
	}
	return notes
}
