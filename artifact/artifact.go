// Package artifact owns a2ad's host schema registry and validates what
// remote A2A agents return against those schemas before any of it reaches a
// host.
//
// Host schemas are JSON Schema draft-07 files, one per name, loaded once from
// a directory ([LoadDir], [LoadFS]) and compiled with
// github.com/xeipuuv/gojsonschema v1.2.0. Schemas of one directory may $ref
// each other by their top-level $id; loading refuses anything that could
// make a schema reach outside its directory or mean less than it says:
// other dialects, later drafts' keywords, a $ref the directory cannot
// resolve, base-URI-changing $id below the top level; and the compiler runs
// with a loader that refuses every external load.
//
// Validation reports [Violation]s: a JSON pointer and a JSON Schema keyword,
// never the offending value, and never an object key the host schema does
// not declare, since agent text must not reach the host through an error
// report. [CheckPolicy] applies a schema and a [Policy] (which parts, how
// large) to an A2A artifact and flags injection phrasing in what a host may
// receive as [Warning]s; [Check] does so under the zero Policy.
//
// Sources: JSON Schema draft-07 (draft-handrews-json-schema-01 and
// draft-handrews-json-schema-validation-01), RFC 6901 (JSON Pointer), A2A
// specification 1.0 §4.1.6–4.1.7 (Part, Artifact).
package artifact

import (
	"cmp"
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/a2ad/a2ad/internal/a2a"
	"github.com/xeipuuv/gojsonschema"
)

// A Violation says where a document breaks its schema and which keyword
// failed, never the offending value.
//
// Pointer is an RFC 6901 JSON pointer into the validated document ("" is the
// root), e.g. "/score" or "/reasons/3". Its tokens are only array indexes and
// property names the schema declares; a violation inside an object member
// the schema does not declare is reported at that object instead, so agent
// chosen keys are never echoed. For "required", and for "dependencies" on a
// property list, the pointer names the missing property ("/policy_version");
// for "additionalProperties" it is the object holding the unexpected
// property.
//
// Keyword is the draft-07 keyword that failed: "type", "enum", "const",
// "required", "additionalProperties", "propertyNames", "dependencies",
// "minProperties", "maxProperties", "patternProperties", "minimum",
// "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
// "minLength", "maxLength", "pattern", "format", "minItems", "maxItems",
// "uniqueItems", "contains", "additionalItems", "allOf", "anyOf", "oneOf",
// "not" or "if" (a failed "then" or "else"); "false" for a value at a false
// schema; "json" for a document that is not JSON; "schema" for any other
// failure of the validator. [CheckPolicy] adds "part_kind",
// "data_part_required", "media_type", "max_parts", "max_artifact_bytes",
// "max_depth", "max_text_bytes", "max_raw_bytes", "url_scheme" and "url";
// see [Policy].
type Violation struct {
	Pointer string `json:"pointer"`
	Keyword string `json:"keyword"`
}

// keywords maps gojsonschema v1.2.0 ResultError.Type() values (errors.go,
// newError) to draft-07 keywords.
var keywords = map[string]string{
	"false":                           "false",
	"required":                        "required",
	"invalid_type":                    "type",
	"number_any_of":                   "anyOf",
	"number_one_of":                   "oneOf",
	"number_all_of":                   "allOf",
	"number_not":                      "not",
	"missing_dependency":              "dependencies",
	"internal":                        "schema",
	"const":                           "const",
	"enum":                            "enum",
	"array_no_additional_items":       "additionalItems",
	"array_min_items":                 "minItems",
	"array_max_items":                 "maxItems",
	"unique":                          "uniqueItems",
	"contains":                        "contains",
	"array_min_properties":            "minProperties",
	"array_max_properties":            "maxProperties",
	"additional_property_not_allowed": "additionalProperties",
	"invalid_property_pattern":        "patternProperties",
	"invalid_property_name":           "propertyNames",
	"string_gte":                      "minLength",
	"string_lte":                      "maxLength",
	"pattern":                         "pattern",
	"format":                          "format",
	"multiple_of":                     "multipleOf",
	"number_gte":                      "minimum",
	"number_gt":                       "exclusiveMinimum",
	"number_lte":                      "maximum",
	"number_lt":                       "exclusiveMaximum",
	"condition_then":                  "if",
	"condition_else":                  "if",
}

// keyword returns the draft-07 keyword for a gojsonschema error type;
// unknown types give "schema".
func keyword(errType string) string {
	if k, ok := keywords[errType]; ok {
		return k
	}
	return "schema"
}

// Validate validates doc, one JSON value, against s. It returns nil if doc is
// valid, else its violations (see [Violation] for what a pointer may name),
// deduplicated and sorted by Pointer then Keyword. A doc that is
// not a single well-formed JSON value gives the single
// Violation{Pointer: "", Keyword: "json"}. A panic of the underlying
// validator is contained and reported as Violation{Pointer: "", Keyword:
// "schema"}, so Validate fails closed.
func (s *Schema) Validate(doc json.RawMessage) []Violation {
	if !json.Valid(doc) {
		return []Violation{{Pointer: "", Keyword: "json"}}
	}
	root, err := decodeUseNumber(doc)
	if err != nil {
		return []Violation{{Pointer: "", Keyword: "json"}}
	}
	return s.validateRoot(root)
}

