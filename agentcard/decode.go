package agentcard

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// The card is decoded member by member rather than with encoding/json,
// whose errors name neither the position of an unknown member nor the array
// index of a mistyped one: a refusal and a note must carry the exact JSON
// pointer. The strict helpers here (decodeObject refuses unknown members)
// serve Normalize's reading of 0.3 security schemes; the card itself is
// read by the collecting checker (check.go).

// field decodes one non-null member whose pointer is ptr.
type field func(ptr string, raw json.RawMessage) error

// decodeObject walks the members of the object raw in document order. A
// member not in fields is refused; a null member is skipped (ProtoJSON reads
// null as the field's default).
func decodeObject(ptr string, raw json.RawMessage, fields map[string]field) error {
	return decodeObjectKeep(ptr, raw, nil, fields)
}

// decodeObjectKeep is decodeObject that keeps the members not in fields in
// *kept instead of refusing them, unless kept is nil.
func decodeObjectKeep(ptr string, raw json.RawMessage, kept *map[string]json.RawMessage, fields map[string]field) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return invalid(ptr, "must be an object")
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return invalid(ptr, "invalid JSON: %v", err)
		}
		name, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return invalid(ptr, "invalid JSON: %v", err)
		}
		p := ptr + "/" + escapePointer(name)
		f, ok := fields[name]
		if !ok && kept != nil {
			if *kept == nil {
				*kept = map[string]json.RawMessage{}
			}
			(*kept)[name] = v
			continue
		}
		if !ok {
			return invalid(p, "unknown field")
		}
		if bytes.Equal(v, []byte("null")) {
			continue
		}
		if err := f(p, v); err != nil {
			return err
		}
	}
	return nil
}

func stringField(dst *string) field {
	return func(p string, v json.RawMessage) error { return decodeString(p, v, dst) }
}

func decodeString(ptr string, raw json.RawMessage, dst *string) error {
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, dst) != nil {
		return invalid(ptr, "must be a string")
	}
	return nil
}

func boolField(dst **bool) field {
	return func(p string, v json.RawMessage) error {
		var b bool
		if json.Unmarshal(v, &b) != nil {
			return invalid(p, "must be a boolean")
		}
		*dst = &b
		return nil
	}
}

// listField decodes a JSON array with one into a non-nil slice, so that an
// empty array stays distinguishable from an absent member.
func listField[T any](dst *[]T, one func(string, json.RawMessage, *T) error) field {
	return func(p string, v json.RawMessage) error {
		var items []json.RawMessage
		if len(v) == 0 || v[0] != '[' || json.Unmarshal(v, &items) != nil {
			return invalid(p, "must be an array")
		}
		out := make([]T, len(items))
		for i, item := range items {
			if err := one(p+"/"+strconv.Itoa(i), item, &out[i]); err != nil {
				return err
			}
		}
		*dst = out
		return nil
	}
}

// decodeRaw keeps an opaque member as it is; Validate checks its type.
func decodeRaw(_ string, raw json.RawMessage, dst *json.RawMessage) error {
	*dst = raw
	return nil
}

func rawMapField(dst *map[string]json.RawMessage) field {
	return func(p string, v json.RawMessage) error {
		if len(v) == 0 || v[0] != '{' || json.Unmarshal(v, dst) != nil {
			return invalid(p, "must be an object")
		}
		return nil
	}
}

// escapePointer escapes one reference token of a JSON pointer (RFC 6901 §3).
func escapePointer(name string) string {
	if !strings.ContainsAny(name, "~/") {
		return name
	}
	return strings.ReplaceAll(strings.ReplaceAll(name, "~", "~0"), "/", "~1")
}
