package agentcard

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/gowebpki/jcs"
)

// SigningPayload returns the bytes an A2A 1.0 card signature signs (A2A 1.0
// §8.4.1, §8.4.2 step 1, §8.4.3 steps 3-5): the card with its members at
// their default value removed, following Protocol Buffer field presence
// (§5.7), and its top-level signatures member excluded, in RFC 8785 (JCS)
// canonical form. Errors are *[ValidationError], for input [SigningInput]
// refuses: not one JSON object, or not canonicalizable.
//
// Each member is judged by the a2a.proto field it encodes (v1.0.1, by its
// ProtoJSON lowerCamelCase name, which §5.5 requires of every JSON
// serialization):
//
//   - JSON null is dropped, whatever the field: ProtoJSON reads null as
//     unset;
//   - a field marked REQUIRED (google.api.field_behavior) is kept, even at its
//     default ("description": "", "skills": []);
//   - a field with the proto3 optional keyword is kept when present, even at
//     its default ("streaming": false);
//   - a message-typed field is kept when present, even as {}: proto3 message
//     fields have presence. Members of a oneof (the SecurityScheme and
//     OAuthFlows variants) are message fields: {"mtlsSecurityScheme": {}}
//     keeps the only member that says which scheme it is;
//   - google.protobuf.Struct fields (AgentExtension.params) are messages too:
//     kept when present, and verbatim inside, since a Struct's members are
//     data, not fields with defaults;
//   - any other string or bool field is dropped at its proto3 default, "" or
//     false ("tenant": "", "required": false);
//   - a repeated or map field is dropped when empty ("extensions": [],
//     "scopes": {} of an implicit flow), unless REQUIRED;
//   - elements of repeated fields and values of map fields are never
//     dropped; message-typed ones have their own members judged the same way
//     (each skill, each security scheme, each scope list);
//   - a member the proto does not define is kept verbatim, nested members
//     included. Its default is unknown, and it is part of the card as
//     published: a signer that canonicalizes the JSON it serves signs it, and
//     dropping it would let anyone add members to a signed card without
//     breaking the signature. ([Parse] refuses such members, except inside
//     the members it keeps opaque: extensions, security schemes and
//     requirements.) Proto field names in snake_case, which ProtoJSON
//     parsers also accept, count as such members;
//   - a member whose JSON type is not its field's (an array for a message, a
//     string for a bool) is kept verbatim: it is no field's default, and
//     [Parse] refuses it where it decodes that field.
//
// The payload of a payload is itself: nothing the rules drop leaves a member
// they would drop next time. Unlike [SigningInput] and [Fingerprint], two
// cards that differ only in members these rules drop have the same payload:
// a signature covers neither their presence nor their absence.
//
// First-party SDKs sign other bytes for some cards; see [Verify].
func SigningPayload(raw []byte) ([]byte, error) {
	plain, err := SigningInput(raw)
	if err != nil {
		return nil, err
	}
	stripped, err := cardMessages["AgentCard"].strip(plain)
	if err != nil {
		return nil, invalid("", "cannot remove default values: %v", err)
	}
	out, err := jcs.Transform(stripped)
	if err != nil {
		return nil, invalid("", "cannot canonicalize (RFC 8785): %v", err)
	}
	return out, nil
}

