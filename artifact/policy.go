package artifact

import (
	"bytes"
	"cmp"
	"encoding/json"
	"mime"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/a2ad/a2ad/internal/a2a"
	"github.com/a2ad/a2ad/internal/untrusted"
)

// Defaults of the [Policy] limits, used where a limit is zero or negative.
const (
	DefaultMaxArtifactBytes = 256 << 10 // bytes, as measured by [Size]
	DefaultMaxTaskBytes     = 1 << 20   // bytes, the sum of [Size] over a task's artifacts
	DefaultMaxParts         = 16
	DefaultMaxDepth         = 32
)

// A Policy says which A2A parts an artifact may carry besides data parts,
// and bounds its size. The zero Policy admits data parts only (text, raw and
// url parts give "part_kind") and applies the default limits.
//
// Every limit that is zero or negative takes its default; see
// [Policy.WithDefaults]. Sizes are in bytes.
type Policy struct {
	// AllowedTextMediaTypes lists the media types a text part may declare,
	// e.g. "text/plain", "text/markdown"; "text/*" admits every text
	// subtype. Matching ignores case; a text part with no mediaType is
	// "text/plain"; the only parameter accepted is charset=utf-8. Empty:
	// every text part gives "part_kind". A listed type that a text part
	// does not declare gives "media_type".
	AllowedTextMediaTypes []string `yaml:"allowed_text_media_types" json:"allowed_text_media_types"`
	// MaxTextBytes bounds each text part, in bytes of its UTF-8 text
	// ("max_text_bytes"); 0: only MaxArtifactBytes applies.
	MaxTextBytes int `yaml:"max_text_bytes" json:"max_text_bytes"`

	// AllowRaw admits raw parts (inline bytes); false: "part_kind".
	AllowRaw bool `yaml:"allow_raw" json:"allow_raw"`
	// AllowedRawMediaTypes lists the media types a raw part may declare,
	// matched as for text; a raw part with no mediaType is
	// "application/octet-stream". Empty: every raw part gives "media_type"
	// even when AllowRaw is set.
	AllowedRawMediaTypes []string `yaml:"allowed_raw_media_types" json:"allowed_raw_media_types"`
	// MaxRawBytes bounds each raw part, in decoded bytes
	// ("max_raw_bytes"); 0: only MaxArtifactBytes applies.
	MaxRawBytes int `yaml:"max_raw_bytes" json:"max_raw_bytes"`

	// AllowURL admits url parts; false: "part_kind". a2ad never fetches
	// them: the URL is passed to the host as it is. Only absolute https
	// URLs with a host and no user information pass ("url_scheme" for
	// another scheme, "url" for anything else).
	AllowURL bool `yaml:"allow_url" json:"allow_url"`

	// MaxArtifactBytes bounds one artifact, as measured by [Size]
	// ("max_artifact_bytes"); default [DefaultMaxArtifactBytes] (256 KiB).
	MaxArtifactBytes int `yaml:"max_artifact_bytes" json:"max_artifact_bytes"`
	// MaxTaskBytes bounds the sum of [Size] over every artifact of one
	// task; default [DefaultMaxTaskBytes] (1 MiB). [CheckPolicy] sees one
	// artifact and does not enforce it: the caller that gathers a task's
	// artifacts (and assembles chunks) does, and should report
	// "max_task_bytes".
	MaxTaskBytes int `yaml:"max_task_bytes" json:"max_task_bytes"`
	// MaxParts bounds the number of parts of one artifact ("max_parts");
	// default [DefaultMaxParts] (16).
	MaxParts int `yaml:"max_parts" json:"max_parts"`
	// MaxDepth bounds the nesting of arrays and objects in a data part
	// ("max_depth"): a scalar is depth 0, {} and [] are 1, {"a":[1]} is 2;
	// default [DefaultMaxDepth] (32). It is checked on the JSON text
	// before anything parses it.
	MaxDepth int `yaml:"max_depth" json:"max_depth"`
}

