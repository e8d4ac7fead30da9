package agentcard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/a2ad/a2ad/internal/natsbind"
)

// Bounds of what one card check reports.
const (
	// MaxFaults bounds CardError.Faults; a last fault says how many more
	// there were.
	MaxFaults = 50
	// MaxNotes bounds the notes of one card, likewise.
	MaxNotes = 50
)

// Note is something a2ad noticed in a card it accepts: a member it does not
// know (kept in the stored and fingerprinted card, but not acted on), or an
// interface or link a2ad cannot use. Pointer is an RFC 6901 JSON pointer
// into the card as stored; Reason is a2ad's own words and never quotes the
// card. Notes never refuse a card.
type Note struct {
	Pointer string `json:"pointer"`
	Reason  string `json:"reason"`
}

// moreNotes is the reason of the last note of a card with more than
// [MaxNotes].
const moreNotes = "and %d more notes"

// CountNotes returns how many notes notes stands for: those listed, and
// for a last "and N more notes" entry (a card with more than [MaxNotes])
// those N instead of that entry.
func CountNotes(notes []Note) int {
	n := len(notes)
	if n > 0 && notes[n-1].Pointer == "" {
		var more int
		if _, err := fmt.Sscanf(notes[n-1].Reason, moreNotes, &more); err == nil {
			return n - 1 + more
		}
	}
	return n
}

// CardError refuses a card for every fault it has at once (at most
// [MaxFaults]): first the members of the wrong JSON type, in document order,
// then what [Card.Validate] refuses, in a2a.proto field order; each a
// *[ValidationError] with its JSON pointer. A member below one already at
// fault is not reported again. errors.As with a *ValidationError finds the
// first.
type CardError struct {
	Faults []*ValidationError
	// Total is the number of faults found, those beyond [MaxFaults]
	// included (not counting the last "and N more faults" entry).
	Total int
}

// MaxErrorBytes bounds [CardError.Error]: the refusal a2ad answers a
// registration with (code invalid, docs/nats-binding.md §9) and logs.
// Faults that do not fit are counted in a last "and N more".
const MaxErrorBytes = 4 << 10

// Error returns "agentcard: <pointer>: <reason>" for one fault, and
// "agentcard: N faults: <pointer>: <reason>; …" for several, N being
// [CardError.Total]; at most [MaxErrorBytes], the faults that do not fit
// counted in a last "; and M more".
func (e *CardError) Error() string {
	if len(e.Faults) == 1 {
		return e.Faults[0].Error()
	}
	total := max(e.Total, len(e.Faults))
	var b strings.Builder
	fmt.Fprintf(&b, "agentcard: %d faults: ", total)
	// Room for "; and NNNNN more" once the faults stop fitting.
	const room = MaxErrorBytes - len("; and 99999 more")
	for i, f := range e.Faults {
		part := strings.TrimPrefix(f.Error(), "agentcard: ")
		if f.Pointer == "" && strings.HasPrefix(part, "and ") && i == len(e.Faults)-1 && total > i {
			part = fmt.Sprintf("and %d more", total-i) // the count of those beyond MaxFaults
		}
		sep := "; "
		if i == 0 {
			sep = ""
		}
		if b.Len()+len(sep)+len(part) > room {
			fmt.Fprintf(&b, "; and %d more", total-i)
			break
		}
		b.WriteString(sep + part)
	}
	return b.String()
}

// Unwrap returns the faults, so that errors.As finds a *ValidationError.
func (e *CardError) Unwrap() []error {
	out := make([]error, len(e.Faults))
	for i, f := range e.Faults {
		out[i] = f
	}
	return out
}

// checker collects the faults and notes of one card.
type checker struct {
	faults      []*ValidationError
	faulted     map[string]bool // every pointer at fault, beyond MaxFaults too
	moreFaults  int
	notes       []Note
	moreNotes   int
	capsPresent bool
}

// fault records a fault at ptr, unless one is recorded at ptr or above it
// already (a member of the wrong type is not also "required").
func (k *checker) fault(ptr, format string, args ...any) {
	if k.atFault(ptr) {
		return
	}
	if k.faulted == nil {
		k.faulted = map[string]bool{}
	}
	k.faulted[ptr] = true
	if len(k.faults) == MaxFaults {
		k.moreFaults++
		return
	}
	k.faults = append(k.faults, invalid(ptr, format, args...))
}

