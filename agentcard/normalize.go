package agentcard

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/gowebpki/jcs"
)

// Normalize returns a card in the A2A 1.0 shape. A 1.0 card comes back
// unchanged, and so does any card with a supportedInterfaces member, which
// only 1.0 defines: it is read as 1.0 whatever 0.3 fields it also carries
// (they are kept, and [Check] notes them). A card in the 0.3 shape, still widely served (top-level url,
// preferredTransport, additionalInterfaces, protocolVersion), is rewritten:
//
//   - url, preferredTransport (default JSONRPC) and protocolVersion (default
//     0.3.0) become the first supportedInterfaces entry, and each
//     additionalInterfaces {url, transport} one more (the main one is not
//     repeated), all with that protocolVersion;
//   - supportsAuthenticatedExtendedCard true becomes
//     capabilities.extendedAgentCard (false, the default, is dropped);
//   - capabilities.stateTransitionHistory, which 1.0 dropped, is removed;
//   - each OpenAPI-style securitySchemes entry, discriminated by type, becomes
//     the matching member of the a2a.proto SecurityScheme oneof, with its
//     description: apiKey {in, name} -> apiKeySecurityScheme {location,
//     name}; http {scheme, bearerFormat} -> httpAuthSecurityScheme; oauth2
//     {flows, oauth2MetadataUrl} -> oauth2SecurityScheme; openIdConnect
//     {openIdConnectUrl} -> openIdConnectSecurityScheme; mutualTLS ->
//     mtlsSecurityScheme. Flows keep their members (authorizationUrl,
//     tokenUrl, refreshUrl, scopes), the deprecated implicit and password
//     flows included, which 1.0 still defines;
//   - security, on the card and on each skill, becomes
//     securityRequirements: {name: [scopes]} becomes
//     {"schemes": {name: {"list": [scopes]}}}, an empty scope list {} (as
//     ProtoJSON writes it). A requirement naming an undeclared scheme is
//     kept: [Parse] does not check that on a 1.0 card either.
//
// Members a scheme or flow's type does not define are kept, under their own
// names, in the 1.0 scheme or flow, for Check to note. What 1.0 cannot say
// the same way is refused: a 0.3 oauth2 scheme with more than one flow (1.0
// OAuthFlows is a oneof), at the second flow; an unknown scheme type or
// flow; a member the 0.3
// schema requires, missing or empty; apiKey in other than query, header or
// cookie; 1.0 securityRequirements in a 0.3 card; duplicate member names
// anywhere (decoding would keep one; RFC 8785 refuses them); members of the
// wrong JSON type.
//
// Errors are *ValidationError naming the JSON pointer, in the 0.3 card, of
// the member at fault. Input that is not a JSON object comes back unchanged,
// for Parse to refuse. The registry stores and fingerprints the normalised
// form. Sources: a2a.proto AgentCard, SecurityScheme, OAuthFlows and
// SecurityRequirement (A2A 1.0 §4.4, §4.5); the 0.3 JSON schema
// (specification/json/a2a.json, v0.3.0).
func Normalize(raw []byte) ([]byte, error) {
	var first error
	normal, _ := normalize(raw, func(err error) {
		if first == nil {
			first = err
		}
	})
	if first != nil {
		return nil, first
	}
	return normal, nil
}

// layout03 records where the members of a 0.3 card went in its 1.0 form,
// so that a fault or note found in the 1.0 form names the member of the
// card as presented.
type layout03 struct {
	// ifaces[i] is where supportedInterfaces/i came from: -1 for the
	// card's url, preferredTransport and protocolVersion, j >= 0 for
	// additionalInterfaces/j.
	ifaces []int
	// brokenSchemes are the securitySchemes entries refused already.
	brokenSchemes map[string]bool
}