// WithDefaults returns p with every zero or negative limit replaced by its
// default. The slices are shared with p.
func (p Policy) WithDefaults() Policy {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&p.MaxArtifactBytes, DefaultMaxArtifactBytes)
	def(&p.MaxTaskBytes, DefaultMaxTaskBytes)
	def(&p.MaxParts, DefaultMaxParts)
	def(&p.MaxDepth, DefaultMaxDepth)
	if p.MaxTextBytes < 0 {
		p.MaxTextBytes = 0
	}
	if p.MaxRawBytes < 0 {
		p.MaxRawBytes = 0
	}
	return p
}

// A Warning flags injection phrasing in agent content that a host may
// receive (see package internal/untrusted): where, and what kind of
// phrasing, never the text. It does not make a [Verdict] invalid: the
// content is delivered, and the host should treat it as untrusted data.
type Warning struct {
	// Pointer is an RFC 6901 JSON pointer into the artifact, built like a
	// [Violation]'s: "/parts/0/data/reasons/2", "/parts/1/text", "/name".
	// Phrasing in an object key the schema does not declare, or anywhere
	// below such a key, is reported at the object that holds the key.
	Pointer string `json:"pointer"`
	// Kind is one of "instruction_override", "role_reassignment",
	// "prompt_reference", "concealment", "role_tag", "exfiltration".
	Kind string `json:"kind"`
}

// CheckPolicy validates A2A artifact a against s under policy p. Its
// Verdict lists violations, each a pointer and a keyword (see [Violation]),
// and warnings (see [Warning]).
//
// Limits are checked first, and a failed one stops the check, so an
// oversized artifact costs no parsing:
//   - more than MaxParts parts: Violation{"/parts", "max_parts"};
//   - more than MaxArtifactBytes ([Size]): "max_artifact_bytes" at
//     "/parts/<i>", the first part that takes the running total over the
//     limit, or at "" if the artifact's own fields already do.
//
// Then each part i, with pointers under "/parts/<i>":
//   - a part that does not carry exactly one of text, raw, url and data,
//     or whose kind p does not admit: "part_kind";
//   - a data part: a mediaType other than "application/json" (or none),
//     or with a parameter other than charset=utf-8: "media_type"; nesting
//     deeper than MaxDepth: "max_depth", and the part is not parsed;
//     otherwise validated with [Schema.Validate], its violations prefixed
//     with "/parts/<i>/data";
//   - a text part: "media_type" and "max_text_bytes" as [Policy] says;
//   - a raw part: "media_type" and "max_raw_bytes" as [Policy] says;
//   - a url part: "url_scheme" or "url" as [Policy] says; a mediaType that
//     does not parse, or has a parameter other than charset=utf-8:
//     "media_type".
//
// An artifact with no data part gives Violation{"/parts",
// "data_part_required"}; an artifactId not matching [A-Za-z0-9_.-]{1,64}
// gives Violation{"/artifactId", "pattern"} and an empty ArtifactID, so it
// cannot carry content to a host.
//
// Warnings come from scanning every string the host may receive from a part
// of a kind p admits: every string value and undeclared object key of a
// parsed data part, a text part, a raw part that is valid UTF-8, a url
// part's URL (percent-decoded); and the artifact's name. A part's filename
// and metadata, and the artifact's description and metadata, count towards
// [Size] but are neither scanned nor checked: do not pass them to a host.
//
// Violations and warnings are each deduplicated and sorted by Pointer then
// Keyword or Kind (so "/parts/10" sorts before "/parts/2"). Valid is true
// exactly when there is no violation. s must not be nil.
func CheckPolicy(s *Schema, a a2a.Artifact, p Policy) Verdict {
	p = p.WithDefaults()
	var c check
	switch ptr, over := overSize(a, p.MaxArtifactBytes); {
	case len(a.Parts) > p.MaxParts:
		c.violate("/parts", "max_parts")
	case over:
		c.violate(ptr, "max_artifact_bytes")
	default:
		c.parts(s, a.Parts, p)
		c.scan("/name", a.Name)
	}
	id := a.ArtifactID
	if !safeID(id) {
		id = ""
		c.violate("/artifactId", "pattern")
	} else {
		// A safe id is still agent text a host sees ("SYSTEM_you_are_now…").
		c.scan("/artifactId", strings.NewReplacer("-", " ", "_", " ", ".", " ").Replace(id))
	}
	if len(c.vs) > 0 {
		c.vs = sortViolations(c.vs)
	}
	if len(c.ws) > 0 {
		slices.SortFunc(c.ws, func(a, b Warning) int {
			return cmp.Or(strings.Compare(a.Pointer, b.Pointer), strings.Compare(a.Kind, b.Kind))
		})
		c.ws = slices.Compact(c.ws)
	}
	return Verdict{ArtifactID: id, Valid: len(c.vs) == 0, Violations: c.vs, Warnings: c.ws}
}

