package mcpedge

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/a2ad/a2ad/agentcard"
	"github.com/a2ad/a2ad/task"
	"github.com/google/jsonschema-go/jsonschema"
)

// Portable tool schemas.
//
// Hosts map tool schemas onto dialects narrower than JSON Schema 2020-12:
// Gemini's function declarations take an OpenAPI 3.0 subset with a single
// `type` per schema; the MCP Inspector's `tools/list --strict`
// (@modelcontextprotocol/inspector 2.12, core/json/schemaLint.ts) refuses a
// bare `true`/`false` schema (error) and warns on a `type` array, on a
// `$ref` that leaves the document and on a schema without any validation
// keyword (`{}`, or one with a description only). jsonschema-go infers
// `["null","array"]` for every Go slice and `["null","object"]` for every
// pointer, and `true` for an `any`: [portable] rewrites such inferred
// schemas at the source, and [SchemaFindings] is the Inspector's check
// plus a2ad's own (a description on every property), which the tests run
// over every tool a2ad lists.

// Bounds and enums a2ad's tool schemas carry, by property name, wherever the
// property occurs.
var (
	taskStates   = []any{string(task.Submitted), string(task.Working), string(task.InputRequired), string(task.AuthRequired), string(task.Completed), string(task.Failed), string(task.Canceled), string(task.Rejected)}
	agentStates  = []any{"approved", "pending", "quarantined"}
	reachStates  = []any{string(agentcard.ReachabilityReachable), string(agentcard.ReachabilityOffline), string(agentcard.ReachabilityUnknown)}
	partKinds    = []any{"data", "text", "raw", "url"}
	anyJSONValue = map[string]any{
		"description": "the validated data part: JSON, as the agent sent it",
		"anyOf": []any{
			map[string]any{"type": "object", "additionalProperties": true},
			map[string]any{"type": "array"},
			map[string]any{"type": "string"},
			map[string]any{"type": "number"},
			map[string]any{"type": "boolean"},
			map[string]any{"type": "null"},
		},
	}
)

// fallbackDescriptions describe properties of types a2ad's edge does not
// own (artifact.Verdict, artifact.Violation, artifact.Warning), where their
// Go declarations carry no description.
var fallbackDescriptions = map[string]string{
	"artifact_id": "the artifact's artifactId (\"\" when it is not a safe identifier)",
	"valid":       "whether the artifact satisfied the host schema and the artifact policy",
	"violations":  "where the artifact broke the host schema: JSON pointer and schema keyword, never the content",
	"pointer":     "RFC 6901 JSON pointer",
	"keyword":     "the JSON Schema keyword that failed, e.g. required, type, enum",
	"kind":        "the kind of phrasing: instruction_override, role_reassignment, prompt_reference, concealment, role_tag or exfiltration",
	"warnings":    "text phrased as instructions to a model: JSON pointer and kind only, never the text",
}

// schemaLimits are the bounds that depend on a2ad's configuration.
type schemaLimits struct {
	MaxDeadlineSeconds int // brief.Limits.MaxDeadlineSeconds
}

// portableFor is the schema jsonschema-go infers for T, made portable
// ([portable]), as a JSON object. T is a fixed struct type: a failure is
// a programming error and panics, at start.
func portableFor[T any](lim schemaLimits) map[string]any {
	s, err := jsonschema.For[T](&jsonschema.ForOptions{})
	if err != nil {
		panic(fmt.Sprintf("mcpedge: schema of %T: %v", *new(T), err))
	}
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("mcpedge: schema of %T: %v", *new(T), err))
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		panic(fmt.Sprintf("mcpedge: schema of %T: %v", *new(T), err))
	}
	portable(m, "", lim)
	return m
}

// portableSchema is [portableFor] encoded, checked with [SchemaFindings]:
// a finding in a schema a2ad derives from its own types panics, at start,
// so no unportable schema is ever listed.
func portableSchema[T any](lim schemaLimits) json.RawMessage {
	return checkedSchema[T](portableFor[T](lim))
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("mcpedge: %v", err))
	}
	return b
}