// atFault reports whether a fault is recorded at ptr or above it.
func (k *checker) atFault(ptr string) bool {
	if k.faulted[""] || k.faulted[ptr] {
		return true
	}
	for i := 1; i < len(ptr); i++ {
		if ptr[i] == '/' && k.faulted[ptr[:i]] {
			return true
		}
	}
	return false
}

func (k *checker) faultErr(err error) {
	if err == nil {
		return
	}
	if ve, ok := err.(*ValidationError); ok {
		k.fault(ve.Pointer, "%s", ve.Reason)
		return
	}
	k.fault("", "%v", err)
}

// note records a note at ptr, unless a fault is recorded there or above.
func (k *checker) note(ptr, reason string) {
	if k.atFault(ptr) {
		return
	}
	if len(k.notes) == MaxNotes {
		k.moreNotes++
		return
	}
	k.notes = append(k.notes, Note{Pointer: ptr, Reason: reason})
}

// err is the CardError of the faults collected, or nil.
func (k *checker) err() error {
	if len(k.faults) == 0 {
		return nil
	}
	faults := slices.Clone(k.faults)
	if k.moreFaults > 0 {
		faults = append(faults, invalid("", "and %d more faults", k.moreFaults))
	}
	return &CardError{Faults: faults, Total: len(k.faults) + k.moreFaults}
}

func (k *checker) allNotes() []Note {
	notes := slices.Clone(k.notes)
	if k.moreNotes > 0 {
		notes = append(notes, Note{Reason: fmt.Sprintf(moreNotes, k.moreNotes)})
	}
	return notes
}

// inspect decodes and validates raw, a card in its 1.0 form that is valid
// JSON, collecting every fault and note.
func inspect(raw []byte) (*Card, []Note, error) {
	k := &checker{}
	c := k.decodeCard(raw)
	if c != nil {
		c.check(k)
	}
	return c, k.allNotes(), k.err()
}

// legacyFields are 0.3 member names a card read as 1.0 may still carry,
// with the note each gets.
var legacyFields = map[string]string{
	"url":                               "a 0.3 field in a card read as 1.0 (it has supportedInterfaces): kept, not used",
	"preferredTransport":                "a 0.3 field in a card read as 1.0 (it has supportedInterfaces): kept, not used",
	"additionalInterfaces":              "a 0.3 field in a card read as 1.0 (it has supportedInterfaces): kept, not used",
	"protocolVersion":                   "a 0.3 field in a card read as 1.0 (it has supportedInterfaces): kept, not used",
	"supportsAuthenticatedExtendedCard": "a 0.3 field in a card read as 1.0 (it has supportedInterfaces): kept, not used (1.0 has capabilities.extendedAgentCard)",
	"security":                          "a 0.3 field in a card read as 1.0 (it has supportedInterfaces): kept, not used (1.0 spells it securityRequirements)",
	"stateTransitionHistory":            "a 0.3 capability that 1.0 dropped: kept, not used",
	"transport":                         "a 0.3 field in a card read as 1.0: kept, not used (1.0 spells it protocolBinding)",
}

// unknownReason words the note of an unknown member name among known.
func unknownReason(name string, known []string) string {
	if r, ok := legacyFields[name]; ok {
		return r
	}
	for _, k := range known {
		if strings.EqualFold(k, name) || k == name+"s" || k+"s" == name {
			return "unknown field: kept, not used (did you mean " + k + "?)"
		}
	}
	return "unknown field: kept, not used"
}

// cfield decodes one non-null member whose pointer is ptr, reporting its
// faults to k.
type cfield func(k *checker, ptr string, raw json.RawMessage)

// plain adapts a strict field to a collecting one.
func plain(f field) cfield {
	return func(k *checker, p string, v json.RawMessage) { k.faultErr(f(p, v)) }
}