// ScanText scans one agent-supplied string that reaches a host outside an
// artifact — a status message, an input-required question — for injection
// phrasing. It returns one Warning at pointer (the caller's, e.g.
// "/question") with the kind found, or nil.
func ScanText(pointer, text string) []Warning {
	if kind, ok := untrusted.Scan(text); ok {
		return []Warning{{Pointer: pointer, Kind: kind}}
	}
	return nil
}

// Size returns the bytes of a that count towards [Policy] MaxArtifactBytes
// and MaxTaskBytes: its artifactId, name, description, metadata and
// extensions, and for each part its content (text and url as UTF-8, raw
// decoded, data as the JSON text received), mediaType, filename and
// metadata.
func Size(a a2a.Artifact) int {
	n := ownSize(a)
	for _, p := range a.Parts {
		n += partSize(p)
	}
	return n
}

func ownSize(a a2a.Artifact) int {
	n := len(a.ArtifactID) + len(a.Name) + len(a.Description) + len(a.Metadata)
	for _, e := range a.Extensions {
		n += len(e)
	}
	return n
}

func partSize(p a2a.Part) int {
	n := len(p.Raw) + len(p.Data) + len(p.MediaType) + len(p.Filename) + len(p.Metadata)
	if p.Text != nil {
		n += len(*p.Text)
	}
	if p.URL != nil {
		n += len(*p.URL)
	}
	return n
}

// overSize reports whether a is larger than limit and where: "" if its own
// fields are, else the part that takes the running total over.
func overSize(a a2a.Artifact, limit int) (string, bool) {
	n := ownSize(a)
	if n > limit {
		return "", true
	}
	for i, p := range a.Parts {
		if n += partSize(p); n > limit {
			return "/parts/" + strconv.Itoa(i), true
		}
	}
	return "", false
}

// check gathers one artifact's violations and warnings.
type check struct {
	vs []Violation
	ws []Warning
}

func (c *check) violate(ptr, kw string) { c.vs = append(c.vs, Violation{Pointer: ptr, Keyword: kw}) }

func (c *check) scan(ptr, text string) {
	if kind, ok := untrusted.Scan(text); ok {
		c.ws = append(c.ws, Warning{Pointer: ptr, Kind: kind})
	}
}