// cardProto is every message reachable from AgentCard, transcribed by hand
// from specification/a2a.proto at tag v1.0.1 (a2aproject/A2A commit
// 3303592588e3): each field by its JSON name, declared in the proto's own
// words. "map T" is map<string, T>; "oneof T" a member of the message's
// oneof; REQUIRED is [(google.api.field_behavior) = REQUIRED]. Scalars are
// only string and bool: no numeric or enum field is reachable from a card.
// AgentCardSignature is listed for completeness: signatures never enter the
// payload.
var cardProto = map[string]map[string]string{
	"AgentCard": {
		"name":                 "string REQUIRED",
		"description":          "string REQUIRED",
		"supportedInterfaces":  "repeated AgentInterface REQUIRED",
		"provider":             "AgentProvider",
		"version":              "string REQUIRED",
		"documentationUrl":     "optional string",
		"capabilities":         "AgentCapabilities REQUIRED",
		"securitySchemes":      "map SecurityScheme",
		"securityRequirements": "repeated SecurityRequirement",
		"defaultInputModes":    "repeated string REQUIRED",
		"defaultOutputModes":   "repeated string REQUIRED",
		"skills":               "repeated AgentSkill REQUIRED",
		"signatures":           "repeated AgentCardSignature",
		"iconUrl":              "optional string",
	},
	"AgentInterface": {
		"url":             "string REQUIRED",
		"protocolBinding": "string REQUIRED",
		"tenant":          "string",
		"protocolVersion": "string REQUIRED",
	},
	"AgentProvider": {
		"url":          "string REQUIRED",
		"organization": "string REQUIRED",
	},
	"AgentCapabilities": {
		"streaming":         "optional bool",
		"pushNotifications": "optional bool",
		"extensions":        "repeated AgentExtension",
		"extendedAgentCard": "optional bool",
	},
	"AgentExtension": {
		"uri":         "string",
		"description": "string",
		"required":    "bool",
		"params":      "google.protobuf.Struct",
	},
	"AgentSkill": {
		"id":                   "string REQUIRED",
		"name":                 "string REQUIRED",
		"description":          "string REQUIRED",
		"tags":                 "repeated string REQUIRED",
		"examples":             "repeated string",
		"inputModes":           "repeated string",
		"outputModes":          "repeated string",
		"securityRequirements": "repeated SecurityRequirement",
	},
	"AgentCardSignature": {
		"protected": "string REQUIRED",
		"signature": "string REQUIRED",
		"header":    "google.protobuf.Struct",
	},
	"StringList": {
		"list": "repeated string",
	},
	"SecurityRequirement": {
		"schemes": "map StringList",
	},
	"SecurityScheme": {
		"apiKeySecurityScheme":        "oneof APIKeySecurityScheme",
		"httpAuthSecurityScheme":      "oneof HTTPAuthSecurityScheme",
		"oauth2SecurityScheme":        "oneof OAuth2SecurityScheme",
		"openIdConnectSecurityScheme": "oneof OpenIdConnectSecurityScheme",
		"mtlsSecurityScheme":          "oneof MutualTlsSecurityScheme",
	},
	"APIKeySecurityScheme": {
		"description": "string",
		"location":    "string REQUIRED",
		"name":        "string REQUIRED",
	},
	"HTTPAuthSecurityScheme": {
		"description":  "string",
		"scheme":       "string REQUIRED",
		"bearerFormat": "string",
	},
	"OAuth2SecurityScheme": {
		"description":       "string",
		"flows":             "OAuthFlows REQUIRED",
		"oauth2MetadataUrl": "string",
	},
	"OpenIdConnectSecurityScheme": {
		"description":      "string",
		"openIdConnectUrl": "string REQUIRED",
	},
	"MutualTlsSecurityScheme": {
		"description": "string",
	},
	"OAuthFlows": {
		"authorizationCode": "oneof AuthorizationCodeOAuthFlow",
		"clientCredentials": "oneof ClientCredentialsOAuthFlow",
		"implicit":          "oneof ImplicitOAuthFlow",
		"password":          "oneof PasswordOAuthFlow",
		"deviceCode":        "oneof DeviceCodeOAuthFlow",
	},
	"AuthorizationCodeOAuthFlow": {
		"authorizationUrl": "string REQUIRED",
		"tokenUrl":         "string REQUIRED",
		"refreshUrl":       "string",
		"scopes":           "map string REQUIRED",
		"pkceRequired":     "bool",
	},
	"ClientCredentialsOAuthFlow": {
		"tokenUrl":   "string REQUIRED",
		"refreshUrl": "string",
		"scopes":     "map string REQUIRED",
	},
	"ImplicitOAuthFlow": {
		"authorizationUrl": "string",
		"refreshUrl":       "string",
		"scopes":           "map string",
	},
	"PasswordOAuthFlow": {
		"tokenUrl":   "string",
		"refreshUrl": "string",
		"scopes":     "map string",
	},
	"DeviceCodeOAuthFlow": {
		"deviceAuthorizationUrl": "string REQUIRED",
		"tokenUrl":               "string REQUIRED",
		"refreshUrl":             "string",
		"scopes":                 "map string REQUIRED",
	},
}