// object walks the members of the object raw in document order: a member
// not in fields is a note, a null member is skipped (ProtoJSON reads null as
// the field's default). It reports whether raw is an object.
func (k *checker) object(ptr string, raw json.RawMessage, fields map[string]cfield) bool {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		k.fault(ptr, "must be an object")
		return false
	}
	known := slices.Sorted(maps.Keys(fields))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			k.fault(ptr, "invalid JSON")
			return true
		}
		name, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			k.fault(ptr, "invalid JSON")
			return true
		}
		p := ptr + "/" + escapePointer(name)
		f, ok := fields[name]
		switch {
		case !ok:
			k.note(p, unknownReason(name, known))
		case bytes.Equal(v, []byte("null")):
		default:
			f(k, p, v)
		}
	}
	return true
}

// list decodes a JSON array into a non-nil slice, each item with one, so
// that an empty array stays distinguishable from an absent member.
func list[T any](dst *[]T, one func(*checker, string, json.RawMessage, *T)) cfield {
	return func(k *checker, p string, v json.RawMessage) {
		var items []json.RawMessage
		if len(v) == 0 || v[0] != '[' || json.Unmarshal(v, &items) != nil {
			k.fault(p, "must be an array")
			return
		}
		out := make([]T, len(items))
		for i, item := range items {
			one(k, p+"/"+strconv.Itoa(i), item, &out[i])
		}
		*dst = out
	}
}

func strItem(k *checker, p string, v json.RawMessage, dst *string) {
	k.faultErr(decodeString(p, v, dst))
}
func rawItem(_ *checker, _ string, v json.RawMessage, dst *json.RawMessage) {
	*dst = v
}

// decodeCard decodes raw, which must be valid JSON, into a Card; nil when
// raw is not an object.
func (k *checker) decodeCard(raw []byte) *Card {
	c := &Card{}
	ok := k.object("", raw, map[string]cfield{
		"name":                plain(stringField(&c.Name)),
		"description":         plain(stringField(&c.Description)),
		"supportedInterfaces": list(&c.SupportedInterfaces, decodeInterface),
		"provider": func(k *checker, p string, v json.RawMessage) {
			c.Provider = &Provider{}
			k.object(p, v, map[string]cfield{
				"url":          plain(stringField(&c.Provider.URL)),
				"organization": plain(stringField(&c.Provider.Organization)),
			})
		},
		"version":          plain(stringField(&c.Version)),
		"documentationUrl": plain(stringField(&c.DocumentationURL)),
		"capabilities": func(k *checker, p string, v json.RawMessage) {
			k.capsPresent = true
			k.object(p, v, map[string]cfield{
				"streaming":         plain(boolField(&c.Capabilities.Streaming)),
				"pushNotifications": plain(boolField(&c.Capabilities.PushNotifications)),
				"extendedAgentCard": plain(boolField(&c.Capabilities.ExtendedAgentCard)),
				"extensions":        list(&c.Capabilities.Extensions, rawItem),
			})
		},
		"securitySchemes":      plain(rawMapField(&c.SecuritySchemes)),
		"securityRequirements": list(&c.SecurityRequirements, rawItem),
		"defaultInputModes":    list(&c.DefaultInputModes, strItem),
		"defaultOutputModes":   list(&c.DefaultOutputModes, strItem),
		"skills":               list(&c.Skills, decodeSkill),
		"signatures":           list(&c.Signatures, rawItem),
		"iconUrl":              plain(stringField(&c.IconURL)),
	})
	if !ok {
		return nil
	}
	return c
}

func decodeInterface(k *checker, ptr string, raw json.RawMessage, in *Interface) {
	k.object(ptr, raw, map[string]cfield{
		"url":             plain(stringField(&in.URL)),
		"protocolBinding": plain(stringField(&in.ProtocolBinding)),
		"protocolVersion": plain(stringField(&in.ProtocolVersion)),
		"tenant":          plain(stringField(&in.Tenant)),
	})
}

func decodeSkill(k *checker, ptr string, raw json.RawMessage, s *Skill) {
	k.object(ptr, raw, map[string]cfield{
		"id":                   plain(stringField(&s.ID)),
		"name":                 plain(stringField(&s.Name)),
		"description":          plain(stringField(&s.Description)),
		"tags":                 list(&s.Tags, strItem),
		"examples":             list(&s.Examples, strItem),
		"inputModes":           list(&s.InputModes, strItem),
		"outputModes":          list(&s.OutputModes, strItem),
		"securityRequirements": list(&s.SecurityRequirements, rawItem),
	})
}