// normalize is [Normalize] that reports every fault of a 0.3 card to
// fault, going on with what it can rewrite, and returns the layout of a
// rewritten card (nil when raw came back as it was).
func normalize(raw []byte, fault func(error)) ([]byte, *layout03) {
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
	if _, v1 := m["supportedInterfaces"]; !legacy || v1 {
		// A card with supportedInterfaces is read as 1.0 whatever else it
		// carries (@a2a-js/sdk 1.3 serves 0.3 fields beside it): its 0.3
		// members are left in place, for Check to note.
		return raw, nil
	}
	if _, err := jcs.Transform(raw); err != nil {
		fault(invalid("", "cannot canonicalize (RFC 8785): %v", err))
		return nil, nil
	}
	lay := &layout03{brokenSchemes: map[string]bool{}}
	str := func(key, def string) string {
		v, ok := m[key]
		if !ok {
			return def
		}
		delete(m, key)
		var s string
		if json.Unmarshal(v, &s) != nil {
			fault(invalid("/"+key, "must be a string"))
			return def
		}
		return s
	}
	v, hasURL := m["url"]
	url := str("url", "")
	if url == "" && (!hasURL || string(v) == `""` || isNull(v)) {
		fault(invalid("/url", "required in a 0.3 card"))
	}
	transport := str("preferredTransport", "JSONRPC")
	version := str("protocolVersion", "0.3.0")
	ifaces := []Interface{}
	if url != "" {
		ifaces = append(ifaces, Interface{URL: url, ProtocolBinding: transport, ProtocolVersion: version})
		lay.ifaces = append(lay.ifaces, -1)
	}
	if v, ok := m["additionalInterfaces"]; ok {
		var extra []json.RawMessage
		if json.Unmarshal(v, &extra) != nil {
			fault(invalid("/additionalInterfaces", "must be a list of {url, transport}"))
		}
		for i, raw := range extra {
			var e struct {
				URL       string `json:"url"`
				Transport string `json:"transport"`
			}
			if json.Unmarshal(raw, &e) != nil {
				fault(invalid(fmt.Sprintf("/additionalInterfaces/%d", i), "must be an object {url, transport} of strings"))
				continue
			}
			if e.URL == "" || e.Transport == "" {
				fault(invalid(fmt.Sprintf("/additionalInterfaces/%d", i), "url and transport are required"))
				continue
			}
			if e.URL != url || e.Transport != transport {
				ifaces = append(ifaces, Interface{URL: e.URL, ProtocolBinding: e.Transport, ProtocolVersion: version})
				lay.ifaces = append(lay.ifaces, i)
			}
		}
		delete(m, "additionalInterfaces")
	}
	if len(ifaces) > 0 {
		m["supportedInterfaces"], _ = json.Marshal(ifaces)
	}

	caps := map[string]json.RawMessage{}
	if v, ok := m["capabilities"]; ok && json.Unmarshal(v, &caps) != nil {
		fault(invalid("/capabilities", "must be an object"))
		caps = nil
	}
	delete(caps, "stateTransitionHistory")
	if v, ok := m["supportsAuthenticatedExtendedCard"]; ok {
		var b bool
		if json.Unmarshal(v, &b) != nil {
			fault(invalid("/supportsAuthenticatedExtendedCard", "must be a boolean"))
		} else if b && caps != nil { // false is the default: dropped, as 1.0 drops default values
			caps["extendedAgentCard"] = v
		}
		delete(m, "supportsAuthenticatedExtendedCard")
	}
	if _, ok := m["capabilities"]; caps != nil && (ok || len(caps) > 0) {
		m["capabilities"], _ = json.Marshal(caps)
	}

	if v, ok := m["securitySchemes"]; ok {
		m["securitySchemes"] = normalizeSchemes("/securitySchemes", v, lay.brokenSchemes, fault)
	}
	if err := normalizeSecurity("", m); err != nil {
		fault(err)
	}
	// Skills that are not all objects are left for Parse to refuse.
	if v, ok := m["skills"]; ok {
		var skills []map[string]json.RawMessage
		if json.Unmarshal(v, &skills) == nil {
			for i, s := range skills {
				if err := normalizeSecurity("/skills/"+strconv.Itoa(i), s); err != nil {
					fault(err)
				}
			}
			m["skills"], _ = json.Marshal(skills)
		}
	}
	out, _ := json.Marshal(m)
	return out, lay
}