// portable rewrites an inferred schema node in place: a `type` array that
// lists "null" with one other type becomes that type (a2ad never emits
// null for such a member: it is omitted instead, see omitempty), an empty
// `additionalProperties` becomes `true`, the property named name gets its
// bound, enum or description (see the tables above).
func portable(node map[string]any, name string, lim schemaLimits) {
	if ts, ok := node["type"].([]any); ok {
		var rest []any
		for _, t := range ts {
			if t != "null" {
				rest = append(rest, t)
			}
		}
		if len(rest) == 1 {
			node["type"] = rest[0]
		}
	}
	if ap, ok := node["additionalProperties"].(map[string]any); ok {
		if len(ap) == 0 {
			node["additionalProperties"] = true
		} else {
			portable(ap, "", lim)
		}
	}
	switch name {
	case "wait_seconds":
		node["minimum"], node["maximum"] = 0, int(maxWaitSeconds)
	case "deadline_seconds":
		node["minimum"] = 0
		if lim.MaxDeadlineSeconds > 0 {
			node["maximum"] = lim.MaxDeadlineSeconds
		}
	}
	if props, ok := node["properties"].(map[string]any); ok {
		for pn, p := range props {
			switch v := p.(type) {
			case bool: // an untyped Go field (any): any JSON value, spelt portably
				if v {
					props[pn] = maps.Clone(anyJSONValue)
				}
			case map[string]any:
				if !constrains(v) {
					a := maps.Clone(anyJSONValue)
					if d, ok := v["description"]; ok {
						a["description"] = d
					}
					props[pn] = a
					continue
				}
				portable(v, pn, lim)
				if _, ok := v["description"]; !ok {
					if d, ok := fallbackDescriptions[pn]; ok {
						v["description"] = d
					}
				}
			}
		}
	}
	if items, ok := node["items"].(map[string]any); ok {
		portable(items, "", lim)
	}
	for _, k := range []string{"anyOf", "oneOf", "allOf"} {
		if arr, ok := node[k].([]any); ok {
			for _, it := range arr {
				if m, ok := it.(map[string]any); ok {
					portable(m, "", lim)
				}
			}
		}
	}
}

// withEnum sets the enum of the property at path (property names, "*" for
// array items) of schema s.
func withEnum(s map[string]any, enum []any, path ...string) {
	if n := schemaAt(s, path...); n != nil {
		n["enum"] = slices.Clone(enum)
	}
}

// schemaAt is the subschema at path (property names; "*" steps into
// items), nil if there is none.
func schemaAt(s map[string]any, path ...string) map[string]any {
	n := s
	for _, p := range path {
		var next any
		if p == "*" {
			next = n["items"]
		} else {
			props, _ := n["properties"].(map[string]any)
			next = props[p]
		}
		m, ok := next.(map[string]any)
		if !ok {
			return nil
		}
		n = m
	}
	return n
}

// maxWaitSeconds is broker.MaxWait in seconds, the maximum of every
// wait_seconds.
const maxWaitSeconds = 50

// SchemaFindings checks one tool schema (a JSON document, decoded) as the
// MCP Inspector's `tools/list --strict` does, and for a description on
// every property: each finding is "<path>: <rule>", path in the
// Inspector's notation (properties.a.items). The rules: boolean-schema (a
// bare true or false where a schema object is expected: an error there),
// type-union (a `type` array), remote-ref (a `$ref` not starting with "#"),
// untyped-schema (a schema with no validation keyword), and, a2ad's own,
// no-description (a property without a description). None: nil.
func SchemaFindings(schema any) []string {
	var out []string
	lintWalk(schema, "", "", 0, &out)
	sort.Strings(out)
	return out
}

// booleanKeywords may hold a bare true or false (the Inspector's
// BOOLEAN_VALUED_KEYWORDS).
var booleanKeywords = map[string]bool{"additionalProperties": true, "unevaluatedProperties": true, "additionalItems": true, "unevaluatedItems": true}

// constrainingKeywords are the Inspector's CONSTRAINING_KEYWORDS: a schema
// with none of them accepts any value.
var constrainingKeywords = map[string]bool{
	"type": true, "enum": true, "const": true, "multipleOf": true, "maximum": true, "exclusiveMaximum": true, "minimum": true,
	"exclusiveMinimum": true, "maxLength": true, "minLength": true, "pattern": true, "format": true, "contentMediaType": true,
	"contentEncoding": true, "contentSchema": true, "maxItems": true, "minItems": true, "uniqueItems": true, "maxContains": true,
	"minContains": true, "maxProperties": true, "minProperties": true, "required": true, "dependentRequired": true, "allOf": true,
	"anyOf": true, "oneOf": true, "not": true, "items": true, "prefixItems": true, "contains": true, "additionalItems": true,
	"unevaluatedItems": true, "properties": true, "patternProperties": true, "additionalProperties": true,
	"unevaluatedProperties": true, "propertyNames": true, "dependentSchemas": true, "dependencies": true, "$ref": true,
	"$dynamicRef": true, "$recursiveRef": true,
}

var (
	lintMapKeywords    = []string{"properties", "patternProperties", "dependentSchemas", "dependencies", "$defs", "definitions"}
	lintArrayKeywords  = []string{"allOf", "anyOf", "oneOf", "prefixItems"}
	lintSingleKeywords = []string{"items", "contains", "not", "propertyNames", "if", "then", "else", "additionalProperties",
		"unevaluatedProperties", "additionalItems", "unevaluatedItems", "contentSchema"}
)

// constrains reports whether schema m has a validation keyword (the
// Inspector's constrainsInstance).
func constrains(m map[string]any) bool {
	for k := range m {
		if constrainingKeywords[k] {
			return true
		}
	}
	_, cond := m["if"]
	_, then := m["then"]
	_, els := m["else"]
	return cond && (then || els)
}