// The protocol bindings of A2A 1.0 (§9 JSON-RPC, §10 gRPC, §11 HTTP+JSON)
// whose interface URLs a2ad can judge.
const (
	bindingJSONRPC  = "JSONRPC"
	bindingGRPC     = "GRPC"
	bindingHTTPJSON = "HTTP+JSON"
)

// securitySchemeTypes are the members of the a2a.proto SecurityScheme
// oneof.
var securitySchemeTypes = []string{"apiKeySecurityScheme", "httpAuthSecurityScheme", "oauth2SecurityScheme",
	"openIdConnectSecurityScheme", "mtlsSecurityScheme"}

// schemeMembers are the members of each SecurityScheme kind (a2a.proto
// APIKeySecurityScheme and the others).
var schemeMembers = map[string][]string{
	"apiKeySecurityScheme":        {"description", "location", "name"},
	"httpAuthSecurityScheme":      {"description", "scheme", "bearerFormat"},
	"oauth2SecurityScheme":        {"description", "flows", "oauth2MetadataUrl"},
	"openIdConnectSecurityScheme": {"description", "openIdConnectUrl"},
	"mtlsSecurityScheme":          {"description"},
}

// check applies the rules of A2A 1.0 §4.4.1 and a2ad's caps to a decoded
// card: see [Card.Validate].
func (c *Card) check(k *checker) {
	k.required("/name", c.Name)
	k.required("/description", c.Description)
	if len(c.SupportedInterfaces) == 0 {
		k.fault("/supportedInterfaces", "required")
	}
	for i, in := range c.SupportedInterfaces {
		p := "/supportedInterfaces/" + strconv.Itoa(i)
		k.required(p+"/url", in.URL)
		k.required(p+"/protocolBinding", in.ProtocolBinding)
		k.required(p+"/protocolVersion", in.ProtocolVersion)
		k.length(p+"/tenant", in.Tenant)
		if in.URL == "" || len(in.URL) > MaxStringBytes {
			continue
		}
		switch in.ProtocolBinding {
		case natsbind.BindingURI: // the one a2ad delegates over: its URL must be right
			k.faultErr(requiredURL(p+"/url", in.URL, interfaceSchemes))
		case bindingJSONRPC, bindingHTTPJSON:
			if webURL(in.URL) != "" {
				k.note(p+"/url", "not an absolute http(s) URL: a client of this binding could not use the interface (a2ad does not use it)")
			}
		case bindingGRPC:
			if !grpcTarget(in.URL) {
				k.note(p+"/url", "not a gRPC target (host:port, dns:///host:port or a URL): a client could not use the interface (a2ad does not use it)")
			}
		case "":
		default:
			k.note(p+"/protocolBinding", "a protocol binding a2ad does not know: interface not used")
		}
	}
	if c.Provider != nil {
		k.required("/provider/url", c.Provider.URL)
		k.required("/provider/organization", c.Provider.Organization)
		k.link("/provider/url", c.Provider.URL)
	}
	k.required("/version", c.Version)
	k.link("/documentationUrl", c.DocumentationURL)
	if !k.capsPresent {
		k.fault("/capabilities", "required")
	}
	k.objects("/capabilities/extensions", c.Capabilities.Extensions)
	k.missingMember("/capabilities/extensions", c.Capabilities.Extensions, "uri", "an extension without its uri is unusable (a2a.proto AgentExtension.uri is required): ignored")
	declared := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(c.SecuritySchemes)) {
		declared[name] = true
		k.scheme("/securitySchemes/"+escapePointer(name), c.SecuritySchemes[name])
	}
	k.requirements("/securityRequirements", c.SecurityRequirements, declared)
	k.requiredList("/defaultInputModes", c.DefaultInputModes)
	k.requiredList("/defaultOutputModes", c.DefaultOutputModes)
	c.checkSkills(k, declared)
	k.objects("/signatures", c.Signatures)
	k.missingMember("/signatures", c.Signatures, "protected", "a signature without its protected header is unusable (a2a.proto AgentCardSignature.protected is required): ignored, never verified")
	k.missingMember("/signatures", c.Signatures, "signature", "a signature without its signature value is unusable (a2a.proto AgentCardSignature.signature is required): ignored, never verified")
	k.link("/iconUrl", c.IconURL)
}