// presented maps a pointer into the 1.0 form of a 0.3 card to the member
// of the card as presented it stems from, or "" when there is none (a
// finding about a member that is refused already).
func (l *layout03) presented(ptr string) string {
	seg := strings.Split(ptr, "/")
	at := func(i int) string {
		if i < len(seg) {
			return seg[i]
		}
		return ""
	}
	switch at(1) {
	case "supportedInterfaces":
		if len(seg) == 2 {
			return "/url" // "required": the card has no usable url
		}
		i, err := strconv.Atoi(at(2))
		if err != nil || i >= len(l.ifaces) {
			return ptr
		}
		from := l.ifaces[i]
		member := map[string]string{"url": "url", "protocolBinding": "transport", "protocolVersion": ""}[at(3)]
		switch {
		case at(3) == "protocolVersion":
			return "/protocolVersion"
		case from < 0 && at(3) == "protocolBinding":
			return "/preferredTransport"
		case from < 0 && at(3) == "url":
			return "/url"
		case from < 0:
			return ""
		case member != "":
			return "/additionalInterfaces/" + strconv.Itoa(from) + "/" + member
		default:
			return "/additionalInterfaces/" + strconv.Itoa(from)
		}
	case "capabilities":
		if at(2) == "extendedAgentCard" {
			return "/supportsAuthenticatedExtendedCard"
		}
	case "securitySchemes":
		if len(seg) < 3 || l.brokenSchemes[unescapePointer(at(2))] {
			if len(seg) >= 3 {
				return ""
			}
			return ptr
		}
		// /securitySchemes/N/<kind>/member -> /securitySchemes/N/member
		rest := seg[:3]
		if len(seg) > 4 {
			m := seg[4]
			if m == "location" {
				m = "in"
			}
			rest = append(rest, m)
			rest = append(rest, seg[5:]...)
		}
		return strings.Join(rest, "/")
	case "securityRequirements":
		return requirementPointer("", seg[1:], l)
	case "skills":
		if at(3) == "securityRequirements" {
			return requirementPointer("/skills/"+at(2), seg[3:], l)
		}
	}
	return ptr
}

// requirementPointer maps seg, [securityRequirements i schemes NAME list
// j], to the 0.3 spelling under prefix: security/i/NAME/j.
func requirementPointer(prefix string, seg []string, l *layout03) string {
	out := []string{prefix, "security"}
	if len(seg) > 1 {
		out = append(out, seg[1])
	}
	if len(seg) > 3 { // schemes NAME
		if l.brokenSchemes[unescapePointer(seg[3])] {
			return ""
		}
		out = append(out, seg[3])
	}
	if len(seg) > 5 { // list j
		out = append(out, seg[5])
	}
	return strings.Join(out, "/")
}

// unescapePointer reverses escapePointer (RFC 6901 §4).
func unescapePointer(tok string) string {
	return strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
}

// normalizeSecurity replaces the 0.3 security member of obj, the card or the
// skill at ptr, with its 1.0 securityRequirements.
func normalizeSecurity(ptr string, obj map[string]json.RawMessage) error {
	if v, ok := obj["securityRequirements"]; ok && !isNull(v) {
		delete(obj, "securityRequirements")
		return invalid(ptr+"/securityRequirements", "a 0.3 card mixes in 1.0 securityRequirements (0.3 spells it security)")
	}
	v, ok := obj["security"]
	if !ok {
		return nil
	}
	delete(obj, "security")
	if isNull(v) {
		return nil
	}
	reqs, err := normalizeRequirements(ptr+"/security", v)
	if err != nil {
		return err
	}
	obj["securityRequirements"] = reqs
	return nil
}

// requirement is a2a.proto SecurityRequirement; scopeList is StringList.
type (
	requirement struct {
		Schemes map[string]scopeList `json:"schemes,omitempty"`
	}
	scopeList struct {
		List []string `json:"list,omitempty"`
	}
)

// normalizeRequirements rewrites a 0.3 security list, [{name: [scopes]}],
// as a 1.0 securityRequirements list.
func normalizeRequirements(ptr string, raw json.RawMessage) (json.RawMessage, error) {
	var items []json.RawMessage
	if err := listField(&items, decodeRaw)(ptr, raw); err != nil {
		return nil, err
	}
	out := make([]requirement, len(items))
	for i, item := range items {
		p := ptr + "/" + strconv.Itoa(i)
		var schemes map[string]json.RawMessage
		if err := rawMapField(&schemes)(p, item); err != nil {
			return nil, err
		}
		if len(schemes) > 0 {
			out[i].Schemes = make(map[string]scopeList, len(schemes))
		}
		for _, name := range slices.Sorted(maps.Keys(schemes)) {
			var scopes []string
			if err := listField(&scopes, decodeString)(p+"/"+escapePointer(name), schemes[name]); err != nil {
				return nil, err
			}
			out[i].Schemes[name] = scopeList{List: scopes}
		}
	}
	return json.Marshal(out)
}