func lintPath(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

func lintWalk(node any, path, keyword string, depth int, out *[]string) {
	if depth > 64 {
		return
	}
	at := path
	if at == "" {
		at = "(root)"
	}
	if b, ok := node.(bool); ok {
		if !booleanKeywords[keyword] {
			*out = append(*out, fmt.Sprintf("%s: boolean-schema (bare %v)", at, b))
		}
		return
	}
	m, ok := node.(map[string]any)
	if !ok {
		return
	}
	if _, ok := m["type"].([]any); ok {
		*out = append(*out, at+": type-union")
	}
	if ref, ok := m["$ref"].(string); ok && ref != "" && !strings.HasPrefix(ref, "#") {
		*out = append(*out, at+": remote-ref")
	}
	if !constrains(m) && keyword != "not" {
		*out = append(*out, at+": untyped-schema")
	}
	for _, k := range lintMapKeywords {
		sub, ok := m[k].(map[string]any)
		if !ok {
			continue
		}
		for _, name := range slices.Sorted(maps.Keys(sub)) {
			p := lintPath(lintPath(path, k), name)
			if k == "properties" {
				if pm, ok := sub[name].(map[string]any); ok && pm["description"] == nil {
					if _, ref := pm["$ref"]; !ref {
						*out = append(*out, p+": no-description")
					}
				}
			}
			lintWalk(sub[name], p, k, depth+1, out)
		}
	}
	for _, k := range lintArrayKeywords {
		arr, ok := m[k].([]any)
		if !ok {
			continue
		}
		for i, it := range arr {
			lintWalk(it, fmt.Sprintf("%s[%d]", lintPath(path, k), i), k, depth+1, out)
		}
	}
	for _, k := range lintSingleKeywords {
		v, ok := m[k]
		if !ok {
			continue
		}
		if arr, ok := v.([]any); ok && k == "items" {
			for i, it := range arr {
				lintWalk(it, fmt.Sprintf("%s[%d]", lintPath(path, k), i), k, depth+1, out)
			}
			continue
		}
		lintWalk(v, lintPath(path, k), k, depth+1, out)
	}
}

// nullableArguments are, per input type, the top-level members a host may
// send as null to mean absent (pointers and slices): [dropNullArguments]
// removes them, since their portable schemas have a single type.
func nullableArguments(t reflect.Type) map[string]bool {
	out := map[string]bool{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		if k := f.Type.Kind(); k == reflect.Pointer || k == reflect.Slice {
			out[name] = true
		}
	}
	return out
}

// dropNullArguments returns raw without the top-level members named in
// nullable whose value is null (raw itself when there are none).
func dropNullArguments(raw json.RawMessage, nullable map[string]bool) json.RawMessage {
	var m map[string]json.RawMessage
	if len(nullable) == 0 || json.Unmarshal(raw, &m) != nil {
		return raw
	}
	changed := false
	for k, v := range m {
		if nullable[k] && string(v) == "null" {
			delete(m, k)
			changed = true
		}
	}
	if !changed {
		return raw
	}
	b, err := json.Marshal(m)
	if err != nil {
		return raw
	}
	return b
}

// taskOutputSchema is the output schema of delegate, task_get,
// task_respond and task_cancel: [TaskOutput], portable, with the enums of
// state and part kind.
func taskOutputSchema(lim schemaLimits) json.RawMessage {
	return checkedSchema[TaskOutput](taskOutputMap(lim))
}

// taskOutputMap is [TaskOutput]'s portable schema, decoded: with the
// enums of state and part kind, and result any JSON value (jsonschema-go
// takes its json.RawMessage for bytes).
func taskOutputMap(lim schemaLimits) map[string]any {
	m := portableFor[TaskOutput](lim)
	withEnum(m, taskStates, "state")
	withEnum(m, partKinds, "artifacts", "*", "parts", "*", "kind")
	props := m["properties"].(map[string]any)
	r := maps.Clone(anyJSONValue)
	r["description"] = props["result"].(map[string]any)["description"]
	props["result"] = r
	return m
}

// agentsListOutputSchema is agents_list's output schema, with the enum of
// status.
func agentsListOutputSchema(lim schemaLimits) json.RawMessage {
	m := portableFor[AgentsListOutput](lim)
	withEnum(m, agentStates, "agents", "*", "status")
	withEnum(m, reachStates, "agents", "*", "reachability")
	return checkedSchema[AgentsListOutput](m)
}

// checkedSchema is m encoded, after [SchemaFindings] found nothing in it
// (else it panics, at start: m is derived from a2ad's own type T).
func checkedSchema[T any](m map[string]any) json.RawMessage {
	if f := SchemaFindings(m); len(f) > 0 {
		panic(fmt.Sprintf("mcpedge: schema of %T is not portable: %s", *new(T), strings.Join(f, "; ")))
	}
	return mustJSON(m)
}