func (c *Card) checkSkills(k *checker, declared map[string]bool) {
	if len(c.Skills) == 0 {
		k.fault("/skills", "required")
	}
	if len(c.Skills) > MaxSkills {
		k.fault("/skills", "%d skills, more than %d", len(c.Skills), MaxSkills)
		return
	}
	seen := make(map[string]int, len(c.Skills))
	for i, s := range c.Skills {
		p := "/skills/" + strconv.Itoa(i)
		k.required(p+"/id", s.ID)
		if j, dup := seen[s.ID]; dup && s.ID != "" {
			k.fault(p+"/id", "duplicate skill id (also /skills/%d)", j)
		} else {
			seen[s.ID] = i
		}
		k.required(p+"/name", s.Name)
		k.required(p+"/description", s.Description)
		if s.Tags == nil {
			k.fault(p+"/tags", "required")
		} else if len(s.Tags) == 0 {
			k.note(p+"/tags", "empty: the skill has no tags")
		}
		for j, tag := range s.Tags {
			if strings.TrimSpace(tag) == "" {
				k.note(p+"/tags/"+strconv.Itoa(j), "an empty or blank tag: ignored")
			}
		}
		for _, l := range []struct {
			field string
			items []string
		}{{"/tags", s.Tags}, {"/examples", s.Examples}, {"/inputModes", s.InputModes}, {"/outputModes", s.OutputModes}} {
			for j, v := range l.items {
				k.length(p+l.field+"/"+strconv.Itoa(j), v)
			}
		}
		k.requirements(p+"/securityRequirements", s.SecurityRequirements, declared)
	}
}

func (k *checker) length(ptr, s string) {
	if len(s) > MaxStringBytes {
		k.fault(ptr, "%d bytes, more than %d", len(s), MaxStringBytes)
	}
}

// required faults a missing or empty ("") string, and notes one of white
// space only: it is there, but says nothing a host could show.
func (k *checker) required(ptr, s string) {
	if s == "" {
		k.fault(ptr, "required")
		return
	}
	if strings.TrimSpace(s) == "" {
		k.note(ptr, "blank (white space only): says nothing")
	}
	k.length(ptr, s)
}

// missingMember notes each object of l (at ptr/i) that lacks member, or
// has it empty, with reason.
func (k *checker) missingMember(ptr string, l []json.RawMessage, member, reason string) {
	for i, v := range l {
		var m map[string]json.RawMessage
		if json.Unmarshal(v, &m) != nil {
			continue // not an object: a fault already
		}
		if x, ok := m[member]; !ok || isNull(x) || string(x) == `""` {
			k.note(ptr+"/"+strconv.Itoa(i)+"/"+member, reason)
		}
	}
}

func (k *checker) requiredList(ptr string, l []string) {
	if len(l) == 0 {
		k.fault(ptr, "required")
	}
	for i, s := range l {
		k.required(ptr+"/"+strconv.Itoa(i), s)
	}
}

// link notes an informational URL (provider, documentation, icon) that is
// not an absolute http(s) URL: a2ad never fetches these, and hosts do not
// see them.
func (k *checker) link(ptr, s string) {
	if s == "" || len(s) > MaxStringBytes {
		return
	}
	if why := webURL(s); why != "" {
		k.note(ptr, why+": ignored")
	}
}

func (k *checker) objects(ptr string, l []json.RawMessage) {
	for i, v := range l {
		if !isObject(v) {
			k.fault(ptr+"/"+strconv.Itoa(i), "must be an object")
		}
	}
}

// scheme checks one securitySchemes value: an object holding exactly one
// member of the a2a.proto SecurityScheme oneof, itself an object. Two
// members contradict each other; none a2ad knows is a note.
func (k *checker) scheme(ptr string, raw json.RawMessage) {
	var members map[string]json.RawMessage
	if !isObject(raw) || json.Unmarshal(raw, &members) != nil {
		k.fault(ptr, "must be an object")
		return
	}
	var kinds []string
	for _, name := range slices.Sorted(maps.Keys(members)) {
		if !slices.Contains(securitySchemeTypes, name) {
			k.note(ptr+"/"+escapePointer(name), unknownReason(name, securitySchemeTypes))
			continue
		}
		kinds = append(kinds, name)
		if isNull(members[name]) {
			continue
		}
		// The scheme's own members are opaque to a2ad; others are noted.
		fields := map[string]cfield{}
		for _, m := range schemeMembers[name] {
			fields[m] = func(*checker, string, json.RawMessage) {}
		}
		k.object(ptr+"/"+name, members[name], fields)
	}
	switch {
	case len(kinds) > 1:
		k.fault(ptr, "declares %d kinds of security scheme (%s), an A2A 1.0 scheme is one", len(kinds), strings.Join(kinds, ", "))
	case len(kinds) == 0:
		k.note(ptr, "no security scheme a2ad knows (want one of "+strings.Join(securitySchemeTypes, ", ")+"): kept, not used")
	}
}

