package agentcard

import (
	"encoding/json"
	"fmt"
)

// Normalize returns a card in the A2A 1.0 shape. A 1.0 card comes back
// unchanged. A card in the 0.3 shape, still widely served (top-level url,
// preferredTransport, additionalInterfaces, protocolVersion), is rewritten:
//
//   - url, preferredTransport (default JSONRPC) and protocolVersion (default
//     0.3.0) become the first supportedInterfaces entry, and each
//     additionalInterfaces {url, transport} one more (the main one is not
//     repeated), all with that protocolVersion;
//   - supportsAuthenticatedExtendedCard true becomes
//     capabilities.extendedAgentCard (false, the default, is dropped);
//   - capabilities.stateTransitionHistory, which 1.0 dropped, is removed.
//
// A 0.3 card with OpenAPI-style securitySchemes or security (card or skill)
// is refused: those have no faithful 1.0 form here. Errors are
// *ValidationError naming the field. Input that is not a JSON object comes
// back unchanged, for Parse to refuse. The registry stores and fingerprints
// the normalised form.
func Normalize(raw []byte) ([]byte, error) {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return raw, nil
	}
	legacy := false
	for _, k := range []string{"url", "preferredTransport", "additionalInterfaces", "protocolVersion", "supportsAuthenticatedExtendedCard"} {
		if _, ok := m[k]; ok {
			legacy = true
		}
	}
	if !legacy {
		return raw, nil
	}
	if _, ok := m["supportedInterfaces"]; ok {
		return nil, invalid("/supportedInterfaces", "a card mixes 1.0 supportedInterfaces with 0.3 fields (url, preferredTransport, additionalInterfaces, protocolVersion)")
	}
	for _, k := range []string{"securitySchemes", "security"} {
		if _, ok := m[k]; ok {
			return nil, invalid("/"+k, "0.3 (OpenAPI-style) security is not normalised: publish a 1.0 card")
		}
	}
	str := func(key, def string) (string, error) {
		v, ok := m[key]
		if !ok {
			return def, nil
		}
		var s string
		if json.Unmarshal(v, &s) != nil {
			return "", invalid("/"+key, "must be a string")
		}
		delete(m, key)
		return s, nil
	}
	url, err := str("url", "")
	if err != nil {
		return nil, err
	}
	if url == "" {
		return nil, invalid("/url", "required in a 0.3 card")
	}
	transport, err := str("preferredTransport", "JSONRPC")
	if err != nil {
		return nil, err
	}
	version, err := str("protocolVersion", "0.3.0")
	if err != nil {
		return nil, err
	}
	ifaces := []Interface{{URL: url, ProtocolBinding: transport, ProtocolVersion: version}}
	if v, ok := m["additionalInterfaces"]; ok {
		var extra []struct {
			URL       string `json:"url"`
			Transport string `json:"transport"`
		}
		if json.Unmarshal(v, &extra) != nil {
			return nil, invalid("/additionalInterfaces", "must be a list of {url, transport}")
		}
		for i, e := range extra {
			if e.URL == "" || e.Transport == "" {
				return nil, invalid(fmt.Sprintf("/additionalInterfaces/%d", i), "url and transport are required")
			}
			if e.URL != url || e.Transport != transport {
				ifaces = append(ifaces, Interface{URL: e.URL, ProtocolBinding: e.Transport, ProtocolVersion: version})
			}
		}
		delete(m, "additionalInterfaces")
	}
	m["supportedInterfaces"], _ = json.Marshal(ifaces)

	caps := map[string]json.RawMessage{}
	if v, ok := m["capabilities"]; ok && json.Unmarshal(v, &caps) != nil {
		return nil, invalid("/capabilities", "must be an object")
	}
	delete(caps, "stateTransitionHistory")
	if v, ok := m["supportsAuthenticatedExtendedCard"]; ok {
		var b bool
		if json.Unmarshal(v, &b) != nil {
			return nil, invalid("/supportsAuthenticatedExtendedCard", "must be a boolean")
		}
		if b { // false is the default: dropped, as 1.0 drops default values
			caps["extendedAgentCard"] = v
		}
		delete(m, "supportsAuthenticatedExtendedCard")
	}
	if _, ok := m["capabilities"]; ok || len(caps) > 0 {
		m["capabilities"], _ = json.Marshal(caps)
	}

	if v, ok := m["skills"]; ok {
		var skills []map[string]json.RawMessage
		if json.Unmarshal(v, &skills) == nil {
			for i, s := range skills {
				if _, ok := s["security"]; ok {
					return nil, invalid(fmt.Sprintf("/skills/%d/security", i), "0.3 (OpenAPI-style) security is not normalised: publish a 1.0 card")
				}
			}
		}
	}
	return json.Marshal(m)
}
