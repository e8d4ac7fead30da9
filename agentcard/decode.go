package agentcard

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// The card is decoded member by member rather than with
// json.Decoder.DisallowUnknownFields, whose errors name neither the position
// of an unknown member nor the array index of a mistyped one: a refusal must
// carry the exact JSON pointer.

// field decodes one non-null member whose pointer is ptr.
type field func(ptr string, raw json.RawMessage) error

// decodeCard decodes raw, which must already be valid JSON, into a Card. It
// reports whether the capabilities member was present and not null, which the
// Card itself cannot show.
func decodeCard(raw []byte) (*Card, bool, error) {
	if t := bytes.TrimLeft(raw, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return nil, false, invalid("", "card must be a JSON object")
	}
	c := &Card{}
	caps := false
	err := decodeObject("", raw, map[string]field{
		"name":                stringField(&c.Name),
		"description":         stringField(&c.Description),
		"supportedInterfaces": listField(&c.SupportedInterfaces, decodeInterface),
		"provider": func(p string, v json.RawMessage) error {
			c.Provider = &Provider{}
			return decodeProvider(p, v, c.Provider)
		},
		"version":              stringField(&c.Version),
		"documentationUrl":     stringField(&c.DocumentationURL),
		"capabilities":         func(p string, v json.RawMessage) error { caps = true; return decodeCapabilities(p, v, &c.Capabilities) },
		"securitySchemes":      rawMapField(&c.SecuritySchemes),
		"securityRequirements": listField(&c.SecurityRequirements, decodeRaw),
		"defaultInputModes":    listField(&c.DefaultInputModes, decodeString),
		"defaultOutputModes":   listField(&c.DefaultOutputModes, decodeString),
		"skills":               listField(&c.Skills, decodeSkill),
		"signatures":           listField(&c.Signatures, decodeRaw),
		"iconUrl":              stringField(&c.IconURL),
	})
	if err != nil {
		return nil, false, err
	}
	return c, caps, nil
}

func decodeInterface(ptr string, raw json.RawMessage, in *Interface) error {
	return decodeObject(ptr, raw, map[string]field{
		"url":             stringField(&in.URL),
		"protocolBinding": stringField(&in.ProtocolBinding),
		"protocolVersion": stringField(&in.ProtocolVersion),
		"tenant":          stringField(&in.Tenant),
	})
}

func decodeProvider(ptr string, raw json.RawMessage, p *Provider) error {
	return decodeObject(ptr, raw, map[string]field{
		"url":          stringField(&p.URL),
		"organization": stringField(&p.Organization),
	})
}

func decodeCapabilities(ptr string, raw json.RawMessage, c *Capabilities) error {
	return decodeObject(ptr, raw, map[string]field{
		"streaming":         boolField(&c.Streaming),
		"pushNotifications": boolField(&c.PushNotifications),
		"extendedAgentCard": boolField(&c.ExtendedAgentCard),
		"extensions":        listField(&c.Extensions, decodeRaw),
	})
}

func decodeSkill(ptr string, raw json.RawMessage, s *Skill) error {
	return decodeObject(ptr, raw, map[string]field{
		"id":                   stringField(&s.ID),
		"name":                 stringField(&s.Name),
		"description":          stringField(&s.Description),
		"tags":                 listField(&s.Tags, decodeString),
		"examples":             listField(&s.Examples, decodeString),
		"inputModes":           listField(&s.InputModes, decodeString),
		"outputModes":          listField(&s.OutputModes, decodeString),
		"securityRequirements": listField(&s.SecurityRequirements, decodeRaw),
	})
}

// decodeObject walks the members of the object raw in document order. A
// member not in fields is refused; a null member is skipped (ProtoJSON reads
// null as the field's default).
func decodeObject(ptr string, raw json.RawMessage, fields map[string]field) error {
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