// The 1.0 security schemes (a2a.proto APIKeySecurityScheme and the rest),
// members in proto order; empty optional members are dropped, as ProtoJSON
// drops default values.
type (
	apiKeyScheme struct {
		Description string `json:"description,omitempty"`
		Location    string `json:"location"`
		Name        string `json:"name"`
	}
	httpAuthScheme struct {
		Description  string `json:"description,omitempty"`
		Scheme       string `json:"scheme"`
		BearerFormat string `json:"bearerFormat,omitempty"`
	}
	oauth2Scheme struct {
		Description       string         `json:"description,omitempty"`
		Flows             map[string]any `json:"flows"`
		OAuth2MetadataURL string         `json:"oauth2MetadataUrl,omitempty"`
	}
	// oauthFlow is any of the four flows 0.3 and 1.0 share; each uses a
	// subset of the members.
	oauthFlow struct {
		AuthorizationURL string            `json:"authorizationUrl,omitempty"`
		TokenURL         string            `json:"tokenUrl,omitempty"`
		RefreshURL       string            `json:"refreshUrl,omitempty"`
		Scopes           map[string]string `json:"scopes"`
	}
	openIDConnectScheme struct {
		Description      string `json:"description,omitempty"`
		OpenIDConnectURL string `json:"openIdConnectUrl"`
	}
	mtlsScheme struct {
		Description string `json:"description,omitempty"`
	}
)

// normalizeSchemes rewrites a 0.3 securitySchemes map, name -> scheme with
// a type discriminator, as the 1.0 map of name -> one-of scheme.
// A scheme refused is reported to fault and kept as an empty scheme (so
// that requirements naming it are not refused again), its name in broken.
func normalizeSchemes(ptr string, raw json.RawMessage, broken map[string]bool, fault func(error)) json.RawMessage {
	if isNull(raw) {
		return raw
	}
	var schemes map[string]json.RawMessage
	if err := rawMapField(&schemes)(ptr, raw); err != nil {
		fault(err)
		return json.RawMessage("null")
	}
	out := make(map[string]map[string]any, len(schemes))
	for _, name := range slices.Sorted(maps.Keys(schemes)) {
		p := ptr + "/" + escapePointer(name)
		oneOf, scheme, err := normalizeScheme(p, schemes[name])
		if err != nil {
			fault(err)
			broken[name] = true
			out[name] = map[string]any{}
			continue
		}
		out[name] = map[string]any{oneOf: scheme}
	}
	b, _ := json.Marshal(out)
	return b
}

// normalizeScheme returns the 1.0 SecurityScheme member name and value for
// the 0.3 scheme at ptr.
func normalizeScheme(ptr string, raw json.RawMessage) (string, any, error) {
	var members map[string]json.RawMessage
	if err := rawMapField(&members)(ptr, raw); err != nil {
		return "", nil, err
	}
	var typ string
	if v, ok := members["type"]; !ok || isNull(v) {
		return "", nil, invalid(ptr+"/type", "required")
	} else if err := decodeString(ptr+"/type", v, &typ); err != nil {
		return "", nil, err
	}
	var description string
	var extra map[string]json.RawMessage // members the scheme's type does not define: kept
	fields := map[string]field{
		"type":        func(string, json.RawMessage) error { return nil },
		"description": stringField(&description),
	}
	with := func(more map[string]field) map[string]field {
		maps.Copy(more, fields)
		return more
	}
	switch typ {
	case "apiKey":
		var s apiKeyScheme
		err := decodeObjectKeep(ptr, raw, &extra, with(map[string]field{"name": stringField(&s.Name), "in": stringField(&s.Location)}))
		if err == nil {
			err = requiredString(ptr+"/in", s.Location)
		}
		if err == nil && !slices.Contains([]string{"query", "header", "cookie"}, s.Location) {
			err = invalid(ptr+"/in", "must be query, header or cookie")
		}
		if err == nil {
			err = requiredString(ptr+"/name", s.Name)
		}
		s.Description = description
		return "apiKeySecurityScheme", withExtra(s, extra), err
	case "http":
		var s httpAuthScheme
		err := decodeObjectKeep(ptr, raw, &extra, with(map[string]field{"scheme": stringField(&s.Scheme), "bearerFormat": stringField(&s.BearerFormat)}))
		if err == nil {
			err = requiredString(ptr+"/scheme", s.Scheme)
		}
		s.Description = description
		return "httpAuthSecurityScheme", withExtra(s, extra), err
	case "oauth2":
		var s oauth2Scheme
		err := decodeObjectKeep(ptr, raw, &extra, with(map[string]field{
			"flows":             func(p string, v json.RawMessage) error { return decodeFlows(p, v, &s.Flows) },
			"oauth2MetadataUrl": stringField(&s.OAuth2MetadataURL),
		}))
		if err == nil && s.Flows == nil {
			err = invalid(ptr+"/flows", "required")
		}
		s.Description = description
		return "oauth2SecurityScheme", withExtra(s, extra), err
	case "openIdConnect":
		var s openIDConnectScheme
		err := decodeObjectKeep(ptr, raw, &extra, with(map[string]field{"openIdConnectUrl": stringField(&s.OpenIDConnectURL)}))
		if err == nil {
			err = requiredString(ptr+"/openIdConnectUrl", s.OpenIDConnectURL)
		}
		s.Description = description
		return "openIdConnectSecurityScheme", withExtra(s, extra), err
	case "mutualTLS":
		var s mtlsScheme
		err := decodeObjectKeep(ptr, raw, &extra, fields)
		s.Description = description
		return "mtlsSecurityScheme", withExtra(s, extra), err
	}
	return "", nil, invalid(ptr+"/type", "unknown security scheme type %q (want apiKey, http, oauth2, openIdConnect or mutualTLS)", truncate(typ, 32))
}