// requirements checks a securityRequirements list (a2a.proto
// SecurityRequirement): each {"schemes": {name: {"list": [scope…]}}},
// naming only schemes the card declares in securitySchemes. Scopes as a
// bare array ({name: [scope…]}), as a2a-go v2.4.0 writes them, are read
// too, with a note.
func (k *checker) requirements(ptr string, reqs []json.RawMessage, declared map[string]bool) {
	for i, raw := range reqs {
		p := ptr + "/" + strconv.Itoa(i)
		k.object(p, raw, map[string]cfield{
			"schemes": func(k *checker, p string, v json.RawMessage) {
				var schemes map[string]json.RawMessage
				if !isObject(v) || json.Unmarshal(v, &schemes) != nil {
					k.fault(p, "must be an object")
					return
				}
				for _, name := range slices.Sorted(maps.Keys(schemes)) {
					sp := p + "/" + escapePointer(name)
					if !declared[name] {
						k.fault(sp, "names a security scheme that securitySchemes does not declare")
					}
					if isNull(schemes[name]) {
						continue
					}
					var scopes []string
					if v := bytes.TrimLeft(schemes[name], " \t\r\n"); len(v) > 0 && v[0] == '[' {
						// The official Go SDK (a2a-go v2.4.0) writes the
						// scopes as a bare array: usable, not the 1.0 shape.
						list(&scopes, strItem)(k, sp, schemes[name])
						k.note(sp, scopesShapeNote)
						continue
					}
					k.object(sp, schemes[name], map[string]cfield{"list": list(&scopes, strItem)})
				}
			},
		})
	}
}

// scopesShapeNote is the note of a requirement's scopes given as a bare
// array.
const scopesShapeNote = "scopes as a bare array, as a2a-go v2.4.0 writes them; A2A 1.0 (a2a.proto StringList) wraps them in {\"list\": [...]}: read all the same"

// webURL says why s is not an absolute http(s) URL with a host and no user
// info, or "" when it is one.
func webURL(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "not a valid URL"
	case u.Scheme != "https" && u.Scheme != "http":
		return "not an http(s) URL"
	case u.Host == "":
		return "not an absolute URL with a host"
	case u.User != nil:
		return "carries user info"
	}
	return ""
}

// grpcTarget reports whether s is a target a gRPC client dials: host:port
// (a2a.proto AgentInterface.url: `"hostname:port"`, e.g.
// "grpc.example.com:443"), the gRPC name syntax dns:[//authority/]host[:port]
// (grpc/grpc doc/naming.md), or an absolute URL of https, http, grpc or
// grpcs.
func grpcTarget(s string) bool {
	hostPort := func(hp string) bool {
		host, port, err := net.SplitHostPort(hp)
		if err != nil || host == "" || strings.ContainsAny(host, "/@ ") {
			return false
		}
		n, err := strconv.Atoi(port)
		return err == nil && n > 0 && n < 65536
	}
	if hostPort(s) {
		return true
	}
	if rest, ok := strings.CutPrefix(s, "dns:"); ok {
		if auth, ok := strings.CutPrefix(rest, "//"); ok {
			_, rest, ok = strings.Cut(auth, "/")
			if !ok {
				return false
			}
		}
		if hostPort(rest) {
			return true
		}
		return rest != "" && !strings.ContainsAny(rest, "/@: ")
	}
	u, err := url.Parse(s)
	return err == nil && slices.Contains([]string{"https", "http", "grpc", "grpcs"}, u.Scheme) && u.Host != "" && u.User == nil
}