func (c *check) parts(s *Schema, parts []a2a.Part, p Policy) {
	dataParts := 0
	for i, part := range parts {
		prefix := "/parts/" + strconv.Itoa(i)
		if contentFields(part) != 1 {
			c.violate(prefix, "part_kind")
			continue
		}
		switch part.Kind() {
		case "data":
			dataParts++
			c.data(s, prefix, part, p)
		case "text":
			if len(p.AllowedTextMediaTypes) == 0 {
				c.violate(prefix, "part_kind")
				continue
			}
			if !admitted(part.MediaType, "text/plain", p.AllowedTextMediaTypes) {
				c.violate(prefix, "media_type")
			}
			if p.MaxTextBytes > 0 && len(*part.Text) > p.MaxTextBytes {
				c.violate(prefix, "max_text_bytes")
			}
			c.scan(prefix+"/text", *part.Text)
		case "raw":
			if !p.AllowRaw {
				c.violate(prefix, "part_kind")
				continue
			}
			if !admitted(part.MediaType, "application/octet-stream", p.AllowedRawMediaTypes) {
				c.violate(prefix, "media_type")
			}
			if p.MaxRawBytes > 0 && len(part.Raw) > p.MaxRawBytes {
				c.violate(prefix, "max_raw_bytes")
			}
			if utf8.Valid(part.Raw) {
				c.scan(prefix+"/raw", string(part.Raw))
			}
		case "url":
			if !p.AllowURL {
				c.violate(prefix, "part_kind")
				continue
			}
			if kw := checkURL(*part.URL); kw != "" {
				c.violate(prefix, kw)
			}
			if _, ok := mediaType(part.MediaType, ""); !ok {
				c.violate(prefix, "media_type")
			}
			c.scan(prefix+"/url", *part.URL)
			if u, err := url.QueryUnescape(*part.URL); err == nil {
				c.scan(prefix+"/url", urlSeparators.Replace(u))
			}
		}
	}
	if dataParts == 0 {
		c.violate("/parts", "data_part_required")
	}
}

// urlSeparators makes words of a decoded URL's path and query.
var urlSeparators = strings.NewReplacer("/", " ", "=", " ", "&", " ")

// data checks one data part: its mediaType, its depth, then its schema, and
// scans its strings.
func (c *check) data(s *Schema, prefix string, part a2a.Part, p Policy) {
	if mt, ok := mediaType(part.MediaType, "application/json"); !ok || mt != "application/json" {
		c.violate(prefix, "media_type")
	}
	deep, members := textShape(part.Data, p.MaxDepth)
	if deep {
		c.violate(prefix, "max_depth")
		return
	}
	if !json.Valid(part.Data) {
		c.violate(prefix+"/data", "json")
		return
	}
	root, err := decodeUseNumber(part.Data)
	if err != nil {
		c.violate(prefix+"/data", "json")
		return
	}
	// Go keeps the last of duplicate members, other readers the first: what
	// a host reads could be what was never validated. Decoding collapsed
	// any duplicates, so fewer members in the tree than in the text means
	// there were some (the cheap test); then find where.
	if members != treeMembers(root) {
		ptr, _ := duplicateMember(part.Data)
		c.violate(prefix+"/data"+ptr, "duplicate_member")
		return
	}
	for _, v := range s.validateRoot(root) {
		c.violate(prefix+"/data"+v.Pointer, v.Keyword)
	}
	for _, f := range untrusted.Walk(root, s.declares) {
		c.ws = append(c.ws, Warning{Pointer: prefix + "/data" + f.Pointer, Kind: f.Kind})
	}
}