// validateRoot is [Schema.Validate] on a document already decoded with
// json.Number.
func (s *Schema) validateRoot(root any) []Violation {
	errs, ok := s.run(root)
	if !ok {
		return []Violation{{Pointer: "", Keyword: "schema"}}
	}
	if len(errs) == 0 {
		return nil
	}
	vs := make([]Violation, 0, len(errs))
	for _, e := range errs {
		kw := keyword(e.Type())
		ptr, complete := s.pointer(root, e.Context())
		// The missing property's name comes from the schema, so it is safe
		// to name, but only under a pointer that was not cut short.
		if complete {
			var missing any
			switch kw {
			case "required":
				missing = e.Details()["property"]
			case "dependencies":
				missing = e.Details()["dependency"]
			}
			if p, ok := missing.(string); ok {
				ptr += "/" + escapeToken(p)
			}
		}
		vs = append(vs, Violation{Pointer: ptr, Keyword: kw})
	}
	return sortViolations(vs)
}

// run validates root, already decoded with json.Number, with the compiled
// schema; ok is false if the validator panicked.
func (s *Schema) run(root any) (errs []gojsonschema.ResultError, ok bool) {
	defer func() {
		if recover() != nil {
			errs, ok = nil, false
		}
	}()
	res, err := s.compiled.Validate(rootLoader{doc: root})
	if err != nil {
		return nil, false
	}
	return res.Errors(), true
}

// pointer turns a gojsonschema context, "(root)" followed by one token per
// level, into an RFC 6901 pointer into root. It stops at the first token
// that is neither an index of an array in root nor a property name the
// schema declares and present in root; complete reports whether every token
// was kept.
func (s *Schema) pointer(root any, ctx *gojsonschema.JsonContext) (string, bool) {
	toks := contextTokens(ctx)
	if len(toks) > 0 {
		toks = toks[1:] // "(root)"
	}
	var b strings.Builder
	node := root
	for _, t := range toks {
		switch n := node.(type) {
		case []any:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(n) || strconv.Itoa(i) != t {
				return b.String(), false
			}
			node = n[i]
		case map[string]any:
			v, present := n[t]
			if !present || !s.names[t] {
				return b.String(), false
			}
			node = v
		default:
			return b.String(), false
		}
		b.WriteByte('/')
		b.WriteString(escapeToken(t))
	}
	return b.String(), true
}

// jsonContextShape reports whether gojsonschema.JsonContext is still
// struct{ head string; tail *JsonContext }, as in v1.2.0 (jsonContext.go).
// Its fields are unexported and its String method joins tokens with a
// delimiter that may occur in keys, so contextTokens reads the fields.
var jsonContextShape = func() bool {
	t := reflect.TypeFor[gojsonschema.JsonContext]()
	if t.NumField() != 2 {
		return false
	}
	h, tl := t.Field(0), t.Field(1)
	return h.Name == "head" && h.Type.Kind() == reflect.String &&
		tl.Name == "tail" && tl.Type == reflect.TypeFor[*gojsonschema.JsonContext]()
}()

// contextTokens returns the tokens of a gojsonschema context, outermost
// first.
func contextTokens(ctx *gojsonschema.JsonContext) []string {
	if ctx == nil {
		return nil
	}
	if !jsonContextShape {
		// Fallback for another gojsonschema version: NUL cannot be in a
		// declared name worth reporting, and pointer() checks every token.
		return strings.Split(ctx.String("\x00"), "\x00")
	}
	var toks []string
	for v := reflect.ValueOf(ctx); !v.IsNil(); v = v.Elem().Field(1) {
		toks = append(toks, v.Elem().Field(0).String())
	}
	slices.Reverse(toks)
	return toks
}

// sortViolations sorts vs by Pointer then Keyword and removes duplicates.
func sortViolations(vs []Violation) []Violation {
	slices.SortFunc(vs, func(a, b Violation) int {
		return cmp.Or(strings.Compare(a.Pointer, b.Pointer), strings.Compare(a.Keyword, b.Keyword))
	})
	return slices.Compact(vs)
}

// A Verdict is the outcome of [CheckPolicy] on one artifact. Valid is true
// exactly when Violations is empty; Warnings do not affect it.
type Verdict struct {
	ArtifactID string      `json:"artifact_id"` // the artifact's artifactId when it is a safe identifier, else ""
	Valid      bool        `json:"valid"`
	Violations []Violation `json:"violations,omitempty"`
	// Warnings flag injection phrasing in content a host may receive
	// (untrusted-content warnings): pointer and kind, never the text.
	Warnings []Warning `json:"warnings,omitempty"`
}

// Check is [CheckPolicy] under the zero [Policy]: data parts only, each
// validated against s (violations under "/parts/<i>/data", e.g.
// "/parts/0/data/score"), so free text cannot ride along unvalidated; every
// text, raw or url part gives "part_kind"; default limits. s must not be
// nil.
func Check(s *Schema, a a2a.Artifact) Verdict {
	return CheckPolicy(s, a, Policy{})
}

// ShownID returns id if it is safe to show a host or an operator (1 to 64
// bytes of ASCII letters, digits, '_', '.', '-'), else "". A Verdict's
// ArtifactID is ShownID of the artifact's artifactId.
func ShownID(id string) string {
	if safeID(id) {
		return id
	}
	return ""
}

func safeID(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// contentFields counts the content fields (text, raw, url, data) p sets.
func contentFields(p a2a.Part) int {
	n := 0
	for _, set := range []bool{p.Text != nil, p.Raw != nil, p.URL != nil, p.Data != nil} {
		if set {
			n++
		}
	}
	return n
}