// flowRequired lists, per 0.3 OAuth flow, the members it requires, in
// order; refreshUrl is optional in each. 1.0 requires the same of
// authorizationCode and clientCredentials.
var flowRequired = map[string][]string{
	"authorizationCode": {"authorizationUrl", "tokenUrl", "scopes"},
	"clientCredentials": {"tokenUrl", "scopes"},
	"implicit":          {"authorizationUrl", "scopes"},
	"password":          {"tokenUrl", "scopes"},
}

// decodeFlows decodes 0.3 OAuthFlows into the one flow a 1.0 OAuthFlows
// holds.
func decodeFlows(ptr string, raw json.RawMessage, dst *map[string]any) error {
	var kind string
	var flow oauthFlow
	var extra map[string]json.RawMessage
	fields := map[string]field{}
	for k, required := range flowRequired {
		fields[k] = func(p string, v json.RawMessage) error {
			if kind != "" {
				return invalid(p, "an A2A 1.0 scheme has one OAuth flow, and this one already has %s", kind)
			}
			kind = k
			return decodeFlow(p, v, required, &flow, &extra)
		}
	}
	if err := decodeObject(ptr, raw, fields); err != nil {
		return err
	}
	if kind == "" {
		return invalid(ptr, "required: one of authorizationCode, clientCredentials, implicit, password")
	}
	*dst = map[string]any{kind: withExtra(flow, extra)}
	return nil
}

func decodeFlow(ptr string, raw json.RawMessage, required []string, f *oauthFlow, extra *map[string]json.RawMessage) error {
	all := map[string]field{
		"authorizationUrl": stringField(&f.AuthorizationURL),
		"tokenUrl":         stringField(&f.TokenURL),
		"scopes":           func(p string, v json.RawMessage) error { return decodeScopes(p, v, &f.Scopes) },
	}
	fields := map[string]field{"refreshUrl": stringField(&f.RefreshURL)}
	for _, k := range required {
		fields[k] = all[k]
	}
	if err := decodeObjectKeep(ptr, raw, extra, fields); err != nil {
		return err
	}
	set := map[string]bool{"authorizationUrl": f.AuthorizationURL != "", "tokenUrl": f.TokenURL != "", "scopes": f.Scopes != nil}
	for _, k := range required {
		if !set[k] {
			return invalid(ptr+"/"+k, "required")
		}
	}
	return nil
}

// decodeScopes decodes an OAuth scopes map, scope -> description.
func decodeScopes(ptr string, raw json.RawMessage, dst *map[string]string) error {
	var scopes map[string]json.RawMessage
	if err := rawMapField(&scopes)(ptr, raw); err != nil {
		return err
	}
	out := make(map[string]string, len(scopes))
	for _, name := range slices.Sorted(maps.Keys(scopes)) {
		var d string
		if err := decodeString(ptr+"/"+escapePointer(name), scopes[name], &d); err != nil {
			return err
		}
		out[name] = d
	}
	*dst = out
	return nil
}

func isNull(v json.RawMessage) bool { return string(v) == "null" }

// withExtra is v, a scheme or flow, as a JSON object with the members of
// extra it does not have itself: what the 0.3 card said beyond its type's
// members is kept in the 1.0 form.
func withExtra(v any, extra map[string]json.RawMessage) any {
	if len(extra) == 0 {
		return v
	}
	b, err := json.Marshal(v)
	var m map[string]json.RawMessage
	if err != nil || json.Unmarshal(b, &m) != nil {
		return v
	}
	for k, x := range extra {
		if _, ok := m[k]; !ok {
			m[k] = x
		}
	}
	return m
}