// textShape reads JSON text b once, skipping string contents: deep is true
// when arrays and objects nest deeper than limit (the scan stops there),
// and members counts the object members (one ':' outside strings each). b
// need not be valid JSON.
func textShape(b []byte, limit int) (deep bool, members int) {
	depth := 0
	inString, escaped := false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == ':':
			members++
		case c == '{' || c == '[':
			if depth++; depth > limit {
				return true, members
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return false, members
}

// treeMembers counts the object members of a decoded JSON value.
func treeMembers(v any) int {
	switch t := v.(type) {
	case map[string]any:
		n := len(t)
		for _, c := range t {
			n += treeMembers(c)
		}
		return n
	case []any:
		n := 0
		for _, c := range t {
			n += treeMembers(c)
		}
		return n
	}
	return 0
}

// DuplicateMember reports whether valid JSON text b has, anywhere, an
// object with two members of one name (RFC 8259 §4: names SHOULD be
// unique; Go's decoder keeps the last, other readers the first), and
// where, as [duplicateMember] names it. For bindings that decode an
// agent's answer before a2ad's own checks see it (internal/httpbind).
func DuplicateMember(b []byte) (string, bool) { return duplicateMember(b) }

// duplicateMember reports whether valid JSON text b has an object with two
// members of one name (RFC 8259 §4: names SHOULD be unique), and the
// pointer of the first such object — array indexes only below the root's
// members, so no agent-chosen name is ever echoed: "" for the root, and an
// object nested under a member is reported at the root.
func duplicateMember(b []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	type frame struct {
		names  map[string]bool // nil for an array
		index  int             // next array index
		expect bool            // object: the next string token is a name
		ptr    string          // where duplicates inside are reported
		fixed  bool            // under an object member: pointers stop growing
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false // io.EOF: b is valid, no duplicate
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.names != nil && top.expect {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				continue
			}
			name, _ := tok.(string)
			if top.names[name] {
				return top.ptr, true
			}
			top.names[name] = true
			top.expect = false
			continue
		}
		// A value (or the end of an array).
		childPtr, fixed := "", false
		if top != nil {
			switch {
			case top.names != nil: // under a member: names are not echoed
				childPtr, fixed = top.ptr, true
				top.expect = true
			case top.fixed:
				childPtr, fixed = top.ptr, true
				top.index++
			default:
				childPtr = top.ptr + "/" + strconv.Itoa(top.index)
				top.index++
			}
		}
		switch d, _ := tok.(json.Delim); d {
		case '{':
			stack = append(stack, &frame{names: map[string]bool{}, expect: true, ptr: childPtr, fixed: fixed})
		case '[':
			stack = append(stack, &frame{ptr: childPtr, fixed: fixed})
		case ']':
			stack = stack[:len(stack)-1]
			if top != nil && top.names == nil {
				top.index-- // the ']' was counted as a value above
			}
			if len(stack) > 0 {
				if p := stack[len(stack)-1]; p.names != nil {
					p.expect = true
				}
			}
		}
	}
}

// declares reports whether the schema declares property name.
func (s *Schema) declares(name string) bool { return s.names[name] }

// mediaType returns the lowercase type/subtype of a part's mediaType, def
// when it is empty. ok is false when it does not parse as a media type
// (RFC 2045 §5.1) or carries a parameter other than charset=utf-8, which
// would be agent text in a field hosts are shown.
func mediaType(mt, def string) (string, bool) {
	if mt == "" {
		return def, true
	}
	base, params, err := mime.ParseMediaType(mt)
	if err != nil || !strings.Contains(base, "/") {
		return "", false
	}
	for k, v := range params {
		if k != "charset" || !strings.EqualFold(v, "utf-8") {
			return "", false
		}
	}
	return base, true
}

// admitted reports whether mediaType mt (def when empty) is one of allowed,
// where "type/*" admits every subtype of type.
func admitted(mt, def string, allowed []string) bool {
	base, ok := mediaType(mt, def)
	if !ok {
		return false
	}
	for _, a := range allowed {
		a = strings.ToLower(strings.TrimSpace(a))
		if a == base || strings.HasSuffix(a, "/*") && strings.HasPrefix(base, a[:len(a)-1]) {
			return true
		}
	}
	return false
}

// checkURL returns "" for an absolute https URL with a host and no user
// information, "url_scheme" for another scheme, and "url" for anything
// else (including spaces and control characters).
func checkURL(raw string) string {
	if strings.ContainsFunc(raw, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return "url"
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return "url"
	case u.Scheme != "https":
		return "url_scheme"
	case u.Opaque != "" || u.Host == "" || u.Hostname() == "" || u.User != nil:
		return "url"
	}
	return ""
}