// cardMessages is cardProto read: a message by name.
var cardMessages = declareMessages(cardProto)

// protoMessage is the fields of one a2a.proto message by JSON name.
type protoMessage map[string]protoField

// protoField is one field of an a2a.proto message as the proto declares it.
type protoField struct {
	label    label
	typ      string // "string", "bool", "google.protobuf.Struct", or a message of cardMessages
	required bool   // [(google.api.field_behavior) = REQUIRED]
}

type label uint8

const (
	singular label = iota
	optional       // the proto3 optional keyword
	oneofMember
	repeated
	mapped // map<string, typ>
)

var labels = map[string]label{"optional": optional, "oneof": oneofMember, "repeated": repeated, "map": mapped}

// declareMessages reads declarations such as "repeated AgentSkill REQUIRED".
// The table is a literal of this package: a malformed one panics, like
// regexp.MustCompile.
func declareMessages(proto map[string]map[string]string) map[string]protoMessage {
	out := make(map[string]protoMessage, len(proto))
	for name, fields := range proto {
		m := make(protoMessage, len(fields))
		for jsonName, decl := range fields {
			words := strings.Fields(decl)
			var f protoField
			if l, ok := labels[words[0]]; ok {
				f.label, words = l, words[1:]
			}
			if n := len(words); n > 1 && words[n-1] == "REQUIRED" {
				f.required, words = true, words[:n-1]
			}
			if len(words) != 1 {
				panic(fmt.Sprintf("agentcard: %s.%s: cannot read declaration %q", name, jsonName, decl))
			}
			f.typ = words[0]
			m[jsonName] = f
		}
		out[name] = m
	}
	return out
}

// kept reports whether a member, canonical JSON, enters the payload.
func (f protoField) kept(v json.RawMessage) bool {
	switch s := string(v); {
	case s == "null":
		return false
	case f.required, f.label == optional, f.label == oneofMember:
		return true
	case f.label == repeated:
		return s != "[]"
	case f.label == mapped:
		return s != "{}"
	case f.typ == "string":
		return s != `""`
	case f.typ == "bool":
		return s != "false"
	default: // a message or a Struct
		return true
	}
}

// strip returns a kept member, canonical JSON, with the members of the
// messages it holds stripped in turn.
func (f protoField) strip(v json.RawMessage) (json.RawMessage, error) {
	m, ok := cardMessages[f.typ]
	if !ok {
		return v, nil // a scalar or a Struct
	}
	switch f.label {
	case repeated:
		if !isArray(v) {
			return v, nil
		}
		var elems []json.RawMessage
		if err := json.Unmarshal(v, &elems); err != nil {
			return nil, err
		}
		for i, e := range elems {
			var err error
			if elems[i], err = m.strip(e); err != nil {
				return nil, err
			}
		}
		return json.Marshal(elems)
	case mapped:
		if !isObject(v) {
			return v, nil
		}
		var values map[string]json.RawMessage
		if err := json.Unmarshal(v, &values); err != nil {
			return nil, err
		}
		for k, e := range values {
			var err error
			if values[k], err = m.strip(e); err != nil {
				return nil, err
			}
		}
		return json.Marshal(values)
	default:
		return m.strip(v)
	}
}

// strip returns a message, canonical JSON, without the members the payload
// drops. A value that is not a JSON object comes back verbatim.
func (m protoMessage) strip(v json.RawMessage) (json.RawMessage, error) {
	if !isObject(v) {
		return v, nil
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(v, &members); err != nil {
		return nil, err
	}
	for name, mv := range members {
		f, known := m[name]
		switch {
		case !known:
		case !f.kept(mv):
			delete(members, name)
		default:
			var err error
			if members[name], err = f.strip(mv); err != nil {
				return nil, err
			}
		}
	}
	return json.Marshal(members)
}

func isArray(v json.RawMessage) bool { return len(v) > 0 && v[0] == '[' }
